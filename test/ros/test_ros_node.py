"""The inference node in its own process, driven from this one over real ROS 2 and gRPC.

One node serves every test of this module (starting it loads four models): bindings for two
robots' cameras found by a topic pattern, a TensorList binding, a decoded-detections model with a
UINT8 HWC input, a classifier, a second detector for load/unload, a binding for malformed frames
and one with a short max_age_ms. The node must exit 0 without an abort at the end.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest

from ros_env import TOKEN
from ros_models import make_repository
from ros_probe import TIMEOUT, NodeProcess, Probe, image_message, stamp_ns, wait_until
from triton_ros.ros.codec.messages import CLASSIFICATION_TYPE, DETECTIONS_TYPE, VISION_MSGS
from triton_ros.ros.tools.synthetic_cameras import parse_camera


pytestmark = pytest.mark.system

NS = f"/t{TOKEN}"
ROBOTS = [
    parse_camera(c)
    for c in (
        "robot1/camera_front:640x480:rgb8",
        "robot1/camera_rear:320x240:bgr8",
        "robot2/camera_front:424x240:rgb8",
        "robot2/camera_rear:256x256:mono8",
    )
]


def params(repo) -> dict:
    return {
        "model_repository": str(repo),
        "startup_models": ["*"],
        "diagnostics_period_s": 0.5,
        "discovery_period_s": 0.5,
        "bindings": ["cams", "tensors", "decoded", "classify", "other", "bad", "old"],
        "cams": {
            "model": "detector",
            "topic_patterns": [f"{NS}/robot*/camera*/image_raw"],
            "score_threshold": 0.0,
            "top_k": 5,
            "max_age_ms": 10000,
            "forget_after_s": 2.0,
        },
        "tensors": {
            "model": "detector",
            "topics": [f"{NS}/tensor_cam/image_raw"],
            "format": "tensors",
            "outputs": ["scores"],
        },
        "decoded": {
            "model": "decoded",
            "topics": [f"{NS}/decoded_cam/image_raw"],
            "class_names": ["zero", "one", "two"],
        },
        "classify": {
            "model": "classifier",
            "topics": [f"{NS}/class_cam/image_raw"],
            "format": "classification",
            "class_count": 3,
        },
        "other": {
            "model": "detector_b",
            "topics": [f"{NS}/other_cam/image_raw"],
            "score_threshold": 0.0,
            "top_k": 3,
            "max_age_ms": 0,
        },
        "bad": {
            "model": "detector",
            "topics": [f"{NS}/bad1/image_raw", f"{NS}/bad2/image_raw", f"{NS}/bad3/image_raw"],
        },
        "old": {"model": "detector", "topics": [f"{NS}/old_cam/image_raw"], "max_age_ms": 1000},
    }


class Env:
    def __init__(self, node: NodeProcess, probe: Probe) -> None:
        from triton_ros_interfaces.msg import InferenceStatus

        self.node = node
        self.probe = probe
        self.status = probe.subscribe(InferenceStatus, f"/{node.name}/status")

    def binding_status(self, name: str):
        msg = self.status.last()
        return next((b for b in msg.bindings if b.name == name), None) if msg else None

    def model_status(self, name: str):
        msg = self.status.last()
        return next((m for m in msg.models if m.name == name), None) if msg else None

    def statistics(self, model: str):
        from triton_ros_interfaces.srv import GetModelStatistics

        response = self.probe.call(
            GetModelStatistics, self.node.service("get_model_statistics"), model_name=model
        )
        assert response.success, response.message
        return response.model_stats[0]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ros_node")
    repo = make_repository(tmp / "models")
    node = NodeProcess(params(repo), tmp, name=f"inference_node_{TOKEN}")
    probe = Probe(f"probe_{TOKEN}")
    try:
        node.wait_ready(probe)
        yield Env(node, probe)
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)


def publish_until_answered(env, topic: str, make, rec, what: str):
    """Publish fresh frames (new stamps) every 0.5 s until the recorder has an answer."""
    pub = env.probe.image_publisher(topic)

    def attempt():
        pub.publish(make(env.probe.node.get_clock().now().to_msg()))
        return rec.count() > 0

    wait_until(attempt, what=what, interval=0.5)
    return rec.messages()


def detections_topic(spec) -> str:
    return f"{NS}/{spec.robot}/{spec.camera}/detections"


def test_four_cameras_of_two_robots_get_detections_with_their_headers(env):
    rig = env.probe.cameras(ROBOTS, prefix=NS, rate=20.0)
    recorders = {
        spec: env.probe.subscribe(DETECTIONS_TYPE, detections_topic(spec)) for spec in ROBOTS
    }
    try:
        for rec in recorders.values():
            rec.wait_for(15, what="detections on every camera's topic")
    finally:
        rig.stop()
    if not VISION_MSGS:  # this machine: the package's own message with vision_msgs' layout
        assert DETECTIONS_TYPE.__module__.startswith("triton_ros_interfaces")
    for spec, rec in recorders.items():
        sent = rig.stamps(spec.topic(NS))
        for msg in rec.messages():
            # every result carries the header of a frame of that very camera
            assert sent.get(stamp_ns(msg.header.stamp)) == spec.frame_id, spec
            assert msg.header.frame_id == spec.frame_id
            assert len(msg.detections) == 5  # threshold 0, top_k 5
            for det in msg.detections:
                assert det.header.frame_id == spec.frame_id
                # boxes were mapped back to this camera's own pixels
                x, y = det.bbox.center.position.x, det.bbox.center.position.y
                assert 0 <= x - det.bbox.size_x / 2 and x + det.bbox.size_x / 2 <= spec.width + 1e-6
                assert (
                    0 <= y - det.bbox.size_y / 2 and y + det.bbox.size_y / 2 <= spec.height + 1e-6
                )
                assert det.results[0].hypothesis.class_id in (
                    "person",
                    "bicycle",
                    "car",
                    "motorcycle",
                    "bus",
                    "truck",
                    "robot",
                    "pallet",
                )

    # The four cameras (four resolutions) fed one dynamic batcher: batches of several frames.
    stats = env.statistics("detector")
    assert stats.execution_count > 0
    assert stats.inference_count / stats.execution_count > 1.0, [
        (b.batch_size, b.compute_infer.count) for b in stats.batch_stats
    ]
    assert any(b.batch_size > 1 for b in stats.batch_stats)
    assert stats.mean_batch_size == pytest.approx(stats.inference_count / stats.execution_count)


def test_a_robot_appearing_later_is_bound_and_unbound_when_it_leaves(env):
    topic = f"{NS}/robot3/camera_up/detections"
    rec = env.probe.subscribe(DETECTIONS_TYPE, topic)
    robot = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_ros.ros.tools.synthetic_cameras",
            "--prefix",
            NS,
            "--rate",
            "15",
            "--camera",
            "robot3/camera_up:320x200:bgra8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        msgs = rec.wait_for(5, what="detections of the late robot")
        seen = env.status.count()
        env.status.wait_for(seen + 2, what="a status while the late robot publishes")
        published_before = env.binding_status("cams").published
    finally:
        robot.send_signal(signal.SIGINT)
        out, _ = robot.communicate(timeout=TIMEOUT)
    assert robot.returncode == 0, out
    assert all(m.header.frame_id == "robot3/camera_up_optical_frame" for m in msgs)
    assert f"found {NS}/robot3/camera_up/image_raw" in env.node.log()
    # gone for longer than forget_after_s (2 s): unbound
    wait_until(
        lambda: f"{NS}/robot3/camera_up/image_raw has had no publisher" in env.node.log(),
        what="the late robot to be unbound",
    )
    # its frames still count in the binding's totals
    seen = env.status.count()
    env.status.wait_for(seen + 2, what="a status after the unbinding")
    assert env.binding_status("cams").published >= published_before >= len(msgs)


def test_tensor_list_output(env):
    from triton_ros_interfaces.msg import TensorList

    rec = env.probe.subscribe(TensorList, f"{NS}/tensor_cam/tensors")
    pixels = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    sent = []

    def make(stamp):
        sent.append(stamp_ns(stamp))
        return image_message(pixels, "rgb8", "tensor_frame", stamp)

    out = publish_until_answered(env, f"{NS}/tensor_cam/image_raw", make, rec, "a TensorList")[0]
    assert out.header.frame_id == "tensor_frame" and stamp_ns(out.header.stamp) in sent
    assert (out.model_name, out.model_version) == ("detector", 1)
    assert [t.name for t in out.tensors] == ["scores"]  # only the requested output
    scores = out.tensors[0]
    assert (scores.datatype, list(scores.shape)) == ("FP32", [1, 256, 8])
    values = np.frombuffer(bytes(scores.data), "<f4").reshape(1, 256, 8)
    assert ((values > 0) & (values < 1)).all()  # sigmoid scores


def test_decoded_detections_from_a_uint8_hwc_model(env):
    rec = env.probe.subscribe(DETECTIONS_TYPE, f"{NS}/decoded_cam/detections")
    pixels = np.full((256, 512, 3), 200, np.uint8)  # 2:1, letterboxed
    out = publish_until_answered(
        env,
        f"{NS}/decoded_cam/image_raw",
        lambda stamp: image_message(pixels, "rgb8", "wide", stamp),
        rec,
        "decoded detections",
    )[0]
    # Row 1 lies in the letterbox padding: dropped. Row 0: (64,64)-(192,192) in the 256x256
    # input -> (128,0)-(384,256) in the source; its score is the mean raw input byte / 255:
    # half image (200), half padding (114), so UINT8 pixels arrived without normalization.
    assert len(out.detections) == 1
    det = out.detections[0]
    assert det.results[0].hypothesis.class_id == "two"
    assert det.results[0].hypothesis.score == pytest.approx((200 + 114) / 2 / 255, abs=1e-3)
    assert (det.bbox.center.position.x, det.bbox.center.position.y) == pytest.approx((256.0, 128.0))
    assert (det.bbox.size_x, det.bbox.size_y) == pytest.approx((256.0, 256.0))


def test_classification_output(env):
    rec = env.probe.subscribe(CLASSIFICATION_TYPE, f"{NS}/class_cam/classification")
    red = np.zeros((48, 64, 3), np.uint8)
    red[..., 2] = 255  # red, in bgr8
    out = publish_until_answered(
        env,
        f"{NS}/class_cam/image_raw",
        lambda stamp: image_message(red, "bgr8", "cls", stamp),
        rec,
        "a classification",
    )[0]
    # letterbox pads 64x48 -> 32x24 with 114 grey: red mean = (24*255 + 8*114)/32/255
    red_mean = (24 * 255 + 8 * 114) / 32 / 255
    assert [r.class_id for r in out.results] == ["red", "bias", "green"]
    assert [r.score for r in out.results] == pytest.approx(
        [red_mean, 0.5, 8 * 114 / 32 / 255], abs=1e-4
    )


def test_load_unload_list_from_another_process_without_losing_other_results(env):
    from triton_ros_interfaces.srv import ListModels, LoadModel, UnloadModel

    listed = env.probe.call(ListModels, env.node.service("list_models"))
    assert listed.success
    states = {(m.name, m.version): (m.state, m.reason) for m in listed.models}
    for name in ("detector", "detector_b", "decoded", "classifier"):
        assert states[(name, "1")] == ("READY", "")

    cams = env.probe.cameras(ROBOTS[:2], prefix=NS, rate=15.0)
    other = env.probe.cameras(
        [parse_camera("x/y:160x120")], rate=15.0, topics=[f"{NS}/other_cam/image_raw"]
    )
    main_rec = env.probe.subscribe(DETECTIONS_TYPE, detections_topic(ROBOTS[0]))
    other_rec = env.probe.subscribe(DETECTIONS_TYPE, f"{NS}/other_cam/detections")
    try:
        other_rec.wait_for(3, what="detections of detector_b")
        before = env.statistics("detector")

        unloaded = env.probe.call(
            UnloadModel, env.node.service("unload_model"), model_name="detector_b"
        )
        assert unloaded.success, unloaded.message
        listed = env.probe.call(ListModels, env.node.service("list_models"))
        states = {(m.name, m.version): (m.state, m.reason) for m in listed.models}
        assert states[("detector_b", "1")] == ("UNAVAILABLE", "unloaded")
        assert states[("detector", "1")] == ("READY", "")
        ready_only = env.probe.call(ListModels, env.node.service("list_models"), ready_only=True)
        assert "detector_b" not in {m.name for m in ready_only.models}

        # frames of the unloaded model are dropped and counted; the other model keeps serving
        n = main_rec.count()
        main_rec.wait_for(n + 10, what="detections while detector_b is unloaded")
        wait_until(
            lambda: (
                (env.binding_status("other") or 0)
                and env.binding_status("other").dropped_unavailable > 0
            ),
            what="dropped_unavailable on the unbound model's binding",
        )
        assert env.model_status("detector_b").level in (0, 1)

        loaded = env.probe.call(LoadModel, env.node.service("load_model"), model_name="detector_b")
        assert loaded.success, loaded.message
        n = other_rec.count()
        other_rec.wait_for(n + 3, what="detections after reloading detector_b")

        missing = env.probe.call(
            LoadModel, env.node.service("load_model"), model_name="no_such_model"
        )
        assert not missing.success and "no_such_model" in missing.message
    finally:
        cams.stop()
        other.stop()
    after = env.statistics("detector")
    assert after.fail.count == before.fail.count  # nothing of detector was lost
    cams_status = env.binding_status("cams")
    assert cams_status.failed == 0 and cams_status.dropped_unavailable == 0


def test_diagnostics_and_status_arrive(env):
    from diagnostic_msgs.msg import DiagnosticArray

    rec = env.probe.subscribe(DiagnosticArray, "/diagnostics")
    prefix = f"/{env.node.name}: "

    def ours():
        for array in rec.messages():
            names = {s.name: s for s in array.status}
            if prefix + "model detector" in names and prefix + "binding cams" in names:
                return names
        return None

    names = wait_until(ours, what="/diagnostics with the model and binding statuses")
    model = names[prefix + "model detector"]
    assert model.level == b"\x00" and model.message == "ready"
    keys = {kv.key for kv in model.values}
    assert {
        "queue_depth",
        "input_rate",
        "output_rate",
        "mean_batch_size",
        "latency_p50_ms",
        "latency_p99_ms",
        "failures",
    } <= keys
    binding = names[prefix + "binding cams"]
    keys = {kv.key for kv in binding.values}
    assert {
        "in_flight",
        "input_rate",
        "output_rate",
        "drop_rate",
        "dropped_stale",
        "dropped_superseded",
        "dropped_malformed",
        "latency_p50_ms",
        "latency_p99_ms",
    } <= keys
    status = env.status.wait_for(1, what="~/status")[-1]
    assert {"detector", "detector_b", "decoded", "classifier"} <= {m.name for m in status.models}
    assert {"cams", "tensors", "decoded", "classify", "other", "bad", "old"} == {
        b.name for b in status.bindings
    }


def test_malformed_images_are_counted_and_logged_and_the_node_keeps_running(env):
    good = np.zeros((60, 80, 3), np.uint8)
    stamp = env.probe.node.get_clock().now().to_msg()
    unknown = image_message(good, "rgb8", "bad1", stamp)
    unknown.encoding = "yuv9000"
    short = image_message(good, "rgb8", "bad2", stamp)
    short.data = short.data[:-1]  # one byte short of step x height
    narrow = image_message(good, "rgb8", "bad3", stamp)
    narrow.step = 80 * 3 - 1
    pubs = [env.probe.image_publisher(f"{NS}/bad{i}/image_raw") for i in (1, 2, 3)]
    rec = env.probe.subscribe(DETECTIONS_TYPE, f"{NS}/bad1/detections")

    def malformed_counted():
        for pub, msg in zip(pubs, (unknown, short, narrow)):
            pub.publish(msg)
        status = env.binding_status("bad")
        return status is not None and status.dropped_malformed >= 3

    wait_until(malformed_counted, what="three malformed frames counted", interval=0.5)
    log = env.node.log()
    assert "unsupported encoding 'yuv9000'" in log
    assert "fewer than step x height" in log
    assert "smaller than width x channels" in log
    assert env.node.proc.poll() is None
    # the same topic still serves good frames
    out = publish_until_answered(
        env,
        f"{NS}/bad1/image_raw",
        lambda stamp: image_message(good, "rgb8", "bad1", stamp),
        rec,
        "a good frame's detections",
    )
    assert out[-1].header.frame_id == "bad1"
    # ~/status comes once a diagnostics period: the next one counts the published frame
    wait_until(lambda: env.binding_status("bad").published >= 1, what="published counted")


def test_frames_older_than_max_age_are_dropped_and_counted(env):
    pub = env.probe.image_publisher(f"{NS}/old_cam/image_raw")
    rec = env.probe.subscribe(DETECTIONS_TYPE, f"{NS}/old_cam/detections")
    pixels = np.zeros((60, 80, 3), np.uint8)

    def stale_counted():
        old = env.probe.now_ns() - 5_000_000_000  # 5 s old, max_age_ms is 1000
        msg = image_message(pixels, "rgb8", "old", env.probe.node.get_clock().now().to_msg())
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(old, 1_000_000_000)
        pub.publish(msg)
        status = env.binding_status("old")
        return status is not None and status.dropped_stale >= 3

    wait_until(stale_counted, what="stale frames counted", interval=0.3)
    assert rec.count() == 0
    # and explained: the topic, the age, the likely cause
    line = next(
        ln for ln in env.node.log().splitlines() if f"a frame of {NS}/old_cam/image_raw" in ln
    )
    assert "[WARN]" in line and "old on this node's system clock, over max_age_ms 1000" in line
    assert "clock is not synchronised" in line


def test_grpc_requests_share_the_models_of_the_node(env):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{env.node.grpc_port}")
    before = env.statistics("detector")
    images = np.zeros((2, 3, 256, 256), np.float32)
    x = grpcclient.InferInput("images", list(images.shape), "FP32")
    x.set_data_from_numpy(images)
    result = client.infer("detector", [x])
    assert result.as_numpy("boxes").shape == (2, 256, 4)
    grpc_stats = client.get_inference_statistics("detector", as_json=True)["model_stats"][0]
    after = env.statistics("detector")
    # one set of statistics: the camera frames of the earlier tests and this request together
    assert after.inference_count >= before.inference_count + 2
    assert int(grpc_stats["inference_count"]) >= before.inference_count + 2
    assert client.is_model_ready("classifier")


def test_the_node_serves_http_and_prometheus_metrics_of_the_same_models(env):
    import re
    import urllib.request

    import tritonclient.http as httpclient

    log = env.node.log()
    http_port = int(re.search(r"HTTP/REST endpoint at 127\.0\.0\.1:(\d+)", log).group(1))
    metrics_port = int(
        re.search(r"metrics endpoint \(/metrics\) at 127\.0\.0\.1:(\d+)", log).group(1)
    )
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    assert client.is_model_ready("detector")
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30)
        .read()
        .decode()
    )
    served = re.search(r'^nv_inference_count\{model="detector",version="1"\} (\d+)', text, re.M)
    # the camera frames of the earlier tests were counted by the node's own core
    assert served and int(served.group(1)) > 0
    assert int(served.group(1)) <= env.statistics("detector").inference_count
