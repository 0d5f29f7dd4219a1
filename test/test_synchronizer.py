"""message_filters' ApproximateTime policy as ported in triton_ros.ros.binding.synchronizer:
the cases of ros2/message_filters' test/test_approximate_time_policy.cpp give the same sets
(stamps in seconds there, nanoseconds here), and every message ends exactly once, in a set or
dropped with its reason (the slop, a full queue, too old)."""
from __future__ import annotations

import random

import pytest

from triton_ros.ros.binding.synchronizer import UNMATCHED_REASONS, ApproximateTimeSync

pytestmark = pytest.mark.unit

S = 1_000_000_000


def run(inputs: int, events, queue_size: int = 10, **kwargs):
    """events: (time in s, input); returns (sets as tuples of seconds, drops, sync)."""
    sync = ApproximateTimeSync(inputs, queue_size=queue_size, **kwargs)
    sets, drops = [], []
    for t, i in events:
        result = sync.add(i, int(t * S), (t, i))
        sets += [tuple(e.stamp_ns / S for e in s) for s in result.sets]
        drops += [(d.entry.stamp_ns / S, d.index, d.reason) for d in result.dropped]
    return sets, drops, sync


# The cases of message_filters' test_approximate_time_policy.cpp: (inputs, events, queue size,
# bounds, expected sets).
CASES = {
    "ExactMatch": (2, [(0, 0), (0, 1), (3, 0), (3, 1), (6, 0), (6, 1)], 10, 0,
                   [(0, 0), (3, 3), (6, 6)]),
    "PerfectMatch": (2, [(0, 0), (1, 1), (3, 0), (4, 1), (6, 0), (7, 1)], 10, 0,
                     [(0, 1), (3, 4)]),
    "ImperfectMatch": (2, [(0, 0), (1, 1), (2, 0), (3, 0), (5, 1), (6, 0), (7, 1)], 10, 0,
                       [(0, 1), (6, 5)]),
    "Acceleration": (2, [(0, 0), (7, 1), (12, 0), (15, 1), (17, 0), (18, 1)], 10, 0,
                     [(12, 7), (17, 18)]),
    "DroppedMessages1": (2, [(0, 0), (1, 1), (3, 1), (4, 0), (7, 1), (8, 0), (10, 0), (11, 1),
                             (13, 0), (14, 1)], 1, 0, [(4, 3), (10, 11)]),
    "DroppedMessages2": (2, [(0, 0), (1, 1), (3, 1), (4, 0), (7, 1), (8, 0), (10, 0), (11, 1),
                             (13, 0), (14, 1)], 2, 0, [(0, 1), (4, 3), (8, 7), (10, 11)]),
    "LongQueue": (2, [(t, 0) for t in range(9)] + [(3, 1), (9, 0), (10, 0), (11, 0), (12, 0),
                                                   (10, 1), (13, 0)], 5, 0, [(10, 10)]),
    "DoublePublish": (2, [(0, 0), (1, 1), (3, 1), (3, 0)], 10, 0, [(0, 1), (3, 3)]),
    "FourTopics": (4, [(0, 0), (1, 1), (2, 2), (3, 3), (5, 0), (5, 3), (6, 1), (6, 2), (8, 0),
                       (9, 1), (10, 2), (11, 3), (10, 0), (13, 0), (14, 1)], 10, 0,
                   [(0, 1, 2, 3), (5, 6, 6, 5), (10, 9, 10, 11)]),
    "EarlyPublish": (4, [(0, 0), (1, 1), (2, 2), (3, 3), (7, 0)], 10, 0, [(0, 1, 2, 3)]),
    "RateBound1.5": (2, [(0, 0), (1, 1), (3, 0), (4, 1), (6, 0), (7, 1)], 10, (1.5, 0),
                     [(0, 1), (3, 4)]),
    "RateBound2": (2, [(0, 0), (1, 1), (3, 0), (4, 1), (6, 0), (7, 1)], 10, (2, 0),
                   [(0, 1), (3, 4), (6, 7)]),
}


