"""The gRPC servicer's ModelInfer on Triton's ``simple`` in one process: no socket, no grpcio.

What it measures is the server's own per-request path (decode the serialized request, core,
direct execution on the calling thread, statistics, serialize the reply), as CPU time of the
one thread that runs it (``time.thread_time``: on a shared 2-core VM wall time moves by 30-50 %
between seconds, thread CPU time far less). Each checkout runs in its own interpreter, the
checkouts alternate round by round, and the minimum and median of the rounds are printed.

    .venv/bin/python -m bench.server.inprocess_infer                    # this checkout
    .venv/bin/python -m bench.server.inprocess_infer --checkout /tmp/base --label before \
        --checkout . --label after                                      # A/B, alternating

Results (markdown, the machine and each checkout's commit, CPU per request and its ratio to the
first checkout at the same gap) go to ``--out`` (default bench/out/server-inprocess_infer.md).
A checkout whose reply is wrong ends the run with a non-zero exit status.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import LOAD_AT_START, ROOT, commit, default_out, emit, machine_lines

_CHILD = r"""
import asyncio, sys, time
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from triton_ros.core.server import InferenceServer, ServerOptions
from triton_ros.frontend.grpc.grpc_server import GrpcInferenceService

repo, requests, windows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gaps = [int(g) for g in sys.argv[4].split(",")]
core = InferenceServer(ServerOptions((repo,), model_control_mode="explicit"))
core.start()
core.load_model("simple")
service = GrpcInferenceService(core)
msg = pb.ModelInferRequest(model_name="simple")
for name in ("INPUT0", "INPUT1"):
    msg.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    msg.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
data = msg.SerializeToString()
expected = (np.arange(16) * 2).astype(np.int32).tobytes()


class Context:          # ModelInfer only touches the context to abort, which must not happen
    async def abort(self, code, details):
        raise SystemExit(f"ModelInfer aborted: {code} {details}")


async def run(n: int, gap_s: float = 0.0) -> tuple[float, float]:
    # n requests, each after gap_s of sleep: (mean thread CPU, median wall) per request, us
    cpu = 0
    walls = []
    for _ in range(n):
        if gap_s:
            time.sleep(gap_s)                 # the thread idles between requests, as when served
        c, w = time.thread_time_ns(), time.perf_counter_ns()
        reply = await service.ModelInfer(data, Context())
        walls.append(time.perf_counter_ns() - w)
        cpu += time.thread_time_ns() - c
    out = pb.ModelInferResponse.FromString(reply)
    if out.raw_output_contents[0] != expected:
        raise SystemExit("wrong OUTPUT0")
    walls.sort()
    return cpu / n / 1000, walls[n // 2] / 1000


async def main() -> None:
    await run(requests)                       # warm-up
    for gap_us in gaps:
        for _ in range(windows):
            cpu_us, wall_us = await run(requests, gap_us / 1e6)
            print(gap_us, cpu_us, wall_us, flush=True)

asyncio.run(main())
core.stop()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--checkout",
        action="append",
        help="a checkout of this project (repeatable; default: this one)",
    )
    ap.add_argument("--label", action="append", help="a name per --checkout, in order")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per checkout, alternating")
    ap.add_argument("--windows", type=int, default=5, help="timed windows per round")
    ap.add_argument("--requests", type=int, default=5000, help="requests per window")
    ap.add_argument(
        "--gap-us",
        default="0",
        help="comma-separated idle times before each "
        "request, us (0: back to back; 500: about the time a request at concurrency "
        "1 spends in the client and grpcio between two of the server's)",
    )
    ap.add_argument(
        "--out",
        default=default_out("server-inprocess_infer"),
        help="also write the results (markdown) here",
    )
    a = ap.parse_args()
    gaps = [int(g) for g in a.gap_us.split(",")]
    checkouts = [os.path.abspath(c) for c in (a.checkout or [str(ROOT)])]
    # (checkout, gap) -> per window: (mean thread CPU, median wall) per request, us
    samples: dict[tuple[str, int], list[tuple[float, float]]] = {
        (c, g): [] for c in checkouts for g in gaps
    }
    for _ in range(a.rounds):
        for checkout in checkouts:
            env = dict(os.environ, PYTHONPATH=checkout)
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _CHILD,
                    os.path.join(checkout, "model_repository"),
                    str(a.requests),
                    str(a.windows),
                    a.gap_us,
                ],
                env=env,
                cwd=checkout,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            for line in out.splitlines():
                gap, cpu, wall = line.split()
                samples[(checkout, int(gap))].append((float(cpu), float(wall)))
    labels = a.label or []
    if len(labels) < len(checkouts):
        labels += [os.path.basename(c) for c in checkouts[len(labels) :]]
    lines = [
        "# The gRPC servicer's ModelInfer on `simple`, in process",
        "",
        f"`python -m bench.server.inprocess_infer {' '.join(sys.argv[1:])}`, run "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: thread CPU time per request "
        f"(decode, core, direct execution, statistics, serialized reply; no socket; a window's "
        f"mean), and the window's median wall time per request, "
        f"{a.rounds} alternating rounds x {a.windows} windows of {a.requests} requests per checkout"
        f" and idle gap (the thread sleeps that long before each request).",
        "",
        machine_lines(),
        f"- load average at start: {' '.join(LOAD_AT_START)}",
        "",
        "| checkout | commit | gap (us) | CPU min (us) | CPU median (us) | CPU median / first "
        "checkout's | wall median (us) | windows |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, checkout in zip(labels, checkouts):
        for gap in gaps:
            values = samples[(checkout, gap)]
            cpu = [v[0] for v in values]
            first = statistics.median(v[0] for v in samples[(checkouts[0], gap)])
            lines.append(
                f"| {label} | {commit(Path(checkout))} | {gap} | {min(cpu):.1f} | "
                f"{statistics.median(cpu):.1f} | {statistics.median(cpu) / first:.2f}x | "
                f"{statistics.median(v[1] for v in values):.1f} | {len(values)} |"
            )
    return emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    raise SystemExit(main())
