"""How far behind the node's executor runs its callbacks: the node's own backlog, measured.

A frame that the middleware has received waits in the node until the executor's thread takes
it; on a loaded host, or with too many cameras for one executor thread, that wait can exceed a
binding's ``max_age_ms`` and the frame is dropped as stale although its publisher's clock is
right. To tell that apart from a publisher's clock, the node measures its
executor's lag with a timer of its own on the steady clock, in the image callbacks' group
(:data:`PERIOD_S`): each tick notes how late it ran (now against the time the timer was due,
which the previous tick read from ``time_until_next_call``), so the measure holds a lag
longer than the period too. The lag *now* is the largest lateness of the last
:data:`WINDOW_NS`, or, while a tick is overdue (the executor is held right now), how overdue it
is: frames taken right after a stall are judged by it before the late tick itself runs.

Measured this way rather than from rclpy's ``MessageInfo.received_timestamp``: Humble's rclpy
has no message info, and the events executor of rclpy 9 fails every callback that asks for it
("SystemError: null argument to internal routine"); a timer works with every executor.

This module is plain Python: the node passes steady-clock times in nanoseconds.
"""

from __future__ import annotations

import collections
import threading

from .latency import LatencyWindow

PERIOD_S = 0.1  # the measuring timer's period
WINDOW_NS = 2_000_000_000  # "now": the largest lateness over this long


class ExecutorLag:
    """The executor's lag from a periodic timer's ticks (:meth:`tick`)."""

    def __init__(self, window_ns: int = WINDOW_NS) -> None:
        self._window_ns = window_ns
        self._lock = threading.Lock()
        self._due_ns: int | None = None  # when the next tick is due
        self._recent: collections.deque[tuple[int, int]] = collections.deque()
        self.samples = LatencyWindow()  # lateness of each tick, for /diagnostics

    def tick(self, now_ns: int, next_due_ns: int) -> None:
        """A tick ran at ``now_ns``; the next one is due at ``next_due_ns``."""
        with self._lock:
            if self._due_ns is not None:
                late = max(0, now_ns - self._due_ns)
                self._recent.append((now_ns, late))
                self.samples.add(late)
                while self._recent and now_ns - self._recent[0][0] > self._window_ns:
                    self._recent.popleft()
            self._due_ns = next_due_ns

    def behind_ns(self, now_ns: int) -> int:
        """How far behind the executor is now (ns); -1 before the first measure."""
        with self._lock:
            if self._due_ns is None:
                return -1
            recent = max(
                (late for t, late in self._recent if now_ns - t <= self._window_ns), default=0
            )
            return max(recent, now_ns - self._due_ns, 0)
