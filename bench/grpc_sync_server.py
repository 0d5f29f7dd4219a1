#!/usr/bin/env python3
"""triton-ros-server with a synchronous gRPC servicer, for measuring the servicer model only.

The product's gRPC endpoint (``triton_ros/frontend/grpc_server.py``) runs on ``grpc.aio``. Issue 10
asks which servicer model costs least per request; this script answers the question by serving the
same core with the other model: ``grpc.server`` and a thread pool (``--grpc-threads``), one thread
per call, each blocking on the core's future. ``ModelInfer`` is parsed and decoded by the
product's servicer on the calling thread (``_decode_now``: tensors as views of the received bytes)
and its outputs are written into the reply by the same codec; the other RPCs reuse the product's
servicer methods, which only await on their error path. HTTP is the product's endpoint. Flags are
``triton-ros-server``'s own subset that bench/bench_request_path.py passes
(``--variant-server LABEL:bench/grpc_sync_server.py``).

With ``floor=True`` (``bench/grpc_sync_floor_server.py``) ``ModelInfer`` answers each request size
from its first answer, as ``bench/grpc_floor_server.py`` does for the ``grpc.aio`` endpoint: what is
left is grpcio's synchronous server (HTTP/2, its polling thread, the hand-off to a pool thread).

Not a product: no TLS, restricted protocols, streaming or decoding off the serving threads.
"""
from __future__ import annotations

import argparse
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from tritonclient.grpc import service_pb2_grpc

from triton_ros.core.errors import TritonRosError
from triton_ros.core.server import InferenceServer, ServerOptions
from triton_ros.frontend import grpc_codec as codec
from triton_ros.frontend.grpc_server import (GRPC_STATUS, GrpcInferenceService, _Capture,
                                             _Malformed)
from triton_ros.frontend.http_server import HttpServer

from grpc_floor_server import FloorService   # this folder (run as a script)


def _sync(method):
    """A servicer coroutine that returns without awaiting, run to completion on this thread."""
    def handler(request, context):
        coroutine = method(request, context)
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        coroutine.close()
        context.abort(grpc.StatusCode.INTERNAL, "the servicer awaited (an error path)")
    return handler


def main(floor: bool = False) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-repository", required=True)
    ap.add_argument("--grpc-port", type=int, default=8001)
    ap.add_argument("--http-port", type=int, default=8000)
    ap.add_argument("--metrics-port", type=int, default=8002, help="unused (no metrics endpoint)")
    ap.add_argument("--grpc-threads", type=int, default=32,
                    help="calls served at once (each one holds a thread until its answer)")
    args = ap.parse_args()

    core = InferenceServer(ServerOptions(model_repositories=(args.model_repository,)))
    core.start()
    servicer = FloorService(core) if floor else GrpcInferenceService(core)

    def model_infer(data: bytes, context) -> bytes:
        answer = servicer.cached_answer(data) if floor else None
        if answer is not None:
            return answer
        try:
            _, request = servicer._decode_now(data, None)     # the product's parse and decode
            response = core.infer(request).result()
            answer = codec.serialize_infer_response(response, request.shared_memory_outputs())
            if floor:
                servicer.keep_answer(data, answer)
            return answer
        except TritonRosError as exc:
            context.abort(GRPC_STATUS[exc.code], exc.message)
        except _Malformed as exc:
            context.abort(grpc.StatusCode.INTERNAL, f"Exception deserializing request: {exc}")

    capture = _Capture()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, capture)
    handlers = {name: grpc.unary_unary_rpc_method_handler(
                    _sync(getattr(servicer, name)), request_deserializer=h.request_deserializer,
                    response_serializer=h.response_serializer)
                for name, h in capture.handlers.items() if name != "ModelStreamInfer"}
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(model_infer)
    server = grpc.server(ThreadPoolExecutor(args.grpc_threads, thread_name_prefix="grpc-sync"),
                         options=[("grpc.max_receive_message_length", -1),
                                  ("grpc.max_send_message_length", -1)])
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(capture.service, handlers),))
    if server.add_insecure_port(f"127.0.0.1:{args.grpc_port}") == 0:
        raise SystemExit(f"cannot bind 127.0.0.1:{args.grpc_port}")
    http = HttpServer(core, port=args.http_port)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start()
    http.start()
    try:
        stop.wait()
    finally:
        server.stop(grace=2).wait()
        http.stop()
        core.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
