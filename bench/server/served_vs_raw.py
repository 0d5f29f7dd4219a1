#!/usr/bin/env python3
"""Served detector vs raw in-process onnxruntime, in one run (issue: core server benchmark).

    .venv/bin/python -m bench.server.served_vs_raw [--seconds 5] [--concurrency 1 4 16 32]

1. Raw: the bundled detector in-process with onnxruntime, one intra-op thread, batch 1, for
   ``--seconds``: images/s (the reference a served model is compared with).
2. Served: ``triton-ros-server`` on the bundled repository, driven by perf_analyzer over gRPC with
   batch-1 requests at concurrency 1, 4, 16 and 32: images/s, p50/p99 latency, and the mean
   executed batch from the server's own statistics (inference_count / execution_count deltas).

Writes a markdown table to ``--out`` (default bench/out/server-served_vs_raw.md) naming the
machine and the commit, and exits 1 when a target at concurrency 16 is not met. On a 2-core
machine perf_analyzer shares the cores with the server: compare ratios from the same run.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import OUT, ROOT, commit, default_out, free_port, machine

MODEL = ROOT / "model_repository" / "detector" / "1" / "model.onnx"
PERF_ANALYZER = Path(sys.executable).parent / "perf_analyzer"


def raw_onnxruntime(seconds: float, batch: int = 1) -> float:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    x = np.zeros((batch, 3, 256, 256), np.float32)
    for _ in range(3):
        session.run(None, {"images": x})
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(None, {"images": x})
        n += batch
    return n / (time.perf_counter() - start)


def server_counts(client) -> tuple[int, int]:
    s = client.get_inference_statistics("detector").model_stats[0]
    return s.inference_count, s.execution_count


def perf(url: str, concurrency: int, seconds: float) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    csv_path = OUT / f"served_vs_raw-perf-{concurrency}.csv"
    cmd = [
        str(PERF_ANALYZER),
        "-m",
        "detector",
        "-i",
        "grpc",
        "-u",
        url,
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(int(seconds * 1000)),
        "--input-data",
        "zero",
        "-s",
        "100",
        "--max-trials",
        "3",
        "-f",
        str(csv_path),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed:\n{out.stdout}\n{out.stderr}")
    row = next(csv.DictReader(io.StringIO(csv_path.read_text())))
    csv_path.unlink()
    return {
        "throughput": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
    }


def main(argv: list[str] | None = None) -> int:
    import tritonclient.grpc as grpcclient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement window")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--out", default=default_out("server-served_vs_raw"))
    parser.add_argument("--repository", default=str(ROOT / "model_repository"))
    args = parser.parse_args(argv)

    raw = raw_onnxruntime(args.seconds)
    print(f"raw onnxruntime, 1 intra-op thread, batch 1: {raw:.1f} images/s", flush=True)

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            args.repository,
            "--grpc-port",
            str(port),
            "--log-info=false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"127.0.0.1:{port}"
    rows = []
    try:
        client = grpcclient.InferenceServerClient(url)
        deadline = time.monotonic() + 120
        while True:
            try:
                if client.is_model_ready("detector"):
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("server did not start")
            time.sleep(0.2)
        for c in args.concurrency:
            before = server_counts(client)
            result = perf(url, c, args.seconds)
            after = server_counts(client)
            executions = after[1] - before[1]
            result["mean_batch"] = (after[0] - before[0]) / executions if executions else 0.0
            result["concurrency"] = c
            rows.append(result)
            print(
                f"c={c}: {result['throughput']:.1f} images/s, p50 {result['p50_ms']:.1f} ms, "
                f"p99 {result['p99_ms']:.1f} ms, mean executed batch {result['mean_batch']:.2f}",
                flush=True,
            )
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=120)

    lines = [
        "# Served detector vs raw onnxruntime",
        "",
        f"Machine: {machine()}  ",
        f"Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit {commit()}  ",
        f"Command: `python -m bench.server.served_vs_raw {' '.join(sys.argv[1:])}`",
        "",
        "Model: bundled `detector` (FP32 [N,3,256,256], 2 CPU instances with 1 intra-op thread, "
        "dynamic batching). Load: perf_analyzer 2.50 over gRPC on 127.0.0.1, batch-1 requests, "
        "zero inputs; it runs on the same cores as the server.",
        "",
        f"Raw in-process onnxruntime, 1 intra-op thread, batch 1: **{raw:.1f} images/s**",
        "",
        "| concurrency | served images/s | ratio to raw | p50 ms | p99 ms | mean executed batch |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['concurrency']} | {r['throughput']:.1f} | {r['throughput'] / raw:.2f}x | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_batch']:.2f} |"
        )
    by_c = {r["concurrency"]: r for r in rows}
    met = []
    if 16 in by_c:
        r16 = by_c[16]
        lines += [
            "",
            "Targets (issue: core server), at concurrency 16:",
            f"- served images/s >= 0.7x raw: {r16['throughput'] / raw:.2f}x "
            f"({'met' if r16['throughput'] >= 0.7 * raw else 'NOT met'})",
            "- p99 below the PyTriton reference (~95 ms, "
            "../shared/notes/perf-analyzer.md: PyTriton "
            f"0.7.0 on this machine type, c=16 ~340 infer/s): {r16['p99_ms']:.1f} ms "
            f"({'met' if r16['p99_ms'] < 95 else 'NOT met'})",
        ]
        met += [r16["throughput"] >= 0.7 * raw, r16["p99_ms"] < 95]
    batches = [r["mean_batch"] for r in rows]
    if len(batches) > 1:
        grows = all(b2 >= b1 for b1, b2 in zip(batches, batches[1:]))
        lines.append(
            f"- mean executed batch grows with concurrency: "
            f"{' -> '.join(f'{b:.2f}' for b in batches)} ({'met' if grows else 'NOT met'})"
        )
        met.append(grows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    if not all(met):
        print("served_vs_raw: a target was not met", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
