"""KServe v2 gRPC endpoint compatible with Triton's ``inference.GRPCInferenceService``.

The servicer only converts (``grpc_codec``) and delegates to the shared
:class:`~triton_ros.core.server.InferenceServer`; errors keep the status code Triton uses
(INVALID_ARG -> INVALID_ARGUMENT, UNSUPPORTED -> UNIMPLEMENTED, ...). It runs on ``grpc.aio`` in
a thread of its own, so the same process can also spin a ROS node. Requests from many clients
reach the same model batchers as every other frontend. The shared memory RPCs delegate to the
core's region registry (system shared memory; a CUDA region is refused as INVALID_ARGUMENT, as
tritonserver without a GPU does).
TraceSetting delegates to the core's trace manager, and a traced inference adds Triton's
GRPC_* timestamps to its trace (core/tracer.py). An RPC of tritonclient's protos that the
servicer does not implement answers UNIMPLEMENTED (never the generated stub's exception).

The inference RPCs are the hot path:

- ``ModelInfer`` and ``ModelStreamInfer`` take and give serialized bytes (no generated
  (de)serializer): ``grpc_codec`` reads the input tensors of a request larger than
  ``SMALL_MESSAGE_BYTES`` as views of the received message (smaller ones go through protobuf,
  which is then cheaper) and writes the output tensors straight into the reply.
- The model is looked up before any tensor is decoded, so a request for an unknown model costs
  nothing but its parse. A request whose decoding is slow (large BYTES tensors, parsed element by
  element, or a message larger than ``OFF_LOOP_BYTES``) is parsed and decoded on a small thread
  pool, so the event loop keeps answering other clients (ServerLive among them) meanwhile.
- Completions come back from the model's instance threads through :class:`LoopHandoff`: one
  event-loop wake-up for all the responses of a batch instead of one per response.
- A stream has at most ``STREAM_BACKLOG`` requests whose final response is not yet sent: past
  that it stops reading, so a client that does not read its responses holds back only itself
  (HTTP/2 flow control) and the server's memory stays bounded.

``ModelStreamInfer`` serves decoupled models (docs/stateful.md): each request's responses come
through its response sink as the model sends them, with Triton's ``triton_final_response``;
``ModelInfer`` refuses such a model as tritonserver does.

When the endpoint stops, every open stream stops reading at once, sends the responses of the
requests it already took, and ends with UNAVAILABLE ("Server is stopping"), so that requests the
client wrote after that get an error rather than silence: an idle stream no longer holds the
process's exit for the whole grace period (``exit_timeout_secs``), after which grpcio cancelled
it anyway.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ...core.errors import StatusCode, TritonRosError, as_triton_error, invalid_arg, unsupported
from ...core.infer_request import InferRequest
from ...core.server import InferenceServer
from . import grpc_codec as codec
from ..event_loop_server import EventLoopServer
from .options import GrpcOptions
from ..limits import GRPC_RESTRICTED_PREFIX, Restrictions

_log = logging.getLogger("triton_ros.grpc")

GRPC_STATUS = {
    StatusCode.UNKNOWN: grpc.StatusCode.UNKNOWN,
    StatusCode.INTERNAL: grpc.StatusCode.INTERNAL,
    StatusCode.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    StatusCode.INVALID_ARG: grpc.StatusCode.INVALID_ARGUMENT,
    StatusCode.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    StatusCode.UNSUPPORTED: grpc.StatusCode.UNIMPLEMENTED,
    StatusCode.ALREADY_EXISTS: grpc.StatusCode.ALREADY_EXISTS,
    StatusCode.CANCELLED: grpc.StatusCode.CANCELLED,
}

# gRPC method -> Triton's protocol group (--grpc-restricted-protocol).
PROTOCOL_GROUPS = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}

# Messages larger than this are parsed and decoded off the event loop (a parse is a copy-speed
# walk, about 1 ms per MB here); smaller ones are decoded on the loop unless they hold large BYTES
# tensors (grpc_codec.large_payload).
OFF_LOOP_BYTES = 4 << 20
# Up to this size a request is parsed by protobuf alone (copying its few tensor bytes costs less
# than walking the wire format in Python); larger ones have their tensors taken as views.
SMALL_MESSAGE_BYTES = 16 << 10
# Requests of one ModelStreamInfer stream whose responses are not yet sent, at most.
STREAM_BACKLOG = 64
# How a stream that was still open when the endpoint stopped ends (after its responses).
STREAM_STOPPING_MESSAGE = "Server is stopping, the stream accepts no more inference requests"


class LoopHandoff:
    """Calls from other threads into one event loop, coalesced: the first call of a burst wakes
    the loop, the others join it (``call_soon_threadsafe`` writes to the loop's self-pipe each
    time, which under load costs more than the call itself)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: collections.deque = collections.deque()
        self._armed = False

    def post(self, fn: Callable[[Any], None], arg: Any) -> None:
        with self._lock:
            self._calls.append((fn, arg))
            if self._armed:
                return
            self._armed = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: the server has stopped, no one waits
            pass

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, collections.deque()
            self._armed = False
        for fn, arg in calls:
            fn(arg)

    def wait(self, future: Future) -> asyncio.Future:
        """An asyncio future that completes (with None: read ``future`` itself) when ``future``
        is done; cancelling it does not cancel ``future``.

        The waiter must not hold ``future``: ``future`` keeps its done-callback, which holds the
        waiter, so a waiter holding ``future`` made a reference cycle per request that only the
        garbage collector freed, with the response's tensors in it (views of the batch's output
        buffer, which the backend then could not reuse)."""
        waiter = self._loop.create_future()
        future.add_done_callback(lambda _: self.post(_resolve, waiter))
        return waiter


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Capture:
    """Stands in for a server to collect the generated method handlers."""

    def add_generic_rpc_handlers(self, handlers) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        self.service, self.handlers = service, handlers


class GrpcInferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Converts and delegates; holds no state of its own beyond its loop's hand-off."""

    def __init__(self, core: InferenceServer) -> None:
        self._core = core
        self._handoff: LoopHandoff | None = None
        self._decoder: ThreadPoolExecutor | None = None
        self._readers: set[asyncio.Task] = set()  # of the open ModelStreamInfer streams
        self._stopping = False

    def add_to_server(self, server) -> None:
        """Register every RPC on ``server`` (a ``grpc.aio.Server``): the generated handlers, but
        ModelInfer and ModelStreamInfer take and give bytes (see the module docstring)."""
        capture = _Capture()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(self, capture)
        handlers = dict(capture.handlers)
        base = service_pb2_grpc.GRPCInferenceServiceServicer
        for name, handler in handlers.items():
            # An RPC of a newer tritonclient's protos that this servicer does not implement
            # answers UNIMPLEMENTED, cleanly (the generated stub raises: a traceback per call).
            if getattr(type(self), name, None) is getattr(base, name, None):
                handlers[name] = _unimplemented(name, handler)
        for name, handler in handlers.items():
            if not handler.request_streaming and not handler.response_streaming:
                handlers[name] = _parsed(handler)
        handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(self.ModelInfer)
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(self.ModelStreamInfer)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(capture.service, handlers),)
        )
        server.add_registered_method_handlers(capture.service, handlers)

    def stop_streams(self) -> None:
        """On the endpoint's loop, as it stops: every open stream reads no more requests; each
        ends with UNAVAILABLE once the responses of the requests it took are sent."""
        self._stopping = True
        for reader in list(self._readers):
            reader.cancel()

    def close(self) -> None:
        if self._decoder is not None:
            self._decoder.shutdown(wait=False, cancel_futures=True)

    def _loop_handoff(self) -> LoopHandoff:
        if self._handoff is None:
            self._handoff = LoopHandoff(asyncio.get_running_loop())
        return self._handoff

    async def _decode(self, data: bytes, *, streaming: bool = False):
        """Serialized ModelInferRequest -> (message, core request, whether its model is
        decoupled). The model is looked up first (an unknown one, or a decoupled one outside a
        stream, costs no decoding); slow decodes run on the decoder threads."""
        if len(data) > OFF_LOOP_BYTES:
            return await asyncio.get_running_loop().run_in_executor(
                self._decoder_pool(), self._decode_now, data, None, streaming
            )
        msg, raws = self._parse(data)
        decoupled = self._decoupled(msg, streaming)
        if codec.large_payload(msg, raws):
            return await asyncio.get_running_loop().run_in_executor(
                self._decoder_pool(), self._decode_now, data, (msg, raws), streaming
            )
        return msg, codec.decode_infer_request(msg, self._core.shared_memory, raws), decoupled

    def _decode_now(self, data: bytes, parsed, streaming: bool):
        """:meth:`_decode` on the calling thread, from ``data`` or its ``(msg, raws)``."""
        if parsed is None:
            parsed = self._parse(data)
        msg, raws = parsed
        decoupled = self._decoupled(msg, streaming)
        return msg, codec.decode_infer_request(msg, self._core.shared_memory, raws), decoupled

    def _decoupled(self, msg, streaming: bool) -> bool:
        """Whether the request's model is decoupled; outside a stream such a model is refused
        as tritonserver refuses it (UNSUPPORTED)."""
        decoupled = self._core.get_model(
            msg.model_name, codec.parse_version(msg.model_version)
        ).config.decoupled
        if decoupled and not streaming:
            raise unsupported(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        return decoupled

    @staticmethod
    def _parse(data: bytes):
        """Serialized ModelInferRequest -> (message, its raw input contents)."""
        try:
            if len(data) <= SMALL_MESSAGE_BYTES:  # protobuf's copy is cheaper than the walk
                msg = pb.ModelInferRequest.FromString(data)
                return msg, msg.raw_input_contents
            return codec.parse_infer_request(data)
        except (codec.MalformedMessage, DecodeError) as exc:
            raise _Malformed(str(exc)) from None

    def _decoder_pool(self) -> ThreadPoolExecutor:
        if self._decoder is None:
            self._decoder = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grpc-decode")
        return self._decoder

    async def _call(self, context, fn: Callable[[], Any], *, blocking: bool = False):
        """Run fn, mapping core errors to the gRPC status Triton would return."""
        try:
            if blocking:
                return await asyncio.get_running_loop().run_in_executor(None, fn)
            return fn()
        except TritonRosError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        except Exception as exc:  # an unexpected fault answers this call only
            _log.exception("internal error in gRPC handler")
            await context.abort(grpc.StatusCode.INTERNAL, as_triton_error(exc).message)

    # ---------------------------------------------------------------- health & metadata
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=self._core.is_live())

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self._core.is_ready())

    async def ModelReady(self, request, context):
        version = await self._call(context, lambda: codec.parse_version(request.version))
        return pb.ModelReadyResponse(ready=self._core.model_ready(request.name, version))

    async def ServerMetadata(self, request, context):
        return codec.encode_server_metadata(self._core.metadata())

    async def ModelMetadata(self, request, context):
        return await self._call(
            context,
            lambda: codec.encode_model_metadata(
                self._core.model_metadata(request.name, codec.parse_version(request.version))
            ),
        )

    async def ModelConfig(self, request, context):
        return await self._call(
            context,
            lambda: pb.ModelConfigResponse(
                config=self._core.model_config(
                    request.name, codec.parse_version(request.version)
                ).proto
            ),
        )

    async def ModelStatistics(self, request, context):
        return await self._call(
            context,
            lambda: codec.encode_statistics(
                self._core.model_statistics(request.name, codec.parse_version(request.version))
            ),
        )

    # ---------------------------------------------------------------- repository
    async def RepositoryIndex(self, request, context):
        return await self._call(
            context,
            lambda: codec.encode_index(self._core.repository_index(ready_only=request.ready)),
            blocking=True,
        )

    async def RepositoryModelLoad(self, request, context):
        def load():
            config_json, files = codec.decode_load_parameters(request)
            self._core.load_model(request.model_name, config_json=config_json, files=files or None)
            return pb.RepositoryModelLoadResponse()

        return await self._call(context, load, blocking=True)

    async def RepositoryModelUnload(self, request, context):
        def unload():
            dependents = False
            if "unload_dependents" in request.parameters:
                dependents = bool(request.parameters["unload_dependents"].bool_param)
            self._core.unload_model(request.model_name, unload_dependents=dependents)
            return pb.RepositoryModelUnloadResponse()

        return await self._call(context, unload, blocking=True)

    # ---------------------------------------------------------------- shared memory
    async def SystemSharedMemoryStatus(self, request, context):
        return await self._call(
            context,
            lambda: codec.encode_system_shm_status(
                self._core.shared_memory.system_status(request.name)
            ),
        )

    async def SystemSharedMemoryRegister(self, request, context):
        def register():
            self._core.shared_memory.register_system(
                request.name, request.key, request.offset, request.byte_size
            )
            return pb.SystemSharedMemoryRegisterResponse()

        return await self._call(context, register)

    async def SystemSharedMemoryUnregister(self, request, context):
        def unregister():
            self._core.shared_memory.unregister_system(request.name)
            return pb.SystemSharedMemoryUnregisterResponse()

        return await self._call(context, unregister)

    async def CudaSharedMemoryStatus(self, request, context):
        return await self._call(
            context,
            lambda: codec.encode_cuda_shm_status(
                self._core.shared_memory.cuda_status(request.name)
            ),
        )

    async def CudaSharedMemoryRegister(self, request, context):
        def register():
            self._core.shared_memory.register_cuda(
                request.name, device_id=request.device_id, byte_size=request.byte_size
            )
            return pb.CudaSharedMemoryRegisterResponse()

        return await self._call(context, register)

    async def CudaSharedMemoryUnregister(self, request, context):
        def unregister():
            self._core.shared_memory.unregister_cuda(request.name)
            return pb.CudaSharedMemoryUnregisterResponse()

        return await self._call(context, unregister)

    # ---------------------------------------------------------------- logging
    async def LogSettings(self, request, context):
        def settings():
            changes = {k: codec.param_value(v) for k, v in request.settings.items()}
            values = (
                self._core.log_settings.update(changes)
                if changes
                else self._core.log_settings.get()
            )
            return codec.encode_log_settings(values)

        return await self._call(context, settings)

    # ---------------------------------------------------------------- trace
    async def TraceSetting(self, request, context):
        def settings():
            changes = {k: list(v.value) or None for k, v in request.settings.items()}
            return codec.encode_trace_settings(
                self._core.trace_setting(request.model_name, changes or None)
            )

        return await self._call(context, settings)

    # ---------------------------------------------------------------- inference
    async def ModelInfer(self, request: bytes, context) -> bytes:
        received = time.monotonic_ns() if self._core.tracer.active else 0
        try:
            _, infer_request, _ = await self._decode(request)
            infer_request.caller_releases_trace = True
            future = self._core.infer(infer_request)
            trace = infer_request.trace
            if trace is not None:
                _trace_call(context, trace, received)
            if not future.done():  # done already when executed directly, or refused
                await self._loop_handoff().wait(future)
            response = future.result()
            shm = infer_request.shared_memory_outputs()
            if codec.large_response(response):
                reply = await asyncio.get_running_loop().run_in_executor(
                    self._decoder_pool(), codec.serialize_infer_response, response, shm
                )
            else:
                reply = codec.serialize_infer_response(response, shm)
            if trace is not None:
                trace.capture("GRPC_SEND_START")
            return reply
        except TritonRosError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        except _Malformed as exc:
            await context.abort(grpc.StatusCode.INTERNAL, f"Exception deserializing request: {exc}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log.exception("internal error in ModelInfer")
            await context.abort(grpc.StatusCode.INTERNAL, as_triton_error(exc).message)

    async def ModelStreamInfer(self, request_iterator, context):
        """Bidirectional stream (see :class:`_StreamCall`): every response carries
        ``triton_final_response``; a non-decoupled request's one response leaves in the order
        the requests came, as tritonserver sends them, and a decoupled request's responses as
        they come. At most STREAM_BACKLOG requests wait for their final response to be sent.
        A stream that ends before its requests did (the client went away) cancels them."""
        out: asyncio.Queue = asyncio.Queue()  # (bytes, the call it ends or None) or DONE
        room = asyncio.Semaphore(STREAM_BACKLOG)
        handoff = self._loop_handoff()
        order: collections.deque = collections.deque()  # non-decoupled calls, in arrival order
        live: set = set()  # calls whose final is not sent yet
        state = {"reading": True, "cut": False}
        done = object()

        def finish(call: _StreamCall) -> None:
            """The call's last item is written (or it had none): it leaves the backlog, and lets
            go of its request (whose future's callback holds the call: no cycle)."""
            live.discard(call)
            call.request = None
            room.release()
            if call.trace is not None:
                call.trace.release()
            if not state["reading"] and not live:
                out.put_nowait(done)

        def emit(call: _StreamCall, item: bytes | None, final: bool) -> None:
            if call.decoupled:
                if item is not None:
                    out.put_nowait((item, call if final else None))
                elif final:
                    finish(call)
                return
            call.item = item
            while order and order[0].item is not None:
                head = order.popleft()
                out.put_nowait((head.item, head))

        def respond(item) -> None:
            call, response, final = item
            if response is None:  # a decoupled model's final flag, alone
                emit(call, call.empty_final() if final and call.empty_final_wanted else None, final)
            elif isinstance(response, TritonRosError):
                emit(call, call.model_error(response.message, final), final)
            elif not call.decoupled and codec.large_response(response):
                serialized = asyncio.get_running_loop().run_in_executor(
                    self._decoder_pool(), codec.serialize_infer_response, response, call.shm, final
                )
                serialized.add_done_callback(lambda f: emit(call, _serialized(call, f), final))
            else:
                emit(
                    call,
                    _serialized(
                        call, lambda: codec.serialize_infer_response(response, call.shm, final)
                    ),
                    final,
                )

        def refused(item) -> None:
            call, future = item
            error = as_triton_error(future.exception())
            if call.request is not None and call.request.issued:
                emit(call, call.model_error(error.message, True), True)
            else:
                emit(call, call.issue_error(error.message), True)

        async def reader() -> None:
            try:
                while True:
                    await room.acquire()
                    try:
                        data = await request_iterator.__anext__()
                    except StopAsyncIteration:
                        room.release()
                        break
                    received = time.monotonic_ns() if self._core.tracer.active else 0
                    try:
                        msg, infer_request, decoupled = await self._decode(data, streaming=True)
                    except (TritonRosError, _Malformed, asyncio.CancelledError) as exc:
                        header = _header_of(data) if not isinstance(exc, _Malformed) else None
                        call = _StreamCall(header, None, False)
                        live.add(call)
                        order.append(call)
                        emit(
                            call,
                            call.issue_error(
                                STREAM_STOPPING_MESSAGE
                                if isinstance(exc, asyncio.CancelledError)
                                else exc.message
                                if isinstance(exc, TritonRosError)
                                else f"Exception deserializing request: {exc}"
                            ),
                            True,
                        )
                        if isinstance(exc, asyncio.CancelledError):
                            raise  # taken, not queued: answered all the same
                        continue
                    call = _StreamCall(msg, infer_request, decoupled)
                    live.add(call)
                    if not decoupled:
                        order.append(call)
                    infer_request.caller_releases_trace = True
                    infer_request.response_sink = lambda response, final, call=call: handoff.post(
                        respond, (call, response, final)
                    )
                    future = self._core.infer(infer_request)
                    call.trace = trace = infer_request.trace
                    if trace is not None:
                        received = received or time.monotonic_ns()
                        trace.capture("GRPC_WAITREAD_START", received)
                        trace.capture("GRPC_WAITREAD_END", received)
                    future.add_done_callback(
                        lambda f, call=call: (
                            f.exception() is not None and handoff.post(refused, (call, f))
                        )
                    )
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                state["cut"] = True  # stop_streams: read no more, answer what was taken
            finally:
                state["reading"] = False
                if not live:
                    out.put_nowait(done)

        task = asyncio.ensure_future(reader())
        self._readers.add(task)
        if self._stopping:  # opened as the endpoint stops
            task.cancel()
        try:
            while True:
                entry = await out.get()
                if entry is done:
                    break
                item, ends = entry
                trace = ends.trace if ends is not None else None
                if trace is not None:
                    trace.capture("GRPC_SEND_START")
                yield item
                if trace is not None:
                    trace.capture("GRPC_SEND_END")
                if ends is not None:
                    finish(ends)
            await task  # a reader's own failure ends the stream with its error
            if state["cut"]:
                await context.abort(grpc.StatusCode.UNAVAILABLE, STREAM_STOPPING_MESSAGE)
        finally:
            self._readers.discard(task)
            task.cancel()
            for call in list(live):  # the stream ended first: nobody reads their responses
                if call.request is not None:
                    call.request.cancel()
                if call.trace is not None:
                    call.trace.release()
                    call.trace = None


class _StreamCall:
    """One request of a ModelStreamInfer stream: what its responses need (its message's id,
    model and version, its outputs in shared memory, whether its model is decoupled and the
    client wants an empty final response) and, for a non-decoupled one, its one response
    once ready (sent in request order)."""

    __slots__ = ("msg", "request", "decoupled", "shm", "trace", "item", "empty_final_wanted")

    def __init__(self, msg, request: InferRequest | None, decoupled: bool) -> None:
        self.msg = msg
        self.request = request
        self.decoupled = decoupled
        self.shm = request.shared_memory_outputs() if request is not None else None
        self.trace = None
        self.item: bytes | None = None
        param = msg.parameters.get("triton_enable_empty_final_response") if msg else None
        self.empty_final_wanted = bool(param is not None and param.bool_param)

    def issue_error(self, message: str) -> bytes:
        return codec.stream_error(message, self.msg.id if self.msg else "")

    def model_error(self, message: str, final: bool) -> bytes:
        msg = self.msg
        return codec.stream_error(message, msg.id, msg.model_name, msg.model_version, final)

    def empty_final(self) -> bytes:
        msg = self.msg
        return codec.empty_final_response(msg.id, msg.model_name, msg.model_version)


def _serialized(call: _StreamCall, serialize) -> bytes:
    """A response serialized (``serialize()``, or a done future of it), or the error item
    of writing it (an output into shared memory, say)."""
    try:
        return codec.serialize_stream_response(
            serialize() if callable(serialize) else serialize.result()
        )
    except Exception as exc:
        return call.model_error(as_triton_error(exc).message, True)


class RestrictionInterceptor(grpc.aio.ServerInterceptor):
    """--grpc-restricted-protocol: a call to a restricted protocol group without the metadata
    ``triton-grpc-protocol-<key>: <value>`` ends with UNAVAILABLE, as in tritonserver."""

    def __init__(self, restrictions: Restrictions) -> None:
        self._restrictions = restrictions

    async def intercept_service(self, continuation, handler_call_details):
        method = handler_call_details.method.rsplit("/", 1)[-1]
        group = PROTOCOL_GROUPS.get(method)
        restriction = self._restrictions.get(group) if group else None
        if restriction is not None:
            header = GRPC_RESTRICTED_PREFIX + restriction[0]
            metadata = dict(handler_call_details.invocation_metadata or ())
            if metadata.get(header) != restriction[1]:
                return _refusal(method, f"This protocol is restricted, expecting header '{header}'")
        return await continuation(handler_call_details)


def _refusal(method: str, message: str) -> grpc.RpcMethodHandler:
    async def unary(request, context):
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    async def stream(request_iterator, context):
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)
        yield  # pragma: no cover  (makes this an async generator)

    if method == "ModelStreamInfer":
        return grpc.stream_stream_rpc_method_handler(stream)
    return grpc.unary_unary_rpc_method_handler(unary)


