"""Messages of several topics matched by header stamp: message_filters' ApproximateTime policy.

A synchronized binding (``inputs``: several topics of one source, e.g. colour + depth +
CameraInfo) feeds its model one *set* per moment: one message of every input, their stamps as
close as the policy can prove. :class:`ApproximateTimeSync` is that policy, ported from
ros2/message_filters' ``include/message_filters/sync_policies/approximate_time.hpp`` (BSD;
the algorithm of http://wiki.ros.org/message_filters/ApproximateTime):

- each input has a deque of waiting messages (oldest first) and a ``past`` list; while every
  deque holds a message, the interval spanned by the deques' heads is a candidate set; the
  input with the latest head is the *pivot*; the earliest head moves to ``past`` and the next
  interval is tried; a better (tighter, with the age penalty 0.1) interval replaces the
  candidate; the candidate is published once it is provably the best (the pivot's own head
  was moved, or every later interval must be longer), using the inter-message lower bounds
  (``min_interval_ns``) to prove it without waiting for the next message when they allow;
- ``max_interval_ns`` (the binding's ``sync_slop_ms``, message_filters'
  ``setMaxIntervalDuration``): a set whose stamps span more is never formed; the oldest head
  is dropped instead;
- at most ``queue_size`` messages per input wait (deque + past); a full queue drops its
  oldest message, and the policy then refuses to make that input the pivot until a message
  of each other input has been seen after it (``has_dropped_messages``).

Hand-written because message_filters is not on PyPI (it ships only with a ROS 2
installation, as ``ros-<distro>-message-filters``), and the node must run from the pip-installed
ROS 2 of its virtual environment too; and because the node needs each dropped message *with
its reason*, which neither implementation reports (the C++ policy drops silently, the Python
``ApproximateTimeSynchronizer`` keeps messages until its queue evicts them and implements
another, greedier search over a slop). The state machine, its tie-breaking (the earliest head
by the lowest input index, the latest by the highest) and the comparisons are the C++
policy's; the port is checked against the cases of message_filters'
``test/test_approximate_time_policy.cpp`` (test/test_synchronizer.py).

One addition, before a message enters the policy: a message that can never be paired is
dropped at once as ``too_old`` instead of waiting to be dropped later: one stamped before a
message of its own input that is already waiting or was paired (out of order: the policy's
deques assume order, and the C++ policy only warns), or stamped more than the slop before a
message that another input already had paired (every later message of that input is newer
still). The outcome is the policy's; the reason is more precise and the message holds no
place in the queue.

And one guard against a bad stamp (``max_jump_ns``, the binding's ``sync_max_stamp_jump_ms``),
because one message stamped in the future would otherwise hold up every set until the clock
reaches it (its input's queue is ordered by stamp, and what was paired only moves forward).
Each input's *offset* (stamp minus the node's receipt time, ``received_ns``) of its last
accepted message is kept, so that stamps are compared without trusting the publishers' clocks
to agree with the node's:

- a message whose offset is more than ``max_jump_ns`` above its own input's and every other
  input's (it is stamped that far ahead of them, after the time between their arrivals), or
  that far below all of them (stamped in the past, or that long late), is dropped at once as
  ``bad_stamp``: it never enters the policy. Unless the previous message of its input was
  dropped so and it agrees with that one: two in a row are the input's new timeline (a
  publisher's clock was stepped, a bag started over), which costs one message per input;
- a message stamped more than ``max_jump_ns`` *before* a message of its own input that is
  waiting or was paired means its input's stamps jumped back (the earlier ones were bad, or the
  timeline changed): every waiting message stamped that far ahead of it, of any input, is
  dropped as ``bad_stamp``, what was paired that far ahead is forgotten, and the message enters
  as usual.

So the namespace is matched again from its first good set on: within one slop window of the
good messages, where message_filters' policy (which has no such guard) waits until
``queue_size`` later messages push the bad one out, and this port's ``too_old`` check alone
would wait until the clock reached it. ``bad_stamp`` is not one of :data:`UNMATCHED_REASONS`:
the caller counts it as a malformed message.

Every message ends exactly once: in a published set, or dropped with one of
:data:`UNMATCHED_REASONS`, or still waiting. Plain Python, thread-safe (one lock); times are
integers in nanoseconds.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

# Why a message found no set (each is counted as unmatched_<reason>):
UNMATCHED_REASONS = (
    "too_old",  # older than what its input, or a partner input, has already had paired
    "no_partner",  # no message of every other input within the slop (or its would-be
    # partners went to a closer match)
    "queue_overflow",  # its input's queue was full (sync_queue_size), or its partner's was
)
BAD_STAMP = "bad_stamp"  # stamped far ahead of (or behind) its namespace (module docstring)


@dataclass(frozen=True)
class Entry:
    """A message waiting in the policy, with its stamp (ns)."""

    stamp_ns: int
    item: Any


@dataclass(frozen=True)
class Dropped:
    """A message that will never be in a set, and why (one of :data:`UNMATCHED_REASONS`, or
    :data:`BAD_STAMP` with the ``detail``)."""

    index: int
    entry: Entry
    reason: str
    detail: str = ""


@dataclass
class SyncResult:
    """What one :meth:`ApproximateTimeSync.add` did: sets published (each one entry per input,
    in input order) and messages dropped, in the order it happened."""

    sets: list[tuple[Entry, ...]] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    # Inputs whose messages came closer together than min_interval_ns (the bound is wrong):
    # message_filters warns once per input; the caller says so.
    bound_violated: list[int] = field(default_factory=list)


class ApproximateTimeSync:
    """message_filters' ApproximateTime policy over ``inputs`` inputs (see the module
    docstring)."""

    def __init__(
        self,
        inputs: int,
        *,
        queue_size: int,
        max_interval_ns: int | None = None,
        min_interval_ns: int | Sequence[int] = 0,
        age_penalty: float = 0.1,
        max_jump_ns: int = 0,
    ) -> None:
        if inputs < 1:
            raise ValueError("a synchronizer needs at least one input")
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if age_penalty < 0:
            raise ValueError("age_penalty must not be negative")
        self.n = inputs
        self.queue_size = queue_size
        self.max_interval_ns = max_interval_ns
        bounds = (
            [int(min_interval_ns)] * inputs
            if isinstance(min_interval_ns, int)
            else [int(b) for b in min_interval_ns]
        )
        if len(bounds) != inputs or any(b < 0 for b in bounds):
            raise ValueError("min_interval_ns: one non-negative bound per input")
        self.bounds = bounds
        self.age_penalty = age_penalty
        self.max_jump_ns = max(0, int(max_jump_ns))  # 0: no bad-stamp guard
        self._offsets: list[int | None] = [None] * inputs  # stamp - receipt, last accepted
        self._refused: list[int | None] = [None] * inputs  # ... of the last one dropped
        self._lock = threading.Lock()
        self._deques: list[deque[Entry]] = [deque() for _ in range(inputs)]
        self._past: list[list[Entry]] = [[] for _ in range(inputs)]
        self._non_empty = 0
        self._pivot: int | None = None
        self._pivot_time = 0
        self._candidate: tuple[Entry, ...] | None = None
        self._candidate_start = 0
        self._candidate_end = 0
        self._has_dropped = [False] * inputs
        self._warned = [False] * inputs
        self._last_paired: list[int | None] = [None] * inputs
        self._result = SyncResult()

    # ---------------------------------------------------------------- public
    def add(
        self, index: int, stamp_ns: int, item: Any, received_ns: int | None = None
    ) -> SyncResult:
        """A message of input ``index`` arrived (at ``received_ns`` on the node's clock, for the
        bad-stamp guard): what got published or dropped because of it."""
        entry = Entry(int(stamp_ns), item)
        with self._lock:
            self._result = result = SyncResult()
            if self.max_jump_ns:
                if received_ns is not None:
                    off = self._off(index, entry.stamp_ns - int(received_ns))
                    if off is not None:
                        result.dropped.append(
                            Dropped(
                                index,
                                entry,
                                BAD_STAMP,
                                f"stamped {off} after the time between their arrivals (over "
                                f"sync_max_stamp_jump_ms {self.max_jump_ns / 1e6:g})",
                            )
                        )
                        return result
                self._jumped_back(index, entry.stamp_ns)
            if self._too_old(index, entry.stamp_ns):
                result.dropped.append(Dropped(index, entry, "too_old"))
                return result
            self._add(index, entry)
            self._result = SyncResult()
            return result

    def waiting(self) -> int:
        """Messages held now (queued, or in a candidate set not yet published)."""
        with self._lock:
            return sum(len(q) + len(p) for q, p in zip(self._deques, self._past))

    def clear(self) -> list[Dropped]:
        """Forget every waiting message (the source is unbound); they are returned."""
        with self._lock:
            out = []
            for i in range(self.n):
                for e in self._past[i] + list(self._deques[i]):
                    out.append(Dropped(i, e, "no_partner"))
                self._past[i].clear()
                self._deques[i].clear()
            self._non_empty = 0
            self._pivot = None
            self._candidate = None
            return out

    # ---------------------------------------------------------------- the addition
    def _off(self, index: int, offset: int) -> str | None:
        """How a message of input ``index`` with ``offset`` is off (see the module docstring),
        or None: it is accepted, and its offset kept."""
        own = self._offsets[index]
        others = [o for j, o in enumerate(self._offsets) if j != index and o is not None]
        ahead = ([offset - max(others)] if others else []) + (
            [offset - own] if own is not None else []
        )
        behind = ([min(others) - offset] if others else []) + (
            [own - offset] if own is not None else []
        )
        what = (
            "its input's last message"
            if not others
            else "the namespace's other inputs"
            if own is None
            else "its input's last message and the namespace's other inputs"
        )
        jump = self.max_jump_ns
        refused = self._refused[index]
        if (ahead and min(ahead) > jump) or (behind and min(behind) > jump):
            if refused is None or abs(offset - refused) > jump:
                self._refused[index] = offset
                if min(ahead) > jump:
                    return f"{min(ahead) / 1e9:.3f} s ahead of {what}"
                return (
                    f"{min(behind) / 1e9:.3f} s behind {what} (a stamp in the past, or a "
                    f"message that late)"
                )
        self._offsets[index] = offset
        self._refused[index] = None
        return None

    def _jumped_back(self, index: int, stamp: int) -> None:
        """If input ``index``'s stamps jumped back by more than max_jump_ns, drop every waiting
        message stamped that far ahead of ``stamp`` as bad and forget pairings that far ahead."""
        limit = stamp + self.max_jump_ns
        own = [e.stamp_ns for e in self._past[index]] + [e.stamp_ns for e in self._deques[index]]
        last = self._last_paired[index]
        if max(own + ([last] if last is not None else []), default=stamp) <= limit:
            return
        self._non_empty = 0  # the candidate search starts over
        self._recover_all()
        self._candidate = None
        self._pivot = None
        for i, q in enumerate(self._deques):
            keep = deque()
            for e in q:
                if e.stamp_ns > limit:
                    self._drop(
                        i,
                        e,
                        BAD_STAMP,
                        f"stamped {(e.stamp_ns - stamp) / 1e9:.3f} s ahead of a later "
                        f"message of {'its own' if i == index else 'another'} input "
                        f"(stamps jumped back over sync_max_stamp_jump_ms "
                        f"{self.max_jump_ns / 1e6:g})",
                    )
                else:
                    keep.append(e)
            self._deques[i] = keep
        self._last_paired = [None if t is not None and t > limit else t for t in self._last_paired]
        self._non_empty = sum(1 for q in self._deques if q)
        if self._non_empty == self.n:
            self._process()

    def _too_old(self, index: int, stamp: int) -> bool:
        q, past = self._deques[index], self._past[index]
        newest_own = q[-1].stamp_ns if q else past[-1].stamp_ns if past else None
        last = self._last_paired[index]
        if (newest_own is not None and stamp < newest_own) or (last is not None and stamp < last):
            return True
        if self.max_interval_ns is None:
            return False
        return any(
            j != index and other is not None and other - stamp > self.max_interval_ns
            for j, other in enumerate(self._last_paired)
        )

    # ---------------------------------------------------------------- the policy
    def _add(self, i: int, entry: Entry) -> None:
        q = self._deques[i]
        q.append(entry)
        if len(q) == 1:
            self._non_empty += 1
            if self._non_empty == self.n:
                self._process()
        else:
            self._check_bound(i)
        # During _process, queue i may have held queue_size + 1 messages.
        if len(q) + len(self._past[i]) > self.queue_size:
            self._non_empty = 0  # recomputed from scratch
            self._recover_all()
            self._drop(i, q.popleft(), "queue_overflow")
            self._has_dropped[i] = True
            if self._pivot is not None:  # the candidate is no longer valid
                self._candidate = None
                self._pivot = None
                self._process()

    def _check_bound(self, i: int) -> None:
        if self._warned[i]:
            return
        q = self._deques[i]
        if len(q) == 1:
            if not self._past[i]:
                return
            previous = self._past[i][-1].stamp_ns
        else:
            previous = q[-2].stamp_ns
        if q[-1].stamp_ns < previous or q[-1].stamp_ns - previous < self.bounds[i]:
            self._warned[i] = True
            if q[-1].stamp_ns >= previous:  # out of order cannot happen: _too_old
                self._result.bound_violated.append(i)

    def _drop(self, i: int, entry: Entry, reason: str, detail: str = "") -> None:
        self._result.dropped.append(Dropped(i, entry, reason, detail))

    def _delete_front(self, i: int, reason: str) -> None:
        q = self._deques[i]
        self._drop(i, q.popleft(), reason)
        if not q:
            self._non_empty -= 1

    def _move_front_to_past(self, i: int) -> None:
        q = self._deques[i]
        self._past[i].append(q.popleft())
        if not q:
            self._non_empty -= 1

    def _make_candidate(self) -> None:
        self._candidate = tuple(q[0] for q in self._deques)
        # Past messages are dropped: a better candidate was found.
        for i, past in enumerate(self._past):
            for e in past:
                self._drop(i, e, "no_partner")
            past.clear()

    def _recover(self, i: int, count: int | None = None) -> None:
        past, q = self._past[i], self._deques[i]
        count = len(past) if count is None else count
        for _ in range(count):
            q.appendleft(past.pop())
        if q:
            self._non_empty += 1

    def _recover_all(self, counts: Sequence[int] | None = None) -> None:
        for i in range(self.n):
            self._recover(i, None if counts is None else counts[i])

    def _publish_candidate(self) -> None:
        candidate = self._candidate
        self._result.sets.append(candidate)
        for i, e in enumerate(candidate):
            self._last_paired[i] = e.stamp_ns
        self._candidate = None
        self._pivot = None
        self._non_empty = 0  # recomputed from scratch
        for i in range(self.n):  # recover hidden messages, delete the candidate's
            self._recover(i)
            q = self._deques[i]
            q.popleft()
            if not q:
                self._non_empty -= 1

    def _boundary(self, times: Sequence[int], end: bool) -> tuple[int, int]:
        """(index, time) of the latest (end) or earliest time; ties as the C++ policy breaks
        them: the earliest by the lowest index, the latest by the highest."""
        index, time = 0, times[0]
        for i in range(1, len(times)):
            if (times[i] < time) != end:
                index, time = i, times[i]
        return index, time

    def _heads(self) -> list[int]:
        return [q[0].stamp_ns for q in self._deques]

    def _virtual_times(self) -> list[int]:
        out = []
        for i, q in enumerate(self._deques):
            if q:
                out.append(q[0].stamp_ns)
            else:  # not empty: we have a candidate
                bound = self._past[i][-1].stamp_ns + self.bounds[i]
                out.append(max(bound, self._pivot_time))
        return out

    def _process(self) -> None:
        penalty = 1.0 + self.age_penalty
        while self._non_empty == self.n:
            heads = self._heads()
            end_index, end_time = self._boundary(heads, True)
            start_index, start_time = self._boundary(heads, False)
            for i in range(self.n):
                if i != end_index:
                    # No dropped message could have been better than the ones we have, so
                    # this input may be the pivot again.
                    self._has_dropped[i] = False
            if self._pivot is None:
                if (
                    self.max_interval_ns is not None
                    and end_time - start_time > self.max_interval_ns
                ):
                    self._delete_front(start_index, "no_partner")  # too wide for a set
                    continue
                if self._has_dropped[end_index]:
                    # The input that would be the pivot dropped messages: not a good pivot.
                    self._delete_front(start_index, "queue_overflow")
                    continue
                self._make_candidate()
                self._candidate_start, self._candidate_end = start_time, end_time
                self._pivot, self._pivot_time = end_index, end_time
                self._move_front_to_past(start_index)
            else:
                if (end_time - self._candidate_end) * penalty >= start_time - self._candidate_start:
                    self._move_front_to_past(start_index)  # not a better candidate
                else:
                    self._make_candidate()  # a better one; same pivot
                    self._candidate_start, self._candidate_end = start_time, end_time
                    self._move_front_to_past(start_index)
            age_check = (end_time - self._candidate_end) * penalty
            if start_index == self._pivot:
                # Every candidate of this pivot was tried: publish the best.
                self._publish_candidate()
            elif age_check >= self._pivot_time - self._candidate_start:
                # Provably optimal: any later candidate contains [pivot_time, end_time].
                self._publish_candidate()
            elif self._non_empty < self.n:
                self._virtual_search(penalty)

    def _virtual_search(self, penalty: float) -> None:
        """Before waiting for more messages, try to prove the candidate optimal with the
        inter-message lower bounds."""
        moves = [0] * self.n
        while True:
            times = self._virtual_times()
            _, end_time = self._boundary(times, True)
            start_index, start_time = self._boundary(times, False)
            if (
                end_time - self._candidate_end
            ) * penalty >= self._pivot_time - self._candidate_start:
                self._publish_candidate()  # cleans up the virtual moves too
                return
            if (end_time - self._candidate_end) * penalty < start_time - self._candidate_start:
                # An optimistic candidate would be better: wait for real messages.
                self._non_empty = 0
                self._recover_all(moves)
                return
            self._move_front_to_past(start_index)
            moves[start_index] += 1
