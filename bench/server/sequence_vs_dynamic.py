#!/usr/bin/env python3
"""The sequence batcher's scheduling cost against the dynamic batcher's, on one stateless model.

One ONNX model (OUTPUT = INPUT + 1, INT32 [N, 16]: next to no compute, so the scheduler is most
of a request's cost) served under three configurations, one instance, max_batch_size 8, no
queue delay:

- ``dynamic``: ``dynamic_batching { }``;
- ``oldest``: ``sequence_batching { oldest { max_candidate_sequences: 16 } }``;
- ``direct``: ``sequence_batching { direct { } }``.

No control inputs and no state: the model and its inputs are the same; only the scheduler
differs. Each client thread runs sequences of ``--length`` requests (START on the first, END on
the last; the dynamic model ignores them), at concurrency 1 and 8:

1. **in process**, through the core's data plane (``InferenceServer.infer``): requests/s, p50 and
   p99 latency, the process's CPU time a request, and the queue time a request from the
   model's statistics; beside ``dynamic`` as served (whose idle instance may run a request on the
   caller's thread: direct execution), ``queued``: the same with direct execution off, every
   request through the queue and the instance's thread as the sequence batcher's go;
2. **over gRPC**, perf_analyzer (its sequence mode for the sequence models) at concurrency 8:
   requests/s and p50.

Variants alternate within each round (``--rounds``, default 3); the table gives the median of the
rounds and, for every ratio to ``dynamic``, its min..max over the rounds. Writes
bench/out/server-sequence.md (``--out``) naming the machine and the commit; a failed request ends
the run with a non-zero exit status.

Usage: ``.venv/bin/python -m bench.server.sequence_vs_dynamic [--seconds 3] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import (
    ServerProcess,
    commit,
    default_out,
    emit_checked,
    find_perf_analyzer,
    machine,
)

CONFIGS = {
    "dynamic": "dynamic_batching { }",
    "queued": "dynamic_batching { }",
    "oldest": "sequence_batching { oldest { max_candidate_sequences: 16 } }",
    "direct": "sequence_batching { direct { } }",
}
#: Variants only the in-process run has: ``queued`` is ``dynamic`` with direct execution off
#: (every request goes through the queue and the instance's thread, as the sequence batcher's
#: do), so that ratios to it are the scheduling alone.
IN_PROCESS_ONLY = ("queued",)


def write_repository(root: Path) -> Path:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT", "one"], ["OUTPUT"])],
        "plus_one",
        [helper.make_tensor_value_info("INPUT", TensorProto.INT32, ["N", 16])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, ["N", 16])],
        [helper.make_tensor("one", TensorProto.INT32, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for name, scheduler in CONFIGS.items():
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        save(model, str(root / name / "1" / "model.onnx"))
        (root / name / "config.pbtxt").write_text(f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
{scheduler}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 16 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""")
    return root


def run_core(core, model: str, concurrency: int, seconds: float, length: int) -> dict:
    """``concurrency`` threads, each running sequences of ``length`` requests for ``seconds``."""
    from triton_ros.core.infer_request import InferRequest

    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[BaseException] = []
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    ids = iter(range(1, 1 << 62))
    lock = threading.Lock()

    def one_sequence(record: list[float] | None) -> None:
        with lock:
            sequence_id = next(ids)
        for i in range(length):
            request = InferRequest(
                model,
                {"INPUT": data},
                sequence_id=sequence_id,
                sequence_start=i == 0,
                sequence_end=i == length - 1,
            )
            t0 = time.perf_counter()
            core.infer_sync(request, timeout=60)
            if record is not None:
                record.append((time.perf_counter() - t0) * 1e3)

    stop = [0.0]

    def worker(index: int) -> None:
        try:
            one_sequence(None)  # warm-up
            while time.perf_counter() < stop[0]:
                one_sequence(latencies[index])
        except BaseException as exc:  # reported, never a hang
            errors.append(exc)

    before = core.model_statistics(model)[0]
    cpu0 = time.process_time()
    stop[0] = time.perf_counter() + seconds
    start = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    if errors:
        raise RuntimeError(f"{model}: a request failed: {errors[0]!r}")
    after = core.model_statistics(model)[0]
    flat = np.array([x for per in latencies for x in per])
    done = after.success.count - before.success.count
    queue_us = (after.queue.ns - before.queue.ns) / max(1, after.queue.count - before.queue.count)
    return {
        "rps": len(flat) / elapsed,
        "p50": float(np.percentile(flat, 50)),
        "p99": float(np.percentile(flat, 99)),
        "cpu_us": cpu / max(1, done) * 1e6,
        "queue_us": queue_us / 1e3,
        "n": len(flat),
    }


