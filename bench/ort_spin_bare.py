#!/usr/bin/env python3
"""Bare ONNX Runtime: how its intra-op threads' spinning fares beside other work on the cores.

One session per spin setting, all with the same intra-op thread count, run batch-1 in turn:
back to back and with a gap between runs (``--gap-ms``, like the dynamic batcher's delay at
concurrency 1), first alone and then beside ``--burners`` processes that each keep one core busy
(the event loop, a load generator or another ROS node on a real host). Prints runs per second,
the median run's wall time and the process CPU time per run (the spinning threads' CPU shows
there), each the median of ``--rounds`` rounds that take the variants in turn (runs/s of each
round in brackets). ``bench/results_ort_spin.md`` holds a run. Not a product.

    .venv/bin/python bench/ort_spin_bare.py --model /tmp/peer/models/tinydet.onnx
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import time

import numpy as np
import onnxruntime as ort

# label -> session configuration entries ("default": ONNX Runtime's own spinning)
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "no spinning": {"session.intra_op.allow_spinning": "0"},
    "spin 100 us": {"session.intra_op.spin_duration_us": "100"},
    "spin 20 us": {"session.intra_op.spin_duration_us": "20"},
}


def _burn(stop) -> None:
    while not stop.is_set():
        pass


def _session(model: str, threads: int, entries: dict[str, str]) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _measure(session: ort.InferenceSession, seconds: float, gap_s: float) -> tuple[float, float, float]:
    """(runs per second, median run in ms, process CPU ms per run)."""
    meta = session.get_inputs()[0]
    shape = [1] + [d if isinstance(d, int) else 1 for d in meta.shape[1:]]
    feed = {meta.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    for _ in range(10):
        session.run(None, feed)
    runs: list[float] = []
    cpu0, start = time.process_time(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        if gap_s:
            time.sleep(gap_s)
        t = time.perf_counter()
        session.run(None, feed)
        runs.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - start
    runs.sort()
    return len(runs) / elapsed, runs[len(runs) // 2] * 1e3, (time.process_time() - cpu0) / len(runs) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads per session")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--burners", type=int, default=1, help="busy processes in the second pass")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the variants in turn, this many times; the medians are printed")
    args = parser.parse_args()
    print(f"onnxruntime {ort.__version__}, {platform.processor() or platform.machine()}, "
          f"{mp.cpu_count()} CPUs, {args.threads} intra-op threads, model {args.model}")
    sessions = {label: _session(args.model, args.threads, entries)
                for label, entries in VARIANTS.items()}
    print("| busy processes | gap between runs | spinning | runs/s (each round) | median run (ms) | CPU per run (ms) |")
    print("|---|---|---|---|---|---|")
    for burners in sorted({0, args.burners}):
        stop = mp.Event()
        procs = [mp.Process(target=_burn, args=(stop,), daemon=True) for _ in range(burners)]
        for proc in procs:
            proc.start()
        try:
            time.sleep(0.3)
            for gap_ms in (0.0, args.gap_ms):
                results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sessions}
                for _ in range(args.rounds):
                    for label, session in sessions.items():
                        results[label].append(_measure(session, args.seconds, gap_ms / 1e3))
                for label, rows in results.items():
                    rate, median, cpu = (statistics.median(col) for col in zip(*rows))
                    each = ", ".join(f"{r[0]:.0f}" for r in rows)
                    print(f"| {burners} | {gap_ms:g} ms | {label} | {rate:.0f} ({each}) | "
                          f"{median:.2f} | {cpu:.2f} |", flush=True)
        finally:
            stop.set()
            for proc in procs:
                proc.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
