#!/usr/bin/env python3
"""Ensemble overhead and Python-backend scaling, side by side in one run.

1. ``detector_pipeline`` (ensemble: Python preprocess -> ONNX color_detector -> Python
   postprocess)
   against calling its three steps one after the other, each way
   a. over gRPC with tritonclient (the direct chain makes three round trips and carries the
      intermediate tensors through the client), and
   b. in-process through the core API (no transport: what the ensemble scheduler itself costs
      against chaining the same three models' futures by hand),
   at concurrency 1 and 4, one 256x256 image per request.
2. A CPU-bound Python model (a pure-Python loop, ~20 ms a request) with 1 and with 2 instances,
   4 concurrent gRPC clients: requests/s and their ratio (2 on two free cores is perfect scaling:
   every instance is its own process, so the GIL does not serialize them).

Writes bench/out/server-ensemble.md (``--out``) naming the machine and the commit; a failed
client request ends the run with a non-zero exit status. Every point runs ``--seconds``
(default 5); the whole run takes about two minutes. The clients share the machine with the
server: compare ratios from the same run, not absolute numbers across machines.

Usage: ``.venv/bin/python -m bench.server.ensemble [--seconds 5] [--out FILE]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from bench.common import ROOT, commit, default_out, free_port, machine

LOOP = 300_000  # iterations of the CPU-bound request (~20 ms of pure Python)

CPU_BOUND_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])
            total = 0
            for i in range(n):          # pure Python: holds the GIL all the time
                total += i * i % 7
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([total], np.int64))]))
        return responses
"""

CPU_BOUND_CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "N", data_type: TYPE_INT64, dims: [ 1 ] }} ]
output [ {{ name: "OUT", data_type: TYPE_INT64, dims: [ 1 ] }} ]
instance_group [ {{ count: {count}, kind: KIND_CPU }} ]
"""


def _burn(iterations: int) -> None:
    total = 0
    for i in range(iterations):
        total += i * i % 7


def raw_process_scaling(seconds: float) -> float:
    """How much faster two bare Python processes get the same loop done than one: the
    parallelism the machine offers right now (other work on a shared machine lowers it)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    iterations = LOOP

    def rate(processes: int) -> float:
        with ctx.Pool(processes) as pool:
            pool.map(_burn, [iterations] * processes)  # start-up, not counted
            done, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                pool.map(_burn, [iterations] * (processes * 4))
                done += processes * 4
            return done / (time.perf_counter() - start)

    return rate(2) / rate(1)


def load(call: Callable[[np.random.Generator], None], concurrency: int, seconds: float) -> dict:
    """Run ``call`` in ``concurrency`` threads for ``seconds``: requests/s and latencies (ms)."""
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[BaseException] = []
    stop = time.perf_counter() + seconds

    def worker(index: int) -> None:
        rng = np.random.default_rng(index)
        try:
            call(rng)  # warm-up, not counted
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                call(rng)
                latencies[index].append((time.perf_counter() - t0) * 1e3)
        except BaseException as exc:  # report, don't hang the run
            errors.append(exc)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"benchmark client failed: {errors[0]!r}")
    flat = np.array([x for per in latencies for x in per])
    return {
        "rps": len(flat) / elapsed,
        "p50": float(np.percentile(flat, 50)),
        "p99": float(np.percentile(flat, 99)),
        "n": len(flat),
    }


def image(rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 256, (1, 256, 256, 3), dtype=np.uint8)


# ------------------------------------------------------------------------------------------
# gRPC
# ------------------------------------------------------------------------------------------


def grpc_calls(url: str):
    import tritonclient.grpc as grpcclient

    local = threading.local()

    def client():
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(url)
        return local.client

    def tensor(name: str, array: np.ndarray, datatype: str):
        t = grpcclient.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array)
        return t

    def ensemble(rng):
        client().infer("detector_pipeline", [tensor("images", image(rng), "UINT8")])

    def direct(rng):
        c = client()
        pre = c.infer("detector_preprocess", [tensor("images", image(rng), "UINT8")])
        det = c.infer("color_detector", [tensor("images", pre.as_numpy("preprocessed"), "FP32")])
        c.infer(
            "detector_postprocess", [tensor("class_detections", det.as_numpy("detections"), "FP32")]
        )

    def cpu_bound(model: str):
        n = np.array([LOOP], np.int64)
        return lambda rng: client().infer(model, [tensor("N", n, "INT64")])

    return ensemble, direct, cpu_bound


# ------------------------------------------------------------------------------------------
# In-process core
# ------------------------------------------------------------------------------------------