def run_perf_analyzer(url: str, model: str, concurrency: int, window_ms: int, length: int) -> dict:
    analyzer, env = find_perf_analyzer()
    result = subprocess.run(
        [
            str(analyzer),
            "-m",
            model,
            "-i",
            "grpc",
            "-u",
            url,
            "--concurrency-range",
            str(concurrency),
            "--measurement-interval",
            str(window_ms),
            "--max-trials",
            "3",
            "--stability-percentage",
            "100",
            "-s",
            "1000000",
            "--sequence-length",
            str(length),
            "--sequence-length-variation",
            "0",
            "--input-data",
            "zero",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if result.returncode != 0:
        raise RuntimeError(f"perf_analyzer on {model} failed:\n{result.stdout}{result.stderr}")
    text = result.stdout
    rps = float(text.split("Throughput: ")[1].split()[0])
    p50 = float(text.split("p50 latency: ")[1].split()[0]) / 1e3
    return {"rps": rps, "p50": p50}


def _median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def _ratio(rounds: dict[str, list[dict]], variant: str, key: str, base: str = "dynamic") -> str:
    """The median ratio of ``key`` to ``base``'s in the same round, and its min..max."""
    if variant == base:
        return "1"
    values = [a[key] / b[key] for a, b in zip(rounds[variant], rounds[base])]
    return f"{statistics.median(values):.2f}x ({min(values):.2f}..{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="each in-process point")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--length", type=int, default=20, help="requests a sequence")
    parser.add_argument("--window-ms", type=int, default=1500, help="perf_analyzer's window")
    parser.add_argument("--out", default=default_out("server-sequence"))
    args = parser.parse_args()

    from triton_ros.core.server import InferenceServer, ServerOptions

    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    lines = [
        f"# Sequence batcher against dynamic batcher ({started} UTC, commit {commit()})",
        "",
        f"Machine: {machine()}",
        "",
        f"One instance, max_batch_size 8, OUTPUT = INPUT + 1 (INT32 [1, 16]); sequences of "
        f"{args.length} requests; {args.rounds} rounds, variants alternating; medians, and "
        f"for ratios to `dynamic` the median (min..max) over the rounds.",
        "",
    ]
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(Path(tmp) / "models")
        core = InferenceServer(ServerOptions((str(repo),)))
        core.start()
        core.get_model("queued").direct_execution_ns = 0
        try:
            for concurrency in (1, 8):
                rounds: dict[str, list[dict]] = {name: [] for name in CONFIGS}
                for _ in range(args.rounds):
                    for name in CONFIGS:
                        rounds[name].append(
                            run_core(core, name, concurrency, args.seconds, args.length)
                        )
                lines += [
                    f"## In process, concurrency {concurrency}",
                    "",
                    "| scheduler | requests/s | p50 ms | p99 ms | CPU a request (us) | "
                    "queue a request (us) | requests/s vs dynamic | vs queued | "
                    "CPU vs queued |",
                    "|---|---|---|---|---|---|---|---|---|",
                ]
                for name in CONFIGS:
                    r = rounds[name]
                    lines.append(
                        f"| {name} | {_median(r, 'rps'):.0f} | {_median(r, 'p50'):.3f} "
                        f"| {_median(r, 'p99'):.3f} | {_median(r, 'cpu_us'):.0f} | "
                        f"{_median(r, 'queue_us'):.0f} | {_ratio(rounds, name, 'rps', 'dynamic')}"
                        f" | {_ratio(rounds, name, 'rps', 'queued')} | "
                        f"{_ratio(rounds, name, 'cpu_us', 'queued')} |"
                    )
                lines.append("")
        finally:
            core.stop()

        server = ServerProcess("--model-repository", str(repo), log=Path(tmp) / "server.log")
        try:
            served = [name for name in CONFIGS if name not in IN_PROCESS_ONLY]
            rounds = {name: [] for name in served}
            for _ in range(args.rounds):
                for name in served:
                    rounds[name].append(
                        run_perf_analyzer(server.url(), name, 8, args.window_ms, args.length)
                    )
        finally:
            if server.stop() != 0:
                failures.append("the server did not exit cleanly")
        lines += [
            "## gRPC, perf_analyzer, concurrency 8",
            "",
            "| scheduler | requests/s | p50 ms | requests/s vs dynamic |",
            "|---|---|---|---|",
        ]
        for name in served:
            lines.append(
                f"| {name} | {_median(rounds[name], 'rps'):.0f} | "
                f"{_median(rounds[name], 'p50'):.2f} | {_ratio(rounds, name, 'rps')} |"
            )
    return emit_checked(lines, failures, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
