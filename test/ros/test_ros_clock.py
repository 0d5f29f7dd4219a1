"""Stale frames are explained, and ages follow ROS time with use_sim_time and a /clock publisher.

This process publishes /clock (simulated time from 1000 s, like ``ros2 bag play --clock``) and
frames stamped on that clock. Two inference nodes bind the same topics: one with
``use_sim_time: true`` (ages on ROS time: fresh frames publish, frames 5 s old are dropped as
stale with a warning naming that age), one without (every frame is ~56 years old on the system
clock: dropped as stale, with a warning naming the topic, the age and the likely cause, and a
WARN on /diagnostics). Frames stamped 5 s ahead of the host's clock are served, and the skew is
reported the same way.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ros_env import TOKEN
from ros_models import classifier
from ros_probe import image_message, stamp_ns, wait_until
from triton_ros.ros.codec.messages import CLASSIFICATION_TYPE


pytestmark = pytest.mark.system

NS = f"/clk{TOKEN}"
SIM_START_NS = 1000 * 1_000_000_000
FRESH, OLD = f"{NS}/fresh/image_raw", f"{NS}/old/image_raw"
AHEAD = f"{NS}/ahead/image_raw"  # stamped 5 s ahead of this host's clock


class SimClock:
    """Publishes /clock at 50 Hz from SIM_START_NS on, advancing with real time."""

    def __init__(self, probe) -> None:
        from rosgraph_msgs.msg import Clock

        self._pub = probe.node.create_publisher(Clock, "/clock", 10)
        self._msg_type = Clock
        self._t0 = time.monotonic_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now_ns(self) -> int:
        return SIM_START_NS + time.monotonic_ns() - self._t0

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._msg_type()
            msg.clock.sec, msg.clock.nanosec = divmod(self.now_ns(), 1_000_000_000)
            self._pub.publish(msg)
            self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def node_params(repo, use_sim_time: bool, prefix: str) -> dict:
    binding = {
        "model": "classifier",
        "format": "classification",
        "max_age_ms": 1000,
        "output_topic_template": "{namespace}/" + prefix + "_{output_name}",
    }
    return {
        "model_repository": str(repo),
        "startup_models": ["*"],
        "use_sim_time": use_sim_time,
        "diagnostics_period_s": 0.5,
        "bindings": ["fresh", "old", "ahead"],
        "fresh": {**binding, "topics": [FRESH]},
        "old": {**binding, "topics": [OLD]},
        "ahead": {**binding, "topics": [AHEAD]},
    }


def binding_status(diagnostics, node, name):
    for array in reversed(diagnostics.messages()):
        for status in array.status:
            if status.name == f"/{node.name}: binding {name}":
                return status
    return None


def test_stale_frames_are_explained_and_sim_time_ages_follow_the_clock(start_node, probe, tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray

    classifier(tmp_path / "models" / "classifier")
    sim = SimClock(probe)
    diagnostics = probe.subscribe(DiagnosticArray, "/diagnostics", qos=100)
    try:
        on_sim = start_node(node_params(tmp_path / "models", True, "sim"))
        on_wall = start_node(node_params(tmp_path / "models", False, "wall"))
        on_sim.wait_ready(probe)
        on_wall.wait_ready(probe)
        sim_results = probe.subscribe(CLASSIFICATION_TYPE, f"{NS}/fresh/sim_classification")
        wall_results = probe.subscribe(CLASSIFICATION_TYPE, f"{NS}/fresh/wall_classification")
        old_results = probe.subscribe(CLASSIFICATION_TYPE, f"{NS}/old/sim_classification")
        ahead_results = probe.subscribe(CLASSIFICATION_TYPE, f"{NS}/ahead/wall_classification")
        fresh_pub, old_pub = probe.image_publisher(FRESH), probe.image_publisher(OLD)
        ahead_pub = probe.image_publisher(AHEAD)
        pixels = np.zeros((32, 32, 3), np.uint8)
        sent: set[int] = set()

        def publish():
            from builtin_interfaces.msg import Time

            now = sim.now_ns()
            fresh = Time(sec=now // 1_000_000_000, nanosec=now % 1_000_000_000)
            old = Time(sec=(now - 5_000_000_000) // 1_000_000_000, nanosec=now % 1_000_000_000)
            sent.add(stamp_ns(fresh))
            fresh_pub.publish(image_message(pixels, "rgb8", "sim_cam", fresh))
            old_pub.publish(image_message(pixels, "rgb8", "sim_cam", old))
            ahead = probe.now_ns() + 5_000_000_000
            ahead_pub.publish(
                image_message(
                    pixels,
                    "rgb8",
                    "skewed_cam",
                    Time(sec=ahead // 1_000_000_000, nanosec=ahead % 1_000_000_000),
                )
            )
            wall_log = on_wall.log()
            return (
                sim_results.count() >= 5
                and f"a frame of {FRESH}" in wall_log
                and f"a frame of {OLD}" in on_sim.log()
                and ahead_results.count() >= 1
                and f"a frame of {AHEAD}" in wall_log
            )

        wait_until(publish, what="results on ROS time and stale warnings", interval=0.1)

        # On ROS time, fresh frames are served with their sim stamps; 5 s old ones are stale.
        assert all(stamp_ns(m.header.stamp) in sent for m in sim_results.messages())
        assert old_results.count() == 0
        log = on_sim.log()
        line = next(ln for ln in log.splitlines() if f"a frame of {OLD}" in ln)
        age = float(line.split(" s old on this node's ")[0].rsplit(" ", 1)[1])
        assert 4.5 <= age < 6.5, line  # /clock ticks every 20 ms (+ load)
        assert "on this node's ROS (/clock, use_sim_time) clock, over max_age_ms 1000" in line
        # (a fresh frame may only go stale by waiting behind a slow model on a loaded machine)
        assert not [
            ln
            for ln in log.splitlines()
            if f"a frame of {FRESH}" in ln and "waited behind" not in ln
        ]

        # On the system clock, every frame stamped on the sim clock is stale, and said why.
        assert wall_results.count() == 0
        line = next(ln for ln in on_wall.log().splitlines() if f"a frame of {FRESH}" in ln)
        assert "[WARN]" in line and "on this node's system clock, over max_age_ms 1000" in line
        age = float(line.split(" s old on this node's ")[0].rsplit(" ", 1)[1])
        assert age > 1e9  # stamps near 1000 s vs the epoch now
        assert "clock is not synchronised" in line and "--clock and use_sim_time:=true" in line

        # A robot whose clock runs ahead: its frames are served, and the skew is reported.
        line = next(ln for ln in on_wall.log().splitlines() if f"a frame of {AHEAD}" in ln)
        assert "[WARN]" in line and "ahead of this node's system clock" in line, line
        ahead_s = float(line.split(" s ahead of")[0].rsplit(" ", 1)[1])
        assert 4.0 < ahead_s <= 5.0, line
        assert "clock is not synchronised" in line

        def stale_warned():
            publish()  # keeps stale frames coming
            status = binding_status(diagnostics, on_wall, "fresh")
            return (
                status is not None
                and status.level == b"\x01"
                and "stale" in status.message
                and "use_sim_time" in status.message
            )

        wait_until(stale_warned, what="a stale WARN on /diagnostics", interval=0.1)
        values = {kv.key: kv.value for kv in binding_status(diagnostics, on_wall, "fresh").values}
        assert int(values["dropped_stale"]) > 0 and int(values["published"]) == 0

        def ahead_warned():
            publish()  # keeps frames (and the skew) coming
            status = binding_status(diagnostics, on_wall, "ahead")
            if status is None:
                return False
            values = {kv.key: kv.value for kv in status.values}
            return (
                status.level == b"\x01"
                and "ahead of this node's clock" in status.message
                and int(values["stamped_ahead"]) > 0
                and int(values["published"]) > 0
            )

        wait_until(
            ahead_warned, what="a clock-skew WARN on /diagnostics, frames published", interval=0.1
        )
    finally:
        sim.stop()