@pytest.mark.parametrize("name", CASES)
def test_the_cases_of_message_filters(name):
    inputs, events, queue_size, bounds, expected = CASES[name]
    kwargs = {}
    if bounds:
        kwargs["min_interval_ns"] = [int(b * S) for b in bounds]
    sets, _, _ = run(inputs, events, queue_size, **kwargs)
    assert sets == [tuple(float(t) for t in s) for s in expected]


def test_the_longqueue_case_message_filters_skips_is_kept_out_of_order():
    # In LongQueue, message_filters' own test feeds 'm' stamped 10 after 'o' (10) of input 1
    # and after 'l' (10) of input 0; here a stamp older than its input's newest is too_old.
    _, drops, _ = run(2, [(0, 0), (5, 0), (3, 0)])
    assert (3.0, 0, "too_old") in drops


def test_the_slop_drops_messages_without_partners():
    # 30 Hz colour and depth, depth frame 3 missing: colour 3 has no partner within 10 ms.
    events = []
    for k in range(8):
        events.append((k / 30, 0))
        if k != 3:
            events.append((k / 30 + 0.004, 1))
    sets, drops, sync = run(2, events, max_interval_ns=10_000_000)
    assert [round(s[0] * 30) for s in sets] == [0, 1, 2, 4, 5, 6]
    assert drops == [(3 / 30, 0, "no_partner")]
    assert sync.waiting() == 2              # set 7 waits for the next message (no bound)
    # With a rate bound the last set does not wait:
    sets, _, sync = run(2, events, max_interval_ns=10_000_000, min_interval_ns=25_000_000)
    assert [round(s[0] * 30) for s in sets] == [0, 1, 2, 4, 5, 6, 7] and sync.waiting() == 0


def test_a_message_older_than_its_partners_pairs_is_too_old():
    # Depth of frame 0 arrives after colour and depth of frame 1 were paired.
    sets, drops, _ = run(2, [(0.0, 0), (0.033, 0), (0.034, 1), (0.066, 0), (0.067, 1),
                             (0.001, 1)], max_interval_ns=10_000_000,
                         min_interval_ns=25_000_000)
    assert (0.001, 1, "too_old") in drops


def test_a_full_queue_drops_the_oldest():
    # Colour keeps coming, depth never does: the queue holds 3, the rest overflow.
    sets, drops, sync = run(2, [(k / 30, 0) for k in range(10)], queue_size=3)
    assert not sets and sync.waiting() == 3
    assert [d[2] for d in drops] == ["queue_overflow"] * 7
    assert [round(d[0] * 30) for d in drops] == list(range(7))


@pytest.mark.parametrize("seed", range(20))
def test_every_message_ends_exactly_once(seed):
    """Random streams of three inputs with jitter, losses and reordering between inputs: each
    message is in one set or dropped once (or still waits); sets are within the slop and in
    stamp order per input."""
    rng = random.Random(seed)
    events = []
    for k in range(200):
        for i in range(3):
            if rng.random() < 0.1:
                continue                              # lost
            events.append((k / 30 + rng.uniform(-0.004, 0.004), i, k / 30 + rng.uniform(0, 0.02)))
    events.sort(key=lambda e: e[2])                   # arrival order: the inputs interleave
    per_input_last = {}
    ordered = []
    for t, i, _ in events:                            # each input stays in order, as DDS keeps it
        if t > per_input_last.get(i, -1):
            per_input_last[i] = t
            ordered.append((t, i))
    slop = 10_000_000
    sets, drops, sync = run(3, ordered, queue_size=rng.choice([2, 5, 10]),
                            max_interval_ns=slop,
                            min_interval_ns=rng.choice([0, 20_000_000]))
    assert sets
    seen = [(t, i) for s in sets for i, t in enumerate(s)] + [(t, i) for t, i, _ in drops]
    assert len(seen) == len(set(seen))
    assert len(seen) + sync.waiting() == len(ordered)
    for s in sets:
        assert (max(s) - min(s)) * S <= slop + 1
    for i in range(3):
        column = [s[i] for s in sets]
        assert column == sorted(column)
    assert {r for _, _, r in drops} <= set(UNMATCHED_REASONS)
