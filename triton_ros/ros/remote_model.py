"""A model served by remote KServe v2 endpoints: tritonserver, KServe or another triton-ros-server.

A binding with ``server_urls`` feeds a :class:`RemoteModel` instead of the embedded core. It is
the binding's model target: name, version, the effective model configuration (fetched from the
remote: ``ModelConfig`` and metadata, so that preprocessing and decoding are planned in the node
as for a local model), readiness, and :meth:`RemoteModel.infer`, which sends one asynchronous
request and returns a ``concurrent.futures.Future`` that ends with a :class:`RemoteResponse` or
a typed :class:`RemoteError`.

The endpoints (``grpc://``, ``grpcs://``, ``http://``, ``https://``) form a pool:

- each request goes to the *up* endpoint with the fewest outstanding requests (ties in turn),
  skipping an endpoint whose oldest request has waited more than a quarter of the timeout
  (a hung server) while another is not in that state;
- a request that fails because of its endpoint (unreachable, TLS refused, timed out) marks that
  endpoint *down* and, after a connection failure, is retried once on another up endpoint if
  its deadline allows, so a frame is published at most once and lost only when no endpoint
  could answer in time; ``FAILING_AFTER`` requests in a row failing for any other reason mark
  it down too (an endpoint answering every request with an error would attract them all);
- a down endpoint is probed (``ModelReady``) after a backoff that doubles with each consecutive
  failure (0.25 s to 4 s) and is used again once it answers; an up endpoint is checked every
  ``HEALTH_PERIOD_S`` as well, so a remote that unloads the model is noticed without traffic;
- an endpoint whose model configuration differs from the reference (that of the first listed
  endpoint that answered at start: other inputs, outputs, shapes, types or batching - a
  misconfigured replica) is marked *mismatch* and not used; it is re-checked every 4 s;
- with every endpoint down, :meth:`RemoteModel.infer` fails at once with ``kind="no_endpoint"``.

A KServe v2 server without Triton's model configuration extension is planned from the
standard model metadata (:func:`config_from_metadata`).

Labels: KServe v2 has no label files, so an output's labels (``label_filename`` in the remote's
configuration) are read once per check through Triton's classification extension (see
:meth:`RemoteModel._fetch_labels`); the binding's ``class_names`` still wins.

Transport: ``tritonclient.grpc.aio`` and ``tritonclient.http.aio`` (Triton's maintained clients)
on one asyncio loop in a thread of its own per model; nothing is hand-written on the wire. TLS
uses the CA, client certificate and key files given; Triton's restricted-protocol header (key
and value) is sent with every call. The header value is never logged, shown in diagnostics or
put in an error message; URLs with credentials (``user:pass@``) are refused.

Shared memory (``shared_memory: auto``): for endpoints on this host (``127.0.0.1``,
``localhost``, ``::1``) each request's input is written into a POSIX shared memory slot that
is registered with that server (Triton's system shared memory extension), so the image does
not travel through the socket; outputs still come back in the response. A server that refuses
registration (triton-ros-server without ``--allow-client-shm true``, or a server in a container
that does not share this host's /dev/shm) is used over the wire, with one log line saying so.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import secrets
import ssl
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import numpy as np
from google.protobuf import json_format

from ..core.errors import StatusCode, TritonRosError, invalid_arg, unavailable
from ..core.model_config import WILDCARD_DIM as WILDCARD, ModelConfig, to_typed
from ..core.protos import model_config_pb2 as mc
from .monitoring.latency import LatencyWindow, percentiles_ms

SCHEMES = {"grpc": ("grpc", False), "grpcs": ("grpc", True),
           "http": ("http", False), "https": ("http", True)}
SHARED_MEMORY_MODES = ("auto", "off")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
PROBE_BACKOFF_MIN_S = 0.25
PROBE_BACKOFF_MAX_S = 4.0
HEALTH_PERIOD_S = 2.0
PROBE_TIMEOUT_S = 2.0
INITIAL_ROUND_S = 3.0                 # start() waits this long at most for the first probes
FAILING_AFTER = 3                     # requests failed in a row that mark an endpoint down
SHM_SLOTS_MAX = 64                     # shared-memory slots per model (one per request in flight)

# Error kinds, counted per endpoint. Those in ENDPOINT_FAILURES mark the endpoint down.
TIMEOUT, UNREACHABLE, REJECTED, MODEL_ERROR, NO_ENDPOINT, CLIENT_ERROR = (
    "timeout", "unreachable", "rejected", "model_error", "no_endpoint", "client_error")
ENDPOINT_FAILURES = (TIMEOUT, UNREACHABLE)
UP, DOWN, MISMATCH = "up", "down", "mismatch"


class RemoteError(TritonRosError):
    """A remote request's failure: a Triton status code and what kind of failure it was."""

    def __init__(self, code: StatusCode, message: str, kind: str) -> None:
        super().__init__(code, message)
        self.kind = kind


@dataclass(frozen=True)
class RemoteConfig:
    """A binding's remote settings (parsed from its parameters)."""

    urls: tuple[str, ...]
    timeout_ms: int = 1000
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    header_key: str = ""
    header_value: str = field(default="", repr=False)     # a secret: never printed
    shared_memory: str = "auto"


@dataclass(frozen=True)
class EndpointAddress:
    url: str                           # as given (checked to hold no credentials)
    protocol: str                      # "grpc" or "http"
    tls: bool
    host: str
    port: int

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS


