"""HTTP/1.1 transport of the HTTP/REST and metrics endpoints: aiohttp's low-level web server with
the limits a server facing untrusted clients needs.

aiohttp (already a dependency through ``tritonclient[http]``) parses requests with its C parser
(llhttp), keeps connections alive, decodes chunked bodies and applies back-pressure; the
benchmark in ``bench/http_stack.py`` chose it over uvicorn+httptools. What it does not do is
added here, through its public ``web.Server`` protocol factory and a :class:`RequestHandler`
subclass (aiohttp is pinned in requirements.txt because this subclass reads two of the
handler's attributes, ``_request_count`` and ``_current_request``):

- **connection limit**: past ``max_connections`` open connections, a new one is answered
  ``503 Service Unavailable`` and closed at once, so idle clients never hold every descriptor;
- **header timeout**: a request head must arrive within ``header_timeout_s`` of the
  connection opening, or of its first byte after the previous response; else ``408`` and close
  (slow or half-sent headers do not hold a connection forever);
- **idle timeout**: aiohttp's keep-alive timeout closes idle connections;
  :func:`read_body` applies the same timeout between body chunks (``408``);
- **body size**: :func:`read_body` refuses a declared ``Content-Length`` over the limit before
  reading it, and a chunked body as soon as it passes the limit (``413``); a request answered
  without reading its body (405, 404, 403...) closes the connection instead of draining it.

The endpoint's loop is uvloop's (libuv, in requirements.txt) where it is installed: socket reads
and writes, which dominate this loop's time on small requests, then run in C. On a quiet 2-core
machine (``bench/http_stack.py``, ``bench/results_http_stack.md``) it raised perf_analyzer's
``simple`` over HTTP from 0.91x to 1.08x the old hand-written server's throughput. Without uvloop (an apt-installed ROS 2 without
``python3-uvloop``) the standard asyncio loop serves; ``TRITON_ROS_HTTP_LOOP=asyncio`` forces it.
gRPC keeps the standard loop: grpc.aio also runs on uvloop (its endpoint tests pass there), but
tried by hand (bench/bench_request_path.py, two rounds alternating) it was no faster: ``simple``
1.03x at concurrency 1 and 1.04x at 64, tinydet 0.96x at 1 and at 16, within the rounds' spread.
"""
from __future__ import annotations

import asyncio
import logging
import os
import weakref
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from .event_loop_server import EventLoopServer
from .options import HttpOptions

_log = logging.getLogger("triton_ros.http")

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]



def raw_response(status: str, message: str) -> bytes:
    """A whole ``Connection: close`` response with a Triton-style JSON error body, for answers
    given outside aiohttp's request cycle."""
    body = ('{"error":"%s"}' % message).encode()
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


_REFUSED = raw_response("503 Service Unavailable", "too many connections, retry later")
_TIMED_OUT = raw_response("408 Request Timeout", "request header timed out")


class TransportError(Exception):
    """A request refused by the transport (size, timeout): its HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Refuse(asyncio.Protocol):
    """Answers a connection over the limit with 503 and closes it."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(_REFUSED)   # type: ignore[attr-defined]
        transport.close()


