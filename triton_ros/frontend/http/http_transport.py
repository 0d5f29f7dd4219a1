"""HTTP/1.1 transport of the HTTP/REST and metrics endpoints: aiohttp's low-level web server with
the limits a server facing untrusted clients needs.

aiohttp (already a dependency through ``tritonclient[http]``) parses requests with its C parser
(llhttp), keeps connections alive, decodes chunked bodies and applies back-pressure. What it
does not do is added here, through its public ``web.Server`` protocol factory and a
:class:`RequestHandler` subclass (aiohttp is pinned in requirements.txt because this subclass
reads three of the handler's attributes, ``_request_count``, ``_current_request`` and
``_request_in_progress``):

- **connection limit**: at ``max_connections`` open connections, a new one evicts the
  connection that has waited longest without a request being answered: an idle keep-alive
  connection first, else one still sending its request head or body; the evicted one is
  answered ``503 Service Unavailable`` and closed. Only when every connection has a request in
  progress (being computed or answered) is the new one refused with ``503``. Idle, half-sent
  or trickled connections can therefore never lock new clients out (docs/server.md);
- **header timeout**: a request head must arrive within ``header_timeout_s`` of the
  connection opening, or of its first byte after the previous response; else ``408`` and close
  (slow or half-sent headers do not hold a connection forever);
- **idle timeout**: aiohttp's keep-alive timeout closes idle connections;
  :func:`read_body` applies the same timeout between body chunks (``408``);
- **minimum body rate**: after ``header_timeout_s``, a body must have arrived at
  ``min_body_rate`` bytes a second on average (Apache's ``RequestReadTimeout body=...,MinRate``
  idea; 500 by default); else ``408`` and close, so a trickled body ends in seconds even below
  the connection limit;
- **aborted requests**: a client that closes its connection within a request head or body, or
  while a large answer is written (:func:`client_gone`), is counted
  (``triton_ros_connections_closed{reason="aborted"}``) and logged as one throttled debug line,
  never a traceback;
- **body size**: :func:`read_body` refuses a declared ``Content-Length`` over the limit before
  reading it, and a chunked body as soon as it passes the limit (``413``); a request answered
  without reading its body (405, 404, 403...) closes the connection instead of draining it.

The endpoint's loop is uvloop's (libuv, in requirements.txt) where it is installed: socket reads
and writes, which dominate this loop's time on small requests, then run in C. Without uvloop (an
apt-installed ROS 2 without ``python3-uvloop``) the standard asyncio loop serves;
``TRITON_ROS_HTTP_LOOP=asyncio`` forces it. gRPC keeps the standard loop: uvloop makes grpc.aio
no faster.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import weakref
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from ...core.infer_stats import EndpointStats
from ..event_loop_server import EventLoopServer
from .options import HttpOptions

_log = logging.getLogger("triton_ros.http")

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def raw_response(status: str, message: str) -> bytes:
    """A whole ``Connection: close`` response with a Triton-style JSON error body, for answers
    given outside aiohttp's request cycle."""
    body = ('{"error":"%s"}' % message).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


_REFUSED = raw_response("503 Service Unavailable", "too many connections, retry later")
_EVICTED = raw_response(
    "503 Service Unavailable",
    "connection closed to admit a new one: the server is at its connection limit",
)
_TIMED_OUT = raw_response("408 Request Timeout", "request header timed out")
# Orders the connections' waits (_LimitedHandler._since): the loop's clock ticks in milliseconds,
# and connections accepted in one tick would tie.
_ORDER = itertools.count()


class TransportError(Exception):
    """A request refused by the transport (size, timeout): its HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ClientGone(TransportError):
    """The connection closed within the request body: nothing can be answered (counted by the
    connection as ``aborted``, unless the server closed it)."""

    def __init__(self) -> None:
        super().__init__(400, "the client closed the connection within the request body")


class _Refuse(asyncio.Protocol):
    """Answers a connection over the limit with 503 and closes it."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(_REFUSED)  # type: ignore[attr-defined]
        transport.close()


