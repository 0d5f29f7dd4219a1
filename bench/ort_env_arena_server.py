#!/usr/bin/env python3
"""triton-ros-server whose ONNX Runtime sessions share one CPU arena, for measuring peak RSS.

The product gives each ONNX Runtime session its own CPU arena, which grows by powers of two
(``kNextPowerOfTwo``). ONNX Runtime's Python API sets another growth rule for the CPU only
through an allocator registered in its environment and shared by every session that opts in
(``session.use_env_allocators``). This script registers one with ``arena_extend_strategy``
``ARENA_STRATEGY`` (environment, default 1: ``kSameAsRequested``), makes every session of the
server opt in, and with ``WARM=1`` runs each instance once on zeros of ``max_batch_size`` rows at
load (float32 and int32 inputs with fixed non-batch dimensions), so that the arena's first
region is sized by the largest batch. Then it runs the product's ``main`` with the same flags.
bench/bench_request_path.py drives it (``--variant-server LABEL:bench/ort_env_arena_server.py``,
``--variant-env LABEL:WARM=1``); results: bench/results_ort_env_arena.md. Not a product.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort

from triton_ros import server_main
from triton_ros.core.backends import onnxruntime_backend

_DTYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32}


class _EnvArenaOptions(ort.SessionOptions):
    def __init__(self) -> None:
        super().__init__()
        self.add_session_config_entry("session.use_env_allocators", "1")


def register_env_arena(strategy: int) -> None:
    """Register this process's one CPU arena in ONNX Runtime's environment (sessions opt in with
    ``session.use_env_allocators``); bench/ort_arena_bare.py uses it too."""
    ort.create_and_register_allocator(
        ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                          ort.OrtMemType.DEFAULT),
        ort.OrtArenaCfg({"arena_extend_strategy": strategy}))


def main() -> int:
    strategy = int(os.environ.get("ARENA_STRATEGY", "1"))
    register_env_arena(strategy)
    ort.SessionOptions = _EnvArenaOptions      # the backend builds its options by this name
    if os.environ.get("WARM") == "1":
        instance = onnxruntime_backend.OnnxRuntimeInstance
        product_init = instance.__init__

        def warmed_init(self, model, **kwargs) -> None:
            product_init(self, model, **kwargs)
            rows = [model.config.max_batch_size] if model.config.max_batch_size > 0 else []
            self.session.run(None, {i.name: np.zeros(rows + list(i.shape[len(rows):]),
                                                     _DTYPES[i.type])
                                    for i in self.session.get_inputs()})
        instance.__init__ = warmed_init
    print(f"ort_env_arena_server: shared CPU arena, extend strategy {strategy}, "
          f"warm {os.environ.get('WARM') == '1'}", file=sys.stderr)
    return server_main.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
