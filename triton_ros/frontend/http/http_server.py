"""KServe v2 HTTP/REST endpoint compatible with Triton's HTTP API (http_server.cc).

Routes, methods, status codes and JSON error bodies (``{"error": "..."}``) are Triton's:

| route | method |
|---|---|
| ``/v2/health/live``, ``/v2/health/ready`` | GET: 200, or 400 when not live/ready |
| ``/v2`` | GET: server metadata |
| ``/v2/models/{m}[/versions/{v}]`` | GET: model metadata |
| ``.../ready`` | GET: 200, or 400 "Model version not ready" |
| ``.../config``, ``.../stats``, ``/v2/models/stats`` | GET: configuration, statistics |
| ``.../infer`` | POST: inference (JSON tensors and the binary tensor extension) |
| ``.../generate[_stream]`` | POST: Triton's generate extension (JSON, or Server-Sent Events) |
| ``/v2/repository/index`` | POST (``{"ready": bool}``) |
| ``/v2/repository/models/{m}/load`` | POST (``config``, ``file:<path>`` parameters) |
| ``/v2/repository/models/{m}/unload`` | POST (``unload_dependents``) |
| ``/v2/systemsharedmemory[/region/{r}]/status`` | GET: registered regions |
| ``/v2/systemsharedmemory/region/{r}/register`` | POST (``key``, ``offset``, ``byte_size``) |
| ``/v2/systemsharedmemory[/region/{r}]/unregister`` | POST: one region, or all |
| ``/v2/cudasharedmemory/...`` | the same routes: no CUDA region exists; register is 400 |
| ``/v2/logging`` | GET: log settings; POST: change them (Triton's dynamic logging) |
| ``/v2[/models/{m}]/trace/setting`` | GET: trace settings; POST: change them (trace extension) |

``infer`` refuses a decoupled model (501, as tritonserver); ``generate`` takes exactly one
response of any model and ``generate_stream`` every response of a decoupled one, each as an SSE
``data:`` event as it comes (an error is an ``{"error": ...}`` event; a refusal before
inference is a JSON error with its status). The model's error answers ``generate`` 400, and
``generate_stream`` 400 when it comes before any response, whatever its code, as tritonserver
answers them. A client that closes a stream cancels its request.

Core errors map as in Triton: INVALID_ARG (and UNKNOWN, ALREADY_EXISTS, CANCELLED) -> 400,
NOT_FOUND -> 404, UNAVAILABLE -> 503, UNSUPPORTED -> 501, INTERNAL -> 500; a wrong method is
405 and an unknown route 404. Bad input of any kind answers that request only.

The transport is aiohttp's server (``http_transport``: keep-alive, chunked bodies,
``Expect: 100-continue``, connection limit with eviction, header and idle timeouts, minimum
body rate, body size limit) on an event loop thread of its own, like the gRPC endpoint;
gzip/deflate compression of requests and responses is handled here. A request's route, method
and API restriction (``--http-restricted-api``: 403 without the header) are checked before its
body is read.
Requests from many connections reach the same core, so perf_analyzer at high concurrency feeds
the same dynamic batcher as gRPC clients and the ROS node. Conversions live in ``http_codec``;
a large request is decompressed, decoded and submitted (cache lookup included) off the event
loop, and a large response encoded and compressed off it, so health checks answer meanwhile.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
import time
import zlib
from typing import Callable, Mapping, NamedTuple
from urllib.parse import unquote

from aiohttp import web

from ...core.errors import StatusCode, TritonRosError, as_triton_error, invalid_arg, unsupported
from ...core.server import InferenceServer
from . import http_codec as codec
from .http_transport import AiohttpEndpoint, TransportError, client_gone, read_body
from .options import HttpOptions
from ..limits import Restrictions

_log = logging.getLogger("triton_ros.http")

HTTP_STATUS = {
    StatusCode.UNKNOWN: 400,
    StatusCode.INTERNAL: 500,
    StatusCode.NOT_FOUND: 404,
    StatusCode.INVALID_ARG: 400,
    StatusCode.UNAVAILABLE: 503,
    StatusCode.UNSUPPORTED: 501,
    StatusCode.ALREADY_EXISTS: 400,
    StatusCode.CANCELLED: 400,
}
DEFAULT_MAX_INPUT_SIZE = HttpOptions().max_input_size  # --http-max-input-size (64 MiB)
JSON = "application/json"
OFF_LOOP_BYTES = 1 << 16  # bodies larger than this are handled off the event loop
_DIGITS = re.compile(r"[0-9]+")

_MODEL_RE = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats))?"
)
SSE = "text/event-stream; charset=utf-8"
_REPOSITORY_RE = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_HEALTH_RE = re.compile(r"/v2(?:/health/(live|ready))?")
_MODEL_TRACE_RE = re.compile(r"/v2/models/([^/]+)/trace/setting")
_SHM_RE = re.compile(
    r"/v2/(systemsharedmemory|cudasharedmemory)(?:/region/([^/]+))?/"
    r"(status|register|unregister)"
)


class HttpError(Exception):
    """An HTTP-level failure (not a core error): status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Request:
    """A request as the service sees it; ``headers`` is case-insensitive (lower-case keys are
    used), ``route`` the classification done before the body was read, ``received`` when its
    head and its body were read (monotonic ns; only while tracing is on, for its trace)."""

    __slots__ = ("method", "path", "headers", "body", "route", "received")

    def __init__(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        route: "Route | None" = None,
        received: tuple[int, int] | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.route = route
        self.received = received


class Response:
    """``trace``: the inference's trace, which the endpoint completes once the response is
    written (HTTP_SEND_START / _END) and releases. ``stream``: an async iterator of chunks
    written as they come (generate_stream), with ``on_close`` called if the client goes away
    first."""

    __slots__ = ("status", "chunks", "headers", "trace", "stream", "on_close")

    def __init__(
        self,
        status: int,
        chunks: list[bytes | memoryview] | bytes = b"",
        content_type: str | None = JSON,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.status = status
        self.chunks = [chunks] if isinstance(chunks, (bytes, memoryview)) else chunks
        self.headers = dict(headers or {})
        self.trace = None
        self.stream = None
        self.on_close = None
        if content_type and (self.chunks and any(len(c) for c in self.chunks)):
            self.headers.setdefault("Content-Type", content_type)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status, codec.error_body(message), headers=headers)


def _core_error(exc: BaseException) -> Response:
    error = as_triton_error(exc)
    return error_response(HTTP_STATUS.get(error.code, 400), error.message)


class HttpService:
    """Routes one parsed request to the core; every answer is a :class:`Response`."""

    def __init__(
        self,
        core: InferenceServer,
        *,
        max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
        max_request_size: int = HttpOptions().max_request_size,
    ) -> None:
        self._core = core
        self._max_input_size = max_input_size
        self._max_request_size = max_request_size

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except TritonRosError as exc:
            return _core_error(exc)
        except (HttpError, TransportError) as exc:
            return error_response(exc.status, exc.message)
        except Exception as exc:  # an unexpected fault answers this request only
            _log.exception("internal error in HTTP handler")
            return _core_error(exc)

    async def _blocking(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _route(self, request: Request) -> Response:
        route = request.route or classify(request.path)
        if route is None:
            raise HttpError(404, "Not Found")
        method = request.method
        if method not in route.methods:
            raise HttpError(405, "Method Not Allowed")
        family, match = route.family, route.match
        if family == "health":
            ok = self._core.is_live() if match.group(1) == "live" else self._core.is_ready()
            return Response(200 if ok else 400)
        if family == "model":
            name = unquote(match.group(1))
            version = int(match.group(2)) if match.group(2) else -1
            kind = match.group(3) or ""
            if kind == "infer":
                if self._decoupled(name, version):
                    raise unsupported(
                        "HTTP end point doesn't support models with decoupled transaction policy"
                    )
                return await self._infer(request, name, version)
            if kind in ("generate", "generate_stream"):
                return await self._generate(request, name, version, kind == "generate_stream")
            if kind == "ready":
                if not self._core.model_ready(name, version):
                    return error_response(400, "Model version not ready")
                return Response(200)
            if kind == "config":
                return Response(200, self._core.model_config(name, version).to_json().encode())
            if kind == "stats":
                return Response(
                    200, codec.encode_statistics(self._core.model_statistics(name, version))
                )
            return Response(
                200, codec.encode_model_metadata(self._core.model_metadata(name, version))
            )
        if family == "all_stats":
            return Response(200, codec.encode_statistics(self._core.model_statistics()))
        if family == "server":
            return Response(200, codec.encode_server_metadata(self._core.metadata()))
        if family == "repository":
            if match.group(1):
                raise unsupported("'repository_name' specification is not supported")
            if match.group(2) == "index":
                ready = codec.decode_index_request(request.body)
                entries = await self._blocking(
                    lambda: self._core.repository_index(ready_only=ready)
                )
                return Response(200, codec.encode_index(entries))
            name = unquote(match.group(3))
            if match.group(4) == "load":
                config_json, files = codec.decode_load_request(request.body)
                await self._blocking(
                    lambda: self._core.load_model(
                        name, config_json=config_json, files=files or None
                    )
                )
            else:
                dependents = codec.decode_unload_request(request.body)
                await self._blocking(
                    lambda: self._core.unload_model(name, unload_dependents=dependents)
                )
            return Response(200)
        if family == "trace":
            name = unquote(match.group(1)) if match else ""
            changes = codec.parse_json_object(request.body, "trace") if method == "POST" else None
            return Response(200, codec.dumps(self._core.trace_setting(name, changes)))
        if family == "logging":
            if method == "POST":
                changes = codec.parse_json_object(request.body, "log settings")
                return Response(200, codec.dumps(self._core.log_settings.update(changes)))
            return Response(200, codec.dumps(self._core.log_settings.get()))
        return self._shared_memory(
            request,
            match.group(1) == "cudasharedmemory",
            unquote(match.group(2) or ""),
            match.group(3),
        )

    def _shared_memory(self, request: Request, cuda: bool, region: str, action: str) -> Response:
        """/v2/{system,cuda}sharedmemory[/region/{r}]/{status,register,unregister}."""
        shm = self._core.shared_memory
        self._require(request.method, "GET" if action == "status" else "POST")
        if action == "status":
            if cuda:
                return Response(200, codec.encode_cuda_shm_status(shm.cuda_status(region)))
            return Response(200, codec.encode_system_shm_status(shm.system_status(region)))
        if action == "unregister":
            (shm.unregister_cuda if cuda else shm.unregister_system)(region)
            return Response(200)
        if cuda:
            _, device_id, byte_size = codec.decode_cuda_shm_register_request(request.body)
            shm.register_cuda(region, device_id=device_id, byte_size=byte_size)
        else:
            shm.register_system(region, *codec.decode_shm_register_request(request.body))
        return Response(200)

    @staticmethod
    def _require(method: str, expected: str) -> None:
        if method != expected:
            raise HttpError(405, "Method Not Allowed")

    async def _infer(self, request: Request, name: str, version: int) -> Response:
        if len(request.body) > OFF_LOOP_BYTES or b"shared_memory_region" in request.body:
            # decompress, parse, copy shared memory and look up the cache on a worker thread
            infer_request, plan, future = await self._blocking(self._submit, request, name, version)
        else:
            infer_request, plan, future = self._submit(request, name, version)
        trace = infer_request.trace
        if trace is None:
            return await self._answer(request, infer_request, plan, future)
        if request.received is not None:
            trace.capture("HTTP_RECV_START", request.received[0])
            trace.capture("HTTP_RECV_END", request.received[1])
        try:
            response = await self._answer(request, infer_request, plan, future)
        except BaseException:
            trace.release()
            raise
        response.trace = trace  # completed and released once it is written
        return response

    async def _answer(self, request: Request, infer_request, plan, future) -> Response:
        # done already when executed directly (Model._execute_directly) or refused
        response = future.result() if future.done() else await asyncio.wrap_future(future)
        shm = infer_request.shared_memory_outputs()
        encoding = _accepted_encoding(request.headers.get("accept-encoding", ""))
        heavy = codec.response_is_heavy(response, plan, shm)
        if heavy or encoding != "identity":
            chunks, json_length = await self._blocking(
                codec.encode_infer_response, response, plan, shm
            )
        else:
            chunks, json_length = codec.encode_infer_response(response, plan, shm)
        headers: dict[str, str] = {}
        content_type = JSON
        if json_length is not None:
            content_type = "application/octet-stream"
            headers["Inference-Header-Content-Length"] = str(json_length)
        if encoding != "identity":
            data = b"".join(chunks)
            if len(data) > OFF_LOOP_BYTES:
                chunks = [await self._blocking(_compress, encoding, data)]
            else:
                chunks = [_compress(encoding, data)]
            headers["Content-Encoding"] = encoding
        return Response(200, chunks, content_type=content_type, headers=headers)

    def _decoupled(self, name: str, version: int) -> bool:
        """Whether the model is decoupled; False when it is not served (the inference then
        reports that)."""
        try:
            return self._core.get_model(name, version).config.decoupled
        except TritonRosError:
            return False

    async def _generate(
        self, request: Request, name: str, version: int, streaming: bool
    ) -> Response:
        """Triton's generate extension: the request's responses as they come (a sink), one
        JSON object (generate) or SSE events (generate_stream)."""
        metadata = self._core.model_metadata(name, version)
        inputs = {t.name: (t.datatype, tuple(t.shape)) for t in metadata.inputs}
        body = _decompress(
            request.headers.get("content-encoding", ""), request.body, self._max_request_size
        )
        infer_request = codec.decode_generate_request(
            name, version, body, inputs, self._max_input_size
        )
        loop = asyncio.get_running_loop()
        items: asyncio.Queue = asyncio.Queue()

        def deliver(item) -> None:
            try:
                loop.call_soon_threadsafe(items.put_nowait, item)
            except RuntimeError:  # the loop is closed: the server stopped, no one waits
                pass

        def sink(response, final: bool) -> None:
            deliver((response, final))

        def refused(future) -> None:
            if future.exception() is not None:
                deliver((future.exception(), True))

        infer_request.response_sink = sink
        self._core.infer(infer_request).add_done_callback(refused)
        if not streaming:
            responses = []
            try:
                while True:
                    response, final = await items.get()
                    if response is not None:
                        responses.append(response)
                    if final:
                        break
            except asyncio.CancelledError:
                infer_request.cancel()
                raise
            errors = [r for r in responses if isinstance(r, TritonRosError)]
            if errors and infer_request.issued:
                # the model's answer is an error: tritonserver's generate answers it 400,
                # whatever its code (its enqueue refusals keep theirs, as below)
                return error_response(400, errors[0].message)
            if errors:
                raise errors[0]
            if len(responses) != 1:  # tritonserver answers this 200, with the error
                return Response(
                    200,
                    codec.error_body(
                        "generate expects model to produce exactly 1 response, use generate stream "
                        "for model that generates various number of responses"
                    ),
                )
            return Response(200, codec.encode_generate_response(responses[0]))
        first, final = await items.get()
        if isinstance(first, TritonRosError) and not infer_request.issued:
            raise first  # refused before inference: a JSON error, its status

        async def events():
            response, last = first, final
            while True:
                if isinstance(response, TritonRosError):
                    yield b"data: " + codec.error_body(response.message) + b"\n\n"
                elif response is not None:
                    yield b"data: " + codec.encode_generate_response(response) + b"\n\n"
                if last:
                    return
                response, last = await items.get()

        # An error before any response is answered 400 (its event in the body), as tritonserver
        # starts the stream with the first response's status.
        status = 400 if isinstance(first, TritonRosError) else 200
        answer = Response(status, b"", content_type=None, headers={"Content-Type": SSE})
        answer.stream = events()
        answer.on_close = infer_request.cancel
        return answer

    def _submit(self, request: Request, name: str, version: int):
        """Decompress and decode the body, then queue the request in the core."""
        body = _decompress(
            request.headers.get("content-encoding", ""), request.body, self._max_request_size
        )
        header_length = _header_length(request.headers.get(codec.INFER_HEADER), len(body))
        if header_length == 0:
            raise invalid_arg(
                "raw binary inference requests (Inference-Header-Content-Length: "
                "0) are not supported; send a JSON header"
            )
        json_size = len(body) if header_length is None else header_length
        if json_size > self._max_input_size:
            raise invalid_arg(
                f"request JSON size of {json_size} bytes exceeds the maximum allowed "
                f"input size of {self._max_input_size} bytes. Use "
                f"--http-max-input-size to increase the limit."
            )
        infer_request, plan = codec.decode_infer_request(
            name, version, body, header_length, self._core.shared_memory
        )
        infer_request.caller_releases_trace = True  # released once the answer is sent
        return infer_request, plan, self._core.infer(infer_request)


def _header_length(text: str | None, content_length: int) -> int | None:
    if text is None:
        return None
    if not _DIGITS.fullmatch(text.strip()):  # int() would also take "0_2" and "+2"
        raise invalid_arg(f"Unable to parse Inference-Header-Content-Length, got: {text}")
    value = int(text.strip())
    if value < 0 or value > content_length:
        raise invalid_arg(
            f"inference header size should be in range (0, {content_length}), got: {text}"
        )
    return value


def _decompress(encoding: str, body: bytes, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise unsupported("Unsupported compression type")
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    decompressor = zlib.decompressobj(wbits)
    try:
        out = decompressor.decompress(body, max(limit, 1) + 1)
    except zlib.error as exc:
        raise invalid_arg(f"failed to decompress the request body ({encoding}): {exc}") from None
    if len(out) > limit:
        raise TransportError(
            413,
            f"decompressed request body exceeds the limit of {limit} bytes "
            f"(--http-max-request-size)",
        )
    return out


def _accepted_encoding(accept: str) -> str:
    """Triton's CompressionTypeUsed: the highest-weighted of identity, gzip and deflate."""
    best, weight = "identity", 0.0
    for part in accept.split(","):
        kind, _, q = part.strip().partition(";q=")
        kind = kind.strip().lower()
        try:
            w = float(q) if q else 1.0
        except ValueError:
            continue
        if kind in ("identity", "gzip", "deflate") and w > weight:
            best, weight = kind, w
    return best


def _compress(encoding: str, data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6) if encoding == "gzip" else zlib.compress(data)


# ------------------------------------------------------------------------------------------
# Routes -> API group (restrictions) and methods, checked before a body is read
# ------------------------------------------------------------------------------------------


class Route(NamedTuple):
    api: str  # Triton's API group (--http-restricted-api)
    methods: tuple[str, ...]
    family: str  # which handler of HttpService._route
    match: "re.Match | None"


_GET, _POST = ("GET",), ("POST",)
_EXACT = {
    "/v2/health/live": Route("health", _GET, "health", _HEALTH_RE.fullmatch("/v2/health/live")),
    "/v2/health/ready": Route("health", _GET, "health", _HEALTH_RE.fullmatch("/v2/health/ready")),
    "/v2": Route("metadata", _GET, "server", None),
    "/v2/models/stats": Route("statistics", _GET, "all_stats", None),
    "/v2/logging": Route("logging", ("GET", "POST"), "logging", None),
    "/v2/trace/setting": Route("trace", ("GET", "POST"), "trace", None),
}
_MODEL_KINDS = {
    "infer": ("inference", _POST),
    "generate": ("inference", _POST),
    "generate_stream": ("inference", _POST),
    "ready": ("health", _GET),
    "config": ("model-config", _GET),
    "stats": ("statistics", _GET),
    "": ("metadata", _GET),
}


def classify(path: str) -> Route | None:
    """The Triton API group of a route, the methods it takes and its handler; None: no such
    route."""
    route = _EXACT.get(path)
    if route is not None:
        return route
    match = _MODEL_TRACE_RE.fullmatch(path)
    if match:
        return Route("trace", ("GET", "POST"), "trace", match)
    match = _MODEL_RE.fullmatch(path)
    if match:
        api, methods = _MODEL_KINDS[match.group(3) or ""]
        return Route(api, methods, "model", match)
    match = _REPOSITORY_RE.fullmatch(path)
    if match:
        return Route("model-repository", _POST, "repository", match)
    match = _SHM_RE.fullmatch(path)
    if match:
        return Route("shared-memory", _GET if match.group(3) == "status" else _POST, "shm", match)
    return None


def to_web_response(response: Response, *, close: bool = False) -> web.StreamResponse:
    headers = response.headers
    if close:
        headers["Connection"] = "close"
    chunks = response.chunks
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    web_response = web.Response(status=response.status, body=body, headers=headers)
    if close:
        web_response.force_close()
    return web_response


class HttpServer(AiohttpEndpoint):
    """Runs the HTTP endpoint on its own event loop thread; start() returns once it listens."""

    service_name = "HTTPService"

    def __init__(
        self,
        core: InferenceServer,
        *,
        address: str = "127.0.0.1",
        port: int = 8000,
        options: HttpOptions | None = None,
        max_input_size: int | None = None,
    ) -> None:
        options = options or HttpOptions()
        if max_input_size is not None:
            from dataclasses import replace

            options = replace(options, max_input_size=max_input_size)
        super().__init__(
            address=address, port=port, limits=options.validate(), stats=core.endpoint_stats
        )
        self._core = core
        self._restrictions: Restrictions = options.restrictions
        self._service = HttpService(
            core, max_input_size=options.max_input_size, max_request_size=options.max_request_size
        )

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.raw_path.split("?", 1)[0]
        method = request.method
        route = classify(path)
        # Answers given before a body is read close the connection: the body is not drained.
        unread = request.can_read_body
        if route is None:
            return to_web_response(error_response(404, "Not Found"), close=unread)
        restriction = self._restrictions.get(route.api)
        if restriction is not None and request.headers.get(restriction[0]) != restriction[1]:
            return to_web_response(
                error_response(403, f"This API is restricted, expecting header '{restriction[0]}'"),
                close=unread,
            )
        if method not in route.methods:
            return to_web_response(error_response(405, "Method Not Allowed"), close=unread)
        received = time.monotonic_ns() if self._core.tracer.active else 0
        try:
            body = b""
            if unread:
                body = await read_body(request, self.limits)
        except TransportError as exc:
            return to_web_response(error_response(exc.status, exc.message), close=True)
        response = await self._service.handle(
            Request(
                method,
                path,
                request.headers,
                body,
                route,
                (received, time.monotonic_ns()) if received else None,
            )
        )
        if response.stream is not None:
            return await _write_stream(request, response)
        if response.trace is not None:
            return await self._send_traced(request, response)
        if len(response.chunks) > 1 and sum(len(c) for c in response.chunks) > OFF_LOOP_BYTES:
            # large binary outputs: written chunk by chunk, never joined on the loop
            return await _write(request, response)
        return to_web_response(response)

    async def _send_traced(
        self, request: web.BaseRequest, response: Response
    ) -> web.StreamResponse:
        """Write a traced inference's response here, timed (HTTP_SEND_START / _END: handed to
        the connection's transport, as Triton's are to libevent), then release its trace."""
        trace = response.trace
        try:
            trace.capture("HTTP_SEND_START")
            written = await _write(request, response)
            trace.capture("HTTP_SEND_END")
            return written
        finally:
            trace.release()


async def _write_stream(request: web.BaseRequest, response: Response) -> web.StreamResponse:
    """Write a streamed response's chunks as they come (chunked); a client that goes away
    meanwhile is counted and its request cancelled (``on_close``)."""
    stream = web.StreamResponse(status=response.status, headers=response.headers)
    stream.enable_chunked_encoding()
    finished = False
    try:
        await stream.prepare(request)
        async for chunk in response.stream:
            await stream.write(chunk)
        await stream.write_eof()
        finished = True
    except ConnectionError:
        client_gone(request)
    finally:
        if not finished and response.on_close is not None:
            response.on_close()
        await response.stream.aclose()
    return stream


async def _write(request: web.BaseRequest, response: Response) -> web.StreamResponse:
    """Write ``response`` chunk by chunk now (its chunks are never joined); a client that goes
    away meanwhile is counted, with no traceback."""
    stream = web.StreamResponse(status=response.status, headers=response.headers)
    stream.content_length = sum(len(c) for c in response.chunks)
    try:
        await stream.prepare(request)
        for chunk in response.chunks:
            await stream.write(chunk)
        await stream.write_eof()
    except ConnectionError:
        client_gone(request)
    return stream
