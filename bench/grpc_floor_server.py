#!/usr/bin/env python3
"""The floor under triton-ros-server's gRPC request path: its endpoint with inference answered
from a cache, for measuring what the core and the codec add.

Everything is the product's (``grpc.aio`` endpoint, options, servicer, metadata, config, the HTTP
endpoint) except ``ModelInfer``: the first request of each size goes through the core as usual and
its serialized answer is kept; every later request of that size is answered with those bytes,
without being parsed or run. What perf_analyzer then measures is grpcio's part of a request
(HTTP/2 over loopback, the Cython receive that copies a message into one ``bytes`` object, the
asyncio hand-offs) plus the servicer's dispatch: the least any server written on ``grpc.aio`` pays.
``ModelStatistics`` adds the cached answers to the core's counts (success, queue, compute,
inferences and executions, with no time), so perf_analyzer finds the version it drove and
bench/bench_request_path.py's CPU per request stays right:

    .venv/bin/python bench/bench_request_path.py --checkout . --label product \\
        --checkout . --label floor --variant-server floor:bench/grpc_floor_server.py

Flags: ``triton-ros-server``'s (it calls its ``main``). Not a product: answers are stale by design.
"""
from __future__ import annotations

import sys
import threading

from tritonclient.grpc import service_pb2 as pb

from triton_ros import server_main
from triton_ros.frontend import grpc_server


class FloorService(grpc_server.GrpcInferenceService):
    """The product's servicer; ModelInfer answers each request size from its first answer."""

    def __init__(self, core) -> None:
        super().__init__(core)
        self._answers: dict[int, tuple[bytes, str]] = {}    # request size -> (answer, model)
        self._counts: dict[str, int] = {}       # answers from the cache, per model
        self._counts_lock = threading.Lock()    # the synchronous floor answers on many threads

    def cached_answer(self, request: bytes) -> bytes | None:
        """The kept answer for a request of this size, counted for ModelStatistics; None if
        there is none yet."""
        cached = self._answers.get(len(request))
        if cached is None:
            return None
        answer, model = cached
        with self._counts_lock:
            self._counts[model] = self._counts.get(model, 0) + 1
        return answer

    def keep_answer(self, request: bytes, answer: bytes) -> None:
        """Keep ``answer`` (computed by the core, which counted it) for this request size."""
        model = pb.ModelInferResponse.FromString(answer).model_name
        self._answers[len(request)] = (answer, model)

    async def ModelInfer(self, request: bytes, context) -> bytes:
        answer = self.cached_answer(request)
        if answer is None:
            answer = await super().ModelInfer(request, context)   # an error raises: not kept
            self.keep_answer(request, answer)
        return answer

    async def ModelStatistics(self, request, context):
        stats = await super().ModelStatistics(request, context)
        for s in stats.model_stats:             # the core's, plus the answers from the cache
            count = self._counts.get(s.name, 0)
            s.inference_count += count
            s.execution_count += count
            # perf_analyzer finds the model version it drove by the counts that moved
            for d in (s.inference_stats.success, s.inference_stats.queue,
                      s.inference_stats.compute_input, s.inference_stats.compute_infer,
                      s.inference_stats.compute_output):
                d.count += count
        return stats


def main() -> int:
    grpc_server.GrpcInferenceService = FloorService     # GrpcServer builds its servicer by name
    return server_main.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
