"""Compressed cameras and segmentation masks across processes (docs/sensors.md).

One ``inference_node`` (its own process) with three bindings and no input_kind parameter
anywhere: ``raw`` (color_detector on raw Image cameras), ``compressed`` (color_detector on every
``.../compressed`` topic, and on one CompressedImage topic bound by name in ``topics`` whose
name says nothing: its type comes from the ROS graph) and ``masks`` (color_segmenter, ``format:
segmentation`` with the colour overlay). Two publisher processes: ``synthetic_cameras`` (raw
cameras, and JPEG and PNG cameras encoded with OpenCV as image_transport does, with ground-truth
boxes and masks) and ``compressed_publisher.py`` (Pillow's JPEG and PNG, one 1920x1080 camera
that the node decodes at 1/4, and corrupt frames in the same streams). The test process pairs
each result with the ground truth of the same frame (stamp and frame_id) and checks: recall and
mean IoU per compressed camera; per-class IoU of the masks in each camera's own pixels; every
corrupt frame counted as malformed on /diagnostics with its cause in the log, while the raw
binding kept publishing and the corrupt streams' next frames were answered."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import ROOT, TIMEOUT, NodeProcess, Probe, stamp_ns, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.codec.registry import base_topic
from triton_ros.ros.tools.detection_metrics import FrameMatcher, MaskScore
from triton_ros.ros.tools.synthetic_cameras import (
    CLASS_NAMES,
    ground_truth_mask_topic,
    ground_truth_topic,
    parse_camera,
)

pytestmark = pytest.mark.system

NS = f"/sen{TOKEN}"
SYN = [
    parse_camera(c)
    for c in (
        "syn/cam_rgb:640x480:rgb8",
        "syn/cam_mono:424x240:mono8",
        "syn/cam_jpeg:640x480:rgb8:jpeg",
        "syn/cam_png:320x240:bgr8:png",
    )
]
# Pillow's cameras: ROBOT/CAMERA:WxH:CODEC[:TOPIC]
PIL = (
    "pil/cam_jpeg:640x480:jpeg",
    "pil/cam_png:848x480:png",
    "pil/cam_big:1920x1080:jpeg",
    "pil/cam_named:480x360:jpeg:/pil/cam_named/stream",
)
NAMED = f"{NS}/pil/cam_named/stream"
CORRUPT_EVERY = 4
SEGMENTER_CLASSES = ("background", *CLASS_NAMES)


def pil_topic(text: str) -> str:
    name, _, _, *topic = text.split(":")
    return f"{NS}{topic[0]}" if topic else f"{NS}/{name}/image_raw/compressed"


def pil_truth(text: str) -> str:
    return f"{NS}/{text.split(':')[0]}/ground_truth"


def params() -> dict:
    common = {"max_age_ms": 0, "score_threshold": 0.5}  # a loaded CI host: no staleness
    return {
        "model_repository": str(ROOT / "model_repository"),
        "startup_models": ["color_detector", "color_segmenter"],
        "diagnostics_period_s": 0.5,
        "discovery_period_s": 0.5,
        "worker_threads": 2,
        "bindings": ["raw", "compressed", "masks"],
        "raw": {"model": "color_detector", "topic_patterns": [f"{NS}/syn/*/image_raw"], **common},
        # max_in_flight 3: a corrupt frame never waits in the slot (where a newer frame
        # would supersede it) on a loaded host
        "compressed": {
            "model": "color_detector",
            "topics": [NAMED],
            "max_in_flight": 3,
            "topic_patterns": [f"{NS}/**/compressed"],
            "output_topic_template": "{camera}/{output_name}",
            **common,
        },
        "masks": {
            "model": "color_segmenter",
            "format": "segmentation",
            "segmentation_overlay": True,
            "max_age_ms": 0,
            "topics": [SYN[0].topic(NS), SYN[1].topic(NS), SYN[2].compressed_topic(NS)],
        },
    }


def detections_topic(image_topic: str) -> str:
    """Where the node publishes a camera's detections: beside its image topic (raw: the
    default template; compressed: {camera}/{output_name})."""
    return base_topic(image_topic).rsplit("/", 1)[0] + "/detections"


class MaskPairs:
    """Masks and ground-truth masks of the same frames, scored per class."""

    def __init__(self) -> None:
        self.score = MaskScore(len(SEGMENTER_CLASSES))
        self.truths: dict = {}
        self.masks: dict = {}
        self.checked: list[tuple] = []  # (mask header, truth header, mask shape)

    def on_truth(self, msg) -> None:
        self._arrive(msg, self.truths, self.masks, truth=True)

    def on_mask(self, msg) -> None:
        self._arrive(msg, self.masks, self.truths, truth=False)

    def _arrive(self, msg, mine, other, *, truth: bool) -> None:
        key = (stamp_ns(msg.header.stamp), msg.header.frame_id)
        partner = other.pop(key, None)
        if partner is None:
            mine[key] = msg
            return
        t, m = (msg, partner) if truth else (partner, msg)
        assert m.encoding == "mono8" and (m.width, m.height) == (t.width, t.height)
        self.score.add(np.frombuffer(m.data, np.uint8), np.frombuffer(t.data, np.uint8))
        self.checked.append((m.header, t.header, (m.height, m.width)))


@pytest.fixture(scope="module")
def sensors(tmp_path_factory):
    from sensor_msgs.msg import Image

    tmp = tmp_path_factory.mktemp("ros_sensors")
    node = NodeProcess(params(), tmp, name=f"inference_node_sensors_{TOKEN}")
    probe = Probe(f"probe_sensors_{TOKEN}")
    procs = []
    try:
        node.wait_ready(probe)
        scored = {}
        for topic, truth in [
            (
                s.compressed_topic(NS) if s.transport in ("jpeg", "png") else s.topic(NS),
                ground_truth_topic(s.topic(NS)),
            )
            for s in SYN
        ] + [(pil_topic(c), pil_truth(c)) for c in PIL]:
            matcher = FrameMatcher()
            probe.node.create_subscription(DETECTIONS_TYPE, truth, matcher.on_truth, 100)
            probe.node.create_subscription(
                DETECTIONS_TYPE, detections_topic(topic), matcher.on_detections, 100
            )
            scored[topic] = matcher
        masks, overlays = {}, {}
        for spec in SYN[:3]:
            topic = spec.compressed_topic(NS) if spec.transport == "jpeg" else spec.topic(NS)
            pairs = MaskPairs()
            probe.node.create_subscription(
                Image, ground_truth_mask_topic(spec.topic(NS)), pairs.on_truth, 100
            )
            out = topic.rsplit("/", 1)[0] + "/segmentation"
            probe.node.create_subscription(Image, out, pairs.on_mask, 100)
            overlays[topic] = probe.subscribe(Image, out + "/overlay")
            masks[topic] = pairs
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "triton_ros.ros.tools.synthetic_cameras",
                    "--prefix",
                    NS,
                    "--rate",
                    "6",
                    "--ground-truth-masks",
                    *[
                        a
                        for s in SYN
                        for a in (
                            "--camera",
                            f"{s.robot}/{s.camera}:{s.width}x{s.height}:{s.encoding}:{s.transport}",
                        )
                    ],
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "test" / "ros" / "compressed_publisher.py"),
                    "--prefix",
                    NS,
                    "--rate",
                    "4",
                    "--corrupt-every",
                    str(CORRUPT_EVERY),
                    "--corrupt-after",
                    "4",
                    *[a for c in PIL for a in ("--camera", c)],
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        yield node, probe, scored, masks, overlays, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=TIMEOUT)
        probe.close()
        node.stop_and_check(signal.SIGINT)


def test_compressed_cameras_are_seen_with_no_input_kind_parameter(sensors):
    """Recall >= 0.95 and mean IoU >= 0.8 per compressed camera (JPEG quality 75), boxes in
    the camera's full pixels (the 1920x1080 one decoded at 1/4)."""
    node, _, scored, _, _, _ = sensors
    compressed = [s.compressed_topic(NS) for s in SYN if s.transport in ("jpeg", "png")] + [
        pil_topic(c) for c in PIL
    ]
    frames = 8
    for topic in compressed:
        matcher = scored[topic]
        wait_until(
            lambda: matcher.snapshot().frames >= frames,
            TIMEOUT,
            f"{frames} scored frames of {topic}; node log:\n{node.log()[-3000:]}",
        )
    for topic in compressed:
        score = scored[topic].snapshot()
        assert score.recall >= 0.95 and score.mean_iou >= 0.8, (topic, vars(score))
        assert score.precision >= 0.95, (topic, vars(score))
        assert scored[topic].unknown == 0
    log = node.log()
    assert f"{NAMED} carries sensor_msgs/msg/CompressedImage; read as compressed" in log, log
    assert "reduced-size JPEG decoding" in log


