"""System shared memory against tensors in the request, side by side in one run (perf_analyzer).

Starts one triton-ros-server on the bundled repository with ``--allow-client-shm=true`` (free
ports on 127.0.0.1) and runs perf_analyzer on each model, for each protocol, once with the
tensors in the request and once with ``--shared-memory system`` (inputs and outputs in regions
perf_analyzer registers), alternating the two, and writes a markdown table with the machine,
throughputs, p50/p99 latencies and the shared-memory/in-request ratios to
``bench/results_shared_memory.md`` (raw perf_analyzer output in ``bench/out/``).

    .venv/bin/python bench/bench_shared_memory.py [--concurrency 4] [--interval-ms 3000]

Bounded: each perf_analyzer run has at most 3 trials of ``--interval-ms`` and a hard timeout
(8 runs by default: about two minutes). perf_analyzer shares the CPU with the server: compare
the ratios of one run, not absolute numbers across machines.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from http_vs_grpc import PERF_ANALYZER, ROOT, Server, machine, run_pa  # noqa: E402

# The detector's input is a 3x256x256 FP32 image (768 KiB) and its outputs 12 KiB: a size at
# which copying through the transport should show. ``simple`` moves 128 bytes each way.
MODELS = ["simple", "detector"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results_shared_memory.md"))
    args = parser.parse_args()
    if not PERF_ANALYZER.exists():
        print("perf_analyzer is not set up (scripts/setup.sh, x86_64 only)", file=sys.stderr)
        return 1
    server = Server("--allow-client-shm=true")
    rows = []
    try:
        for model in args.models:
            for protocol in ("grpc", "http"):
                results = {}
                for way, extra in (("request", ()), ("shm", ("--shared-memory", "system"))):
                    results[way] = run_pa(model, protocol, server.url(protocol),
                                          args.concurrency, args.interval_ms, extra=extra,
                                          tag=f"-{way}")
                rows.append((model, protocol, results))
    finally:
        server.stop()

    lines = [
        "# System shared memory vs tensors in the request (perf_analyzer, same server, same run)",
        "",
        f"Machine: {machine()}.",
        f"perf_analyzer 2.50.0, batch-1 requests, `--input-data zero`, concurrency "
        f"{args.concurrency}, up to 3 trials of {args.interval_ms} ms; `shm` is "
        f"`--shared-memory system` (inputs and outputs in regions perf_analyzer registers). "
        f"perf_analyzer shares the CPU with the server: read the ratios, not the absolute "
        f"numbers.",
        "",
        "| model | protocol | in request infer/s | shm infer/s | shm/request | request p50/p99 µs "
        "| shm p50/p99 µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, protocol, r in rows:
        q, m = r["request"], r["shm"]
        lines.append(f"| {model} | {protocol} | {q['throughput']:.0f} | {m['throughput']:.0f} | "
                     f"{m['throughput'] / q['throughput']:.2f} | {q['p50']}/{q['p99']} | "
                     f"{m['p50']}/{m['p99']} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
