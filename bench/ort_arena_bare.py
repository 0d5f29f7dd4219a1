#!/usr/bin/env python3
"""How much an ONNX Runtime CPU arena holds after a dynamic batcher's mix of batch sizes.

One session of tinydet (the peer benchmark's model, ``${PEER_DIR:-/tmp/peer}/models``), one
intra-op thread count, runs on 80 random batch sizes from 1 to 32 (seeded), each a view of one
preallocated float32 input of 32 rows, so the process's resident memory after the runs, less
before them, is what ONNX Runtime kept. Arenas:

- ``default``: the session's own arena (powers of two), as the product configures it;
- ``env``: one arena registered in ONNX Runtime's environment with ``arena_extend_strategy``
  kSameAsRequested, the session opting in (``session.use_env_allocators``);
- ``env-warm``: the same, its first run a full batch of 32.

    .venv/bin/python bench/ort_arena_bare.py            # every arena, seeds 0 and 1

Each case runs in a fresh interpreter (an environment allocator is process-wide). Prints one line
per case; results and the server-side follow-up: bench/results_ort_env_arena.md.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
from pathlib import Path

MODEL = Path(os.environ.get("PEER_DIR", "/tmp/peer")) / "models" / "tinydet.onnx"


def rss_mb() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def one(arena: str, seed: int, threads: int) -> str:
    import numpy as np
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.enable_mem_pattern = False         # as the product, for models with a batch dimension
    if arena != "default":
        from ort_env_arena_server import register_env_arena
        register_env_arena(1)                  # kSameAsRequested
        options.add_session_config_entry("session.use_env_allocators", "1")
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    images = np.random.default_rng(seed).random((32, 3, 224, 224), dtype=np.float32)
    rng = random.Random(seed)
    sizes = ([32] if arena == "env-warm" else []) + [rng.randint(1, 32) for _ in range(80)]
    before = rss_mb()
    for rows in sizes:
        session.run(None, {name: images[:rows]})
    after = rss_mb()
    return (f"{arena:9s} seed {seed} threads {threads}: resident {before:.0f} -> {after:.0f} MB, "
            f"held by ONNX Runtime {after - before:.0f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arena", choices=("default", "env", "env-warm"))
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not MODEL.is_file():
        print(f"{MODEL} is missing: run ../shared/peer-bench/setup.sh first", file=sys.stderr)
        return 2
    if args.arena:
        for seed in (int(s) for s in args.seeds.split(",")):
            print(one(args.arena, seed, args.threads), flush=True)
        return 0
    status = 0
    for arena in ("default", "env", "env-warm"):
        for seed in args.seeds.split(","):
            status |= subprocess.call([sys.executable, __file__, "--arena", arena, "--seeds", seed,
                                       "--threads", str(args.threads)])
    return 1 if status else 0


if __name__ == "__main__":
    raise SystemExit(main())
