"""KServe v2 gRPC endpoint compatible with Triton's ``inference.GRPCInferenceService``.

The servicer only converts (``grpc_codec``) and delegates to the shared
:class:`~triton_ros.core.server.InferenceServer`; errors keep the status code Triton uses
(INVALID_ARG -> INVALID_ARGUMENT, UNSUPPORTED -> UNIMPLEMENTED, ...). It runs on ``grpc.aio`` in
a thread of its own, so the same process can also spin a ROS node. Requests from many clients
reach the same model batchers as every other frontend. The shared memory RPCs delegate to the
core's region registry (system shared memory; CUDA shared memory is refused as UNIMPLEMENTED).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ..core.errors import StatusCode, TritonRosError, as_triton_error, invalid_arg
from ..core.server import InferenceServer
from . import grpc_codec as codec
from .event_loop_server import EventLoopServer
from .options import GRPC_RESTRICTED_PREFIX, GrpcOptions, Restrictions

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
    "ServerLive": "health", "ServerReady": "health", "ModelReady": "health",
    "ServerMetadata": "metadata", "ModelMetadata": "metadata",
    "ModelInfer": "inference", "ModelStreamInfer": "inference",
    "ModelConfig": "model-config", "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository", "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory", "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory", "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory", "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace", "LogSettings": "logging",
}


class GrpcInferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Converts and delegates; holds no state of its own."""

    def __init__(self, core: InferenceServer) -> None:
        self._core = core

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
        return await self._call(context, lambda: codec.encode_model_metadata(
            self._core.model_metadata(request.name, codec.parse_version(request.version))))

    async def ModelConfig(self, request, context):
        return await self._call(context, lambda: pb.ModelConfigResponse(
            config=self._core.model_config(request.name, codec.parse_version(request.version)).proto))

    async def ModelStatistics(self, request, context):
        return await self._call(context, lambda: codec.encode_statistics(
            self._core.model_statistics(request.name, codec.parse_version(request.version))))

    # ---------------------------------------------------------------- repository
    async def RepositoryIndex(self, request, context):
        return await self._call(context, lambda: codec.encode_index(
            self._core.repository_index(ready_only=request.ready)), blocking=True)

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
        return await self._call(context, lambda: codec.encode_system_shm_status(
            self._core.shared_memory.system_status(request.name)))

    async def SystemSharedMemoryRegister(self, request, context):
        def register():
            self._core.shared_memory.register_system(request.name, request.key, request.offset,
                                                     request.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()
        return await self._call(context, register)

    async def SystemSharedMemoryUnregister(self, request, context):
        def unregister():
            self._core.shared_memory.unregister_system(request.name)
            return pb.SystemSharedMemoryUnregisterResponse()
        return await self._call(context, unregister)

    async def CudaSharedMemoryStatus(self, request, context):
        return await self._call(context, lambda: codec.encode_cuda_shm_status(
            self._core.shared_memory.cuda_status(request.name)))

    async def CudaSharedMemoryRegister(self, request, context):
        def register():
            self._core.shared_memory.register_cuda(request.name, device_id=request.device_id,
                                                   byte_size=request.byte_size)
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
            values = (self._core.log_settings.update(changes) if changes
                      else self._core.log_settings.get())
            return codec.encode_log_settings(values)
        return await self._call(context, settings)

    # ---------------------------------------------------------------- inference
    async def ModelInfer(self, request, context):
        try:
            infer_request = codec.decode_infer_request(request, self._core.shared_memory)
            response = await asyncio.wrap_future(self._core.infer(infer_request))
            return codec.encode_infer_response(response, infer_request.shared_memory_outputs())
        except TritonRosError as exc:
            await context.abort(GRPC_STATUS[exc.code], exc.message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _log.exception("internal error in ModelInfer")
            await context.abort(grpc.StatusCode.INTERNAL, as_triton_error(exc).message)

    async def ModelStreamInfer(self, request_iterator, context):
        """Bidirectional stream: responses go back as each request completes, in any order."""
        out: asyncio.Queue = asyncio.Queue()
        done = object()
        state = {"in_flight": 0, "reading": True}

        def finish_one(item) -> None:
            out.put_nowait(item)
            state["in_flight"] -= 1
            if not state["reading"] and state["in_flight"] == 0:
                out.put_nowait(done)

        def error_item(msg, message: str) -> pb.ModelStreamInferResponse:
            return pb.ModelStreamInferResponse(
                error_message=message,
                infer_response=pb.ModelInferResponse(id=msg.id, model_name=msg.model_name,
                                                     model_version=msg.model_version))

        async def reader() -> None:
            try:
                async for msg in request_iterator:
                    state["in_flight"] += 1
                    try:
                        infer_request = codec.decode_infer_request(msg, self._core.shared_memory)
                    except TritonRosError as exc:
                        finish_one(error_item(msg, exc.message))
                        continue
                    future = asyncio.wrap_future(self._core.infer(infer_request))

                    def on_done(f, msg=msg, shm=infer_request.shared_memory_outputs()) -> None:
                        try:
                            item = pb.ModelStreamInferResponse(
                                infer_response=codec.encode_infer_response(f.result(), shm))
                        except Exception as exc:  # the model's error, or writing an output
                            item = error_item(msg, as_triton_error(exc).message)
                        finish_one(item)

                    future.add_done_callback(on_done)
            finally:
                state["reading"] = False
                if state["in_flight"] == 0:
                    out.put_nowait(done)

        task = asyncio.ensure_future(reader())
        try:
            while True:
                item = await out.get()
                if item is done:
                    break
                yield item
        finally:
            task.cancel()


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
                return _refusal(method, f"This protocol is restricted, expecting header "
                                        f"'{header}'")
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
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=root,
                                       require_client_auth=options.use_ssl_mutual)


class GrpcServer(EventLoopServer):
    """Runs the gRPC endpoint on its own event loop thread; start() returns once it listens.
    ``options`` (:class:`~triton_ros.frontend.options.GrpcOptions`) sets message sizes,
    keepalive, connection timeouts, TLS and restricted protocols."""

    service_name = "GRPCInferenceService"

    def __init__(self, core: InferenceServer, *, address: str = "127.0.0.1", port: int = 8001,
                 options: GrpcOptions | None = None,
                 max_concurrent_rpcs: int | None = None) -> None:
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
        self._server = grpc.aio.server(options=self._options.channel_options(),
                                       interceptors=interceptors,
                                       maximum_concurrent_rpcs=self._max_concurrent_rpcs)
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
            GrpcInferenceService(self._core), self._server)
        if self._credentials is not None:
            bound = self._server.add_secure_port(self.target, self._credentials)
        else:
            bound = self._server.add_insecure_port(self.target)
        if bound == 0:
            raise OSError(f"cannot bind gRPC endpoint to {self.target}")
        self.port = bound
        await self._server.start()

    async def _shutdown(self, grace: float) -> None:
        # In-flight calls get the grace period; new calls are refused at once.
        await self._server.stop(grace)
