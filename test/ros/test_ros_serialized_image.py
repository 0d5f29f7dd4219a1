"""Serialized images (``serialized_images``, ``ros/codec/serialized_image.py``): the reader gives
back every field rclpy serialized, its pixels a view of the received bytes, and refuses bytes that
are no Image; a binding reading serialized frames publishes exactly what one reading typed
messages publishes, header kept, for a frame with objects in it, and one asked for serialized
frames where rosbags cannot be imported reads typed messages instead."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ros_env import ROOT, TOKEN
from ros_probe import (
    assert_same_right_boxes,
    bundled_core,
    detections_probe,
    image_message,
    stop_binding,
    wait_until,
)
from triton_ros.ros.codec.preprocess import MalformedImage
from triton_ros.ros.codec.serialized_image import ImageReader


pytestmark = pytest.mark.integration


def _serialized(pixels: np.ndarray, encoding: str, frame_id: str, sec: int, nanosec: int):
    from builtin_interfaces.msg import Time
    from rclpy.serialization import serialize_message

    msg = image_message(pixels, encoding, frame_id, Time(sec=sec, nanosec=nanosec))
    return msg, serialize_message(msg)


# frame_id and encoding lengths move every later field across CDR's 4-byte alignment
@pytest.mark.parametrize("frame_id", ["", "c", "cam", "cam0", "robot_7/camera_optical_frame"])
@pytest.mark.parametrize(
    "encoding,shape",
    [("rgb8", (48, 64, 3)), ("mono8", (7, 5)), ("bgra8", (3, 9, 4)), ("mono16", (4, 6, 2))],
)
def test_reader_gives_back_what_rclpy_serialized(frame_id, encoding, shape):
    rng = np.random.default_rng(len(frame_id) * 31 + len(encoding))
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    msg, raw = _serialized(
        pixels, encoding, frame_id, -7 if frame_id else 1_700_000_000, 999_999_999
    )
    got = ImageReader()(raw)
    assert (got.header.stamp.sec, got.header.stamp.nanosec, got.header.frame_id) == (
        msg.header.stamp.sec,
        msg.header.stamp.nanosec,
        msg.header.frame_id,
    )
    assert type(got.header) is type(msg.header)  # the outputs carry it: rclpy's own Header
    assert (got.height, got.width, got.encoding, got.is_bigendian, got.step) == (
        msg.height,
        msg.width,
        msg.encoding,
        msg.is_bigendian,
        msg.step,
    )
    assert got.data.dtype == np.uint8 and got.data.tobytes() == pixels.tobytes()
    assert np.shares_memory(got.data, np.frombuffer(raw, np.uint8)), "the pixels were copied"


def test_reader_refuses_bytes_that_are_no_image():
    _, raw = _serialized(np.zeros((4, 4, 3), np.uint8), "rgb8", "cam", 1, 2)
    reader = ImageReader()
    for bad in (raw[:-5], raw[:30], b"", b"\x07\x07\x00\x00" + raw[4:]):
        with pytest.raises(MalformedImage, match="not a serialized sensor_msgs/Image"):
            reader(bad)


TOPIC = f"/serialized{TOKEN}/cam/image_raw"


@pytest.fixture
def ros_node(spinning_node):
    return spinning_node(
        f"serialized_{TOKEN}",
        {
            "bindings": ["cam"],
            "cam.model": "color_detector",
            "cam.topics": [TOPIC],
            "cam.score_threshold": 0.5,
            "cam.max_age_ms": 0,
        },
    )


def test_serialized_and_typed_bindings_publish_the_same(ros_node, monkeypatch):
    from triton_ros.ros.binding.binding import Binding
    from triton_ros.ros.tools.detection_metrics import message_boxes
    from triton_ros.ros.targets.local import LocalModelTarget
    from triton_ros.ros.parameters import declare_and_read
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    core = bundled_core("color_detector")
    config = declare_and_read(ros_node, bundled_repository=ROOT / "model_repository")
    pixels, truth = SyntheticScene(parse_camera("r/cam:320x240:rgb8"), seed=5).render(0.0)
    assert len(truth.boxes) > 0
    results, pub = detections_probe(ros_node, TOPIC, f"/serialized{TOKEN}/cam/detections")
    published = {}
    try:
        # "fallback": serialized_images true where rosbags cannot be imported -> typed
        for serialized, frame_id in ((True, "serialized"), (False, "typed"), (True, "fallback")):
            workers = ThreadPoolExecutor(2)
            with monkeypatch.context() as patch:
                if frame_id == "fallback":
                    patch.setitem(sys.modules, "rosbags.typesys", None)  # import fails
                binding = Binding(
                    config.bindings[0],
                    node=ros_node,
                    target=LocalModelTarget(core, "color_detector"),
                    workers=workers,
                    callback_group=None,
                    serialized_images=serialized,
                )
            assert (binding._readers["image"] is not None) == (frame_id == "serialized")
            binding.start()
            stamp = ros_node.get_clock().now().to_msg()

            def arrived():
                pub.publish(image_message(pixels, "rgb8", frame_id, stamp))
                return any(r.header.frame_id == frame_id for r in results)

            wait_until(arrived, what=f"detections of the {frame_id} binding", interval=0.2)
            msg = next(r for r in results if r.header.frame_id == frame_id)
            assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (stamp.sec, stamp.nanosec)
            published[frame_id] = message_boxes(msg)
            counters, _, _ = binding.sources()[0].snapshot()
            assert counters.dropped_malformed == 0 and counters.failed_internal == 0
            stop_binding(binding, workers)
        # the same, and right: one box per object, on it (letterbox 320 -> 256: ~3 px a pixel)
        assert_same_right_boxes(published, truth)
    finally:
        core.stop()
