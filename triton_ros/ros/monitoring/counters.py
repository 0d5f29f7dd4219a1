"""How every frame a binding receives ends, counted: the reasons, and the counters by reason.

:class:`SourceCounters` is the one table of the counters: /diagnostics shows each under its
field's name, ``~/status`` (``triton_ros_interfaces/BindingStatus``) has a field of that name,
and the reporter's :class:`~triton_ros.ros.monitoring.diagnostics.BindingHealth` is a
SourceCounters (:data:`REPORTED`: the order they are shown in).

Every received frame ends up counted exactly once (:class:`SourceCounters`): published, dropped
for one of :data:`DROP_REASONS` or failed for one of :data:`FAIL_REASONS`, or it is still in
flight or waiting. Why each one happened is logged through a
:class:`~triton_ros.ros.monitoring.failures.FailureLog`.

A synchronized binding's source (one namespace, several input topics) counts *matched sets* as
its frames; the messages of its inputs that found no set are counted apart, by reason
(:data:`UNMATCHED_REASONS`, the synchronizer's), and are not frames: they never reached flow
control.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# Frames dropped on purpose (bounded latency, bad input, model not serving): WARN.
DROP_REASONS = ("dropped_stale", "dropped_superseded", "dropped_malformed", "dropped_unavailable")
# Frames that failed on their way (ERROR), by stage:
FAIL_REASONS = (
    "failed_plan",  # the binding's settings do not fit the model (INVALID_ARG ...)
    "failed_preprocess",  # the input could not be turned into the model's input
    "failed_inference",  # the model answered with an error (TritonError, exception, timeout)
    "failed_decode",  # the model's outputs could not be decoded into the message
    "failed_publish",  # the message could not be published
    "failed_internal",  # an unexpected exception in the node's own code
)

# Messages of a synchronized binding's inputs that found no set (binding/synchronizer.py): WARN.
UNMATCHED_REASONS = ("unmatched_too_old", "unmatched_no_partner", "unmatched_queue_overflow")


@dataclass
class SourceCounters:
    """Totals of one input topic since it was bound; only grow."""

    received: int = 0
    published: int = 0
    dropped_stale: int = 0
    dropped_superseded: int = 0
    dropped_malformed: int = 0
    dropped_unavailable: int = 0
    # Not a drop: frames stamped more than max_age_ms ahead of the node's clock (clock skew),
    # processed and published all the same.
    stamped_ahead: int = 0
    # Not a drop: frames stamped 0 (the publisher leaves header.stamp unset), to which max_age_ms
    # cannot apply; processed all the same. (A stamp before 1970 is malformed.)
    unstamped: int = 0
    # Not a drop either: frames sent while the source's frame in flight had waited longer than
    # hedge_after_fraction of server_timeout_ms (remote targets: a hung endpoint), and how they
    # ended (published, or lost: dropped or failed; the rest are still in flight).
    hedged: int = 0
    hedged_published: int = 0
    hedged_lost: int = 0
    failed_plan: int = 0
    failed_preprocess: int = 0
    failed_inference: int = 0
    failed_decode: int = 0
    failed_publish: int = 0
    failed_internal: int = 0
    # Synchronized bindings: input messages that found no set (not frames; not in dropped).
    unmatched_too_old: int = 0
    unmatched_no_partner: int = 0
    unmatched_queue_overflow: int = 0

    def add(self, other: "SourceCounters") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def copy(self) -> "SourceCounters":
        out = SourceCounters()
        out.add(self)
        return out

    @property
    def failed(self) -> int:
        """Frames that failed on their way, every stage together."""
        return sum(getattr(self, name) for name in FAIL_REASONS)

    @property
    def unmatched(self) -> int:
        """Input messages of a synchronized binding that found no set, every reason together."""
        return sum(getattr(self, name) for name in UNMATCHED_REASONS)

    @property
    def dropped(self) -> int:
        return (
            self.dropped_stale
            + self.dropped_superseded
            + self.dropped_malformed
            + self.dropped_unavailable
            + self.failed
        )


#: Every counter as /diagnostics and ~/status show it, in order: the table's fields, with the
#: failures' total (``failed``) before the failures by stage.
COUNTERS = tuple(f.name for f in fields(SourceCounters))
REPORTED = tuple(
    name
    for counter in COUNTERS
    for name in (("failed", counter) if counter == FAIL_REASONS[0] else (counter,))
)