class _LimitedHandler(RequestHandler):
    """aiohttp's connection handler with a request-head timeout, and what the connection limit
    needs to know of it: whether it may be evicted, and since when it waits."""

    __slots__ = (
        "_head_timer",
        "_head_timeout",
        "_limited",
        "_since",
        "_partial_head",
        "reading_body",
        "_closed_here",
        "__weakref__",
    )

    def __init__(self, manager: "_LimitedServer", *, head_timeout: float, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self._limited = manager
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        self._since = 0  # when it opened, or its last request head arrived (_ORDER)
        self._partial_head = False  # bytes of a request head that is not complete yet
        self.reading_body = False  # read_body is reading this connection's request body
        self._closed_here = False  # closed by the server (evicted, timed out)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._since = next(_ORDER)
        self._arm()

    def eviction_key(self) -> tuple[int, int] | None:
        """None while a request is in progress past its body (computed or answered): it is
        never evicted. Else (0, since) for a connection with no request (idle keep-alive, or a
        head still arriving) and (1, since) for one still sending its body: the smallest key is
        evicted first."""
        if self.transport is None or self._closed_here:
            return None
        if not self._request_in_progress:
            return (0, self._since)
        if self.reading_body:
            return (1, self._since)
        return None

    def closing(self, reason: str) -> bool:
        """The server is about to close this connection for ``reason`` (counted once); False if
        it is closed already."""
        if self.transport is None or self._closed_here:
            return False
        self._closed_here = True
        self._limited.count(reason)
        return True

    def close_here(self, response: bytes, reason: str) -> None:
        """Answer ``response`` (a whole raw response), close the connection, count ``reason``."""
        transport = self.transport
        if not self.closing(reason):
            return
        transport.write(response)  # type: ignore[attr-defined]
        self.force_close()  # may already drop self.transport
        transport.close()

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self._loop.call_later(self._head_timeout, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._disarm()  # a whole head arrived
            self._partial_head = False
            self._since = next(_ORDER)
        elif self._current_request is None:
            self._arm()  # bytes of a head that is not complete yet
            self._partial_head = True

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._current_request is None:
            self.close_here(_TIMED_OUT, "timeout")

    def log_exception(self, *args, **kwargs) -> None:
        """Malformed requests (aiohttp answers them 400) are counted and logged in one line,
        throttled; anything else keeps aiohttp's report with its traceback."""
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            self._closed_here = True  # answered 400 and closed: not an abort
            self._limited.bad_request(exc)
            return
        super().log_exception(*args, **kwargs)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._limited.open.discard(self)
        if not self._closed_here and (self.reading_body or self._partial_head):
            self._limited.aborted()
        super().connection_lost(exc)


def _first_or_every(count: int, every: int) -> bool:
    """Whether the ``count``-th event of a kind is logged: the first, then every ``every``-th."""
    return count == 1 or count % every == 0


class _LimitedServer(web.Server):
    """aiohttp's protocol factory: at the connection limit, evicts the connection that has
    waited longest without a request in progress, or refuses the new one (module docstring)."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_connections: int,
        head_timeout: float,
        endpoint: str,
        stats: EndpointStats | None,
        **kwargs,
    ) -> None:
        super().__init__(handler, **kwargs)
        self._max_connections = max_connections
        self._head_timeout = head_timeout
        self._endpoint = endpoint
        self._stats = stats if stats is not None else EndpointStats()
        self._stats.register(endpoint)
        # Counted when the protocol is created: asyncio may create several before the first
        # connection_made runs. A handler leaves on connection_lost (or when collected), or
        # when it is evicted.
        self.open: weakref.WeakSet[_LimitedHandler] = weakref.WeakSet()

    def count(self, reason: str) -> int:
        return self._stats.count(self._endpoint, reason)

    @property
    def refused(self) -> int:
        return self._stats.snapshot().get((self._endpoint, "refused"), 0)

    def bad_request(self, exc: HttpProcessingError) -> None:
        count = self.count("malformed")
        if _first_or_every(count, 100):
            reason = str(exc.message).strip().splitlines()[0] if exc.message else type(exc).__name__
            _log.warning(
                "malformed HTTP request answered %s (%d so far): %s", exc.code, count, reason
            )

    def aborted(self) -> None:
        count = self.count("aborted")
        if _first_or_every(count, 100):
            _log.debug(
                "%s: a client closed its connection within a request (%d so far)",
                self._endpoint,
                count,
            )

    def __call__(self):  # type: ignore[override]
        if len(self.open) >= self._max_connections and not self._evict_one():
            count = self.count("refused")
            if _first_or_every(count, 1000):
                _log.warning(
                    "connection limit of %d reached, every connection busy with a "
                    "request: refused %d connection(s) with 503",
                    self._max_connections,
                    count,
                )
            return _Refuse()
        handler = _LimitedHandler(
            self, loop=self._loop, head_timeout=self._head_timeout, **self._kwargs
        )
        self.open.add(handler)
        return handler

    def _evict_one(self) -> bool:
        """Close the connection with the smallest eviction key (``_LimitedHandler``); False
        when none may be evicted."""
        victim, best = None, None
        for handler in list(self.open):
            key = handler.eviction_key()
            if key is not None and (best is None or key < best):
                victim, best = handler, key
        if victim is None:
            return False
        self.open.discard(victim)
        victim.close_here(_EVICTED, "evicted")
        count = self._stats.snapshot().get((self._endpoint, "evicted"), 0)
        if _first_or_every(count, 1000):
            _log.info(
                "%s: connection limit of %d reached: closed %d waiting connection(s) to "
                "admit new ones",
                self._endpoint,
                self._max_connections,
                count,
            )
        return True


def new_http_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (and ``TRITON_ROS_HTTP_LOOP`` is not
    ``asyncio``), else the standard one."""
    if os.environ.get("TRITON_ROS_HTTP_LOOP", "").strip().lower() != "asyncio":
        try:
            import uvloop
        except ImportError as exc:  # said once per endpoint: it is slower, not broken
            _log.info("uvloop unavailable (%s): this endpoint uses the asyncio event loop", exc)
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def client_gone(request: web.BaseRequest) -> None:
    """The client of ``request`` closed its connection while the answer was being written:
    counted as ``aborted`` (unless the server closed it), no traceback."""
    handler = request.protocol
    if isinstance(handler, _LimitedHandler) and not handler._closed_here:
        handler._closed_here = True  # counted here, not again when the connection goes
        handler._limited.aborted()


async def read_body(request: web.BaseRequest, limits: HttpOptions) -> bytes | bytearray:
    """The request body, refused with 413 past ``limits.max_request_size`` bytes, with 408 when
    no data arrives for ``limits.idle_timeout_s`` seconds or when, after
    ``limits.header_timeout_s``, it has come slower than ``limits.min_body_rate`` bytes a second;
    :class:`ClientGone` when the client closes the connection meanwhile. aiohttp's stream
    pauses the socket while its buffer is full, so a fast sender of tiny chunks is held to a
    bounded backlog."""
    limit = limits.max_request_size
    length = request.content_length
    if length is not None and length > limit:
        raise TransportError(
            413,
            f"request body of {length} bytes exceeds the limit of {limit} "
            f"bytes (--http-max-request-size)",
        )
    handler = request.protocol if isinstance(request.protocol, _LimitedHandler) else None
    if handler is not None:
        handler.reading_body = True
    try:
        return await _read_body(request, limits)
    except ConnectionError:  # aiohttp's "Connection lost", a reset: the client went away
        raise ClientGone() from None
    except TransportError as exc:
        if handler is not None and exc.status == 408:
            handler.closing("timeout")  # the caller answers the 408 and closes
        raise
    finally:
        if handler is not None:
            handler.reading_body = False


async def _read_body(request: web.BaseRequest, limits: HttpOptions) -> bytes | bytearray:
    limit = limits.max_request_size
    if request.headers.get("Expect", "").lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    content = request.content
    first: bytes | None = None
    buf: bytearray | None = None  # many small chunks accumulate here, not as a list
    size = 0
    while True:
        chunk = content.read_nowait()  # what is already buffered, without a wait
        if not chunk:
            if content.is_eof():
                break
            wait = limits.idle_timeout_s
            if limits.min_body_rate:
                due = started + limits.header_timeout_s + size / limits.min_body_rate
                wait = min(wait, due - loop.time())
            try:
                if wait <= 0:
                    raise asyncio.TimeoutError
                chunk = await asyncio.wait_for(content.readany(), wait)
            except asyncio.TimeoutError:
                if wait < limits.idle_timeout_s:
                    raise TransportError(
                        408,
                        f"request body arrived at less than {limits.min_body_rate} bytes "
                        f"a second (--http-min-body-rate)",
                    ) from None
                raise TransportError(
                    408, f"no request data for {limits.idle_timeout_s} s"
                ) from None
            if not chunk:
                break
        size += len(chunk)
        if size > limit:
            raise TransportError(
                413, f"request body exceeds the limit of {limit} bytes (--http-max-request-size)"
            )
        if first is None:
            first = chunk
        else:
            if buf is None:
                buf = bytearray(first)
            buf += chunk
    if buf is not None:
        return buf
    return first or b""


class AiohttpEndpoint(EventLoopServer):
    """An aiohttp low-level server with :class:`HttpOptions` limits on its own loop thread;
    what its transport ends is counted in ``stats`` as ``endpoint``."""

    endpoint = "http"

    def __init__(
        self, *, address: str, port: int, limits: HttpOptions, stats: EndpointStats | None = None
    ) -> None:
        super().__init__(address=address, port=port)
        self.limits = limits
        self.stats = stats
        self._web: _LimitedServer | None = None
        self._tcp: asyncio.base_events.Server | None = None

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        raise NotImplementedError

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        return new_http_loop()

    @property
    def refused_connections(self) -> int:
        return self._web.refused if self._web is not None else 0

    async def _listen(self) -> None:
        self._web = _LimitedServer(
            self.handle,
            max_connections=self.limits.max_connections,
            head_timeout=self.limits.header_timeout_s,
            endpoint=self.endpoint,
            stats=self.stats,
            keepalive_timeout=self.limits.idle_timeout_s,
            lingering_time=0.0,  # an unread body closes the connection, never drained
            access_log=None,
            max_line_size=8190,
            max_field_size=8190,
            max_headers=128,
            auto_decompress=False,  # decompressed here, within the size limit
            handler_cancellation=True,
        )
        loop = asyncio.get_running_loop()
        self._tcp = await loop.create_server(
            self._web, self.address, self.port, reuse_address=True, backlog=1024
        )
        self.port = self._tcp.sockets[0].getsockname()[1]

    async def _shutdown(self, grace: float) -> None:
        self._tcp.close()
        # Idle keep-alive connections close at once: without this, shutdown() waited out the
        # whole grace period on each idle connection, so one idle client held the process's exit
        # for exit_timeout_secs (30 s). aiohttp's own runner does the same first (its
        # Server.pre_shutdown, which older aiohttp releases from a distribution lack; close()
        # and the connections list are in all of them). In-flight requests still get the grace
        # period: close() ends a busy connection once its response is sent.
        for connection in self._web.connections:
            connection.close()
        await self._web.shutdown(grace)
        await self._tcp.wait_closed()
