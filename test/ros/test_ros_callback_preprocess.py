"""Where a frame is preprocessed (node parameter ``preprocess_in_callback``): in the image
callback, on the thread that spins the node (the default), or on a worker thread. Both publish
the same detections, with the input's header, and they are right (one box on each object of a
synthetic frame); a frame that fails preprocessing in the callback is counted as
failed_preprocess and the callback goes on serving the next frames."""

from __future__ import annotations

import threading
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


pytestmark = pytest.mark.integration

TOPIC = f"/inline{TOKEN}/cam/image_raw"
DETECTIONS = f"/inline{TOKEN}/cam/detections"
WORKER = "binding_worker"


@pytest.fixture
def ros_node(spinning_node):
    return spinning_node(
        f"inline_{TOKEN}",
        {
            "bindings": ["cam"],
            "cam.model": "color_detector",
            "cam.topics": [TOPIC],
            "cam.score_threshold": 0.5,
            "cam.max_age_ms": 0,
        },
    )


def test_the_default_preprocesses_in_the_callback():
    from triton_ros.ros.parameters import NODE_PARAMS, NodeConfig

    assert {spec.name: spec.default for spec in NODE_PARAMS}["preprocess_in_callback"] is True
    assert NodeConfig.__dataclass_fields__["preprocess_in_callback"].default is True


def test_callback_and_worker_preprocessing_publish_the_same_right_boxes(ros_node, monkeypatch):
    from triton_ros.ros.binding.binding import Binding
    from triton_ros.ros.binding.frames import FramePath
    from triton_ros.ros.tools.detection_metrics import message_boxes
    from triton_ros.ros.targets.local import LocalModelTarget
    from triton_ros.ros.parameters import declare_and_read
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    threads: list[str] = []  # where each frame was preprocessed
    start_frame = FramePath._start_frame

    def recording(self, source, frame):
        threads.append(threading.current_thread().name)
        return start_frame(self, source, frame)

    monkeypatch.setattr(FramePath, "_start_frame", recording)
    core = bundled_core("color_detector")
    config = declare_and_read(ros_node, bundled_repository=ROOT / "model_repository")
    pixels, truth = SyntheticScene(parse_camera("r/cam:320x240:rgb8"), seed=11).render(0.0)
    assert len(truth.boxes) > 0
    results, pub = detections_probe(ros_node, TOPIC, DETECTIONS)
    published = {}
    try:
        for inline, frame_id in ((True, "callback"), (False, "worker")):
            threads.clear()
            workers = ThreadPoolExecutor(2, thread_name_prefix=WORKER)
            binding = Binding(
                config.bindings[0],
                node=ros_node,
                target=LocalModelTarget(core, "color_detector"),
                workers=workers,
                callback_group=None,
                preprocess_in_callback=inline,
            )
            binding.start()
            stamp = ros_node.get_clock().now().to_msg()

            def arrived():
                pub.publish(image_message(pixels, "rgb8", frame_id, stamp))
                return any(r.header.frame_id == frame_id for r in results)

            wait_until(
                arrived, what=f"detections of frames preprocessed in the {frame_id}", interval=0.2
            )
            msg = next(r for r in results if r.header.frame_id == frame_id)
            assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (stamp.sec, stamp.nanosec)
            published[frame_id] = message_boxes(msg)
            assert threads, "no frame was started"
            on_workers = [name.startswith(WORKER) for name in threads]
            assert all(on_workers) if not inline else not any(on_workers), (inline, threads)
            stop_binding(binding, workers)
        # the same, and right: one box per object, on it (letterbox 320 -> 256: ~3 px a pixel)
        assert_same_right_boxes(published, truth)
    finally:
        core.stop()


def test_a_frame_failing_in_the_callback_is_counted_and_the_next_publish(ros_node, monkeypatch):
    from triton_ros.ros.codec import preprocess as preprocess_module
    from triton_ros.ros.binding.binding import Binding
    from triton_ros.ros.targets.local import LocalModelTarget
    from triton_ros.ros.parameters import declare_and_read

    failures = {"left": 2}
    call = preprocess_module.Preprocessor.__call__

    def flaky(self, *args):
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError("preprocessing fault for the test")
        return call(self, *args)

    monkeypatch.setattr(preprocess_module.Preprocessor, "__call__", flaky)
    core = bundled_core("color_detector")
    config = declare_and_read(ros_node, bundled_repository=ROOT / "model_repository")
    results, pub = detections_probe(ros_node, TOPIC, DETECTIONS)
    workers = ThreadPoolExecutor(2, thread_name_prefix=WORKER)
    binding = Binding(
        config.bindings[0],
        node=ros_node,
        target=LocalModelTarget(core, "color_detector"),
        workers=workers,
        callback_group=None,
        preprocess_in_callback=True,
    )
    try:
        binding.start()
        pixels = np.zeros((240, 320, 3), np.uint8)

        def arrived():
            pub.publish(image_message(pixels, "rgb8", "cam", ros_node.get_clock().now().to_msg()))
            return results

        wait_until(arrived, what="detections after two failed frames", interval=0.2)
        counters, _, _ = binding.sources()[0].snapshot()
        assert counters.failed_preprocess == 2 and counters.failed_internal == 0
        assert binding.sources()[0].snapshot()[1] in (0, 1)  # the slot was released
    finally:
        binding.stop()
        workers.shutdown(wait=True)
        core.stop()
