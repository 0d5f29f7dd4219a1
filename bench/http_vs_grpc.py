"""HTTP/REST against gRPC on the same triton-ros-server, side by side in one run.

Starts one server on the bundled repository (free ports on 127.0.0.1), then runs perf_analyzer
with ``-i grpc`` and ``-i http`` on each model at the given concurrency, alternating protocols,
and writes a markdown table with the machine, throughputs, p50/p99 latencies and the HTTP/gRPC
ratios to ``bench/results_http_vs_grpc.md`` (raw perf_analyzer output in ``bench/out/``).

    .venv/bin/python bench/http_vs_grpc.py [--concurrency 16] [--interval-ms 3000]

Bounded: each perf_analyzer run has at most 3 trials of ``--interval-ms`` and a hard timeout.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_common import free_port  # noqa: E402
PERF_ANALYZER = ROOT / ".venv" / "bin" / "perf_analyzer"
OUT = ROOT / "bench" / "out"


def machine() -> str:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"`{' '.join(platform.uname())}`, nproc {os.cpu_count()}, CPU {cpu}"


def run_pa(model: str, protocol: str, url: str, concurrency: int, interval_ms: int, *,
           extra: tuple[str, ...] = (), tag: str = "") -> dict:
    cmd = [str(PERF_ANALYZER), "-m", model, "-i", protocol, "-u", url, "--concurrency-range",
           str(concurrency), "--measurement-interval", str(interval_ms), "--max-trials", "3",
           "-s", "100000", "--input-data", "zero", "--percentile", "99", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=interval_ms / 1000 * 6 + 120)
    (OUT / f"{model}-{protocol}{tag}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed for {model} {protocol}:\n{proc.stdout}{proc.stderr}")
    text = proc.stdout
    throughput = float(re.search(r"Throughput: ([\d.]+) infer/sec", text).group(1))
    p50 = int(re.search(r"p50 latency: (\d+) usec", text).group(1))
    p99 = int(re.search(r"p99 latency: (\d+) usec", text).group(1))
    return {"throughput": throughput, "p50": p50, "p99": p99}


class Server:
    """triton-ros-server on the bundled repository, free ports on 127.0.0.1, log in bench/out."""

    def __init__(self, *args: str) -> None:
        self.grpc_port, self.http_port, metrics_port = free_port(), free_port(), free_port()
        OUT.mkdir(parents=True, exist_ok=True)
        self.log_path = OUT / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "triton_ros.server_main", "--model-repository",
             str(ROOT / "model_repository"), "--grpc-port", str(self.grpc_port), "--http-port",
             str(self.http_port), "--metrics-port", str(metrics_port), *args],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=str(ROOT))
        deadline = time.monotonic() + 120
        while "Started Metrics Service" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("server did not start: see bench/out/server.log")
            time.sleep(0.2)

    def url(self, protocol: str) -> str:
        return f"127.0.0.1:{self.grpc_port if protocol == 'grpc' else self.http_port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=60)
        self._log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--interval-ms", type=int, default=3000)
    parser.add_argument("--models", nargs="+", default=["simple", "detector"])
    args = parser.parse_args()
    if not PERF_ANALYZER.exists():
        print("perf_analyzer is not set up (scripts/setup.sh, x86_64 only)", file=sys.stderr)
        return 1
    server = Server()
    try:
        rows = []
        for model in args.models:
            results = {}
            for protocol in ("grpc", "http"):
                results[protocol] = run_pa(model, protocol, server.url(protocol),
                                           args.concurrency, args.interval_ms)
            rows.append((model, results))
    finally:
        server.stop()

    lines = [
        "# HTTP/REST vs gRPC (perf_analyzer, same server, same run)",
        "",
        f"Machine: {machine()}.",
        f"perf_analyzer 2.50.0, batch-1 requests, `--input-data zero`, concurrency "
        f"{args.concurrency}, up to 3 trials of {args.interval_ms} ms. perf_analyzer shares the "
        f"CPU with the server: read the ratios, not the absolute numbers.",
        "",
        "| model | gRPC infer/s | HTTP infer/s | HTTP/gRPC | gRPC p50/p99 µs | HTTP p50/p99 µs |",
        "|---|---|---|---|---|---|",
    ]
    for model, r in rows:
        g, h = r["grpc"], r["http"]
        lines.append(f"| {model} | {g['throughput']:.0f} | {h['throughput']:.0f} | "
                     f"{h['throughput'] / g['throughput']:.2f} | {g['p50']}/{g['p99']} | "
                     f"{h['p50']}/{h['p99']} |")
    (ROOT / "bench" / "results_http_vs_grpc.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
