#!/usr/bin/env python3
"""ONNX Runtime against OpenVINO, and FP32 against FP16 and INT8, on the bundled detectors: one
run, side by side, on this CPU.

For the bundled ``color_detector`` (constructed to see synthetic_cameras' scenes) and
``detector`` (six convolutions, random weights), each in FP32, FP16 and INT8 (QDQ) ONNX made by
scripts/quantize_color_detector.py (INT8 calibrated on synthetic camera frames):

- bare runtime: CPU time per image (the process's, every runtime thread) and images/s of ONNX
  Runtime (1 intra-op thread, as the bundled configurations) and of OpenVINO (1 stream, 1 thread,
  latency hint, FP32 compute as the backend sets it; plus ``bf16``: the FP32 model with
  OpenVINO's own CPU default here, bf16 compute) at batch 1 and 8. CPU time per image is the
  measure that ranks them: on a host shared with other work the wall-clock rates swing with the
  load, the CPU a runtime spends per image far less. The configurations take turns for
  ``--rounds`` rounds of ``--seconds`` (all rounds together) each; the median counts.
- served: the same models in one triton-ros-server (the bundled instance groups; OpenVINO with one
  stream and one thread per instance), tritonclient over gRPC: latency p50 at concurrency 1,
  images/s and the server's CPU ms per image at concurrency 8, taking turns likewise.
- accuracy (color_detector): recall, precision and mean IoU against the scenes' ground truth of
  what the server answers for 96 frames, decoded and matched as the ROS demo does.

Checks (exit status 1 when one fails): the server's answers equal the bare runtime's for the same
model file; FP32 finds every object (recall 1.0, IoU >= 0.95); FP16 and INT8 lose at most 0.05
recall and 0.05 mean IoU against FP32. Writes the table (markdown) to stdout and ``--out``.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import quantize_color_detector as quant  # noqa: E402
from bench.common import free_port, wait_ready  # noqa: E402

MODELS = ("color_detector", "detector")
PRECISIONS = ("fp32", "fp16", "int8")


def machine() -> str:
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or "unknown"
    return f"{model}, {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}"


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            text=True,
            capture_output=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ------------------------------------------------------------------------------ bare runtimes
def ort_runner(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"images": x})


def ov_runner(path: Path, precision_hint: str = "f32"):
    import openvino as ov

    compiled = ov.Core().compile_model(
        str(path),
        "CPU",
        {
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": 1,
            "INFERENCE_PRECISION_HINT": precision_hint,
        },
    )
    request = compiled.create_infer_request()
    return lambda x: list(request.infer({"images": x}).values())


def images_per_second(run, x: np.ndarray, seconds: float) -> tuple[float, float]:
    """(images/s, CPU ms per image) of ``run`` on ``x`` for ``seconds``: the process's CPU time
    (every runtime thread) per image, which another process's load on the host changes far less
    than the wall-clock rate."""
    run(x)
    done, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        run(x)
        done += len(x)
    return done / (time.perf_counter() - start), 1000 * (time.process_time() - cpu) / done


def bare(
    files: dict[tuple[str, str], Path], seconds: float, rounds: int
) -> dict[tuple, tuple[float, float]]:
    runners = {}
    for (model, precision), path in files.items():
        runners[(model, precision, "onnxruntime")] = ort_runner(path)
        runners[(model, precision, "openvino")] = ov_runner(path)
        if precision == "fp32":
            runners[(model, precision, "openvino bf16")] = ov_runner(path, "bf16")
    frames, _ = quant.evaluation_set(8, seed=500)
    results: dict[tuple, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for key, run in runners.items():
            for batch in (1, 8):
                results.setdefault(key + (batch,), []).append(
                    images_per_second(run, frames[:batch], seconds / rounds)
                )
    return {
        k: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v))
        for k, v in results.items()
    }


# ------------------------------------------------------------------------------ served
class Server:
    def __init__(self, repository: Path) -> None:
        self.port, http, metrics = (free_port() for _ in range(3))
        self.log = open(Path(tempfile.gettempdir()) / f"bench-backends-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.server_main",
                "--model-repository",
                str(repository),
                "--grpc-port",
                str(self.port),
                "--http-port",
                str(http),
                "--metrics-port",
                str(metrics),
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        import tritonclient.grpc as grpcclient

        try:
            wait_ready(grpcclient.InferenceServerClient(f"127.0.0.1:{self.port}"), timeout=180)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"server not ready: see {self.log.name}") from None

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def infer(client, model: str, x: np.ndarray, outputs: list[str]) -> list[np.ndarray]:
    import tritonclient.grpc as grpcclient

    inp = grpcclient.InferInput("images", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer(model, [inp])
    return [result.as_numpy(name) for name in outputs]


def process_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def served_rate(
    port: int,
    pid: int,
    model: str,
    x: np.ndarray,
    outputs: list[str],
    concurrency: int,
    seconds: float,
) -> tuple[float, float, float]:
    """(p50 latency ms, images/s, the server's CPU ms per image) of ``concurrency`` clients
    sending ``x`` for ``seconds``."""
    import tritonclient.grpc as grpcclient

    latencies: list[float] = []
    window: list[float] = []  # [start, stop], set once every client is warm
    lock = threading.Lock()

    def open_window():
        now = time.perf_counter()
        window[:] = [now, now + seconds, process_cpu_seconds(pid)]

    warm = threading.Barrier(concurrency, action=open_window)

    def client_loop():
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        infer(client, model, x, outputs)
        warm.wait()
        mine = []
        while time.perf_counter() < window[1]:
            t0 = time.perf_counter()
            infer(client, model, x, outputs)
            mine.append(time.perf_counter() - t0)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client_loop) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - window[0]
    images = len(latencies) * len(x)
    cpu = process_cpu_seconds(pid) - window[2]
    return 1000 * statistics.median(latencies), images / elapsed, 1000 * cpu / images


OUTPUTS = {"color_detector": ["detections"], "detector": ["boxes", "scores"]}


def served(port: int, pid: int, names: list[str], seconds: float, rounds: int) -> dict[str, tuple]:
    """name -> (p50 ms at concurrency 1, images/s and server CPU ms per image at 8)."""
    frames, _ = quant.evaluation_set(1, seed=600)
    got: dict[str, dict[int, list]] = {}
    for _ in range(rounds):
        for name in names:
            outputs = OUTPUTS[name.split("_fp")[0].split("_int")[0]]
            for concurrency in (1, 8):
                got.setdefault(name, {}).setdefault(concurrency, []).append(
                    served_rate(port, pid, name, frames, outputs, concurrency, seconds / rounds)
                )
    return {
        name: (
            statistics.median(m[0] for m in by[1]),
            statistics.median(m[1] for m in by[8]),
            statistics.median(m[2] for m in by[8]),
        )
        for name, by in got.items()
    }


# ------------------------------------------------------------------------------ accuracy
def accuracy(port: int, files: dict[tuple[str, str], Path], failures: list[str]) -> dict:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    frames, truths = quant.evaluation_set(96)
    scores = {}
    for precision in PRECISIONS:
        path = files[("color_detector", precision)]
        for runtime, suffix, runner in (
            ("onnxruntime", "", ort_runner(path)),
            ("openvino", "_openvino", ov_runner(path)),
        ):
            name = f"color_detector_{precision}{suffix}"
            answers = np.concatenate(
                [
                    infer(client, name, frames[i : i + 8], ["detections"])[0]
                    for i in range(0, len(frames), 8)
                ]
            )
            direct = np.concatenate(
                [runner(frames[i : i + 8])[0] for i in range(0, len(frames), 8)]
            )
            if not np.allclose(answers, direct, rtol=1e-5, atol=1e-4):
                failures.append(
                    f"{name}: the server's answers differ from {runtime} run "
                    f"directly (max {np.abs(answers - direct).max():.3g})"
                )
            scores[(precision, runtime)] = quant.score(answers, truths)
    for runtime in ("onnxruntime", "openvino"):
        fp32 = scores[("fp32", runtime)]
        if fp32.recall < 1.0 or fp32.mean_iou < 0.95:
            failures.append(f"FP32 on {runtime}: recall {fp32.recall:.3f}, IoU {fp32.mean_iou:.3f}")
        for precision in ("fp16", "int8"):
            s = scores[(precision, runtime)]
            if s.recall < fp32.recall - 0.05 or s.mean_iou < fp32.mean_iou - 0.05:
                failures.append(
                    f"{precision} on {runtime} loses too much: recall "
                    f"{s.recall:.3f}, IoU {s.mean_iou:.4f} (FP32 {fp32.recall:.3f}, "
                    f"{fp32.mean_iou:.4f})"
                )
    return scores


# ------------------------------------------------------------------------------ report
def table(rates: dict, serving: dict, scores: dict) -> str:
    lines = [
        "| model | precision | runtime | bare CPU ms/img b1 | b8 | CPU vs ORT FP32 b1 | "
        "bare img/s b1 | served p50 ms c1 | served img/s c8 | served CPU ms/img c8 | "
        "recall | mean IoU |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model in MODELS:
        base = rates[(model, "fp32", "onnxruntime", 1)][1]
        for precision in PRECISIONS:
            for runtime in ("onnxruntime", "openvino", "openvino bf16"):
                key = (model, precision, runtime)
                if key + (1,) not in rates:
                    continue
                name = f"{model}_{precision}" + ("_openvino" if runtime == "openvino" else "")
                served_row = serving.get(name) if runtime != "openvino bf16" else None
                s = scores.get((precision, runtime)) if model == "color_detector" else None
                (rate1, cpu1), (_, cpu8) = rates[key + (1,)], rates[key + (8,)]
                lines.append(
                    f"| {model} | {precision.upper()} | {runtime} | {cpu1:.2f} | {cpu8:.2f} | "
                    f"{base / cpu1:.2f}x | {rate1:.0f} | "
                    + (
                        "{:.2f} | {:.0f} | {:.2f} | ".format(*served_row)
                        if served_row
                        else "- | - | - | "
                    )
                    + (f"{s.recall:.3f} | {s.mean_iou:.4f} |" if s is not None else "- | - |")
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=6.0,
        help="measuring time per configuration, all rounds together (default 6)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="turns taken (default 3)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "models"
        names = quant.write_repository(repository, 64, MODELS)
        files = {
            (model, precision): repository / f"{model}_{precision}" / "1" / "model.onnx"
            for model in MODELS
            for precision in PRECISIONS
        }
        print("bare runtimes ...", file=sys.stderr, flush=True)
        rates = bare(files, args.seconds, args.rounds)
        print("served ...", file=sys.stderr, flush=True)
        server = Server(repository)
        try:
            serving = served(
                server.port,
                server.proc.pid,
                [n for n in names if "fp16" not in n],
                args.seconds,
                args.rounds,
            )
            scores = accuracy(server.port, files, failures)
        finally:
            server.stop()
    report = (
        f"Machine: {machine()}; commit {commit()}; {args.rounds} rounds of "
        f"{args.seconds / args.rounds:.1f} s per configuration.\n\n"
        + table(rates, serving, scores)
        + "\n"
    )
    print(report)
    if args.out:
        args.out.write_text(report)
    for failure in failures:
        print(f"CHECK FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
