"""Why a frame did not become a result, told: a throttled log that keeps the last error.

Every frame a binding receives ends counted exactly once, by reason
(:mod:`~triton_ros.ros.monitoring.counters`). Failures are also reported through a
:class:`FailureLog`: the first occurrence of a kind is logged at once, later ones at most once per
period with the number suppressed meanwhile (a kind of one topic has the topic in its key, so
each topic is throttled on its own), and the last error (text, level, time) is kept for
``/diagnostics``: the binding's last, and the last of each topic, so that every broken topic is
named there, not only the latest one. :data:`STALE_CAUSES` (clocks), :data:`BACKLOG_CAUSE`
(the node's own queue) and :data:`WAITED_CAUSE` (behind frames in the model) explain stale
frames.

This module is plain Python (no rclpy): the node passes its logger.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

LOG_EVERY_NS = 5_000_000_000  # one log line per kind every 5 s at most
TOPICS_KEPT = 64  # topics whose last error is kept (the oldest goes first)

STALE_CAUSES = (
    "the publisher's clock is not synchronised with this host's (use chrony/NTP, or "
    "set max_age_ms: 0), or a bag is replayed without --clock and use_sim_time:=true"
)
BACKLOG_CAUSE = (
    "it was young enough when it reached this node but waited in the node's own "
    "queue until its callback ran: the node is behind (its executor thread is busy or the host's "
    "CPUs are; lower the frame rate or the number of cameras, raise max_age_ms, or "
    "preprocess on the worker threads: preprocess_in_callback false)"
)
NO_BACKLOG = (
    "; or the node itself is behind (its executor's lag is not measured yet, "
    "so its own queue time is unknown)"
)
WAITED_CAUSE = (
    "it arrived in time but waited behind frames still in the model: inference is "
    "slower than this topic's frame rate (raise max_in_flight or max_age_ms, lower "
    "the rate, or check the model's latency in /diagnostics)"
)


@dataclass
class _Throttle:
    logged_ns: int
    suppressed: int = 0


@dataclass(frozen=True)
class LastError:
    """The most recent failure of a binding."""

    text: str
    reason: str
    level: str  # "warn" or "error"
    monotonic_ns: int
    summary: str = ""  # a shorter text for a diagnostics message

    def age_s(self, now_ns: int | None = None) -> float:
        return ((now_ns or time.monotonic_ns()) - self.monotonic_ns) / 1e9


class FailureLog:
    """Throttled, counted log lines of one binding and its last error."""

    def __init__(self, logger: Any, every_ns: int = LOG_EVERY_NS) -> None:
        self._logger = logger
        self._every_ns = every_ns
        self._lock = threading.Lock()
        self._throttles: dict[str, _Throttle] = {}
        self.last: LastError | None = None
        self.last_stale: LastError | None = None
        self._topics: dict[str, LastError] = {}  # the last error of each topic, newest last

    def report(
        self,
        key: str,
        reason: str,
        text: str,
        *,
        level: str = "error",
        summary: str = "",
        record: bool = True,
        topic: str = "",
    ) -> bool:
        """Record a failure; log it unless one of the same ``key`` was logged within the period.
        Returns whether it was logged. ``record`` False: a note (e.g. frames hedged), logged
        the same way but not kept as the last error. ``topic``: the topic it concerns, whose
        last error it becomes."""
        now = time.monotonic_ns()
        last = LastError(text, reason, level, now, summary or text)
        with self._lock:
            if topic and record:
                self._topics.pop(topic, None)
                self._topics[topic] = last
                if len(self._topics) > TOPICS_KEPT:
                    del self._topics[next(iter(self._topics))]
            if not record:
                pass
            elif reason in ("dropped_stale", "stamped_ahead"):
                self.last_stale = last  # clock trouble, kept apart from failures
            else:
                self.last = last
            throttle = self._throttles.get(key)
            if throttle is not None and now - throttle.logged_ns < self._every_ns:
                throttle.suppressed += 1
                return False
            suppressed = throttle.suppressed if throttle is not None else 0
            since_s = (now - throttle.logged_ns) / 1e9 if throttle is not None else 0.0
            self._throttles[key] = _Throttle(now)
        if suppressed:
            text += f" [{suppressed} more like this in the last {since_s:.1f} s]"
        self._emit(level, text)
        return True

    def topic_errors(self) -> tuple[tuple[str, LastError], ...]:
        """(topic, its last error) of every topic that had one, oldest first."""
        with self._lock:
            return tuple(self._topics.items())

    def forget_topic(self, topic: str) -> None:
        """A topic unbound: its last error goes."""
        with self._lock:
            self._topics.pop(topic, None)

    def _emit(self, level: str, text: str) -> None:
        # One call site per severity: rclpy's logger refuses a call site whose severity changes
        # between calls ("Logger severity cannot be changed between calls").
        try:
            if level == "warn":
                self._logger.warning(text)
            else:
                self._logger.error(text)
        except Exception as exc:  # the log line must not be lost with it
            print(
                f"[{level.upper()}] {text} (logger failed: {type(exc).__name__}: {exc})",
                file=sys.stderr,
                flush=True,
            )