def parse_url(url: str) -> EndpointAddress:
    """``grpc://host:port`` etc. -> EndpointAddress; INVALID_ARG naming what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise invalid_arg(f"server URL '{url}' is not a URL: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise invalid_arg(f"server URL '{url}' must start with one of "
                          f"{', '.join(s + '://' for s in SCHEMES)}")
    if parts.username or parts.password:
        # never echo the URL: it holds a secret
        raise invalid_arg(f"a {parts.scheme}:// server URL must not hold credentials; use "
                          f"server_header_key/server_header_value")
    if not parts.hostname or port is None:
        raise invalid_arg(f"server URL '{url}' needs a host and a port ({parts.scheme}://host:port)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise invalid_arg(f"server URL '{url}' must be {parts.scheme}://host:port (no path)")
    protocol, tls = SCHEMES[parts.scheme]
    return EndpointAddress(url, protocol, tls, parts.hostname, port)


def check_remote_config(config: RemoteConfig) -> None:
    """Validate a RemoteConfig at start (URLs, files, pairs); INVALID_ARG on the first problem."""
    addresses = [parse_url(u) for u in config.urls]
    if len(set(config.urls)) != len(config.urls):
        raise invalid_arg("server_urls lists an endpoint twice")
    for param, path in (("tls_ca_file", config.tls_ca_file), ("tls_cert_file", config.tls_cert_file),
                        ("tls_key_file", config.tls_key_file)):
        if path and not os.path.isfile(path):
            raise invalid_arg(f"parameter '{param}': no file '{path}'")
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise invalid_arg("tls_cert_file and tls_key_file go together (client certificate)")
    if (config.tls_ca_file or config.tls_cert_file) and not any(a.tls for a in addresses):
        raise invalid_arg("TLS files are set but no server URL uses grpcs:// or https://")
    if bool(config.header_key) != bool(config.header_value):
        raise invalid_arg("server_header_key and server_header_value go together")
    if config.shared_memory not in SHARED_MEMORY_MODES:
        raise invalid_arg(f"shared_memory must be one of {', '.join(SHARED_MEMORY_MODES)}")
    if config.timeout_ms <= 0:
        raise invalid_arg("server_timeout_ms must be positive")


@dataclass
class RemoteResponse:
    model_name: str
    model_version: int
    outputs: dict[str, np.ndarray]


@dataclass
class EndpointHealth:
    """One endpoint's figures for /diagnostics and ~/list_models (no secret in here)."""

    url: str
    state: str
    reason: str
    outstanding: int
    requests: int                      # answered requests, total
    errors: dict[str, int]             # by kind, total
    latency: list[int]                 # round trips (ns) since the last report
    shared_memory: bool


# --------------------------------------------------------------------------------------------
# Endpoint
# --------------------------------------------------------------------------------------------

class _Endpoint:
    """One URL's client and state; touched only on the model's event loop (except figures)."""

    def __init__(self, address: EndpointAddress) -> None:
        self.address = address
        self.client: Any = None
        self.state = DOWN
        self.reason = "not probed yet"
        self.outstanding = 0
        self.started: dict[int, int] = {}  # outstanding request -> when it was sent (ns)
        self.requests = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.latency = LatencyWindow()
        self.failures = 0                  # consecutive; sets the probe backoff
        self.consecutive_errors = 0        # requests failed in a row (any kind)
        self.wake = asyncio.Event()
        self.shm = False                   # inputs go through shared memory
        self.shm_refused = False
        self.registered: set[str] = set()  # shared-memory slots registered with this server
        self.fetched: tuple | None = None  # first probe round: (config, versions) to adopt
        self.metadata_only = False         # no ModelConfig there: planned from metadata

    def oldest_age(self, now_ns: int) -> int:
        """How long the oldest outstanding request has waited (ns); 0 without one."""
        return now_ns - min(self.started.values()) if self.started else 0

    def health(self) -> EndpointHealth:
        return EndpointHealth(self.address.url, self.state, self.reason, self.outstanding,
                              self.requests, dict(self.errors), self.latency.drain(), self.shm)


class _ShmSlot:
    """One POSIX shared-memory block holding one request's input."""

    def __init__(self, byte_size: int) -> None:
        from tritonclient.utils import shared_memory as shm

        self.name = f"triton_ros_{os.getpid()}_{secrets.token_hex(4)}"
        self.key = "/" + self.name
        self.byte_size = byte_size
        self.handle = shm.create_shared_memory_region(self.name, self.key, byte_size)

    def destroy(self) -> None:
        from tritonclient.utils import shared_memory as shm
        try:
            shm.destroy_shared_memory_region(self.handle)
        except Exception:                  # already gone: nothing to release
            pass


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------