class _LimitedHandler(RequestHandler):
    """aiohttp's connection handler with a request-head timeout."""

    __slots__ = ("_head_timer", "_head_timeout", "_limited", "__weakref__")

    def __init__(self, manager: "_LimitedServer", *, head_timeout: float, **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self._limited = manager
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._arm()

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
            self._disarm()                      # a whole head arrived
        elif self._current_request is None:
            self._arm()                         # bytes of a head that is not complete yet

    def _head_expired(self) -> None:
        self._head_timer = None
        transport = self.transport
        if self._current_request is None and transport is not None:
            transport.write(_TIMED_OUT)
            self.force_close()      # may already drop self.transport
            transport.close()

    def log_exception(self, *args, **kwargs) -> None:
        """Malformed requests (aiohttp answers them 400) are counted and logged in one line,
        throttled; anything else keeps aiohttp's report with its traceback."""
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            self._limited.bad_request(exc)
            return
        super().log_exception(*args, **kwargs)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._limited.open.discard(self)
        super().connection_lost(exc)


class _LimitedServer(web.Server):
    """aiohttp's protocol factory, refusing connections past the limit."""

    def __init__(self, handler: Handler, *, max_connections: int, head_timeout: float,
                 **kwargs) -> None:
        super().__init__(handler, **kwargs)
        self._max_connections = max_connections
        self._head_timeout = head_timeout
        self.refused = 0
        self.malformed = 0
        # Counted when the protocol is created: asyncio may create several before the first
        # connection_made runs. A handler leaves on connection_lost (or when collected).
        self.open: weakref.WeakSet[_LimitedHandler] = weakref.WeakSet()

    def bad_request(self, exc: HttpProcessingError) -> None:
        self.malformed += 1
        if self.malformed == 1 or self.malformed % 100 == 0:
            reason = str(exc.message).strip().splitlines()[0] if exc.message else type(exc).__name__
            _log.warning("malformed HTTP request answered %s (%d so far): %s", exc.code,
                         self.malformed, reason)

    def __call__(self):   # type: ignore[override]
        if len(self.open) >= self._max_connections:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                _log.warning("connection limit of %d reached: refused %d connection(s) with 503",
                             self._max_connections, self.refused)
            return _Refuse()
        handler = _LimitedHandler(self, loop=self._loop, head_timeout=self._head_timeout,
                                  **self._kwargs)
        self.open.add(handler)
        return handler


def new_http_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (and ``TRITON_ROS_HTTP_LOOP`` is not
    ``asyncio``), else the standard one."""
    if os.environ.get("TRITON_ROS_HTTP_LOOP", "").strip().lower() != "asyncio":
        try:
            import uvloop
        except ImportError as exc:   # said once per endpoint: it is slower, not broken
            _log.info("uvloop unavailable (%s): this endpoint uses the asyncio event loop", exc)
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


async def read_body(request: web.BaseRequest, limit: int,
                    idle_timeout: float) -> bytes | bytearray:
    """The request body, refused with 413 past ``limit`` bytes and with 408 when no data arrives
    for ``idle_timeout`` seconds. aiohttp's stream pauses the socket while its buffer is full,
    so a fast sender of tiny chunks is held to a bounded backlog."""
    length = request.content_length
    if length is not None and length > limit:
        raise TransportError(413, f"request body of {length} bytes exceeds the limit of {limit} "
                                  f"bytes (--http-max-request-size)")
    if request.headers.get("Expect", "").lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    content = request.content
    first: bytes | None = None
    buf: bytearray | None = None      # many small chunks accumulate here, not as a list
    size = 0
    while True:
        chunk = content.read_nowait()     # what is already buffered, without a wait
        if not chunk:
            if content.is_eof():
                break
            try:
                chunk = await asyncio.wait_for(content.readany(), idle_timeout)
            except asyncio.TimeoutError:
                raise TransportError(408, f"no request data for {idle_timeout} s") from None
            if not chunk:
                break
        size += len(chunk)
        if size > limit:
            raise TransportError(413, f"request body exceeds the limit of {limit} bytes "
                                      f"(--http-max-request-size)")
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
    """An aiohttp low-level server with :class:`HttpOptions` limits on its own loop thread."""

    def __init__(self, *, address: str, port: int, limits: HttpOptions) -> None:
        super().__init__(address=address, port=port)
        self.limits = limits
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
            self.handle, max_connections=self.limits.max_connections,
            head_timeout=self.limits.header_timeout_s,
            keepalive_timeout=self.limits.idle_timeout_s,
            lingering_time=0.0,        # an unread body closes the connection, never drained
            access_log=None, max_line_size=8190, max_field_size=8190, max_headers=128,
            auto_decompress=False,     # decompressed here, within the size limit
            handler_cancellation=True)
        loop = asyncio.get_running_loop()
        self._tcp = await loop.create_server(self._web, self.address, self.port,
                                             reuse_address=True, backlog=1024)
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