def core_calls(core):
    from triton_ros.core.infer_request import InferRequest

    def run(model: str, inputs: dict) -> dict:
        return core.infer_sync(InferRequest(model, inputs), timeout=60).outputs

    def ensemble(rng):
        run("detector_pipeline", {"images": image(rng)})

    def direct(rng):
        pre = run("detector_preprocess", {"images": image(rng)})
        det = run("color_detector", {"images": pre["preprocessed"]})
        run("detector_postprocess", {"class_detections": det["detections"]})

    return ensemble, direct


def row(name: str, r: dict) -> str:
    return f"| {name} | {r['rps']:.1f} | {r['p50']:.2f} | {r['p99']:.2f} | {r['n']} |"


def compare(ensemble, direct, direct_name: str, seconds: float) -> list[str]:
    """Table rows and ratio lines: the ensemble against its steps called in turn."""
    rows, ratios = [], []
    for concurrency in (1, 4):
        e = load(ensemble, concurrency, seconds)
        d = load(direct, concurrency, seconds)
        rows += [
            row(f"ensemble, concurrency {concurrency}", e),
            row(f"{direct_name}, concurrency {concurrency}", d),
        ]
        ratios.append(
            f"- concurrency {concurrency}: ensemble/{direct_name} throughput "
            f"{e['rps'] / d['rps']:.2f}x, p50 latency {e['p50'] / d['p50']:.2f}x "
            f"({e['p50'] - d['p50']:+.2f} ms)"
        )
        print(*rows[-2:], ratios[-1], sep="\n", flush=True)
    return [*rows, "", *ratios, ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=default_out("server-ensemble"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_ensemble_"))
    repo = work / "models"
    shutil.copytree(ROOT / "model_repository", repo)
    for count in (1, 2):
        model = repo / f"cpu_bound_{count}"
        (model / "1").mkdir(parents=True)
        (model / "1" / "model.py").write_text(CPU_BOUND_MODEL)
        (model / "config.pbtxt").write_text(CPU_BOUND_CONFIG.format(name=model.name, count=count))

    lines = [
        "# Ensemble overhead and Python-backend scaling",
        "",
        f"Run {datetime.datetime.now().isoformat(timespec='seconds')} by "
        f"`python -m bench.server.ensemble --seconds {args.seconds:g}` at commit {commit()}. "
        f"Compare the ratios within this run; the load average below says how busy the "
        f"machine was.",
        "",
        f"- {machine()}",
        f"- load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        "",
        "Reading: 1a is what a client gains by sending one ensemble request instead of three "
        "(one round trip, intermediate tensors stay in the server); 1b isolates the ensemble "
        "scheduler itself (no transport), so its p50 difference is the scheduler's overhead "
        "per request; 2 shows whether Python instances run in parallel (separate processes).",
        "",
    ]
    header = ["| way | requests/s | p50 ms | p99 ms | requests |", "|---|---|---|---|---|"]

    port = free_port()
    log = open(work / "server.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            str(repo),
            "--grpc-port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=str(ROOT),
    )
    try:
        import tritonclient.grpc as grpcclient

        url = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if grpcclient.InferenceServerClient(url).is_server_ready():
                    break
            except Exception:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError((work / "server.log").read_text())
            time.sleep(0.2)
        ensemble, direct, cpu_bound = grpc_calls(url)

        lines += [
            "## 1a. detector_pipeline over gRPC: ensemble vs the three steps called in turn",
            "",
            *header,
            *compare(ensemble, direct, "3 direct calls", args.seconds),
        ]

        lines += [
            "## 2. Python backend: CPU-bound model (pure-Python loop), 4 gRPC clients",
            "",
            *header,
        ]
        one = load(cpu_bound("cpu_bound_1"), 4, args.seconds)
        two = load(cpu_bound("cpu_bound_2"), 4, args.seconds)
        raw = raw_process_scaling(args.seconds)
        lines += [
            row("1 instance", one),
            row("2 instances", two),
            "",
            f"- scaling 1 -> 2 instances: {two['rps'] / one['rps']:.2f}x requests/s "
            f"(the clients and the server's gRPC thread use the same cores)",
            f"- the same loop in 2 bare Python processes against 1, same run: {raw:.2f}x "
            f"(the parallelism the machine offered; 2.00x on two idle cores)",
            "",
        ]
        print(*lines[-6:], sep="\n", flush=True)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()

    from triton_ros.core import InferenceServer, ServerOptions

    core = InferenceServer(ServerOptions(model_repositories=(str(ROOT / "model_repository"),)))
    core.start()
    try:
        ensemble, direct = core_calls(core)
        lines += [
            "## 1b. detector_pipeline in-process (core API, no transport)",
            "",
            *header,
            *compare(ensemble, direct, "3 chained calls", args.seconds),
        ]
    finally:
        core.stop()
    shutil.rmtree(work, ignore_errors=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
