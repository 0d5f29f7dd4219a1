"""The endpoints of one remote model and which one gets a request: pick, mark down, back off.

- each request goes to the *up* endpoint with the fewest outstanding requests (ties in turn),
  skipping an endpoint whose oldest request has waited more than a quarter of the timeout
  (a hung server) while another is not in that state (:meth:`EndpointPool.pick`);
- a request that fails because of its endpoint (unreachable, TLS refused, timed out) marks that
  endpoint *down*; ``FAILING_AFTER`` requests in a row failing for any other reason mark it down
  too (an endpoint answering every request with an error would attract them all)
  (:meth:`EndpointPool.failed`);
- a down endpoint is probed again after a backoff that doubles with each consecutive failure
  (0.25 s to 4 s), an up one every ``HEALTH_PERIOD_S`` (:meth:`Endpoint.probe_wait_s`); the
  probes themselves are the model's (model.py);
- an endpoint whose model configuration differs from the reference is *mismatch* and not used
  (planning.py);
- why an endpoint is down is logged (:meth:`EndpointPool.tell_reason`): when it goes down, and
  while it stays down whenever the reason changes (at most one line per endpoint every
  :data:`REASON_MIN_S`), the same reason again every :data:`REASON_EVERY_S` with the number of
  failed probes since; the reason is the model's probe's, explained where it can be
  (diagnosis.py).

Each endpoint keeps its figures (requests, errors by kind, round trips) for ``/diagnostics``:
:meth:`Endpoint.health`.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable

from ...monitoring.latency import LatencyWindow
from .config import (
    FAILING_AFTER,
    HEALTH_PERIOD_S,
    PROBE_BACKOFF_MAX_S,
    PROBE_BACKOFF_MIN_S,
    EndpointAddress,
)
from .errors import ENDPOINT_FAILURES, RemoteError

UP, DOWN, MISMATCH = "up", "down", "mismatch"
REASON_MIN_S = 5.0  # one line about a down endpoint at most this often ...
REASON_EVERY_S = 60.0  # ... and the same reason again at most this often


@dataclass
class EndpointHealth:
    """One endpoint's figures for /diagnostics and ~/list_models (no secret in here)."""

    url: str
    state: str
    reason: str
    outstanding: int
    requests: int  # answered requests, total
    errors: dict[str, int]  # by kind, total
    latency: list[int]  # round trips (ns) since the last report
    shared_memory: bool


class Endpoint:
    """One URL's client and state; touched only on the model's event loop (except figures)."""

    def __init__(self, address: EndpointAddress, index: int) -> None:
        self.address = address
        self.index = index
        self.client: Any = None
        self.state = DOWN
        self.reason = "not probed yet"
        self.outstanding = 0
        self.started: dict[int, int] = {}  # outstanding request -> when it was sent (ns)
        self.requests = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.latency = LatencyWindow()
        self.failures = 0  # consecutive; sets the probe backoff
        self.consecutive_errors = 0  # requests failed in a row (any kind)
        self.wake = asyncio.Event()
        self.shm = False  # inputs go through shared memory
        self.shm_refused = False
        self.registered: set[str] = set()  # shared-memory slots registered with this server
        self.fetched: tuple | None = None  # first probe round: (config, versions, labels)
        self.metadata_only = False  # no ModelConfig there: planned from metadata
        self.logged_reason = ""  # the reason last logged (tell_reason) ...
        self.logged_at = float("-inf")  # ... when (monotonic s)
        self.unlogged = 0  # failed probes not logged since
        self.hint: tuple[float, str] | None = None  # (when, diagnosis.explain's answer)

    def oldest_age(self, now_ns: int) -> int:
        """How long the oldest outstanding request has waited (ns); 0 without one."""
        started = list(self.started.values())
        return now_ns - min(started) if started else 0

    def backoff_s(self) -> float:
        """How long a down endpoint waits for its next probe."""
        return min(PROBE_BACKOFF_MAX_S, PROBE_BACKOFF_MIN_S * 2 ** max(0, self.failures - 1))

    def probe_wait_s(self) -> float:
        """How long until this endpoint's next probe."""
        return HEALTH_PERIOD_S if self.state == UP else self.backoff_s()

    def health(self) -> EndpointHealth:
        return EndpointHealth(
            self.address.url,
            self.state,
            self.reason,
            self.outstanding,
            self.requests,
            dict(self.errors),
            self.latency.drain(),
            self.shm,
        )


