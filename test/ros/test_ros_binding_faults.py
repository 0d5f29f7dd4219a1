"""A binding in this process (real rclpy node, real core with the bundled detector) whose model
target breaks its contract: ``infer`` raises instead of failing its future, or the future fails
with an untyped exception. Such defects are counted (failed_internal, failed_inference), kept as
the last error, reported on the binding's health, and never leave the source's in-flight slot
taken: later frames still publish. A binding with a sound target leaves no reference cycle behind
(test/test_reference_cycles.py says why that matters).
"""

from __future__ import annotations

import gc
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from ros_env import ROOT, TOKEN
from ros_probe import bundled_core, image_message, wait_until
from triton_ros.core.infer_request import InferRequest, InferResponse
from triton_ros.core.server import InferenceServer
from triton_ros.ros.targets.local import LocalModelTarget
from triton_ros.ros.targets.spec import InferFuture
from triton_ros.ros.binding.source import Frame


pytestmark = pytest.mark.integration

TOPIC = f"/faults{TOKEN}/cam/image_raw"


class BrokenTarget:
    """The local detector, except that the first ``raises`` calls of infer raise and the next
    ``untyped`` calls return a future failing with a plain ValueError."""

    def __init__(self, inner: LocalModelTarget, raises: int, untyped: int) -> None:
        self._inner = inner
        self.name, self.version, self.location = inner.name, inner.version, inner.location
        self.raises, self.untyped = raises, untyped
        self.calls = 0

    def describe(self):
        return self._inner.describe()

    def state(self):
        return self._inner.state()

    def close(self):
        self._inner.close()

    def can_hedge(self):
        return False

    def infer(self, inputs, **kwargs):
        self.calls += 1
        if self.calls <= self.raises:
            raise RuntimeError("target defect: infer raised")
        if self.calls <= self.raises + self.untyped:
            future = InferFuture()
            future.set_exception(ValueError("target defect: untyped failure"))
            return future
        return self._inner.infer(inputs, **kwargs)


@pytest.fixture
def ros_node(spinning_node):
    return spinning_node(
        f"faults_{TOKEN}",
        {
            "bindings": ["cam"],
            "cam.model": "detector",
            "cam.topics": [TOPIC],
            "cam.score_threshold": 0.0,
            "cam.top_k": 1,
        },
    )


def _detector_core() -> InferenceServer:
    return bundled_core("detector")


def _binding(node, core: InferenceServer, target):
    """The node's one binding ("cam" on TOPIC) over ``target``, and its worker pool."""
    from triton_ros.ros.binding.binding import Binding
    from triton_ros.ros.parameters import declare_and_read

    config = declare_and_read(node, bundled_repository=ROOT / "model_repository")
    workers = ThreadPoolExecutor(2)
    binding = Binding(
        config.bindings[0], node=node, target=target, workers=workers, callback_group=None
    )
    return binding, workers


def _frame_sender(node):
    """A function that publishes one black 64x48 rgb8 frame on TOPIC, stamped now."""
    pixels = np.zeros((48, 64, 3), np.uint8)
    pub = node.create_publisher(
        type(image_message(pixels, "rgb8", "", node.get_clock().now().to_msg())), TOPIC, 10
    )
    return lambda: pub.publish(
        image_message(pixels, "rgb8", "cam", node.get_clock().now().to_msg())
    )