def server_credentials(options: GrpcOptions) -> grpc.ServerCredentials:
    """TLS credentials from the PEM files named by --grpc-server-cert/-key/-root-cert; a file
    that cannot be read is an INVALID_ARG error naming it."""

    def read(path: str, flag: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise invalid_arg(f"{flag}: cannot read '{path}': {exc.strerror}") from None

    key = read(options.server_key, "--grpc-server-key")
    cert = read(options.server_cert, "--grpc-server-cert")
    root = read(options.root_cert, "--grpc-root-cert") if options.root_cert else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=root, require_client_auth=options.use_ssl_mutual
    )


def _trace_call(context, trace, received: int) -> None:
    """A traced ModelInfer (Triton's gRPC timestamps): grpcio hands the handler a message it
    has read, so both GRPC_WAITREAD_START and _END are when the handler received it;
    GRPC_SEND_END is when the call ended, after the reply was handed to grpcio
    (GRPC_SEND_START). The call's end releases the trace, whatever its outcome."""
    received = received or time.monotonic_ns()  # tracing turned on since it arrived
    trace.capture("GRPC_WAITREAD_START", received)
    trace.capture("GRPC_WAITREAD_END", received)

    def ended(_) -> None:
        if trace.captured("GRPC_SEND_START"):
            trace.capture("GRPC_SEND_END")
        trace.release()

    context.add_done_callback(ended)


