#!/usr/bin/env python3
"""A batch of 32 images in ONNX Runtime on the CPU, whole or in parts: throughput and the memory
the runs hold (issue 10, memory; the reason for the ONNX Runtime backend's ``max_sub_batch_size``).

One session (the given intra-op threads, memory patterns off as the product sets them for a
batching model), one random FP32 batch of 32 preallocated; resident memory is read after a
batch-1 run (session and arena set up) and after 10 batches of 32 run as parts of ``--rows``
rows (views of the batch, no copy). Run each part size in its own process:

    for r in 32 8 4 1; do .venv/bin/python bench/ort_sub_batch_bare.py --model M --rows $r; done
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort


def rss_mb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--rows", type=int, default=32, help="rows per run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.enable_mem_pattern = False
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    meta = session.get_inputs()[0]
    shape = [args.batch] + [int(d) for d in meta.shape[1:]]
    batch = np.random.default_rng(0).random(shape, dtype=np.float32)
    session.run(None, {meta.name: batch[:1]})
    before = rss_mb()
    start = time.perf_counter()
    for _ in range(args.repeats):
        for i in range(0, args.batch, args.rows):
            session.run(None, {meta.name: batch[i:i + args.rows]})
    seconds = time.perf_counter() - start
    after = rss_mb()
    print(f"rows/run={args.rows} threads={args.threads} batch={args.batch}: "
          f"{args.repeats * args.batch / seconds:.0f} img/s, resident {before} -> {after} MB "
          f"(+{after - before} MB)")


if __name__ == "__main__":
    main()