def test_target_defects_are_counted_and_the_slot_is_released(ros_node):
    from triton_ros.ros.monitoring.diagnostics import ERROR, WARN, DiagnosticsReporter
    from triton_ros.ros.codec.messages import DETECTIONS_TYPE

    core = _detector_core()
    target = BrokenTarget(LocalModelTarget(core, "detector"), raises=3, untyped=2)
    reporter = DiagnosticsReporter(core)
    binding, workers = _binding(ros_node, core, target)
    results = []
    ros_node.create_subscription(
        DETECTIONS_TYPE, f"/faults{TOKEN}/cam/detections", results.append, 10
    )
    send = _frame_sender(ros_node)
    try:
        reporter.report([binding.figures()], time.monotonic_ns())
        binding.start()

        def published():
            send()
            return len(results) >= 2

        wait_until(published, what="results after the target's defects", interval=0.1)

        counters, in_flight, _ = binding.sources()[0].snapshot()
        assert counters.failed_internal == 3 and counters.failed_inference == 2
        assert counters.published >= 2
        assert binding.failures.last is not None
        _, [health] = reporter.report([binding.figures()], time.monotonic_ns())
        assert health.failed_internal == 3 and health.failed_inference == 2
        assert health.level in (WARN, ERROR) and "failed_internal" in health.message
        assert (
            "ValueError: target defect: untyped failure" in health.last_error
            or "RuntimeError: target defect: infer raised" in health.last_error
        )
    finally:
        binding.stop()
        workers.shutdown(wait=True)
        core.stop()


class StuckTarget(BrokenTarget):
    """Returns futures that nobody answers until the test does."""

    def __init__(self, inner: LocalModelTarget) -> None:
        super().__init__(inner, raises=0, untyped=0)
        self.futures: list[InferFuture] = []

    def infer(self, inputs, **kwargs):
        future = InferFuture()
        self.futures.append(future)
        return future


def test_a_frame_stuck_in_the_model_is_reported(ros_node, monkeypatch):
    from triton_ros.core.errors import unavailable
    from triton_ros.ros.monitoring import diagnostics

    monkeypatch.setattr(diagnostics, "STALLED_WARN_S", 0.5)
    core = _detector_core()
    target = StuckTarget(LocalModelTarget(core, "detector"))
    reporter = diagnostics.DiagnosticsReporter(core)
    binding, workers = _binding(ros_node, core, target)
    send = _frame_sender(ros_node)
    try:
        reporter.report([binding.figures()], time.monotonic_ns())
        binding.start()

        def sent():
            send()
            return target.futures

        wait_until(sent, what="a frame in the model", interval=0.1)
        source = binding.sources()[0]
        wait_until(
            lambda: sent() and source.snapshot()[2], what="a frame waiting behind it", interval=0.1
        )
        time.sleep(1.0)  # max_age_ms is 500
        _, [health] = reporter.report([binding.figures()], time.monotonic_ns())
        assert health.level == diagnostics.WARN and health.in_flight == 1
        assert "in the model without a result for" in health.message
        # The model answers at last (with an error): counted. The frame that waited behind the
        # stuck one aged in the slot: dropped as stale, and said so (not "clocks").
        target.futures[0].set_exception(unavailable("gave up"))
        wait_until(lambda: source.snapshot()[1] == 0, what="the slot released")
        counters, _, waiting = source.snapshot()
        assert counters.dropped_unavailable == 1 and counters.dropped_stale == 1 and not waiting
        assert "waited behind frames still in the model" in binding.failures.last_stale.text
        # and the next frame runs
        wait_until(
            lambda: sent() and len(target.futures) >= 2,
            what="the next frame after the stuck one",
            interval=0.1,
        )
    finally:
        binding.stop()
        for future in target.futures:
            if not future.done():
                future.set_exception(unavailable("test over"))
        workers.shutdown(wait=True)
        core.stop()


def test_published_frames_leave_no_cycle(ros_node):
    """The requests, responses, futures and frames of published frames are freed by reference
    counting, not left to the garbage collector (checked to fail when the binding's done-callback
    holds its future)."""
    from triton_ros.ros.codec.messages import DETECTIONS_TYPE

    core = _detector_core()
    binding, workers = _binding(ros_node, core, LocalModelTarget(core, "detector"))
    results = []
    ros_node.create_subscription(
        DETECTIONS_TYPE, f"/faults{TOKEN}/cam/detections", results.append, 10
    )
    send = _frame_sender(ros_node)

    def published(count: int):
        def check() -> bool:
            send()
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
            ours = [
                o for o in gc.garbage if isinstance(o, (InferRequest, InferResponse, Future, Frame))
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert ours == []
    finally:
        binding.stop()
        workers.shutdown(wait=True)
        core.stop()