def _unimplemented(name: str, generated: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``generated`` that answers UNIMPLEMENTED."""
    message = f"{name} is not implemented by triton-ros-server"

    async def unary(request, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    async def stream(request_iterator, context):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)
        yield  # pragma: no cover  (makes this an async generator)

    kinds = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }
    make = kinds[(generated.request_streaming, generated.response_streaming)]
    return make(
        stream if generated.response_streaming else unary,
        request_deserializer=generated.request_deserializer,
        response_serializer=generated.response_serializer,
    )


_UNPARSABLE = object()  # what _parsed's deserializer gives for bytes that do not parse


def _parsed(generated: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``generated`` (unary) with a request that does not parse answered INTERNAL "Unable to
    parse request", as tritonserver does (grpc.aio logs a traceback and answers UNKNOWN)."""
    deserialize, behavior = generated.request_deserializer, generated.unary_unary

    def parse(data: bytes):
        try:
            return deserialize(data)
        except DecodeError:
            return _UNPARSABLE

    async def call(request, context):
        if request is _UNPARSABLE:
            await context.abort(grpc.StatusCode.INTERNAL, "Unable to parse request")
        return await behavior(request, context)

    return grpc.unary_unary_rpc_method_handler(
        call, request_deserializer=parse, response_serializer=generated.response_serializer
    )


class _Malformed(Exception):
    """The bytes of an inference request are not a ModelInferRequest."""


def _header_of(data: bytes):
    """The request's id and model (for an error answer on a stream), or None if unreadable."""
    try:
        return codec.parse_infer_request(data)[0]
    except codec.MalformedMessage:
        return None


class GrpcServer(EventLoopServer):
    """Runs the gRPC endpoint on its own event loop thread; start() returns once it listens.
    ``options`` (:class:`~triton_ros.frontend.grpc.options.GrpcOptions`) sets message sizes,
    keepalive, connection timeouts, TLS and restricted protocols."""

    service_name = "GRPCInferenceService"

    def __init__(
        self,
        core: InferenceServer,
        *,
        address: str = "127.0.0.1",
        port: int = 8001,
        options: GrpcOptions | None = None,
        max_concurrent_rpcs: int | None = None,
    ) -> None:
        super().__init__(address=address, port=port)
        self._core = core
        self._options = (options or GrpcOptions()).validate()
        self._max_concurrent_rpcs = max_concurrent_rpcs or self._options.max_concurrent_rpcs
        self._credentials = server_credentials(self._options) if self._options.use_ssl else None
        self._server: grpc.aio.Server | None = None

    async def _listen(self) -> None:
        interceptors = []
        if self._options.restrictions:
            interceptors.append(RestrictionInterceptor(self._options.restrictions))
        self._server = grpc.aio.server(
            options=self._options.channel_options(),
            interceptors=interceptors,
            maximum_concurrent_rpcs=self._max_concurrent_rpcs,
        )
        self._service = GrpcInferenceService(self._core)
        self._service.add_to_server(self._server)
        if self._credentials is not None:
            bound = self._server.add_secure_port(self.target, self._credentials)
        else:
            bound = self._server.add_insecure_port(self.target)
        if bound == 0:
            raise OSError(f"cannot bind gRPC endpoint to {self.target}")
        self.port = bound
        await self._server.start()

    async def _shutdown(self, grace: float) -> None:
        # In-flight calls get the grace period; new calls are refused at once; open streams
        # stop reading and end once their responses are sent (not at the end of the grace).
        self._service.stop_streams()
        await self._server.stop(grace)
        self._service.close()
