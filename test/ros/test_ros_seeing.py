"""Boxes land on the objects, across processes: ``synthetic_cameras`` (its own process) publishes
frames and their ground truth; ``inference_node`` (its own process) binds them to the bundled
``color_detector`` with letterbox and with stretch, and to ``detector_pipeline`` exactly as
docs/node.md shows it; the test process pairs each detections message with the ground truth of
the same frame (stamp and frame_id) and checks every box, in the camera's own pixels, for every
encoding and five resolutions and aspect ratios. A tritonclient request to the node's gRPC
endpoint with one of the very frames gives the same boxes."""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import ROOT, TIMEOUT, NodeProcess, Probe, stamp_ns, wait_until
from triton_ros.ros.tools.detection_metrics import FrameMatcher, message_boxes
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.synthetic_cameras import ground_truth_topic, parse_camera


pytestmark = pytest.mark.system

NS = f"/s{TOKEN}"
CAMERAS = (
    "cam_rgb:640x480:rgb8",
    "cam_bgr:320x240:bgr8",
    "cam_rgba:848x480:rgba8",
    "cam_bgra:480x640:bgra8",
    "cam_mono:424x240:mono8",
)
BINDINGS = {  # binding name -> (robot name of its cameras, binding parameters)
    "letterbox": ("lb", {"model": "color_detector", "score_threshold": 0.5}),
    "stretch": ("st", {"model": "color_detector", "score_threshold": 0.5, "resize": "stretch"}),
    # As docs/node.md's example binds it: UINT8 HWC input, decoded detections, nms false.
    "pipeline": ("pl", {"model": "detector_pipeline", "nms": False}),
}
SPECS = {
    name: [parse_camera(f"{robot}/{c}") for c in CAMERAS] for name, (robot, _) in BINDINGS.items()
}
FRAMES = 5  # frames checked per camera


def params() -> dict:
    out = {
        "model_repository": str(ROOT / "model_repository"),
        "startup_models": ["color_detector", "detector_pipeline"],
        "diagnostics_period_s": 0.5,
        "discovery_period_s": 0.5,
        "bindings": list(BINDINGS),
    }
    for name, (robot, extra) in BINDINGS.items():
        # max_age_ms 0: a loaded CI machine must not turn this into a test of staleness.
        out[name] = {"topic_patterns": [f"{NS}/{robot}/*/image_raw"], "max_age_ms": 0, **extra}
    return out


def tolerance(spec, resize: str) -> tuple[float, float]:
    sx, sy = 256 / spec.width, 256 / spec.height
    if resize == "letterbox":
        sx = sy = min(sx, sy)
    return 1.5 / sx + 1.0, 1.5 / sy + 1.0


