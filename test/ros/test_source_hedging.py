"""A source's hedging (binding/source.py), without processes: when it starts a frame beside
stalled ones, how many, and how hedged frames are counted; and the endpoint pool's answer
(targets/remote/pool.py) to "is there a stalled endpoint and a moving one"."""

from __future__ import annotations

import pytest

from triton_ros.ros.binding.source import Frame, Source
from triton_ros.ros.targets.remote.config import parse_url
from triton_ros.ros.targets.remote.pool import UP, EndpointPool

pytestmark = pytest.mark.unit


def frame(i: int) -> Frame:
    return Frame(msg=i, stamp_ns=0, received_ns=0)


def source(can_hedge, hedge_after_ms=100.0) -> Source:
    return Source(
        "/cam",
        "/out",
        max_in_flight=1,
        max_age_ms=0,
        discovered=False,
        hedge_after_ms=hedge_after_ms,
        can_hedge=can_hedge,
    )


def test_no_hedge_while_the_target_says_no_or_hedging_is_off():
    for s in (source(lambda: False), source(lambda: True, hedge_after_ms=0.0)):
        assert s.offer(frame(1), 0) is not None
        assert s.offer(frame(2), 0) is None  # waits in the slot
        assert s.counters.hedged == 0 and s.snapshot()[1] == 1


def test_one_hedged_frame_beside_a_stalled_one_and_its_place_handed_on():
    s = source(lambda: True)
    first = s.offer(frame(1), 0)
    assert first is not None and not first.hedged
    hedged = s.offer(frame(2), 0)
    assert hedged is not None and hedged.hedged and hedged.msg == 2
    assert s.offer(frame(3), 0) is None  # at most K + 1 in flight
    assert s.snapshot()[1] == 2 and s.counters.hedged == 1
    nxt = s.finish(0)  # the hedged frame left: 3 takes its place
    assert nxt is not None and nxt.msg == 3 and nxt.hedged
    assert s.counters.hedged == 2 and s.snapshot()[1] == 2
    assert s.finish(0) is None and s.finish(0) is None
    assert s.snapshot()[1] == 0


def test_a_target_that_cannot_say_does_not_hedge():
    def broken():
        raise RuntimeError("no")

    s = source(broken)
    s.offer(frame(1), 0)
    assert s.offer(frame(2), 0) is None and s.counters.hedged == 0


def test_the_pool_hedges_only_with_a_stalled_and_a_moving_endpoint():
    pool = EndpointPool(
        [parse_url("grpc://127.0.0.1:1"), parse_url("grpc://127.0.0.1:2")],
        timeout_ms=1000,
        log=lambda *_: None,
        who="test",
    )
    a, b = pool.endpoints
    a.state = b.state = UP
    assert not pool.can_hedge(100)  # nothing outstanding
    pool.sent(a)
    a.started = {k: v - 200_000_000 for k, v in a.started.items()}  # waited 200 ms
    assert pool.can_hedge(100_000_000)  # a stalled, b moves
    assert not pool.can_hedge(300_000_000)  # not stalled yet
    b.state = "down"
    assert not pool.can_hedge(100_000_000)  # nowhere to go