class RemoteModel:
    """One model (name, version) on a pool of KServe v2 endpoints."""

    def __init__(self, name: str, version: int, config: RemoteConfig, *,
                 log: Callable[[str, str], None] | None = None, owner: str = "") -> None:
        check_remote_config(config)
        self.name = name
        # how log lines name this model: "binding 'fleet', model 'detector'"
        self._who = f"{owner}, model '{name}'" if owner else f"model '{name}'"
        self.requested_version = version
        self.settings = config
        self._log = log or _python_log
        self._endpoints = [_Endpoint(parse_url(u)) for u in config.urls]
        self._turn = itertools.count()
        self._request_ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task] = []
        self._config: ModelConfig | None = None
        self._signature: tuple | None = None
        self._version = version
        self._config_source = ""
        self._generation = 0               # grows when the reference configuration changes
        self._spec: tuple[int, Any] | None = None
        self._labels: dict[str, list[str]] = {}
        self._shm_free: list[_ShmSlot] = []
        self._shm_all: list[_ShmSlot] = []
        self._headers = {config.header_key: config.header_value} if config.header_key else None
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
        for ep in self._endpoints:
            ep.wake = asyncio.Event()          # bound to this loop
            ep.client = self._make_client(ep.address)
        # A first round of probes, together: the reference configuration is then that of the
        # first listed endpoint that answers, not of whichever answered first.
        self._first_round = True
        probes = [asyncio.ensure_future(self._probe(ep)) for ep in self._endpoints]
        _, pending = await asyncio.wait(probes, timeout=INITIAL_ROUND_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        self._first_round = False
        for ep in self._endpoints:
            if ep.fetched is not None:
                fetched, ep.fetched = ep.fetched, None
                await self._adopt(ep, *fetched)
        for ep in self._endpoints:
            self._tasks.append(asyncio.get_running_loop().create_task(self._probe_loop(ep)))

    def stop(self, timeout: float = 10.0) -> None:
        """Let requests in flight finish (at most one request timeout), then close the clients
        and the loop."""
        if self._loop is None or self._stopped:
            return
        self._stopped = True
        deadline = time.monotonic() + self.settings.timeout_ms / 1000.0 + 0.5
        while any(ep.outstanding for ep in self._endpoints) and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=timeout)
        except Exception as exc:               # closing must not stop the node's shutdown
            self._log("warn", f"{self._who}: closing the remote clients: {exc}")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=timeout)
        for slot in self._shm_all:
            slot.destroy()

    def close(self) -> None:
        """The model target's close (ros/model_target.py): stop()."""
        self.stop()

    async def _close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        unregister = [ep.client.unregister_system_shared_memory(name, headers=self._headers)
                      for ep in self._endpoints if ep.shm and ep.state == UP
                      for name in ep.registered]
        if unregister:                         # together, one second at most: a hung server
            try:                               # must not hold the node's shutdown
                await asyncio.wait_for(asyncio.gather(*unregister, return_exceptions=True), 1.0)
            except asyncio.TimeoutError:       # the server may be gone: its regions with it
                pass
        for ep in self._endpoints:
            try:
                await asyncio.wait_for(ep.client.close(), 1.0)
            except Exception:                  # a broken channel: nothing left to release
                pass

    # ---------------------------------------------------------------- the model target
    @property
    def version(self) -> int:
        return self._version

    @property
    def location(self) -> str:
        return ", ".join(self.settings.urls)

    def describe(self):
        """The ModelSpec of the remote model (the same object until its configuration changes);
        UNAVAILABLE, naming every endpoint and its state, while no endpoint is up."""
        from .model_target import spec_from_config

        if not self.ready():
            raise RemoteError(StatusCode.UNAVAILABLE, self._unavailable_text(), NO_ENDPOINT)
        cached = self._spec
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        spec = spec_from_config(self._config, self._version, self._labels)
        self._spec = (self._generation, spec)
        return spec

    def state(self):
        """Readiness for /diagnostics: READY while an endpoint is up, else UNAVAILABLE with
        every endpoint's state and reason."""
        from .model_target import TargetState

        version = str(self._version) if self._config is not None else ""
        if self.ready():
            up = [ep.address.url for ep in self._endpoints if ep.state == UP]
            return TargetState(True, "READY", f"served by {', '.join(up)}", version)
        return TargetState(False, "UNAVAILABLE", self._unavailable_text(), version)

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def config(self) -> ModelConfig:
        """The remote's configuration; UNAVAILABLE until an endpoint has answered."""
        if self._config is None:
            raise RemoteError(StatusCode.UNAVAILABLE, self._unavailable_text(), NO_ENDPOINT)
        return self._config

    @property
    def labels(self) -> dict[str, list[str]]:
        return dict(self._labels)

    def ready(self) -> bool:
        return self._config is not None and any(ep.state == UP for ep in self._endpoints)

    def endpoints(self) -> list[EndpointHealth]:
        return [ep.health() for ep in self._endpoints]

    def describe_endpoints(self) -> list[tuple[str, str, str]]:
        """(url, state, reason) per endpoint, without draining any figure."""
        return [(ep.address.url, ep.state, ep.reason) for ep in self._endpoints]

    def infer(self, inputs: Mapping[str, np.ndarray], outputs=None, *, priority: int = 0,
              timeout_us: int = 0) -> Future:
        """Send one request; the Future ends with a RemoteResponse or a RemoteError."""
        if self._loop is None or self._stopped:
            future: Future = Future()
            future.set_exception(RemoteError(StatusCode.UNAVAILABLE,
                                             f"{self._who}: remote client stopped",
                                             NO_ENDPOINT))
            return future
        return asyncio.run_coroutine_threadsafe(
            self._infer(dict(inputs), tuple(outputs) if outputs else None, priority, timeout_us),
            self._loop)

    # ---------------------------------------------------------------- requests
    def _pick(self, tried: set[int]) -> _Endpoint | None:
        """The up endpoint with the fewest outstanding requests (ties in turn). An endpoint
        with a request unanswered for longer than a quarter of the timeout is *stalled* (a hung
        server is only marked down when that request times out): it gets new requests only
        when every up endpoint is stalled, and then the one whose oldest request is youngest."""
        now = time.monotonic_ns()
        stall_ns = self.settings.timeout_ms * 250_000
        up = [(ep.outstanding, i, ep.oldest_age(now)) for i, ep in
              enumerate(self._endpoints) if ep.state == UP and i not in tried]
        if not up:
            return None
        moving = [u for u in up if u[2] <= stall_ns]
        if not moving:
            # every endpoint has a request waiting that long (a loaded fleet, or a hang): the
            # one whose oldest request is the youngest has made progress most recently
            return self._endpoints[min(up, key=lambda u: u[2])[1]]
        fewest = min(n for n, _, _ in moving)
        candidates = [i for n, i, _ in moving if n == fewest]
        return self._endpoints[candidates[next(self._turn) % len(candidates)]]

    def _unavailable_text(self) -> str:
        states = "; ".join(f"{ep.address.url} {ep.state} ({ep.reason})" for ep in self._endpoints)
        return f"no endpoint of model '{self.name}' is up: {states}"

    async def _infer(self, inputs: dict[str, np.ndarray], outputs: tuple[str, ...] | None,
                     priority: int, timeout_us: int) -> RemoteResponse:
        deadline = time.monotonic() + self.settings.timeout_ms / 1000.0
        tried: set[int] = set()
        while True:
            ep = self._pick(tried)
            if ep is None:
                raise RemoteError(StatusCode.UNAVAILABLE, self._unavailable_text(), NO_ENDPOINT)
            tried.add(self._endpoints.index(ep))
            remaining = deadline - time.monotonic()
            ep.outstanding += 1
            started = time.monotonic_ns()
            request_id = next(self._request_ids)
            ep.started[request_id] = started
            slot = None

            async def attempt() -> RemoteResponse:
                nonlocal slot
                # the slot's registration (an RPC) counts against the request's deadline too
                slot = await self._shm_slot(ep, inputs)
                return await self._send(ep, inputs, outputs, priority, timeout_us, slot,
                                        remaining)
            try:
                result = await asyncio.wait_for(attempt(), remaining)
            except Exception as exc:
                error = self._classify(ep, exc)
                ep.errors[error.kind] += 1
                if slot is not None and error.kind not in ENDPOINT_FAILURES:
                    ep.registered.discard(slot.name)   # e.g. the server lost the region
                ep.consecutive_errors += 1
                if error.kind not in ENDPOINT_FAILURES and \
                        ep.consecutive_errors >= FAILING_AFTER:
                    # an endpoint failing every request answers fast, so it would keep winning
                    # "fewest outstanding": out until a probe finds it ready again
                    self._mark_down(ep, RemoteError(error.code, f"{FAILING_AFTER} requests in "
                                                    f"a row failed, the last: {error.message}",
                                                    error.kind))
                if error.kind in ENDPOINT_FAILURES:
                    self._mark_down(ep, error)
                    if deadline - time.monotonic() > 0.05 and self._pick(tried) is not None:
                        continue                   # one frame, another endpoint
                raise error from None
            finally:
                ep.outstanding -= 1
                ep.started.pop(request_id, None)
                if slot is not None:
                    self._shm_free.append(slot)
            ep.latency.add(time.monotonic_ns() - started)
            ep.requests += 1
            ep.failures = 0
            ep.consecutive_errors = 0
            return result

    async def _send(self, ep: _Endpoint, inputs: dict[str, np.ndarray],
                    outputs: tuple[str, ...] | None, priority: int, timeout_us: int,
                    slot: _ShmSlot | None, remaining: float) -> RemoteResponse:
        from tritonclient.utils import np_to_triton_dtype

        lib = _client_lib(ep.address.protocol)
        offset = 0
        wire_inputs = []
        for name, array in inputs.items():
            x = lib.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            if slot is not None:
                x.set_shared_memory(slot.name, array.nbytes, offset)
                offset += array.nbytes
            elif ep.address.protocol == "grpc":
                x.set_data_from_numpy(array)
            else:
                x.set_data_from_numpy(array, binary_data=True)
            wire_inputs.append(x)
        wanted = None
        if outputs:
            wanted = [lib.InferRequestedOutput(n) if ep.address.protocol == "grpc"
                      else lib.InferRequestedOutput(n, binary_data=True) for n in outputs]
        version = "" if self.requested_version < 0 else str(self.requested_version)
        kwargs: dict[str, Any] = dict(model_version=version, outputs=wanted, priority=priority,
                                      headers=self._headers)
        if timeout_us:
            kwargs["timeout"] = timeout_us
        if ep.address.protocol == "grpc":
            kwargs["client_timeout"] = max(0.001, remaining)
        result = await ep.client.infer(self.name, wire_inputs, **kwargs)
        response = result.get_response()
        if ep.address.protocol == "grpc":
            names = [o.name for o in response.outputs]
            model_version = response.model_version
        else:
            names = [o["name"] for o in response.get("outputs", [])]
            model_version = response.get("model_version", "")
        try:
            version_number = int(model_version)
        except (TypeError, ValueError):
            version_number = self._version
        return RemoteResponse(self.name, version_number,
                              {n: result.as_numpy(n) for n in names})

    def _classify(self, ep: _Endpoint, exc: BaseException, *, probe: bool = False) -> RemoteError:
        """A failure as a typed RemoteError, by its status code or exception type (not its text)."""
        from tritonclient.utils import InferenceServerException

        where = f"{ep.address.url}"
        if isinstance(exc, RemoteError):
            return exc
        if isinstance(exc, asyncio.TimeoutError):
            limit = (f"{PROBE_TIMEOUT_S:g} s (health probe)" if probe else
                     f"{self.settings.timeout_ms} ms (server_timeout_ms)")
            return RemoteError(StatusCode.UNAVAILABLE, f"{where}: no answer within {limit}",
                               TIMEOUT)
        if isinstance(exc, InferenceServerException):
            status = str(exc.status() or "")
            text = f"{where}: {exc.message()}"
            if ep.address.protocol == "grpc":
                code = status.replace("StatusCode.", "")
                if code == "DEADLINE_EXCEEDED":
                    return RemoteError(StatusCode.UNAVAILABLE, f"{where}: no answer within "
                                       f"{self.settings.timeout_ms} ms (server_timeout_ms)",
                                       TIMEOUT)
                if code == "UNAVAILABLE":
                    return RemoteError(StatusCode.UNAVAILABLE, text, UNREACHABLE)
                if code in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
                    return RemoteError(StatusCode.UNAVAILABLE, text, REJECTED)
                mapped = {"INVALID_ARGUMENT": StatusCode.INVALID_ARG,
                          "NOT_FOUND": StatusCode.NOT_FOUND,
                          "UNIMPLEMENTED": StatusCode.UNSUPPORTED,
                          "ALREADY_EXISTS": StatusCode.ALREADY_EXISTS,
                          "CANCELLED": StatusCode.CANCELLED}.get(code, StatusCode.INTERNAL)
                return RemoteError(mapped, text, MODEL_ERROR)
            mapped = {"400": StatusCode.INVALID_ARG, "404": StatusCode.NOT_FOUND,
                      "501": StatusCode.UNSUPPORTED, "503": StatusCode.UNAVAILABLE,
                      "401": StatusCode.UNAVAILABLE, "403": StatusCode.UNAVAILABLE}
            if status in ("401", "403"):
                return RemoteError(StatusCode.UNAVAILABLE, text, REJECTED)
            if not status or status == "None":     # no HTTP answer at all
                return RemoteError(StatusCode.UNAVAILABLE, text, UNREACHABLE)
            return RemoteError(mapped.get(status, StatusCode.INTERNAL), text, MODEL_ERROR)
        if isinstance(exc, (OSError, ssl.SSLError)) or _is_aiohttp_error(exc):
            return RemoteError(StatusCode.UNAVAILABLE, f"{where}: {type(exc).__name__}: {exc}",
                               UNREACHABLE)
        return RemoteError(StatusCode.INTERNAL, f"{where}: {type(exc).__name__}: {exc}",
                           CLIENT_ERROR)

    def _mark_down(self, ep: _Endpoint, error: RemoteError) -> None:
        if ep.state != UP:
            return                             # already down: the other requests in flight
        self._log("warn", f"{self._who}: endpoint {ep.address.url} is down: "
                  f"{error.message}; probing it again with backoff")
        ep.state = DOWN
        ep.reason = f"{error.kind}: {error.message}"
        ep.failures += 1                       # one event, however many requests it failed
        ep.registered.clear()                  # a restarted server forgets its regions
        ep.wake.set()

    # ---------------------------------------------------------------- shared memory
    async def _shm_slot(self, ep: _Endpoint, inputs: dict[str, np.ndarray]) -> _ShmSlot | None:
        if not ep.shm:
            return None
        size = sum(a.nbytes for a in inputs.values())
        slot = None
        while self._shm_free:
            candidate = self._shm_free.pop()
            if candidate.byte_size >= size:
                slot = candidate
                break
            candidate.destroy()                # the input grew (another model version)
            self._shm_all.remove(candidate)
        if slot is None:
            if len(self._shm_all) >= SHM_SLOTS_MAX:
                return None                    # all slots busy: this one goes over the wire
            slot = _ShmSlot(size)
            self._shm_all.append(slot)
        try:
            if slot.name not in ep.registered:
                await self._register(ep, slot)
                ep.registered.add(slot.name)
            offset = 0
            from tritonclient.utils import shared_memory as shm
            for array in inputs.values():
                shm.set_shared_memory_region(slot.handle, [np.ascontiguousarray(array)], offset)
                offset += array.nbytes
        except BaseException:
            self._shm_free.append(slot)
            raise
        return slot

    async def _register(self, ep: _Endpoint, slot: _ShmSlot) -> None:
        """Register a slot with an endpoint. A server that outlived our giving up on it (a
        timeout) still holds the slot's earlier registration: it is replaced."""
        async def register():
            await asyncio.wait_for(ep.client.register_system_shared_memory(
                slot.name, slot.key, slot.byte_size, headers=self._headers), PROBE_TIMEOUT_S)
        try:
            await register()
        except Exception as exc:
            if self._classify(ep, exc).kind != MODEL_ERROR:
                raise
            await asyncio.wait_for(ep.client.unregister_system_shared_memory(
                slot.name, headers=self._headers), PROBE_TIMEOUT_S)
            await register()

    async def _try_shared_memory(self, ep: _Endpoint) -> None:
        """Decide whether this endpoint takes inputs through shared memory (once per start)."""
        if self.settings.shared_memory != "auto" or not ep.address.local or ep.shm_refused:
            return
        if ep.shm:
            return
        try:
            probe = _ShmSlot(64)
        except Exception as exc:               # no /dev/shm here: use the wire
            ep.shm_refused = True
            self._log("info", f"{self._who}: shared memory unavailable in this process "
                      f"({exc}); {ep.address.url} is used over the wire")
            return
        try:
            await asyncio.wait_for(ep.client.register_system_shared_memory(
                probe.name, probe.key, probe.byte_size, headers=self._headers), PROBE_TIMEOUT_S)
            await asyncio.wait_for(ep.client.unregister_system_shared_memory(
                probe.name, headers=self._headers), PROBE_TIMEOUT_S)
            ep.shm = True
            self._log("info", f"{self._who}: {ep.address.url} is on this host; inputs "
                      f"go through system shared memory")
        except Exception as exc:
            ep.shm_refused = True
            error = self._classify(ep, exc)
            self._log("info", f"{self._who}: {ep.address.url} refused shared memory "
                      f"({error.message}); inputs go over the wire (shared_memory: auto)")
        finally:
            probe.destroy()

    # ---------------------------------------------------------------- probes
    async def _probe_loop(self, ep: _Endpoint) -> None:
        while True:
            try:
                await self._probe(ep)
            except asyncio.CancelledError:
                raise
            except Exception as exc:           # a probe's own bug must not end probing
                reason = f"probe failed: {type(exc).__name__}: {exc}"
                if ep.reason != reason:
                    self._log("error", f"{self._who}: probing {ep.address.url}: {reason}")
                ep.reason = reason
                ep.failures += 1
            if ep.state == UP:
                wait = HEALTH_PERIOD_S
            else:
                wait = min(PROBE_BACKOFF_MAX_S, PROBE_BACKOFF_MIN_S * 2 ** max(0, ep.failures - 1))
            ep.wake.clear()
            try:
                await asyncio.wait_for(ep.wake.wait(), wait)
                if ep.state == DOWN:           # just marked down by a request: back off first
                    await asyncio.sleep(min(PROBE_BACKOFF_MAX_S, PROBE_BACKOFF_MIN_S
                                            * 2 ** max(0, ep.failures - 1)))
            except asyncio.TimeoutError:
                pass

    async def _probe(self, ep: _Endpoint) -> None:
        version = "" if self.requested_version < 0 else str(self.requested_version)
        was = ep.state
        if ep.state != UP and ep.reason.startswith(UNREACHABLE):
            # A fresh channel connects now; the old one may sit in its own reconnect backoff
            # (which, with this probe's backoff, could delay a recovered server by both).
            old, ep.client = ep.client, self._make_client(ep.address)
            try:
                await old.close()
            except Exception:                  # a broken channel: nothing to release
                pass
        try:
            ready = await asyncio.wait_for(ep.client.is_model_ready(
                self.name, version, headers=self._headers), PROBE_TIMEOUT_S)
            if not ready:
                raise RemoteError(StatusCode.UNAVAILABLE, f"{ep.address.url}: model "
                                  f"'{self.name}' is not ready there", MODEL_ERROR)
            if ep.state != UP:
                await self._check_config(ep, version)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = self._classify(ep, exc, probe=True)
            if ep.state == UP:
                self._mark_down(ep, error)
            else:
                ep.failures += 1
                ep.reason = f"{error.kind}: {error.message}"
                ep.registered.clear()
            return
        if ep.state == MISMATCH or self._first_round:
            return
        await self._try_shared_memory(ep)
        self._set_up(ep, was)

    def _set_up(self, ep: _Endpoint, was: str) -> None:
        ep.state = UP
        ep.reason = "ready"
        if was != UP:
            self._log("info", f"{self._who} version {self._version}: endpoint "
                      f"{ep.address.url} is up" + (" (shared memory)" if ep.shm else ""))

    async def _check_config(self, ep: _Endpoint, version: str) -> None:
        """Fetch the endpoint's config and metadata; the first one becomes the reference."""
        timeout = PROBE_TIMEOUT_S
        grpc_kw = {"as_json": True} if ep.address.protocol == "grpc" else {}
        meta = await asyncio.wait_for(ep.client.get_model_metadata(
            self.name, version, headers=self._headers, **grpc_kw), timeout)
        try:
            raw = await asyncio.wait_for(ep.client.get_model_config(
                self.name, version, headers=self._headers, **grpc_kw), timeout)
            if ep.address.protocol == "grpc":
                raw = raw.get("config", raw)
            proto = json_format.ParseDict(raw, mc.ModelConfig(), ignore_unknown_fields=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error = self._classify(ep, exc, probe=True)
            if error.kind != MODEL_ERROR:
                raise error from None
            # A KServe v2 server without Triton's model configuration extension (e.g. another
            # KServe runtime): the standard metadata gives names, data types and shapes.
            proto = config_from_metadata(self.name, meta)
            if not ep.metadata_only:
                ep.metadata_only = True
                self._log("info", f"{self._who}: {ep.address.url} has no model configuration "
                          f"({error.message}); planning from its metadata")
        config = to_typed(proto)
        versions = [int(v) for v in meta.get("versions", []) if str(v).isdigit()]
        labels = await self._fetch_labels(ep, config, version)
        if self._first_round:
            ep.fetched = (config, versions, labels)
            return
        self._adopt_config(ep, config, versions, labels)

    async def _fetch_labels(self, ep: _Endpoint, config: ModelConfig,
                            version: str) -> dict[str, list[str]]:
        """Labels of outputs with a label_filename, through Triton's classification extension.

        KServe v2 does not serve label files, but a request for an output with ``class_count``
        equal to its element count answers every element as "value:index:label", the label
        present for each index that has one. One request of zeros, at each (re)check.
        """
        wanted = [t for t in config.outputs if t.label_filename]
        inputs = [t for t in config.inputs if not t.optional]
        if not wanted or any(WILDCARD in t.dims for t in inputs):
            return {}
        from tritonclient.utils import triton_to_np_dtype

        lib = _client_lib(ep.address.protocol)
        batch = [1] if config.max_batch_size > 0 else []
        request = []
        for t in inputs:
            shape = batch + list(t.dims)
            x = lib.InferInput(t.name, shape, t.datatype)
            dtype = triton_to_np_dtype(t.datatype)
            if dtype is None or t.datatype == "BYTES":
                return {}
            x.set_data_from_numpy(np.zeros(shape, dtype))
            request.append(x)
        labels: dict[str, list[str]] = {}
        for t in wanted:
            count = int(np.prod(t.dims)) if t.dims and WILDCARD not in t.dims else 0
            if not 0 < count <= 1_000_000:
                continue
            try:
                result = await asyncio.wait_for(ep.client.infer(
                    self.name, request, model_version=version,
                    outputs=[lib.InferRequestedOutput(t.name, class_count=count)],
                    headers=self._headers), PROBE_TIMEOUT_S)
                found: dict[int, str] = {}
                for item in np.asarray(result.as_numpy(t.name)).reshape(-1):
                    parts = (item.decode() if isinstance(item, bytes) else str(item)).split(":", 2)
                    if len(parts) == 3:
                        found[int(parts[1])] = parts[2]
                labels[t.name] = [found[i] for i in range(len(found))] if \
                    set(found) == set(range(len(found))) else []
            except Exception as exc:           # labels are a nicety: class indices then
                self._log("warn", f"{self._who}: could not read the labels of output "
                          f"'{t.name}' from {ep.address.url} "
                          f"({self._classify(ep, exc, probe=True).message}); class indices are "
                          f"published unless the binding sets class_names")
        return {k: v for k, v in labels.items() if v}

    async def _adopt(self, ep: _Endpoint, config: ModelConfig, versions: list[int],
                     labels: dict[str, list[str]]) -> None:
        """After the first round: take an endpoint's fetched configuration and mark it up."""
        self._adopt_config(ep, config, versions, labels)
        if ep.state != MISMATCH:
            await self._try_shared_memory(ep)
            self._set_up(ep, DOWN)

    def _adopt_config(self, ep: _Endpoint, config: ModelConfig, versions: list[int],
                      labels: dict[str, list[str]]) -> None:
        signature = _signature(config)
        if self._signature is None or self._config_source == ep.address.url:
            changed = self._signature is not None and (signature != self._signature
                                                       or labels != self._labels)
            self._config, self._signature, self._labels = config, signature, labels
            self._config_source = ep.address.url
            self._version = (self.requested_version if self.requested_version >= 0
                             else max(versions, default=1))
            if changed or self._generation == 0:
                self._generation += 1
            return
        if signature == self._signature:
            if ep.state == MISMATCH:           # fixed on the remote: may be used again
                self._log("info", f"{self._who}: endpoint {ep.address.url} now serves "
                          f"the same configuration as {self._config_source}")
                ep.state = DOWN
            return
        ep.failures = max(ep.failures, 6)  # re-checked every PROBE_BACKOFF_MAX_S
        if ep.state == MISMATCH:
            return
        ep.state = MISMATCH
        ep.reason = (f"its model '{self.name}' differs from {self._config_source}'s "
                     f"(inputs, outputs or batching); not used")
        self._log("error", f"{self._who}: endpoint {ep.address.url} serves a "
                  f"different configuration than {self._config_source} "
                  f"({_describe(config)} vs {_describe(self._config)}); it is not used")

    # ---------------------------------------------------------------- clients
    def _make_client(self, address: EndpointAddress):
        s = self.settings
        if address.protocol == "grpc":
            import tritonclient.grpc.aio as grpc_aio
            from tritonclient.grpc import KeepAliveOptions
            keepalive = KeepAliveOptions()
            # tritonclient's own channel options, plus reconnects bounded like the probes: by
            # default a gRPC channel backs its reconnects off to 2 minutes, which would keep a
            # restarted server unused long after it answers.
            options = [
                ("grpc.max_send_message_length", 2**31 - 1),
                ("grpc.max_receive_message_length", 2**31 - 1),
                ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
                ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
                ("grpc.keepalive_permit_without_calls",
                 keepalive.keepalive_permit_without_calls),
                ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
                ("grpc.initial_reconnect_backoff_ms", int(PROBE_BACKOFF_MIN_S * 1000)),
                ("grpc.max_reconnect_backoff_ms", int(PROBE_BACKOFF_MAX_S * 1000)),
            ]
            return grpc_aio.InferenceServerClient(
                address.target, ssl=address.tls,
                root_certificates=s.tls_ca_file or None,
                private_key=s.tls_key_file or None,
                certificate_chain=s.tls_cert_file or None, channel_args=options)
        import tritonclient.http.aio as http_aio
        context = None
        if address.tls:
            context = ssl.create_default_context(cafile=s.tls_ca_file or None)
            if s.tls_cert_file:
                context.load_cert_chain(s.tls_cert_file, s.tls_key_file)
        return http_aio.InferenceServerClient(address.target, ssl=address.tls,
                                              ssl_context=context, conn_timeout=PROBE_TIMEOUT_S)


# --------------------------------------------------------------------------------------------
# Monitoring
# --------------------------------------------------------------------------------------------

ERROR_KINDS = (TIMEOUT, UNREACHABLE, REJECTED, MODEL_ERROR, CLIENT_ERROR)


@dataclass
class EndpointReport:
    """One endpoint over the last diagnostics period."""

    model: str
    version: int
    url: str
    state: str
    reason: str
    level: int                         # 0 OK, 1 WARN, 2 ERROR (diagnostic_msgs levels)
    outstanding: int
    requests_per_s: float
    requests_total: int
    rtt_p50_ms: float
    rtt_p99_ms: float
    errors: dict[str, int]             # totals by kind
    shared_memory: bool


class EndpointReporter:
    """Turns the endpoints' growing counters into per-period figures (keeps the previous ones)."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], int] = {}
        self._prev_ns = 0

    def report(self, models: list[RemoteModel], now_ns: int) -> list[EndpointReport]:
        period_s = (now_ns - self._prev_ns) / 1e9 if self._prev_ns else 0.0
        self._prev_ns = now_ns
        out = []
        for model in models:
            healths = model.endpoints()
            any_up = any(h.state == UP for h in healths)
            for h in healths:
                key = (model.name, h.url)
                delta = h.requests - self._prev.get(key, 0)
                self._prev[key] = h.requests
                p50, p99 = percentiles_ms(h.latency)
                if h.state == UP:
                    level = 0
                elif h.state == MISMATCH or not any_up:
                    level = 2
                else:
                    level = 1
                out.append(EndpointReport(
                    model.name, model.version, h.url, h.state, h.reason, level, h.outstanding,
                    delta / period_s if period_s > 0 else 0.0, h.requests, p50, p99,
                    {kind: h.errors.get(kind, 0) for kind in ERROR_KINDS}, h.shared_memory))
        return out


def endpoint_statuses(node_name: str, reports: list[EndpointReport]) -> list:
    """One diagnostic_msgs/DiagnosticStatus per endpoint of each remote model."""
    from diagnostic_msgs.msg import DiagnosticStatus, KeyValue

    def kv(key: str, value) -> KeyValue:
        return KeyValue(key=key, value=f"{value:.3f}" if isinstance(value, float) else str(value))

    out = []
    for r in reports:
        message = r.state if r.state == UP else f"{r.state}: {r.reason}"
        status = DiagnosticStatus(level=bytes([r.level]),
                                  name=f"{node_name}: remote {r.model} {r.url}",
                                  message=message, hardware_id=r.url)
        status.values = [
            kv("model", r.model), kv("version", r.version), kv("endpoint", r.url),
            kv("state", r.state), kv("outstanding", r.outstanding),
            kv("requests_per_s", r.requests_per_s), kv("requests_total", r.requests_total),
            kv("rtt_p50_ms", r.rtt_p50_ms), kv("rtt_p99_ms", r.rtt_p99_ms),
            kv("shared_memory", r.shared_memory),
        ] + [kv(f"errors_{kind}", n) for kind, n in r.errors.items()]
        out.append(status)
    return out


def _client_lib(protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc as lib
    else:
        import tritonclient.http as lib
    return lib


def config_from_metadata(name: str, meta: Mapping[str, Any]) -> mc.ModelConfig:
    """A ModelConfig from standard KServe v2 model metadata (no Triton config extension).

    Shapes whose first dimension is -1 on every input and output are read as a batch
    dimension (max_batch_size 1: the node sends one frame per request); the data formats
    (NCHW/NHWC) are then unknown, so the binding's ``layout`` decides, or the dims.
    """
    from ..core.datatypes import protocol_to_config

    def tensors(key: str) -> list[dict]:
        return [dict(t) for t in meta.get(key, [])]

    inputs, outputs = tensors("inputs"), tensors("outputs")
    shapes = [[int(d) for d in t.get("shape", [])] for t in inputs + outputs]
    batched = bool(shapes) and all(s and s[0] == -1 for s in shapes)
    proto = mc.ModelConfig(name=name, max_batch_size=1 if batched else 0)
    for key, target in (("inputs", proto.input), ("outputs", proto.output)):
        for t in tensors(key):
            dims = [int(d) for d in t.get("shape", [])]
            entry = target.add()
            entry.name = t["name"]
            entry.data_type = mc.DataType.Value(protocol_to_config(t["datatype"]))
            entry.dims.extend(dims[1:] if batched else dims)
    return proto


_LOGGER = logging.getLogger("triton_ros.remote")
_LEVELS = {"info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


def _python_log(level: str, text: str) -> None:
    """Default log: Python logging (the node routes it to its ROS logger)."""
    _LOGGER.log(_LEVELS.get(level, logging.INFO), text)


def _signature(config: ModelConfig) -> tuple:
    return (config.max_batch_size,
            tuple((t.name, t.datatype, tuple(t.dims)) for t in config.inputs),
            tuple((t.name, t.datatype, tuple(t.dims)) for t in config.outputs))


def _describe(config: ModelConfig) -> str:
    def io(ts):
        return ", ".join(f"{t.name} {t.datatype} {list(t.dims)}" for t in ts)
    return f"inputs [{io(config.inputs)}], outputs [{io(config.outputs)}]"


def _is_aiohttp_error(exc: BaseException) -> bool:
    try:
        import aiohttp
    except ImportError:                        # pragma: no cover
        return False
    return isinstance(exc, aiohttp.ClientError)
