"""Stale frames told apart: the node's own backlog, or a publisher's clock (issue 34, item 11).

On a loaded host, frames of cameras on the same machine were dropped as stale with the hint
"publisher's clock is not synchronised", while they had only waited in the node's own queue.
The node measures how far behind its executor runs (monitoring/executor_lag.py): if that
explains a frame's age, the node is behind; if the frame was old even without it, the clocks
(or a bag without --clock) are. Here a real binding on a real rclpy node (spun by its own
executor thread, the bundled ``detector`` in a core of this process, the lag measured by the
node's timer) gets fresh frames while its executor is held busy by a slow callback, and a
frame stamped 5 s before it was sent.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ros_env import ROOT, TOKEN
from ros_probe import bundled_core, image_message, wait_until
from triton_ros.ros.binding.frames import stale_cause
from triton_ros.ros.monitoring.executor_lag import ExecutorLag
from triton_ros.ros.monitoring.failures import BACKLOG_CAUSE, NO_BACKLOG, STALE_CAUSES, WAITED_CAUSE
from triton_ros.ros.targets.local import LocalModelTarget

pytestmark = pytest.mark.integration

TOPIC = f"/stale{TOKEN}/cam/image_raw"
MS = 1_000_000


def test_the_cause_follows_from_the_age_the_backlog_and_the_slot():
    # aged in the slot behind frames in the model
    assert stale_cause(900 * MS, 5 * MS, 500, waited=True) == ("waited", WAITED_CAUSE)
    # 900 ms old, the node 860 ms behind: 40 ms old without the node's own backlog
    kind, text = stale_cause(900 * MS, 860 * MS, 500, waited=False)
    assert kind == "backlog" and text.startswith(BACKLOG_CAUSE)
    assert "the node was 860 ms behind; without that the frame was 40 ms old" in text
    assert "clock" not in text
    # 5 s old even without the backlog: clocks, whatever the queue added
    kind, text = stale_cause(5_200 * MS, 200 * MS, 500, waited=False)
    assert kind == "arrived" and "5.000 s old even without the node's own backlog" in text
    assert STALE_CAUSES in text
    # the lag not measured yet: both causes named
    assert stale_cause(900 * MS, -1, 500, waited=False) == ("arrived", STALE_CAUSES + NO_BACKLOG)


def test_the_executor_lag_holds_a_stall_longer_than_its_period_and_an_overdue_tick():
    lag = ExecutorLag(window_ns=2_000 * MS)
    assert lag.behind_ns(0) == -1
    lag.tick(0, 100 * MS)
    lag.tick(100 * MS, 200 * MS)
    assert lag.behind_ns(150 * MS) == 0
    # the executor is held from 150 ms: a frame taken at 1.65 s sees the tick 1.45 s overdue
    assert lag.behind_ns(1_650 * MS) == 1_450 * MS
    lag.tick(1_700 * MS, 1_800 * MS)  # the late tick: 1.5 s late
    assert lag.behind_ns(1_750 * MS) == 1_500 * MS
    assert lag.samples.drain() == [0, 1_500 * MS]
    assert lag.behind_ns(4_000 * MS) == 2_200 * MS  # no tick since: overdue again


class Logged:
    """A logger that keeps the lines (warning and error)."""

    def __init__(self, lines: list[str]) -> None:
        self.warning = self.error = lines.append


@pytest.fixture
def ros_node(spinning_node):
    return spinning_node(
        f"stale_{TOKEN}",
        {
            "bindings": ["cam"],
            "cam.model": "detector",
            "cam.topics": [TOPIC],
            "cam.max_age_ms": 500,
            "cam.max_in_flight": 4,
            "cam.input_depth": 10,
            "cam.input_reliability": "reliable",
        },
    )


def test_frames_that_waited_for_a_busy_executor_are_blamed_on_the_backlog_not_clocks(ros_node):
    from rclpy.clock import Clock, ClockType
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from triton_ros.ros.binding.binding import Binding
    from triton_ros.ros.parameters import declare_and_read

    core = bundled_core("detector")
    workers = ThreadPoolExecutor(2)
    config = declare_and_read(ros_node, bundled_repository=ROOT / "model_repository")
    lag = ExecutorLag()  # measured as the node does
    steady = Clock(clock_type=ClockType.STEADY_TIME)

    def measure():
        now = time.monotonic_ns()
        lag.tick(now, now + lag_timer.time_until_next_call())

    lag_timer = ros_node.create_timer(0.1, measure, clock=steady)
    binding = Binding(
        config.bindings[0],
        node=ros_node,
        target=LocalModelTarget(core, "detector"),
        workers=workers,
        callback_group=None,
        executor_lag=lag,
    )
    logged: list[str] = []
    binding.failures._logger = Logged(logged)  # its lines, as the node would log them
    pub = ros_node.create_publisher(
        Image, TOPIC, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    )
    pixels = np.zeros((48, 64, 3), np.uint8)
    clock = ros_node.get_clock()
    busy = threading.Event()

    def hold_the_executor():  # a callback that keeps the executor for 1.5 s
        timer.cancel()
        busy.set()
        time.sleep(1.5)

    try:
        binding.start()
        wait_until(lambda: pub.get_subscription_count() > 0, what="the binding's subscription")
        # the lag timer has ticked once (it knows when its next tick is due), so that the tick
        # after the hold measures it, however slowly a loaded host started the executor
        wait_until(lambda: lag.behind_ns(time.monotonic_ns()) >= 0, what="a first lag tick")
        timer = ros_node.create_timer(0.05, hold_the_executor)
        assert busy.wait(30)
        for _ in range(3):  # fresh frames, while the executor is held
            pub.publish(image_message(pixels, "rgb8", "cam", clock.now().to_msg()))
            time.sleep(0.05)
        time.sleep(1.6)  # after the hold: a frame 5 s old when sent
        old = clock.now().nanoseconds - 5_000_000_000
        msg = image_message(pixels, "rgb8", "cam", clock.now().to_msg())
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(old, 1_000_000_000)
        pub.publish(msg)
        source = wait_until(lambda: binding.sources(), what="the source")[0]
        wait_until(lambda: source.snapshot()[0].dropped_stale >= 4, what="four stale frames")
        assert max(lag.samples.drain()) > 1_000 * MS  # it measured the hold
        backlog = [t for t in logged if BACKLOG_CAUSE in t]
        clocks = [t for t in logged if STALE_CAUSES in t]
        # the fresh frames: the node's queue, not clocks (one line: the others are throttled)
        assert len(backlog) == 1, logged
        behind_ms = int(re.search(r"the node was (\d+) ms behind", backlog[0]).group(1))
        assert behind_ms >= 1000, backlog[0]
        # the frame sent 5 s old: clocks
        assert len(clocks) == 1 and "s old even without the node's own backlog" in clocks[0], logged
    finally:
        binding.stop()
        for source in binding.sources():
            binding.remove_source(source.topic)
        workers.shutdown(wait=True)
        core.stop()
