"""The frontends side by side on one triton-ros-server, in one run: gRPC against HTTP/REST, and
tensors in the request against system shared memory.

    .venv/bin/python -m bench.server.transports [--concurrency 4 16] [--interval-ms 3000]

Starts one server on the bundled repository with ``--allow-client-shm=true`` (free ports on
127.0.0.1) and runs perf_analyzer on each model (``simple``: 64-byte tensors; ``detector``: a
768 KiB input, 12 KiB of outputs), at each concurrency, over gRPC and HTTP, each once with the
tensors in the request and once with ``--shared-memory system`` (inputs and outputs in regions
perf_analyzer registers), one after the other. Reports throughput and p50/p99 of each, the
HTTP/gRPC ratio (tensors in the request) and the shared-memory/in-request ratio per protocol,
with the machine and the commit, to ``--out`` (default bench/out/server-transports.md); raw
perf_analyzer output in bench/out/. Exits 1 when a perf_analyzer run fails.

Bounded: each perf_analyzer run has at most 3 trials of ``--interval-ms`` and a hard timeout
(16 runs by default: about three minutes). perf_analyzer shares the CPU with the server: compare
the ratios of one run, not absolute numbers across machines.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

from bench.common import (
    OUT,
    ROOT,
    ServerProcess,
    commit,
    default_out,
    emit,
    find_perf_analyzer,
    machine,
)

WAYS = (("request", ()), ("shm", ("--shared-memory", "system")))


def run_pa(
    pa: tuple,
    model: str,
    protocol: str,
    url: str,
    concurrency: int,
    interval_ms: int,
    extra: tuple[str, ...],
    tag: str,
) -> dict:
    """One perf_analyzer run: throughput (infer/s), p50 and p99 (us)."""
    binary, env = pa
    cmd = [
        str(binary),
        "-m",
        model,
        "-i",
        protocol,
        "-u",
        url,
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(interval_ms),
        "--max-trials",
        "3",
        "-s",
        "100000",
        "--input-data",
        "zero",
        "--percentile",
        "99",
        *extra,
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=interval_ms / 1000 * 6 + 120
    )
    (OUT / f"transports-{tag}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed for {tag}:\n{proc.stdout}{proc.stderr}")
    text = proc.stdout
    return {
        "throughput": float(re.search(r"Throughput: ([\d.]+) infer/sec", text).group(1)),
        "p50": int(re.search(r"p50 latency: (\d+) usec", text).group(1)),
        "p99": int(re.search(r"p99 latency: (\d+) usec", text).group(1)),
    }


def cell(r: dict) -> str:
    return f"{r['throughput']:.0f}/s ({r['p50'] / 1e3:.2f} / {r['p99'] / 1e3:.2f} ms)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--models", nargs="+", default=["simple", "detector"])
    parser.add_argument("--out", default=default_out("server-transports"))
    args = parser.parse_args()
    pa = find_perf_analyzer()
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    server = ServerProcess(
        "--model-repository",
        str(ROOT / "model_repository"),
        "--allow-client-shm=true",
        log=OUT / "transports-server.log",
    )
    results: dict[tuple, dict] = {}
    try:
        for model in args.models:
            for c in args.concurrency:
                for protocol in ("grpc", "http"):
                    for way, extra in WAYS:
                        tag = f"{model}-c{c}-{protocol}-{way}"
                        r = results[(model, c, protocol, way)] = run_pa(
                            pa,
                            model,
                            protocol,
                            server.url(protocol),
                            c,
                            args.interval_ms,
                            extra,
                            tag,
                        )
                        print(f"{tag}: {cell(r)}", flush=True)
    finally:
        server.stop()

    lines = [
        "# The frontends side by side: gRPC and HTTP/REST, tensors in the request and in system "
        "shared memory",
        "",
        f"`python -m bench.server.transports {' '.join(sys.argv[1:])}`, run {started}, commit "
        f"{commit()}.",
        "",
        f"Machine: {machine()}. perf_analyzer, batch-1 requests, `--input-data zero`, up to 3 "
        f"trials of {args.interval_ms} ms; `shm` is `--shared-memory system`. perf_analyzer "
        f"shares the CPU with the server: read the ratios, not the absolute numbers. Cells: "
        f"infer/s (p50 / p99).",
        "",
        "| model | concurrency | gRPC | HTTP | gRPC shm | HTTP shm | HTTP / gRPC | shm / request, "
        "gRPC | shm / request, HTTP |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model in args.models:
        for c in args.concurrency:
            r = {(p, w): results[(model, c, p, w)] for p in ("grpc", "http") for w, _ in WAYS}
            lines.append(
                f"| {model} | {c} | {cell(r['grpc', 'request'])} | {cell(r['http', 'request'])} | "
                f"{cell(r['grpc', 'shm'])} | {cell(r['http', 'shm'])} | "
                f"{r['http', 'request']['throughput'] / r['grpc', 'request']['throughput']:.2f}x | "
                f"{r['grpc', 'shm']['throughput'] / r['grpc', 'request']['throughput']:.2f}x | "
                f"{r['http', 'shm']['throughput'] / r['http', 'request']['throughput']:.2f}x |"
            )
    return emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    sys.exit(main())