@pytest.fixture(scope="module")
def seeing(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ros_seeing")
    node = NodeProcess(params(), tmp, name=f"inference_node_seeing_{TOKEN}")
    probe = Probe(f"probe_seeing_{TOKEN}")
    cameras = None
    try:
        node.wait_ready(probe)
        pairs = {}
        for binding, specs in SPECS.items():
            for spec in specs:
                matcher = PairRecorder()
                probe.node.create_subscription(
                    DETECTIONS_TYPE, ground_truth_topic(spec.topic(NS)), matcher.on_truth, 50
                )
                probe.node.create_subscription(
                    DETECTIONS_TYPE,
                    spec.topic(NS).rsplit("/", 1)[0] + "/detections",
                    matcher.on_detections,
                    50,
                )
                pairs[spec] = (binding, matcher)
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        images = probe.subscribe(
            Image, SPECS["letterbox"][1].topic(NS), qos=qos_profile_sensor_data
        )
        cameras = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.ros.tools.synthetic_cameras",
                "--prefix",
                NS,
                "--rate",
                "8",
                *[
                    a
                    for specs in SPECS.values()
                    for s in specs
                    for a in ("--camera", f"{s.robot}/{s.camera}:{s.width}x{s.height}:{s.encoding}")
                ],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        yield node, probe, pairs, images
    finally:
        if cameras is not None:
            cameras.send_signal(signal.SIGINT)
            out, _ = cameras.communicate(timeout=TIMEOUT)
            assert cameras.returncode == 0, out
        probe.close()
        node.stop_and_check(signal.SIGINT)


class PairRecorder(FrameMatcher):
    """A FrameMatcher that also keeps the (ground truth, detections) message pairs."""

    def __init__(self) -> None:
        super().__init__(on_pair=lambda truth, det: self._pairs.append((truth, det)))
        self._pairs: list = []

    def pairs(self) -> list:
        with self._lock:
            return list(self._pairs)


@pytest.mark.parametrize("binding", list(BINDINGS))
def test_boxes_land_on_the_objects_in_each_cameras_pixels(seeing, binding):
    node, _, pairs, _ = seeing
    resize = "stretch" if binding == "stretch" else "letterbox"
    for spec in SPECS[binding]:
        _, matcher = pairs[spec]
        wait_until(
            lambda: len(matcher.pairs()) >= FRAMES,
            TIMEOUT,
            f"{FRAMES} frames of {spec.topic(NS)} ({binding}) with detections and ground "
            f"truth; node log:\n{node.log()[-3000:]}",
        )
        checked = matcher.pairs()[:FRAMES]
        assert len(checked) == FRAMES
        tol = tolerance(spec, resize)
        for truth, det in checked:
            assert det.header.frame_id == truth.header.frame_id == spec.frame_id
            assert stamp_ns(det.header.stamp) == stamp_ns(truth.header.stamp)
            tb, tc, _ = message_boxes(truth)
            db, dc, ds = message_boxes(det)
            assert sorted(dc) == sorted(tc), (spec, dc, tc)  # every object, right class, once
            assert (ds > 0.9).all(), ds
            for box, cls in zip(tb, tc):
                err = np.abs(db[dc.index(cls)] - box)
                assert (err[[0, 2]] <= tol[0]).all() and (err[[1, 3]] <= tol[1]).all(), (
                    f"{spec.topic(NS)} {cls}: {db[dc.index(cls)].round(1)} vs {box} (tol {tol})"
                )
        score = matcher.snapshot()
        assert score.recall == 1.0 and score.precision == 1.0 and score.mean_iou > 0.85, (
            spec,
            vars(score),
        )


def test_a_tritonclient_request_with_the_same_frame_gives_the_same_boxes(seeing):
    import tritonclient.grpc as grpcclient

    from triton_ros.core.model_config import TensorConfig
    from triton_ros.ros.codec.preprocess import PreprocessConfig, plan_input, preprocess

    node, _, pairs, images = seeing
    spec = SPECS["letterbox"][1]  # bgr8 320x240
    _, matcher = pairs[spec]
    images.wait_for(1, what="an image of the bgr8 camera")

    def answered_frame():
        """An image the test received whose detections and ground truth arrived too."""
        answered = {stamp_ns(t.header.stamp): (t, d) for t, d in matcher.pairs()}
        return next(
            (
                (m, answered[stamp_ns(m.header.stamp)])
                for m in images.messages()
                if stamp_ns(m.header.stamp) in answered
            ),
            None,
        )

    msg, (truth, det) = wait_until(answered_frame, what="a frame with the node's answer")
    assert msg.encoding == "bgr8"
    pixels = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)
    plan = plan_input(
        PreprocessConfig(),
        TensorConfig(name="images", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW"),
        model="color_detector",
    )
    tensor, letterbox = preprocess(pixels, "bgr8", plan)
    x = grpcclient.InferInput("images", [1, *tensor.shape], "FP32")
    x.set_data_from_numpy(tensor[None])
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{node.grpc_port}")
    rows = client.infer("color_detector", [x]).as_numpy("detections")[0]
    rows = rows[rows[:, 4] > 0.5]
    boxes = letterbox.to_source(rows[:, :4])
    # The node's own answer for the same frame (same stamp), and its ground truth.
    db, dc, _ = message_boxes(det)
    tb, tc, _ = message_boxes(truth)
    labels = (ROOT / "model_repository" / "color_detector" / "labels.txt").read_text().split()
    names = [labels[int(c)] for c in rows[:, 5]]
    assert sorted(names) == sorted(dc) == sorted(tc)
    for box, name in zip(boxes, names):
        np.testing.assert_allclose(box, db[dc.index(name)], atol=1e-3)
        assert np.abs(box - tb[tc.index(name)]).max() <= tolerance(spec, "letterbox")[0]
