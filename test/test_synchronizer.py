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
    "ExactMatch": (
        2,
        [(0, 0), (0, 1), (3, 0), (3, 1), (6, 0), (6, 1)],
        10,
        0,
        [(0, 0), (3, 3), (6, 6)],
    ),
    "PerfectMatch": (2, [(0, 0), (1, 1), (3, 0), (4, 1), (6, 0), (7, 1)], 10, 0, [(0, 1), (3, 4)]),
    "ImperfectMatch": (
        2,
        [(0, 0), (1, 1), (2, 0), (3, 0), (5, 1), (6, 0), (7, 1)],
        10,
        0,
        [(0, 1), (6, 5)],
    ),
    "Acceleration": (
        2,
        [(0, 0), (7, 1), (12, 0), (15, 1), (17, 0), (18, 1)],
        10,
        0,
        [(12, 7), (17, 18)],
    ),
    "DroppedMessages1": (
        2,
        [(0, 0), (1, 1), (3, 1), (4, 0), (7, 1), (8, 0), (10, 0), (11, 1), (13, 0), (14, 1)],
        1,
        0,
        [(4, 3), (10, 11)],
    ),
    "DroppedMessages2": (
        2,
        [(0, 0), (1, 1), (3, 1), (4, 0), (7, 1), (8, 0), (10, 0), (11, 1), (13, 0), (14, 1)],
        2,
        0,
        [(0, 1), (4, 3), (8, 7), (10, 11)],
    ),
    "LongQueue": (
        2,
        [(t, 0) for t in range(9)] + [(3, 1), (9, 0), (10, 0), (11, 0), (12, 0), (10, 1), (13, 0)],
        5,
        0,
        [(10, 10)],
    ),
    "DoublePublish": (2, [(0, 0), (1, 1), (3, 1), (3, 0)], 10, 0, [(0, 1), (3, 3)]),
    "FourTopics": (
        4,
        [
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 3),
            (5, 0),
            (5, 3),
            (6, 1),
            (6, 2),
            (8, 0),
            (9, 1),
            (10, 2),
            (11, 3),
            (10, 0),
            (13, 0),
            (14, 1),
        ],
        10,
        0,
        [(0, 1, 2, 3), (5, 6, 6, 5), (10, 9, 10, 11)],
    ),
    "EarlyPublish": (4, [(0, 0), (1, 1), (2, 2), (3, 3), (7, 0)], 10, 0, [(0, 1, 2, 3)]),
    "RateBound1.5": (
        2,
        [(0, 0), (1, 1), (3, 0), (4, 1), (6, 0), (7, 1)],
        10,
        (1.5, 0),
        [(0, 1), (3, 4)],
    ),
    "RateBound2": (
        2,
        [(0, 0), (1, 1), (3, 0), (4, 1), (6, 0), (7, 1)],
        10,
        (2, 0),
        [(0, 1), (3, 4), (6, 7)],
    ),
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
    assert sync.waiting() == 2  # set 7 waits for the next message (no bound)
    # With a rate bound the last set does not wait:
    sets, _, sync = run(2, events, max_interval_ns=10_000_000, min_interval_ns=25_000_000)
    assert [round(s[0] * 30) for s in sets] == [0, 1, 2, 4, 5, 6, 7] and sync.waiting() == 0


def test_a_message_older_than_its_partners_pairs_is_too_old():
    # Depth of frame 0 arrives after colour and depth of frame 1 were paired.
    sets, drops, _ = run(
        2,
        [(0.0, 0), (0.033, 0), (0.034, 1), (0.066, 0), (0.067, 1), (0.001, 1)],
        max_interval_ns=10_000_000,
        min_interval_ns=25_000_000,
    )
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
                continue  # lost
            events.append((k / 30 + rng.uniform(-0.004, 0.004), i, k / 30 + rng.uniform(0, 0.02)))
    events.sort(key=lambda e: e[2])  # arrival order: the inputs interleave
    per_input_last = {}
    ordered = []
    for t, i, _ in events:  # each input stays in order, as DDS keeps it
        if t > per_input_last.get(i, -1):
            per_input_last[i] = t
            ordered.append((t, i))
    slop = 10_000_000
    sets, drops, sync = run(
        3,
        ordered,
        queue_size=rng.choice([2, 5, 10]),
        max_interval_ns=slop,
        min_interval_ns=rng.choice([0, 20_000_000]),
    )
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


