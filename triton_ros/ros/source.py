"""One input topic of a binding: bounded latency and the counters behind its diagnostics.

At most ``max_in_flight`` (K) frames of a source are in the model at once. A frame that arrives
while K are in flight waits in a one-frame slot where the latest frame wins: the frame it replaces
is dropped as *superseded*. A frame older than ``max_age_ms`` (its header stamp to now, on the
node's clock) is dropped as *stale* when it arrives and again when it leaves the slot. Every
received frame ends up counted exactly once: published, dropped (stale, superseded, malformed,
model unavailable) or failed, or is still in flight or waiting.

This module is plain Python: the node passes stamps and times in nanoseconds.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .diagnostics import LatencyWindow


@dataclass
class SourceCounters:
    """Totals since the source was bound; only grow."""

    received: int = 0
    published: int = 0
    dropped_stale: int = 0
    dropped_superseded: int = 0
    dropped_malformed: int = 0
    dropped_unavailable: int = 0
    failed: int = 0

    def add(self, other: "SourceCounters") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def copy(self) -> "SourceCounters":
        out = SourceCounters()
        out.add(self)
        return out

    @property
    def dropped(self) -> int:
        return (self.dropped_stale + self.dropped_superseded + self.dropped_malformed
                + self.dropped_unavailable + self.failed)


@dataclass(frozen=True)
class Frame:
    """A received image and when it was received (node clock, ns)."""

    msg: Any
    stamp_ns: int                      # header stamp; 0 when the publisher left it unset
    received_ns: int


class Source:
    """Flow control and statistics of one input topic."""

    def __init__(self, topic: str, output_topic: str, *, max_in_flight: int, max_age_ms: int,
                 discovered: bool) -> None:
        self.topic = topic
        self.output_topic = output_topic
        self.discovered = discovered           # found by a pattern (may be unbound later)
        self.max_in_flight = max_in_flight
        self.max_age_ns = max_age_ms * 1_000_000
        self.subscription = None
        self.publisher = None
        self.last_seen_publisher_ns = 0       # for forgetting sources that went away
        self.counters = SourceCounters()
        self.e2e_latency = LatencyWindow()     # stamp -> publication
        self.infer_latency = LatencyWindow()   # request -> response
        self._lock = threading.Lock()
        self._in_flight = 0
        self._pending: Frame | None = None
        self._malformed_logged_ns = 0

    # ---------------------------------------------------------------- flow control
    def offer(self, frame: Frame, now_ns: int) -> Frame | None:
        """A new frame arrived: return it if it may start now, else keep or drop it."""
        with self._lock:
            self.counters.received += 1
            if self._is_stale(frame, now_ns):
                self.counters.dropped_stale += 1
                return None
            if self._in_flight < self.max_in_flight:
                self._in_flight += 1
                return frame
            if self._pending is not None:
                self.counters.dropped_superseded += 1
            self._pending = frame
            return None

    def finish(self, now_ns: int) -> Frame | None:
        """A frame left the model (published, dropped or failed): return the next one to start."""
        with self._lock:
            while self._pending is not None:
                frame, self._pending = self._pending, None
                if self._is_stale(frame, now_ns):
                    self.counters.dropped_stale += 1
                    continue
                return frame                   # takes over the finished frame's place
            self._in_flight -= 1
            return None

    def _is_stale(self, frame: Frame, now_ns: int) -> bool:
        return self.max_age_ns > 0 and frame.stamp_ns > 0 and now_ns - frame.stamp_ns > self.max_age_ns

    # ---------------------------------------------------------------- accounting
    def count(self, field: str) -> None:
        with self._lock:
            setattr(self.counters, field, getattr(self.counters, field) + 1)

    def count_malformed(self, now_ns: int, log_every_ns: int = 5_000_000_000) -> bool:
        """Count a malformed frame (received and dropped); True when it should be logged (the
        first one, then at most one per ``log_every_ns``)."""
        with self._lock:
            self.counters.received += 1
            self.counters.dropped_malformed += 1
            if self._malformed_logged_ns == 0 or now_ns - self._malformed_logged_ns >= log_every_ns:
                self._malformed_logged_ns = now_ns
                return True
            return False

    def snapshot(self) -> tuple[SourceCounters, int, bool]:
        """(counters copy, frames in flight, whether a frame waits)."""
        with self._lock:
            return self.counters.copy(), self._in_flight, self._pending is not None