def test_corrupt_frames_are_counted_and_every_stream_goes_on(sensors):
    """Each corrupt frame is malformed on /diagnostics with its cause in the log (no traceback);
    the corrupt streams' later frames are answered, and the raw cameras' binding published all
    along."""
    from diagnostic_msgs.msg import DiagnosticArray

    node, probe, scored, _, _, procs = sensors
    diagnostics = probe.subscribe(DiagnosticArray, "/diagnostics")

    def malformed():
        for array in reversed(diagnostics.messages()):
            for status in array.status:
                if status.name.endswith("binding compressed"):
                    values = {kv.key: kv.value for kv in status.values}
                    return int(values["dropped_malformed"]), values
        return None

    # corrupt frames flow (after the publisher's first 4 s), two of each stream at least
    wait_until(
        lambda: (m := malformed()) is not None and m[0] >= 2 * len(PIL),
        TIMEOUT,
        "corrupt frames counted",
    )
    raw = scored[SYN[0].topic(NS)]
    corrupt_topics = [pil_topic(c) for c in PIL]
    start = {t: scored[t].snapshot().frames for t in corrupt_topics}
    raw_start = raw.snapshot().frames
    # a few more rounds of corrupt frames: every CORRUPT_EVERY-th frame at 4 Hz
    wait_until(
        lambda: all(
            scored[t].snapshot().frames >= start[t] + 2 * CORRUPT_EVERY for t in corrupt_topics
        ),
        TIMEOUT,
        "frames after corrupt ones",
    )
    assert raw.snapshot().frames >= raw_start + 8, "the raw binding stalled"
    publisher = procs[1]
    publisher.send_signal(signal.SIGINT)
    out, _ = publisher.communicate(timeout=TIMEOUT)
    assert publisher.returncode == 0, out
    counts = json.loads(out.strip().splitlines()[-1])
    sent_corrupt = sum(counts["corrupt"].values())
    assert sent_corrupt >= 3 * len(PIL), counts

    # Best-effort delivery may lose a frame; the node counts every corrupt one it received,
    # and nothing else: the good frames of the same streams are all answered or dropped
    # for a reason that is not malformed.
    # (0.75: a loaded CI host lost 3 of 24 to best-effort delivery)
    try:
        count, values = wait_until(
            lambda: (
                (found := malformed()) is not None and found[0] >= 0.75 * sent_corrupt and found
            ),
            TIMEOUT,
            "the corrupt frames counted as malformed",
            interval=0.2,
        )
    except AssertionError as exc:
        found = malformed()
        raise AssertionError(
            f"{exc}: {sent_corrupt}, {counts['corrupt']}, "
            + str(
                found
                and {
                    k: v
                    for k, v in found[1].items()
                    if k.startswith(("dropped", "received", "pub", NS))
                }
            )
        ) from None
    assert count <= sent_corrupt, values
    assert int(values["failed"]) == 0, values
    log = node.log()
    for topic in corrupt_topics:  # logged per topic, throttled (5 s)
        assert f"malformed compressed on {topic}" in log, topic
    causes = {
        cause
        for cause in (
            "JPEG does not decode",
            "empty data",
            "unsupported format",
            "neither JPEG nor PNG",
            "image does not decode",
        )
        if cause in log
    }
    assert len(causes) >= 2, causes
    assert "Traceback" not in log