# --------------------------------------------------------------------------------------------
# Bad stamps: one message stamped far ahead must not hold up the namespace
# --------------------------------------------------------------------------------------------

SLOP = 10_000_000
JUMP = 1_000_000_000


def rgbd_frames(frames, bad=None, *, latency=0.003, base=0.0):
    """Colour, depth and CameraInfo at 30 Hz from ``base`` (s), each received ``latency`` after
    its stamp; ``bad``: {(frame, input): stamp in s} overrides stamps (received on time all the
    same)."""
    bad = bad or {}
    events = []
    for k in frames:
        for i in range(3):
            t = base + k / 30 + 0.001 * i
            events.append((bad.get((k, i), t), i, t + latency))
    return events


def run_received(events, inputs=3, **kwargs):
    sync = ApproximateTimeSync(
        inputs, queue_size=10, max_interval_ns=SLOP, max_jump_ns=JUMP, **kwargs
    )
    sets, drops = [], []
    for t, i, received in events:
        result = sync.add(i, int(round(t * S)), (t, i), int(round(received * S)))
        sets += [tuple(e.stamp_ns / S for e in s) for s in result.sets]
        drops += [(d.entry.stamp_ns / S, d.index, d.reason) for d in result.dropped]
    return sets, drops, sync


def frames_of(sets):
    return sorted({round(s[0] * 30) for s in sets})


@pytest.mark.parametrize(
    "bad",
    [
        {(5, 0): 2_145_916_800.0},  # colour stamped in 2038
        {(5, 0): 5 / 30 + 12.0},  # colour 12 s ahead
        {(5, i): 5 / 30 + 12.0 + 0.001 * i for i in range(3)},  # a whole set 12 s ahead
        {(5, 1): 2_145_916_800.0, (9, 2): 5 / 30 + 40.0},  # two inputs, two frames
    ],
)
def test_a_message_stamped_far_ahead_is_dropped_as_a_bad_stamp_and_matching_goes_on(bad):
    sets, drops, sync = run_received(rgbd_frames(range(20), bad), min_interval_ns=25_000_000)
    bad_frames = {k for k, _ in bad}
    assert [(round(t, 6), i) for t, i, r in drops if r == "bad_stamp"] == [
        (round(t, 6), i) for (_, i), t in sorted(bad.items())
    ]
    # every frame whose three messages are good is matched; at most the one frame that came
    # with the bad message loses its good messages as no_partner
    assert set(frames_of(sets)) == set(range(20)) - bad_frames
    assert all(r in ("bad_stamp", "no_partner") for _, _, r in drops)
    assert sync.waiting() == 0


def test_a_whole_set_ahead_before_any_other_message_is_paired_then_forgotten():
    # Without a reference yet (the namespace's first messages), the bad set is paired; the good
    # messages that follow are two in a row on each input, a timeline of their own: matching
    # starts over from the second good frame.
    events = rgbd_frames([0], {(0, i): 5000.0 + 0.001 * i for i in range(3)}) + rgbd_frames(
        range(1, 10)
    )
    sets, drops, _ = run_received(events, min_interval_ns=25_000_000)
    assert sets[0][0] == 5000.0 and frames_of(sets[1:]) == list(range(2, 10))
    assert {r for _, _, r in drops} == {"bad_stamp"}


def test_stamps_jumping_back_on_every_input_start_the_matching_over():
    # A bag replayed in a loop: the stamps of every input jump back by 10 s together.
    events = rgbd_frames(range(300, 306)) + rgbd_frames(range(0, 6), latency=10.003 + 306 / 30)
    sets, drops, _ = run_received(events, min_interval_ns=25_000_000)
    assert frames_of(sets) == list(range(1, 6)) + list(range(300, 306))  # one frame lost
    assert {r for _, _, r in drops} <= {"bad_stamp"}


def test_a_clock_step_of_the_publisher_costs_at_most_one_message_per_input():
    # The robot's clock is stepped 3 s forward (NTP): every input's stamps move together.
    events = rgbd_frames(range(10)) + [(t + 3.0, i, r) for t, i, r in rgbd_frames(range(10, 20))]
    sets, drops, _ = run_received(events, min_interval_ns=25_000_000)
    assert frames_of(sets) == list(range(10)) + [k + 90 for k in range(11, 20)]  # 3 s: 90
    assert [d[1] for d in drops if d[2] == "bad_stamp"] == [0, 1, 2]


