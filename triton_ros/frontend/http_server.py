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
| ``/v2/repository/index`` | POST (``{"ready": bool}``) |
| ``/v2/repository/models/{m}/load`` | POST (``config``, ``file:<path>`` parameters) |
| ``/v2/repository/models/{m}/unload`` | POST (``unload_dependents``) |
| ``/v2/systemsharedmemory[/region/{r}]/status`` | GET: registered regions |
| ``/v2/systemsharedmemory/region/{r}/register`` | POST (``key``, ``offset``, ``byte_size``) |
| ``/v2/systemsharedmemory[/region/{r}]/unregister`` | POST: one region, or all |
| ``/v2/cudasharedmemory/...`` | the same routes: no CUDA region exists; register is 501 |
| ``/v2/logging`` | GET: log settings; POST: change them (Triton's dynamic logging) |

Core errors map as in Triton: INVALID_ARG (and UNKNOWN, ALREADY_EXISTS, CANCELLED) -> 400,
NOT_FOUND -> 404, UNAVAILABLE -> 503, UNSUPPORTED -> 501, INTERNAL -> 500; a wrong method is
405 and an unknown route 404. Bad input of any kind answers that request only.

The server is a small HTTP/1.1 implementation on ``asyncio`` in a thread of its own (like the
gRPC endpoint): persistent connections (keep-alive), ``Expect: 100-continue``, chunked request
bodies and gzip/deflate compression. Requests from many connections reach the same core, so
perf_analyzer at high concurrency feeds the same dynamic batcher as gRPC clients and the ROS node.
Conversions live in ``http_codec``; large JSON conversions run off the event loop.
"""
from __future__ import annotations

import asyncio
import gzip
import logging
import re
import zlib
from typing import Awaitable, Callable
from urllib.parse import unquote

from ..core.errors import StatusCode, TritonRosError, as_triton_error, invalid_arg, unsupported
from ..core.server import InferenceServer
from . import http_codec as codec
from .event_loop_server import EventLoopServer

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
REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
           405: "Method Not Allowed", 413: "Payload Too Large", 431: "Request Header Fields Too Large",
           500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"}

DEFAULT_MAX_INPUT_SIZE = 1 << 26     # --http-max-input-size (Triton's default, 64 MiB)
MAX_BODY_SIZE = (1 << 31) - 1        # Triton parses Content-Length as int32
MAX_HEADER_SIZE = 1 << 16
JSON = "application/json"

_MODEL_RE = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|ready|config|stats))?")
_REPOSITORY_RE = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_HEALTH_RE = re.compile(r"/v2(?:/health/(live|ready))?")
_SHM_RE = re.compile(r"/v2/(systemsharedmemory|cudasharedmemory)(?:/region/([^/]+))?/"
                     r"(status|register|unregister)")


class HttpError(Exception):
    """An HTTP-level failure (not a core error): status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Request:
    __slots__ = ("method", "path", "headers", "body")

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body


class Response:
    __slots__ = ("status", "chunks", "headers")

    def __init__(self, status: int, chunks: list[bytes | memoryview] | bytes = b"",
                 content_type: str | None = JSON, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.chunks = [chunks] if isinstance(chunks, (bytes, memoryview)) else chunks
        self.headers = dict(headers or {})
        if content_type and (self.chunks and any(len(c) for c in self.chunks)):
            self.headers.setdefault("Content-Type", content_type)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status, codec.error_body(message), headers=headers)


def _core_error(exc: BaseException) -> Response:
    error = as_triton_error(exc)
    return error_response(HTTP_STATUS.get(error.code, 400), error.message)


class HttpService:
    """Routes one parsed request to the core; every answer is a :class:`Response`."""

    def __init__(self, core: InferenceServer, *, max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        self._core = core
        self._max_input_size = max_input_size

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except TritonRosError as exc:
            return _core_error(exc)
        except HttpError as exc:
            return error_response(exc.status, exc.message)
        except Exception as exc:  # an unexpected fault answers this request only
            _log.exception("internal error in HTTP handler")
            return _core_error(exc)

    async def _blocking(self, fn: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def _route(self, request: Request) -> Response:
        path, method = request.path, request.method
        if path == "/v2/models/stats":
            self._require(method, "GET")
            return Response(200, codec.encode_statistics(self._core.model_statistics()))
        match = _MODEL_RE.fullmatch(path)
        if match:
            name = unquote(match.group(1))
            version = int(match.group(2)) if match.group(2) else -1
            kind = match.group(3) or ""
            if kind == "infer":
                self._require(method, "POST")
                return await self._infer(request, name, version)
            self._require(method, "GET")
            if kind == "ready":
                if not self._core.model_ready(name, version):
                    return error_response(400, "Model version not ready")
                return Response(200)
            if kind == "config":
                return Response(200, self._core.model_config(name, version).to_json().encode())
            if kind == "stats":
                return Response(200, codec.encode_statistics(
                    self._core.model_statistics(name, version)))
            return Response(200, codec.encode_model_metadata(self._core.model_metadata(name, version)))
        match = _HEALTH_RE.fullmatch(path)
        if match:
            self._require(method, "GET")
            kind = match.group(1)
            if kind is None:
                return Response(200, codec.encode_server_metadata(self._core.metadata()))
            ok = self._core.is_live() if kind == "live" else self._core.is_ready()
            return Response(200 if ok else 400)
        match = _REPOSITORY_RE.fullmatch(path)
        if match:
            self._require(method, "POST")
            if match.group(1):
                raise unsupported("'repository_name' specification is not supported")
            if match.group(2) == "index":
                ready = codec.decode_index_request(request.body)
                entries = await self._blocking(lambda: self._core.repository_index(ready_only=ready))
                return Response(200, codec.encode_index(entries))
            name = unquote(match.group(3))
            if match.group(4) == "load":
                config_json, files = codec.decode_load_request(request.body)
                await self._blocking(lambda: self._core.load_model(
                    name, config_json=config_json, files=files or None))
            else:
                dependents = codec.decode_unload_request(request.body)
                await self._blocking(lambda: self._core.unload_model(
                    name, unload_dependents=dependents))
            return Response(200)
        if path == "/v2/logging":
            if method == "POST":
                changes = codec.parse_json_object(request.body, "log settings")
                return Response(200, codec.dumps(self._core.log_settings.update(changes)))
            self._require(method, "GET")
            return Response(200, codec.dumps(self._core.log_settings.get()))
        match = _SHM_RE.fullmatch(path)
        if match:
            return self._shared_memory(request, match.group(1) == "cudasharedmemory",
                                       unquote(match.group(2) or ""), match.group(3))
        raise HttpError(404, "Not Found")

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
            shm.register_cuda(region, device_id=0, byte_size=0)
        else:
            shm.register_system(region, *codec.decode_shm_register_request(request.body))
        return Response(200)

    @staticmethod
    def _require(method: str, expected: str) -> None:
        if method != expected:
            raise HttpError(405, "Method Not Allowed")

    async def _infer(self, request: Request, name: str, version: int) -> Response:
        body = _decompress(request.headers.get("content-encoding", ""), request.body,
                           self._max_input_size)
        header_length = _header_length(request.headers.get(codec.INFER_HEADER), len(body))
        if header_length == 0:
            raise invalid_arg("raw binary inference requests (Inference-Header-Content-Length: "
                              "0) are not supported; send a JSON header")
        json_size = len(body) if header_length is None else header_length
        if json_size > self._max_input_size:
            raise invalid_arg(f"request JSON size of {json_size} bytes exceeds the maximum allowed "
                              f"input size of {self._max_input_size} bytes. Use "
                              f"--http-max-input-size to increase the limit.")
        decode = lambda: codec.decode_infer_request(  # noqa: E731
            name, version, body, header_length, self._core.shared_memory)
        if json_size > (1 << 16):
            infer_request, plan = await self._blocking(decode)
        else:
            infer_request, plan = decode()
        response = await asyncio.wrap_future(self._core.infer(infer_request))
        shm = infer_request.shared_memory_outputs()
        if codec.response_is_heavy(response, plan, shm):
            chunks, json_length = await self._blocking(codec.encode_infer_response, response,
                                                       plan, shm)
        else:
            chunks, json_length = codec.encode_infer_response(response, plan, shm)
        headers: dict[str, str] = {}
        content_type = JSON
        if json_length is not None:
            content_type = "application/octet-stream"
            headers["Inference-Header-Content-Length"] = str(json_length)
        encoding = _accepted_encoding(request.headers.get("accept-encoding", ""))
        if encoding != "identity":
            chunks = [_compress(encoding, b"".join(chunks))]
            headers["Content-Encoding"] = encoding
        return Response(200, chunks, content_type=content_type, headers=headers)


def _header_length(text: str | None, content_length: int) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise invalid_arg(f"Unable to parse Inference-Header-Content-Length, got: {text}") from None
    if value < 0 or value > content_length:
        raise invalid_arg(f"inference header size should be in range (0, {content_length}), "
                          f"got: {text}")
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
        raise invalid_arg(f"decompressed request body exceeds the maximum allowed input size of "
                          f"{limit} bytes. Use --http-max-input-size to increase the limit.")
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
# HTTP/1.1 transport
# ------------------------------------------------------------------------------------------

async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(400, "malformed chunked request body") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers
                pass
            return b"".join(parts)
        total += size
        if total > limit:
            raise HttpError(413, f"request body exceeds {limit} bytes")
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "malformed chunked request body")


def _head(status: int, headers: dict[str, str], length: int, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}"]
    lines.extend(f"{k}: {v}" for k, v in headers.items())
    lines.append(f"Content-Length: {length}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class HttpServer(EventLoopServer):
    """Runs the HTTP endpoint on its own event loop thread; start() returns once it listens."""

    service_name = "HTTPService"

    def __init__(self, core: InferenceServer, *, address: str = "127.0.0.1", port: int = 8000,
                 max_input_size: int = DEFAULT_MAX_INPUT_SIZE) -> None:
        super().__init__(address=address, port=port)
        self._core = core
        self._service = HttpService(core, max_input_size=max_input_size)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self._idle: set[asyncio.StreamWriter] = set()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._connection, self.address, self.port, limit=MAX_HEADER_SIZE,
            reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self, grace: float) -> None:
        self._server.close()
        # In-flight requests get the grace period; idle keep-alive connections close at once.
        for writer in list(self._idle):
            writer.close()
        if self._connections:
            _, pending = await asyncio.wait(list(self._connections), timeout=grace)
            for task in pending:
                task.cancel()
        await self._server.wait_closed()

    # ---------------------------------------------------------------- one connection
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            await self._serve_connection(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            _log.exception("HTTP connection failed")
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve_connection(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        while not self._stop_requested.is_set():
            # While waiting for its next request a connection is idle: stop() closes it.
            self._idle.add(writer)
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                await self._send(writer, error_response(431, "request header is too large"), False)
                return
            finally:
                self._idle.discard(writer)
            try:
                request, keep_alive = await self._read_request(head, reader, writer)
            except HttpError as exc:
                await self._send(writer, error_response(exc.status, exc.message), False)
                return
            except asyncio.LimitOverrunError:   # a chunk-size line longer than 64 KiB
                await self._send(writer, error_response(400, "malformed chunked request body"),
                                 False)
                return
            response = await self._service.handle(request)
            await self._send(writer, response, keep_alive)
            if not keep_alive:
                return

    async def _read_request(self, head: bytes, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> tuple[Request, bool]:
        try:
            text = head.decode("latin-1")
            request_line, *header_lines = text[:-4].split("\r\n")
            method, target, version = request_line.split(" ")
        except ValueError:
            raise HttpError(400, "malformed HTTP request line") from None
        if not version.startswith("HTTP/1."):
            raise HttpError(400, f"unsupported protocol '{version}'")
        headers: dict[str, str] = {}
        for line in header_lines:
            key, sep, value = line.partition(":")
            if not sep:
                raise HttpError(400, "malformed HTTP header line")
            headers[key.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        keep_alive = ("close" not in connection) if version == "HTTP/1.1" \
            else ("keep-alive" in connection)

        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = await _read_chunked(reader, MAX_BODY_SIZE)
        else:
            length_text = headers.get("content-length", "0")
            try:
                length = int(length_text)
            except ValueError:
                raise HttpError(400, f"Unable to parse Content-Length, got: {length_text}") from None
            if length < 0 or length > MAX_BODY_SIZE:
                raise HttpError(400, f"Unable to parse Content-Length, value is out of range "
                                     f"[ 0, {MAX_BODY_SIZE} ], got: {length_text}")
            body = await reader.readexactly(length) if length else b""
        path = target.split("?", 1)[0]
        return Request(method, path, headers, body), keep_alive

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, response: Response, keep_alive: bool) -> None:
        length = sum(len(c) for c in response.chunks)
        writer.write(_head(response.status, response.headers, length, keep_alive))
        for chunk in response.chunks:
            if len(chunk):
                writer.write(chunk)
        await writer.drain()
