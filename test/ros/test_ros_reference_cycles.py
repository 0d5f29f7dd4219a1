"""A binding in this process (real rclpy node, real core with the bundled detector): the frames it
has published leave no reference cycle behind. Their requests, responses and futures are freed by
reference counting once published, not at the garbage collector's next pass (a response keeps
the batch's output buffer alive; test/test_reference_cycles.py says why that matters)."""
from __future__ import annotations

import gc
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from ros_env import ROOT, TOKEN
from ros_probe import image_message, wait_until
from triton_ros.core.infer_request import InferRequest, InferResponse
from triton_ros.core.server import InferenceServer, ServerOptions
from triton_ros.ros.model_target import LocalModelTarget
from triton_ros.ros.source import Frame

TOPIC = f"/cycles{TOKEN}/cam/image_raw"


@pytest.fixture
def ros_node():
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node(
        f"cycles_{TOKEN}", context=context, parameter_overrides=[
            Parameter("bindings", value=["cam"]), Parameter("cam.model", value="detector"),
            Parameter("cam.topics", value=[TOPIC]), Parameter("cam.score_threshold", value=0.0),
            Parameter("cam.top_k", value=1)])
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    yield node
    executor.shutdown()
    thread.join(timeout=30)
    node.destroy_node()
    rclpy.shutdown(context=context)


def test_published_frames_leave_no_cycle(ros_node):
    from triton_ros.ros.bindings import Binding
    from triton_ros.ros.diagnostics import DiagnosticsReporter
    from triton_ros.ros.output_messages import DETECTIONS_TYPE
    from triton_ros.ros.parameters import declare_and_read

    config = declare_and_read(ros_node, bundled_repository=ROOT / "model_repository")
    core = InferenceServer(ServerOptions(model_repositories=(str(ROOT / "model_repository"),),
                                         model_control_mode="explicit",
                                         startup_models=("detector",)))
    core.start()
    workers = ThreadPoolExecutor(2)
    binding = Binding(config.bindings[0], node=ros_node, target=LocalModelTarget(core, "detector"),
                      workers=workers, reporter=DiagnosticsReporter(core), callback_group=None)
    results = []
    ros_node.create_subscription(DETECTIONS_TYPE, f"/cycles{TOKEN}/cam/detections",
                                 results.append, 10)
    pub = ros_node.create_publisher(type(image_message(np.zeros((1, 1, 3), np.uint8), "rgb8", "",
                                                       ros_node.get_clock().now().to_msg())),
                                    TOPIC, 10)
    pixels = np.zeros((48, 64, 3), np.uint8)

    def published(count: int):
        def check() -> bool:
            pub.publish(image_message(pixels, "rgb8", "cam",
                                      ros_node.get_clock().now().to_msg()))
            return len(results) >= count
        return check

    try:
        binding.start()
        wait_until(published(1), what="a first result", interval=0.1)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            wait_until(published(len(results) + 10), what="ten more results", interval=0.05)
            gc.collect()
            ours = [o for o in gc.garbage
                    if isinstance(o, (InferRequest, InferResponse, Future, Frame))]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert ours == []
    finally:
        binding.stop()
        workers.shutdown(wait=True)
        core.stop()