def test_without_the_guard_a_future_stamp_holds_up_the_matching():
    """What the guard is for: the policy alone (and this port's too_old check) waits."""
    sync = ApproximateTimeSync(3, queue_size=10, max_interval_ns=SLOP)
    published = 0
    for t, i, _ in rgbd_frames(range(20), {(5, 0): 2_145_916_800.0}):
        published += len(sync.add(i, int(round(t * S)), None).sets)
    assert published == 5  # frames 0-4; nothing after the bad colour


def test_a_late_message_is_not_a_bad_stamp():
    # Depth 200 ms late (network): too old or without partner, never a bad stamp.
    events = rgbd_frames(range(10))
    late = [
        (t, i, r + 0.2) if i == 1 and 3 <= round(t * 30) <= 4 else (t, i, r) for t, i, r in events
    ]
    late.sort(key=lambda e: e[2])
    _, drops, _ = run_received(late)
    assert "bad_stamp" not in {r for _, _, r in drops}


T0 = 1_700_000_000.0  # 2023, seconds


@pytest.mark.parametrize(
    "bad",
    [
        {(5, 0): T0 - 3600.0},  # colour an hour in the past
        {(5, 2): 0.000001},  # CameraInfo near 1970
        {(5, 1): T0 - 30.0, (11, 0): T0 - 30.0},
    ],
)
def test_a_message_stamped_far_in_the_past_is_a_bad_stamp_and_costs_no_good_one(bad):
    sets, drops, sync = run_received(
        rgbd_frames(range(20), bad, base=T0), min_interval_ns=25_000_000
    )
    assert sorted((round(t, 6), i) for t, i, r in drops if r == "bad_stamp") == sorted(
        (round(t, 6), i) for (_, i), t in bad.items()
    )
    assert [round((s[0] - T0) * 30) for s in sets] == [
        k for k in range(20) if k not in {k for k, _ in bad}
    ]
    assert all(r in ("bad_stamp", "no_partner") for _, _, r in drops)


def test_two_future_messages_in_a_row_cost_a_few_frames_not_the_namespace():
    # Two in a row agree with each other: taken as the input's new timeline, then given up
    # at the next good message (its stamps jump back, the good inputs agree with it).
    bad = {(5, 0): 2_145_916_800.0, (6, 0): 2_145_916_800.033}
    sets, drops, _ = run_received(rgbd_frames(range(20), bad, base=T0), min_interval_ns=25_000_000)
    matched = [round((s[0] - T0) * 30) for s in sets]
    assert matched == [k for k in range(20) if k not in (5, 6)]
    assert sorted(round(t, 3) for t, i, r in drops if r == "bad_stamp") == [
        2_145_916_800.0,
        2_145_916_800.033,
    ]


def test_an_input_lagging_behind_the_others_costs_one_message():
    # Depth published 1.5 s after its capture, every frame; the CameraInfo on time.
    events = sorted(
        ((t, i, r + 1.5 if i == 1 else r) for t, i, r in rgbd_frames(range(60), base=T0)),
        key=lambda e: e[2],
    )
    sync = ApproximateTimeSync(3, queue_size=60, max_interval_ns=SLOP, max_jump_ns=JUMP)
    dropped = []
    for t, i, received in events:
        dropped += [
            d.reason for d in sync.add(i, int(round(t * S)), None, int(round(received * S))).dropped
        ]
    # its first message is 1.5 s behind the others: a bad stamp; the second agrees with it
    assert dropped.count("bad_stamp") == 1


@pytest.mark.parametrize("seed", range(10))
def test_random_bad_stamps_cost_only_their_own_frames(seed):
    rng = random.Random(seed)
    bad = {}
    for k in range(5, 200, 6):
        if rng.random() < 0.7:
            i = rng.randrange(3)
            bad[(k, i)] = rng.choice(
                [
                    T0 + 12.0 + k / 30,
                    2_145_916_800.0 + k,
                    T0 - 3600.0,
                    0.5,
                    T0 + k / 30 + rng.choice([-1, 1]) * 5.0,
                ]
            )
    sets, drops, sync = run_received(
        rgbd_frames(range(200), bad, base=T0), min_interval_ns=25_000_000
    )
    assert sorted((round(t, 6), i) for t, i, r in drops if r == "bad_stamp") == sorted(
        (round(t, 6), i) for (_, i), t in bad.items()
    )
    matched = {round((s[0] - T0) * 30) for s in sets}
    assert matched == set(range(200)) - {k for k, _ in bad}
