"""One input topic of a binding: bounded latency and the counters behind its diagnostics.

At most ``max_in_flight`` (K) frames of a source are in the model at once. A frame that arrives
while K are in flight waits in a one-frame slot where the latest frame wins: the frame it replaces
is dropped as *superseded*. A frame older than ``max_age_ms`` (its header stamp to now, on the
node's clock) is dropped as *stale* when it arrives and again when it leaves the slot. Every
received frame ends up counted exactly once: published, dropped (stale, superseded, malformed,
model unavailable) or failed (by stage,
:data:`~triton_ros.ros.monitoring.counters.FAIL_REASONS`), or is still in flight or waiting. Each
stale drop is reported to ``on_stale`` with the frame's age and whether it arrived fresh and aged
waiting in the slot (the model is too slow) or arrived stale (clocks), so that the binding can
explain it; a frame stamped more than ``max_age_ms`` ahead of the node's clock (clock skew the other
way) is reported the same way with a negative age, counted as ``stamped_ahead`` and processed all
the same.

Hedging (remote targets with more than one endpoint, ``hedge_after_fraction``): when K frames
are in flight, a new frame is not put in the slot but started at once, as one extra frame in
flight (``hedged``), if ``can_hedge()`` says that an endpoint holds a request unanswered for
longer than ``hedge_after_ms`` (a hung server) while another is up and not stalled (the endpoint
pool then sends the frame there: it prefers the one with fewer outstanding requests and skips a
stalled one). At most one hedged frame is in flight per source, so at most K + 1 frames are;
when it leaves, the waiting frame takes its place as usual, so frames keep flowing through the
healthy endpoint until the hung request times out. The stall is the model's (any of its
requests), not only this source's: a source of a binding whose other source is caught may
also run K + 1 frames meanwhile, which is bounded and harmless.

This module is plain Python: the node passes stamps and times in nanoseconds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from ..codec.base import InputKind
from ..monitoring.counters import SourceCounters
from ..monitoring.latency import LatencyWindow
from .sequences import SourceSequence
from .sync_inputs import SyncGroup


@dataclass(frozen=True)
class Frame:
    """A received image, when it was received (node clock, ns), and its input kind."""

    msg: Any  # the message, or a synchronized source's MatchedSet
    stamp_ns: int  # header stamp; 0 when the publisher left it unset
    received_ns: int
    # The input kind that reads it (codec/registry.py); a matched set's: its kinds by input
    kind: str | tuple[tuple[str, str], ...] = ""
    received_mono_ns: int = 0  # the same on the monotonic clock (request traces)
    hedged: bool = False  # started beside a stalled frame (see the docstring)


class Source:
    """Flow control and statistics of one input topic."""

    def __init__(
        self,
        topic: str,
        output_topic: str,
        *,
        max_in_flight: int,
        max_age_ms: int,
        discovered: bool,
        on_stale: Callable[["Source", Frame, int, bool], None] | None = None,
        hedge_after_ms: float = 0.0,
        can_hedge: Callable[[], bool] | None = None,
    ) -> None:
        self.topic = topic
        self.output_topic = output_topic
        self.discovered = discovered  # found by a pattern (may be unbound later)
        self.max_in_flight = max_in_flight
        self.max_age_ns = max_age_ms * 1_000_000
        self.subscription: Any = None  # the binding's subscription to the topic
        self.publisher: Any = None  # its output topic's
        self.extra_publishers: dict[str, Any] = {}  # an output format's further topics
        self.kind: InputKind | None = None  # the input kind it is subscribed with
        # A synchronized source (a namespace): its inputs' subscriptions and synchronizer
        self.sync: SyncGroup | None = None
        self.last_seen_publisher_ns = 0  # for forgetting sources that went away
        self.counters = SourceCounters()
        self.sequence = SourceSequence()  # its sequence on a stateful model
        self.e2e_latency = LatencyWindow()  # stamp -> publication
        self.infer_latency = LatencyWindow()  # request -> response
        self._lock = threading.Lock()
        self._in_flight = 0
        self._pending: Frame | None = None
        # (source, frame, age ns, whether it aged waiting in the slot), called outside the lock
        self._on_stale = on_stale
        self._progress_ns = 0  # monotonic: a frame last started idle or left
        self.hedge_after_ns = int(hedge_after_ms * 1e6)  # 0: no hedging
        self._can_hedge = can_hedge

    # ---------------------------------------------------------------- flow control
    def offer(self, frame: Frame, now_ns: int) -> Frame | None:
        """A new frame arrived: return it if it may start now, else keep or drop it."""
        stale = None
        ahead = (
            self.max_age_ns > 0 and frame.stamp_ns > 0 and frame.stamp_ns - now_ns > self.max_age_ns
        )
        if ahead:
            self._stale(frame, now_ns, waited=False)  # told with a negative age
        with self._lock:
            self.counters.received += 1
            if ahead:
                self.counters.stamped_ahead += 1
            if self._is_stale(frame, now_ns):
                self.counters.dropped_stale += 1
                stale = frame
            elif self._in_flight < self.max_in_flight:
                if self._in_flight == 0:
                    self._progress_ns = time.monotonic_ns()
                self._in_flight += 1
                return frame
            elif self._hedge_now():
                self._in_flight += 1
                self.counters.hedged += 1
                return replace(frame, hedged=True)
            else:
                if self._pending is not None:
                    self.counters.dropped_superseded += 1
                self._pending = frame
                return None
        self._stale(stale, now_ns, waited=False)
        return None

    def finish(self, now_ns: int) -> Frame | None:
        """A frame left the model (published, dropped or failed): return the next one to start.

        Call exactly once per frame that :meth:`offer` or :meth:`finish` returned."""
        stale: list[Frame] = []
        with self._lock:
            self._progress_ns = time.monotonic_ns()
            frame = None
            while self._pending is not None:
                waiting, self._pending = self._pending, None
                if self._is_stale(waiting, now_ns):
                    self.counters.dropped_stale += 1
                    stale.append(waiting)
                    continue
                frame = waiting  # takes over the finished frame's place
            if frame is not None and self._in_flight > self.max_in_flight:
                # the extra (hedged) place: the frame taking it is hedged too
                self.counters.hedged += 1
                frame = replace(frame, hedged=True)
            if frame is None:
                self._in_flight -= 1
        for old in stale:
            self._stale(old, now_ns, waited=True)
        return frame

    def _hedge_now(self) -> bool:
        """Under the lock, K frames in flight: whether a new frame starts beside them."""
        if not self.hedge_after_ns or self._in_flight > self.max_in_flight:
            return False  # off, or a hedged frame is in flight already
        try:
            return self._can_hedge is None or bool(self._can_hedge())
        except Exception:  # a target that cannot say: no hedge
            return False

    def _is_stale(self, frame: Frame, now_ns: int) -> bool:
        return (
            self.max_age_ns > 0 and frame.stamp_ns > 0 and now_ns - frame.stamp_ns > self.max_age_ns
        )

    def _stale(self, frame: Frame, now_ns: int, *, waited: bool) -> None:
        age = now_ns - frame.stamp_ns
        if self._on_stale is not None:
            self._on_stale(self, frame, age, waited)

    # ---------------------------------------------------------------- accounting
    def count(self, field: str) -> None:
        with self._lock:
            setattr(self.counters, field, getattr(self.counters, field) + 1)

    def count_malformed(self) -> None:
        """Count a malformed frame: received, and dropped before flow control."""
        with self._lock:
            self.counters.received += 1
            self.counters.dropped_malformed += 1

    def stalled_for_ns(self, now_monotonic_ns: int) -> int:
        """How long frames have been in the model without any leaving it (0: none in flight)."""
        with self._lock:
            if self._in_flight <= 0:
                return 0
            return max(0, now_monotonic_ns - self._progress_ns)

    def snapshot(self) -> tuple[SourceCounters, int, bool]:
        """(counters copy, frames in flight, whether a frame waits)."""
        with self._lock:
            return self.counters.copy(), self._in_flight, self._pending is not None