class EndpointPool:
    """The endpoints of one model, in the order given, and the accounting of their requests."""

    def __init__(
        self,
        addresses: list[EndpointAddress],
        *,
        timeout_ms: int,
        log: Callable[[str, str], None],
        who: str,
    ) -> None:
        self.endpoints = [Endpoint(address, i) for i, address in enumerate(addresses)]
        self._stall_ns = timeout_ms * 250_000  # a quarter of the timeout
        self._log = log
        self._who = who
        self._turn = itertools.count()
        self._request_ids = itertools.count()

    def __iter__(self):
        return iter(self.endpoints)

    def any_up(self) -> bool:
        return any(ep.state == UP for ep in self.endpoints)

    def pick(self, tried: set[int]) -> Endpoint | None:
        """The up endpoint with the fewest outstanding requests (ties in turn). An endpoint
        with a request unanswered for longer than a quarter of the timeout is *stalled* (a hung
        server is only marked down when that request times out): it gets new requests only
        when every up endpoint is stalled, and then the one whose oldest request is youngest."""
        now = time.monotonic_ns()
        up = [
            (ep.outstanding, i, ep.oldest_age(now))
            for i, ep in enumerate(self.endpoints)
            if ep.state == UP and i not in tried
        ]
        if not up:
            return None
        moving = [u for u in up if u[2] <= self._stall_ns]
        if not moving:
            # every endpoint has a request waiting that long (a loaded fleet, or a hang): the
            # one whose oldest request is the youngest has made progress most recently
            return self.endpoints[min(up, key=lambda u: u[2])[1]]
        fewest = min(n for n, _, _ in moving)
        candidates = [i for n, i, _ in moving if n == fewest]
        return self.endpoints[candidates[next(self._turn) % len(candidates)]]

    def can_hedge(self, after_ns: int) -> bool:
        """Whether an endpoint holds a request unanswered for longer than ``after_ns`` (stalled)
        while another is up with none that old: a frame hedged now (binding/source.py) would
        find one that moves. Read from other threads: a race gives a stale answer, never an
        error."""
        now = time.monotonic_ns()
        stalled = moving = False
        for ep in self.endpoints:
            try:
                age = ep.oldest_age(now)
            except (RuntimeError, ValueError):  # its requests changed while read
                continue
            if age >= after_ns:
                stalled = True
            elif ep.state == UP:
                moving = True
        return stalled and moving

    def unavailable_text(self, model: str) -> str:
        states = "; ".join(f"{ep.address.url} {ep.state} ({ep.reason})" for ep in self.endpoints)
        return f"no endpoint of model '{model}' is up: {states}"

    # ---------------------------------------------------------------- a request's accounting
    def sent(self, ep: Endpoint) -> tuple[int, int]:
        """A request leaves for ``ep``: (its id, when it was sent, ns)."""
        ep.outstanding += 1
        started = time.monotonic_ns()
        request_id = next(self._request_ids)
        ep.started[request_id] = started
        return request_id, started

    def settled(self, ep: Endpoint, request_id: int) -> None:
        """A request of ``ep`` ended, answered or not."""
        ep.outstanding -= 1
        ep.started.pop(request_id, None)

    def succeeded(self, ep: Endpoint, started: int) -> None:
        ep.latency.add(time.monotonic_ns() - started)
        ep.requests += 1
        ep.failures = 0
        ep.consecutive_errors = 0

    def failed(self, ep: Endpoint, error: RemoteError) -> None:
        """Count a failed request; mark its endpoint down for an endpoint failure, or after
        FAILING_AFTER failures in a row of any kind."""
        ep.errors[error.kind] += 1
        ep.consecutive_errors += 1
        if error.kind not in ENDPOINT_FAILURES and ep.consecutive_errors >= FAILING_AFTER:
            # an endpoint failing every request answers fast, so it would keep winning
            # "fewest outstanding": out until a probe finds it ready again
            self.mark_down(
                ep,
                RemoteError(
                    error.code,
                    f"{FAILING_AFTER} requests in a row failed, the last: {error.message}",
                    error.kind,
                ),
            )
        if error.kind in ENDPOINT_FAILURES:
            self.mark_down(ep, error)

    def mark_down(self, ep: Endpoint, error: RemoteError, *, tell: bool = True) -> bool:
        """Mark an up endpoint down (False: it was not up). ``tell``: log why now (else the
        caller does, once it has explained it: tell_reason)."""
        if ep.state != UP:
            return False  # already down: the other requests in flight
        ep.state = DOWN
        ep.reason = f"{error.kind}: {error.message}"
        if tell:
            self.tell_reason(ep, news=True)
        ep.failures += 1  # one event, however many requests it failed
        ep.registered.clear()  # a restarted server forgets its regions
        ep.wake.set()
        return True

    def tell_reason(self, ep: Endpoint, *, news: bool = False, quiet: bool = False) -> None:
        """Log why ``ep`` is down (its ``reason``), throttled per endpoint (module docstring).
        ``news``: it just went down (logged at once); ``quiet``: only note it as told (the
        start-up line already said it)."""
        now = time.monotonic()
        same = ep.reason == ep.logged_reason
        if quiet or (not news and now - ep.logged_at < (REASON_EVERY_S if same else REASON_MIN_S)):
            if quiet:
                ep.logged_reason, ep.logged_at = ep.reason, now
            else:
                ep.unlogged += 1
            return
        since = (
            f" ({ep.unlogged} failed probe{'s' if ep.unlogged != 1 else ''} since the last line)"
            if ep.unlogged and same
            else ""
        )
        self._log(
            "warn",
            f"{self._who}: endpoint {ep.address.url} is "
            f"{'still ' if same and not news else ''}down: {ep.reason}{since}; probing it "
            f"again with backoff",
        )
        ep.logged_reason, ep.logged_at, ep.unlogged = ep.reason, now, 0
