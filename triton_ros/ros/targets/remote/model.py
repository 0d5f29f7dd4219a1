"""A model served by remote KServe v2 endpoints: tritonserver, KServe or another triton-ros-server.

A binding with ``server_urls`` feeds a :class:`RemoteModel` instead of the embedded core. It is
the binding's model target (:class:`~triton_ros.ros.targets.spec.ModelTarget`): name, version,
the effective model configuration (fetched from the remote, planning.py, so that preprocessing
and decoding are planned in the node as for a local model), readiness, and
:meth:`RemoteModel.infer`, which sends one asynchronous request and returns a
``concurrent.futures.Future`` that ends with a :class:`RemoteResponse` or a typed
:class:`~triton_ros.ros.targets.remote.errors.RemoteError`.

The endpoints (``grpc://``, ``grpcs://``, ``http://``, ``https://``) form a pool (pool.py). A
request goes to the endpoint the pool picks; one that fails because of its endpoint
(unreachable, TLS refused, timed out) marks it down and, after a connection failure, is retried
once on another up endpoint if its deadline allows, so a frame is published at most once and
lost only when no endpoint could answer in time. With every endpoint down,
:meth:`RemoteModel.infer` fails at once with ``kind="no_endpoint"``. Each endpoint is probed
(``ModelReady``, then its configuration when it comes into service) by a task of its own,
after the pool's backoff when down and every ``HEALTH_PERIOD_S`` when up, so a remote that
unloads the model is noticed without traffic.

Transport: one client per endpoint, of its protocol's class (clients.py), on one asyncio loop in
a thread of its own per model. The restricted-protocol header value is never logged, shown in
diagnostics or put in an error message.

Shared memory (``shared_memory: auto``): for endpoints on this host (``127.0.0.1``,
``localhost``, ``::1``) each request's inputs are written into a slot (shared_memory.py)
registered with that server, so the image does not travel through the socket. A server that
refuses registration (triton-ros-server without ``--allow-client-shm true``, or a server in a
container that does not share this host's /dev/shm) is used over the wire, with one log line
saying so.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Callable, Mapping

import numpy as np

from ....core.errors import StatusCode
from ....core.model_config import ModelConfig
from ..spec import InferFuture, ModelSpec, TargetState, spec_from_config
from .clients import client_for
from .config import INITIAL_ROUND_S, PROBE_TIMEOUT_S, RemoteConfig, check_remote_config, parse_url
from .diagnosis import explain
from .errors import ENDPOINT_FAILURES, MODEL_ERROR, NO_ENDPOINT, UNREACHABLE, RemoteError
from .planning import Reference
from .pool import DOWN, MISMATCH, UP, Endpoint, EndpointHealth, EndpointPool
from .shared_memory import ShmSlot, SlotPool

_LOGGER = logging.getLogger("triton_ros.remote")
EXPLAIN_EVERY_S = 10.0  # an unreachable endpoint is looked at again at most this often
_LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


def _python_log(level: str, text: str) -> None:
    """Default log: Python logging (the node routes it to its ROS logger)."""
    _LOGGER.log(_LEVELS.get(level, logging.INFO), text)


@dataclass
class RemoteResponse:
    model_name: str
    model_version: int
    outputs: dict[str, np.ndarray]


class RemoteModel:
    """One model (name, version) on a pool of KServe v2 endpoints."""

    def __init__(
        self,
        name: str,
        version: int,
        config: RemoteConfig,
        *,
        log: Callable[[str, str], None] | None = None,
        binding: str = "",
    ) -> None:
        check_remote_config(config)
        self.name = name
        self.binding = binding  # the binding it serves ("": none, e.g. a tool)
        # how log lines name this model: "binding 'fleet', model 'detector'"
        self._who = f"binding '{binding}', model '{name}'" if binding else f"model '{name}'"
        self.requested_version = version
        self.settings = config
        self._log = log or _python_log
        self._pool = EndpointPool(
            [parse_url(u) for u in config.urls],
            timeout_ms=config.timeout_ms,
            log=self._log,
            who=self._who,
        )
        self._reference = Reference(name, version, log=self._log, who=self._who)
        self._slots = SlotPool()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task] = []
        self._spec: tuple[int, ModelSpec] | None = None
        self._stopped = False
        self._first_round = False

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the event loop thread and the clients, probe every endpoint once (for at most
        INITIAL_ROUND_S), then keep probing in the background."""
        self._loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.call_soon(started.set)
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"remote_{self.name}", daemon=True)
        self._thread.start()
        started.wait()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)

    async def _start(self) -> None:
        for ep in self._pool:
            ep.wake = asyncio.Event()  # bound to this loop
            ep.client = client_for(ep.address, self.settings)
        # A first round of probes, together: the reference configuration is then that of the
        # first listed endpoint that answers, not of whichever answered first.
        self._first_round = True
        probes = [asyncio.ensure_future(self._probe(ep)) for ep in self._pool]
        _, pending = await asyncio.wait(probes, timeout=INITIAL_ROUND_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        self._first_round = False
        for ep in self._pool:
            if ep.fetched is not None:
                fetched, ep.fetched = ep.fetched, None
                await self._adopt(ep, *fetched)
        self._reference.warn_disagreement(list(self._pool))
        for ep in self._pool:
            self._tasks.append(asyncio.get_running_loop().create_task(self._probe_loop(ep)))

    def stop(self, timeout: float = 10.0) -> None:
        """Let requests in flight finish (at most one request timeout), then close the clients
        and the loop."""
        if self._loop is None or self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + self.settings.timeout_ms / 1000.0 + 0.5
        while any(ep.outstanding for ep in self._pool) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=timeout)
        except Exception as exc:  # closing must not stop the node's shutdown
            self._log("warn", f"{self._who}: closing the remote clients: {exc}")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=timeout)
        self._slots.destroy_all()

    def close(self) -> None:
        """The model target's close (ros/targets/spec.py): stop()."""
        self.stop()

    async def _close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        unregister = [
            ep.client.unregister_shared_memory(name)
            for ep in self._pool
            if ep.shm and ep.state == UP
            for name in ep.registered
        ]
        if unregister:  # together, one second at most: a hung server
            try:  # must not hold the node's shutdown
                await asyncio.wait_for(asyncio.gather(*unregister, return_exceptions=True), 1.0)
            except asyncio.TimeoutError:  # the server may be gone: its regions with it
                pass
        for ep in self._pool:
            try:
                await asyncio.wait_for(ep.client.close(), 1.0)
            except Exception:  # a broken channel: nothing left to release
                pass

    # ---------------------------------------------------------------- the model target
    @property
    def version(self) -> int:
        return self._reference.version

    @property
    def location(self) -> str:
        return ", ".join(self.settings.urls)

    def describe(self) -> ModelSpec:
        """The ModelSpec of the remote model (the same object until its configuration changes);
        UNAVAILABLE, naming every endpoint and its state, while no endpoint is up."""
        if not self.ready():
            raise RemoteError(StatusCode.UNAVAILABLE, self._unavailable_text(), NO_ENDPOINT)
        reference = self._reference
        cached = self._spec
        if cached is not None and cached[0] == reference.generation:
            return cached[1]
        spec = spec_from_config(reference.config, reference.version, reference.labels)
        self._spec = (reference.generation, spec)
        return spec

    def state(self) -> TargetState:
        """Readiness for /diagnostics: READY while an endpoint is up, else UNAVAILABLE with
        every endpoint's state and reason."""
        version = str(self.version) if self._reference.config is not None else ""
        if self.ready():
            up = [ep.address.url for ep in self._pool if ep.state == UP]
            return TargetState(True, "READY", f"served by {', '.join(up)}", version)
        return TargetState(False, "UNAVAILABLE", self._unavailable_text(), version)

    @property
    def generation(self) -> int:
        return self._reference.generation

    @property
    def config(self) -> ModelConfig:
        """The remote's configuration; UNAVAILABLE until an endpoint has answered."""
        if self._reference.config is None:
            raise RemoteError(StatusCode.UNAVAILABLE, self._unavailable_text(), NO_ENDPOINT)
        return self._reference.config

    @property
    def labels(self) -> dict[str, list[str]]:
        return dict(self._reference.labels)

    def ready(self) -> bool:
        return self._reference.config is not None and self._pool.any_up()

    def endpoints(self) -> list[EndpointHealth]:
        return [ep.health() for ep in self._pool]

    def can_hedge(self) -> bool:
        """Whether a frame sent now beside one stalled longer than hedge_after_fraction of the
        timeout would find a moving endpoint (pool.py)."""
        after_ns = int(self.settings.hedge_after_fraction * self.settings.timeout_ms * 1e6)
        return after_ns > 0 and self._pool.can_hedge(after_ns)

    def describe_endpoints(self) -> list[tuple[str, str, str]]:
        """(url, state, reason) per endpoint, without draining any figure."""
        return [(ep.address.url, ep.state, ep.reason) for ep in self._pool]

    def infer(
        self,
        inputs: Mapping[str, np.ndarray],
        outputs=None,
        *,
        priority: int = 0,
        timeout_us: int = 0,
        sequence: tuple[int | str, bool, bool] | None = None,
        on_response=None,
    ) -> InferFuture:
        """Send one request; the future ends with a RemoteResponse or a RemoteError."""
        future = InferFuture()
        if on_response is not None:  # planning refuses decoupled remote models
            future.set_exception(
                RemoteError(
                    StatusCode.UNSUPPORTED,
                    f"{self._who}: a decoupled model is served "
                    f"through ModelStreamInfer, which remote targets "
                    f"do not use",
                    NO_ENDPOINT,
                )
            )
            return future
        if self._loop is None or self._stopped:
            future.set_exception(
                RemoteError(
                    StatusCode.UNAVAILABLE, f"{self._who}: remote client stopped", NO_ENDPOINT
                )
            )
            return future
        sent = asyncio.run_coroutine_threadsafe(
            self._infer(
                dict(inputs), tuple(outputs) if outputs else None, priority, timeout_us, sequence
            ),
            self._loop,
        )
        sent.add_done_callback(partial(_settle, future))
        future.add_done_callback(lambda f: sent.cancel() if f.cancelled() else None)
        return future

    # ---------------------------------------------------------------- requests
    def _unavailable_text(self) -> str:
        return self._pool.unavailable_text(self.name)

    def _wanted_version(self) -> str:
        return "" if self.requested_version < 0 else str(self.requested_version)

    async def _infer(
        self,
        inputs: dict[str, np.ndarray],
        outputs: tuple[str, ...] | None,
        priority: int,
        timeout_us: int,
        sequence: tuple[int | str, bool, bool] | None = None,
    ) -> RemoteResponse:
        deadline = time.monotonic() + self.settings.timeout_ms / 1000.0
        tried: set[int] = set()
        while True:
            ep = self._pool.pick(tried)
            if ep is None:
                raise RemoteError(StatusCode.UNAVAILABLE, self._unavailable_text(), NO_ENDPOINT)
            tried.add(ep.index)
            remaining = deadline - time.monotonic()
            request_id, started = self._pool.sent(ep)
            slot = None

            async def attempt() -> RemoteResponse:
                nonlocal slot
                # the slot's registration (an RPC) counts against the request's deadline too
                slot = await self._shm_slot(ep, inputs)
                answer = await ep.client.infer(
                    self.name,
                    inputs,
                    outputs=outputs,
                    version=self._wanted_version(),
                    priority=priority,
                    timeout_us=timeout_us,
                    slot=slot,
                    remaining=remaining,
                    sequence=sequence,
                )
                try:
                    version = int(answer.model_version)
                except (TypeError, ValueError):
                    version = self.version
                return RemoteResponse(self.name, version, answer.outputs)

            try:
                result = await asyncio.wait_for(attempt(), remaining)
            except Exception as exc:
                error = ep.client.classify(exc)
                if slot is not None and error.kind not in ENDPOINT_FAILURES:
                    ep.registered.discard(slot.name)  # e.g. the server lost the region
                self._pool.failed(ep, error)
                if (
                    error.kind in ENDPOINT_FAILURES
                    and deadline - time.monotonic() > 0.05
                    and self._pool.pick(tried) is not None
                ):
                    continue  # one frame, another endpoint
                raise error from None
            finally:
                self._pool.settled(ep, request_id)
                if slot is not None:
                    self._slots.release(slot)
            self._pool.succeeded(ep, started)
            return result

    # ---------------------------------------------------------------- shared memory
    async def _shm_slot(self, ep: Endpoint, inputs: dict[str, np.ndarray]) -> ShmSlot | None:
        """A slot holding the inputs, registered with ``ep``; None: over the wire."""
        if not ep.shm:
            return None
        slot = self._slots.acquire(sum(a.nbytes for a in inputs.values()))
        if slot is None:
            return None  # all slots busy: this one goes over the wire
        try:
            if slot.name not in ep.registered:
                await self._register(ep, slot)
                ep.registered.add(slot.name)
            slot.write(inputs)
        except BaseException:
            self._slots.release(slot)
            raise
        return slot

    async def _register(self, ep: Endpoint, slot: ShmSlot) -> None:
        """Register a slot with an endpoint. A server that outlived our giving up on it (a
        timeout) still holds the slot's earlier registration: it is replaced."""

        async def register():
            await asyncio.wait_for(
                ep.client.register_shared_memory(slot.name, slot.key, slot.byte_size),
                PROBE_TIMEOUT_S,
            )

        try:
            await register()
        except Exception as exc:
            if ep.client.classify(exc).kind != MODEL_ERROR:
                raise
            await asyncio.wait_for(ep.client.unregister_shared_memory(slot.name), PROBE_TIMEOUT_S)
            await register()

    async def _try_shared_memory(self, ep: Endpoint) -> None:
        """Decide whether this endpoint takes inputs through shared memory (once per start)."""
        if self.settings.shared_memory != "auto" or not ep.address.local or ep.shm_refused:
            return
        if ep.shm:
            return
        try:
            probe = ShmSlot(64)
        except Exception as exc:  # no /dev/shm here: use the wire
            ep.shm_refused = True
            self._log(
                "info",
                f"{self._who}: shared memory unavailable in this process "
                f"({exc}); {ep.address.url} is used over the wire",
            )
            return
        try:
            await asyncio.wait_for(
                ep.client.register_shared_memory(probe.name, probe.key, probe.byte_size),
                PROBE_TIMEOUT_S,
            )
            await asyncio.wait_for(ep.client.unregister_shared_memory(probe.name), PROBE_TIMEOUT_S)
            ep.shm = True
            self._log(
                "info",
                f"{self._who}: {ep.address.url} is on this host; inputs "
                f"go through system shared memory",
            )
        except Exception as exc:
            ep.shm_refused = True
            error = ep.client.classify(exc)
            self._log(
                "info",
                f"{self._who}: {ep.address.url} refused shared memory "
                f"({error.message}); inputs go over the wire (shared_memory: auto)",
            )
        finally:
            probe.destroy()

    # ---------------------------------------------------------------- probes
    async def _probe_loop(self, ep: Endpoint) -> None:
        while True:
            try:
                await self._probe(ep)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a probe's own bug must not end probing
                reason = f"probe failed: {type(exc).__name__}: {exc}"
                if ep.reason != reason:
                    self._log("error", f"{self._who}: probing {ep.address.url}: {reason}")
                ep.reason = reason
                ep.failures += 1
            wait = ep.probe_wait_s()
            ep.wake.clear()
            try:
                await asyncio.wait_for(ep.wake.wait(), wait)
                if ep.state == DOWN:  # just marked down by a request: back off first
                    await asyncio.sleep(ep.backoff_s())
            except asyncio.TimeoutError:
                pass

    async def _probe(self, ep: Endpoint) -> None:
        version = self._wanted_version()
        was = ep.state
        if ep.state != UP and ep.reason.startswith(UNREACHABLE):
            # A fresh channel connects now; the old one may sit in its own reconnect backoff
            # (which, with this probe's backoff, could delay a recovered server by both).
            old, ep.client = ep.client, client_for(ep.address, self.settings)
            try:
                await old.close()
            except Exception:  # a broken channel: nothing to release
                pass
        try:
            ready = await asyncio.wait_for(
                ep.client.is_model_ready(self.name, version), PROBE_TIMEOUT_S
            )
            if not ready:
                raise RemoteError(
                    StatusCode.UNAVAILABLE,
                    f"{ep.address.url}: model '{self.name}' is not ready there",
                    MODEL_ERROR,
                )
            if ep.state != UP:
                fetched = await self._reference.fetch(ep, version)
                if self._first_round:
                    ep.fetched = fetched
                    return
                self._reference.adopt(ep, *fetched)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = ep.client.classify(exc, probe=True)
            if ep.state == UP:  # out of service at once; why, once explained
                self._pool.mark_down(ep, error, tell=False)
                error = await self._explained(ep, error)
                ep.reason = f"{error.kind}: {error.message}"
                self._pool.tell_reason(ep, news=True)
            else:
                error = await self._explained(ep, error)
                ep.failures += 1
                ep.reason = f"{error.kind}: {error.message}"
                ep.registered.clear()
                # at start the node's start-up line tells every endpoint's state and reason
                self._pool.tell_reason(ep, quiet=self._first_round)
            return
        if ep.state == MISMATCH or self._first_round:
            return
        await self._try_shared_memory(ep)
        self._set_up(ep, was)

    async def _explained(self, ep: Endpoint, error: RemoteError) -> RemoteError:
        """An unreachable endpoint's error with what is wrong in words (diagnosis.py): looked
        at again at most every EXPLAIN_EVERY_S, else the last answer."""
        if error.kind != UNREACHABLE:
            return error
        now = time.monotonic()
        if ep.hint is None or now - ep.hint[0] >= EXPLAIN_EVERY_S:
            try:
                hint = await explain(ep.address, self.settings, PROBE_TIMEOUT_S)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a diagnosis must not end probing
                hint = ""
                self._log(
                    "warn",
                    f"{self._who}: could not look at {ep.address.url}: {type(exc).__name__}: {exc}",
                )
            ep.hint = (now, hint)
        hint = ep.hint[1]
        if not hint:
            return error
        return RemoteError(error.code, f"{ep.address.url}: {hint} [{error.message}]", error.kind)

    async def _adopt(
        self, ep: Endpoint, config: ModelConfig, versions: list[int], labels: dict[str, list[str]]
    ) -> None:
        """After the first round: take an endpoint's fetched configuration and mark it up."""
        self._reference.adopt(ep, config, versions, labels)
        if ep.state != MISMATCH:
            await self._try_shared_memory(ep)
            self._set_up(ep, DOWN)

    def _set_up(self, ep: Endpoint, was: str) -> None:
        ep.state = UP
        ep.reason = "ready"
        ep.hint = None
        ep.logged_reason, ep.unlogged = "", 0
        if was != UP:
            self._log(
                "info",
                f"{self._who} version {self.version}: endpoint "
                f"{ep.address.url} is up" + (" (shared memory)" if ep.shm else ""),
            )


def _settle(future: InferFuture, sent: Future) -> None:
    """Give ``future`` the outcome of the request ``sent`` on the client's event loop."""
    if future.done():
        return
    if sent.cancelled():
        future.cancel()
    elif sent.exception() is not None:
        future.set_exception(sent.exception())
    else:
        future.set_result(sent.result())