def test_segmentation_masks_against_ground_truth(sensors):
    """Masks in each camera's own pixels, stamp and frame_id kept: per-class IoU >= 0.9 over
    the frames scored; the overlay is the mask in colours."""
    node, _, _, masks, overlays, _ = sensors
    from triton_ros.ros.codec.segmentation import PALETTE

    frames = 6
    for topic, pairs in masks.items():
        wait_until(
            lambda: pairs.score.frames >= frames,
            TIMEOUT,
            f"{frames} masks of {topic}; node log:\n{node.log()[-3000:]}",
        )
    for (topic, pairs), spec in zip(masks.items(), SYN):
        ious = pairs.score.ious()
        drawn = [0] + [
            1 + CLASS_NAMES.index(c)
            for c in (("black", "white") if spec.encoding == "mono8" else CLASS_NAMES)
        ]
        assert all(ious[k] >= 0.9 for k in drawn), (
            topic,
            {SEGMENTER_CLASSES[k]: round(float(ious[k]), 3) for k in drawn},
        )
        for mask_header, truth_header, shape in pairs.checked:
            assert mask_header.frame_id == truth_header.frame_id == spec.frame_id
            assert shape == (spec.height, spec.width)
        overlay = overlays[topic].wait_for(1, what=f"an overlay of {topic}")[-1]
        assert (overlay.encoding, overlay.width, overlay.height) == (
            "rgb8",
            spec.width,
            spec.height,
        )
        colours = np.frombuffer(overlay.data, np.uint8).reshape(-1, 3)
        assert {tuple(c) for c in np.unique(colours, axis=0)} <= {tuple(c) for c in PALETTE[:7]}
