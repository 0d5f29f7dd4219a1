#!/usr/bin/env python3
"""GPU batching benchmark of the server: batch-1 against dynamic batching, on a GPU machine.

    python3 -m bench.gpu.batching [--seconds 5] [--concurrency 1,8,32,64]     # from the root

Needs an NVIDIA GPU with PyTorch (CUDA) and tritonclient[grpc] importable; exits 2 with the
reason when either is missing (no GPU: nothing is run). What it does, in one bounded run:

1. The model alone, in this process: a small convolutional classifier in PyTorch on the GPU
   (FP32 [N,3,224,224] -> [N,1000]) at batch 1 and 32: the images/s ceiling.
2. ``triton-ros-server`` (this checkout, free ports on 127.0.0.1) serves the same network as a
   Triton Python-backend model with ``KIND_GPU``: inputs arrive through DLPack
   (``pb_utils.Tensor.to_dlpack`` -> ``torch.from_dlpack``), are moved to the GPU, run, and come
   back through DLPack (``pb_utils.Tensor.from_dlpack``). Two copies of it: ``gpu_net_b1``
   without ``dynamic_batching`` (every request alone) and ``gpu_net_dyn`` with it
   (max_batch_size 32, ``--queue-delay-us``).
3. tritonclient gRPC clients (threads) send batch-1 requests at each concurrency for
   ``--seconds``: images/s, p50 and p99 latency per model and concurrency.
4. Per executed batch size (the model writes each execution's size and duration, measured around
   the GPU work and its copies): executions, p50 and p99 execution time, and images/s at that
   size.
5. The server's own overhead per request on this path at concurrency 1: the client's p50
   latency minus the model's p50 execution time (gRPC, the core, the Python stub's IPC), and the
   server's statistics (request duration minus compute time).

Writes bench/out/gpu-batching.md (``--out``) naming the machine, the GPU and the commit; exits 1
when a request failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT, commit, default_out, free_port

MODEL_PY = '''
"""Benchmark model: a small conv classifier in PyTorch on the instance's GPU, DLPack in and out."""
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def build_net(torch, device):
    torch.manual_seed(0)
    layers, cin = [], 3
    for cout, stride in ((32, 2), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1)):
        layers += [torch.nn.Conv2d(cin, cout, 3, stride, 1), torch.nn.ReLU()]
        cin = cout
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(cin, 1000)]
    return torch.nn.Sequential(*layers).to(device).eval()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.log = open(config["parameters"]["exec_log"]["string_value"], "a", buffering=1)
        self.paths = set()
        if config["parameters"]["engine"]["string_value"] == "numpy":   # --cpu-dry-run
            self.torch = None
            return
        import torch
        self.torch = torch
        self.device = torch.device("cuda", int(args["model_instance_device_id"]))
        self.net = build_net(torch, self.device)

    def _dry_run(self, requests):
        start = time.perf_counter()
        parts = [np.from_dlpack(pb_utils.get_input_tensor_by_name(r, "INPUT0")) for r in requests]
        self.paths.add("dlpack")
        x = np.concatenate(parts) if len(parts) > 1 else parts[0]
        y = np.ascontiguousarray(x.reshape(x.shape[0], -1)[:, :1000] * 2.0)
        took = time.perf_counter() - start
        responses, offset = [], 0
        for part in parts:
            rows = part.shape[0]
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor.from_dlpack("OUTPUT0", y[offset:offset + rows])]))
            offset += rows
        self.log.write(f"{x.shape[0]} {took * 1e3:.4f} {'+'.join(sorted(self.paths))}\\n")
        return responses

    def _input(self, request):
        tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        try:
            out = self.torch.from_dlpack(tensor.to_dlpack())
            self.paths.add("dlpack")
        except (BufferError, RuntimeError, TypeError):   # a read-only array: numpy refuses
            out = self.torch.from_numpy(np.array(tensor.as_numpy()))
            self.paths.add("copy")
        return out

    def execute(self, requests):
        if self.torch is None:
            return self._dry_run(requests)
        torch = self.torch
        start = time.perf_counter()
        parts = [self._input(r) for r in requests]
        x = (torch.cat(parts) if len(parts) > 1 else parts[0]).to(self.device, non_blocking=True)
        with torch.inference_mode():
            y = self.net(x)
        y = y.cpu()                                        # waits for the GPU
        took = time.perf_counter() - start
        responses, offset = [], 0
        for part in parts:
            rows = part.shape[0]
            out = y[offset:offset + rows].contiguous()
            offset += rows
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor.from_dlpack("OUTPUT0", out)]))
        self.log.write(f"{x.shape[0]} {took * 1e3:.4f} {'+'.join(sorted(self.paths))}\\n")
        return responses

    def finalize(self):
        self.log.close()
'''

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 32
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1000 ] }} ]
instance_group [ {{ count: 1, kind: {kind} }} ]
parameters {{ key: "exec_log" value: {{ string_value: "{log}" }} }}
parameters {{ key: "engine" value: {{ string_value: "{engine}" }} }}
{batching}
"""


def need(what: str, why: str) -> None:
    print(f"bench.gpu.batching: {what}: {why}; nothing was run", file=sys.stderr)
    sys.exit(2)


def pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def model_alone(torch, gpu: int, seconds: float) -> dict[int, float]:
    """images/s of the network in this process at batch 1 and 32 (no server)."""
    namespace: dict = {}
    exec(
        compile(
            MODEL_PY.split("class TritonPythonModel")[0].replace(
                "import triton_python_backend_utils as pb_utils", ""
            ),
            "model",
            "exec",
        ),
        namespace,
    )
    device = torch.device("cuda", gpu)
    net = namespace["build_net"](torch, device)
    out = {}
    for batch in (1, 32):
        x = torch.rand(batch, 3, 224, 224)
        for _ in range(5):
            with torch.inference_mode():
                net(x.to(device)).cpu()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            with torch.inference_mode():
                net(x.to(device)).cpu()
            n += batch
        out[batch] = n / (time.perf_counter() - start)
    return out


def drive(url: str, model: str, concurrency: int, seconds: float) -> dict:
    import tritonclient.grpc as grpcclient

    image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client() -> None:
        c = grpcclient.InferenceServerClient(url)
        x = grpcclient.InferInput("INPUT0", [1, 3, 224, 224], "FP32")
        x.set_data_from_numpy(image)
        mine = []
        while time.monotonic() < stop:
            t = time.perf_counter()
            try:
                c.infer(model, [x])
            except Exception as exc:  # counted and reported, never hidden
                with lock:
                    errors.append(str(exc)[:200])
                continue
            mine.append(time.perf_counter() - t)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    return {
        "images_s": len(latencies) / elapsed,
        "p50_ms": 1e3 * pct(latencies, 50),
        "p99_ms": 1e3 * pct(latencies, 99),
        "errors": errors,
    }


def read_exec_log(path: Path, skip: int) -> tuple[list[tuple[int, float]], int, str]:
    lines = path.read_text().splitlines() if path.exists() else []
    rows = [(int(b), float(ms)) for b, ms, *_ in (line.split() for line in lines[skip:])]
    paths = lines[-1].split()[2] if lines and len(lines[-1].split()) > 2 else "?"
    return rows, len(lines), paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per concurrency and model")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--queue-delay-us", type=int, default=500)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--out", default=default_out("gpu-batching"))
    parser.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="check the benchmark's own workings without a GPU: KIND_CPU and a "
        "numpy stand-in for the network (its numbers mean nothing)",
    )
    args = parser.parse_args()

    try:
        import tritonclient.grpc  # noqa: F401
    except ImportError as exc:
        need("tritonclient[grpc] is not installed", str(exc))
    if args.cpu_dry_run:
        torch, gpu_name, torch_version, alone = None, "none (--cpu-dry-run)", "-", {1: 1.0, 32: 1.0}
    else:
        try:
            import torch
        except ImportError as exc:
            need("PyTorch is not installed", str(exc))
        if not torch.cuda.is_available():
            need("no CUDA device", "torch.cuda.is_available() is False")
        gpu_name, torch_version = torch.cuda.get_device_name(args.gpu), torch.__version__
        print(f"GPU {args.gpu}: {gpu_name}, torch {torch_version}", flush=True)
        alone = model_alone(torch, args.gpu, min(args.seconds, 3.0))
        print(
            f"model alone: batch 1 {alone[1]:.0f} img/s, batch 32 {alone[32]:.0f} img/s", flush=True
        )
    kind = "KIND_CPU" if args.cpu_dry_run else f"KIND_GPU, gpus: [ {args.gpu} ]"
    engine = "numpy" if args.cpu_dry_run else "torch"

    levels = [int(c) for c in args.concurrency.split(",")]
    results: dict[str, dict[int, dict]] = {}
    per_batch: dict[str, list[tuple[int, float]]] = {}
    overhead: dict[str, dict] = {}
    paths = "?"
    with tempfile.TemporaryDirectory(prefix="gpu_bench_") as tmp:
        repo = Path(tmp) / "models"
        logs = {}
        for name, batching in (
            ("gpu_net_b1", ""),
            (
                "gpu_net_dyn",
                f"dynamic_batching {{ max_queue_delay_microseconds: {args.queue_delay_us} }}",
            ),
        ):
            (repo / name / "1").mkdir(parents=True)
            (repo / name / "1" / "model.py").write_text(MODEL_PY)
            logs[name] = Path(tmp) / f"{name}.log"
            (repo / name / "config.pbtxt").write_text(
                CONFIG.format(
                    name=name, kind=kind, engine=engine, log=logs[name], batching=batching
                )
            )
        grpc_port = free_port()
        server_log = open(Path(tmp) / "server.log", "w")
        env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.server_main",
                f"--model-repository={repo}",
                f"--grpc-port={grpc_port}",
                "--allow-http=false",
                "--allow-metrics=false",
            ],
            stdout=server_log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(ROOT),
        )
        url = f"127.0.0.1:{grpc_port}"
        try:
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(url)
            deadline = time.monotonic() + 300
            while True:
                failed = ""
                try:
                    if all(client.is_model_ready(m) for m in logs):
                        break
                    failed = "; ".join(
                        f"{m.name}: {m.reason}"
                        for m in client.get_model_repository_index().models
                        if m.state == "UNAVAILABLE"
                    )
                except Exception:
                    pass
                if failed or server.poll() is not None or time.monotonic() > deadline:
                    print((Path(tmp) / "server.log").read_text()[-4000:], file=sys.stderr)
                    print(
                        f"bench.gpu.batching: the server did not get both models ready {failed}",
                        file=sys.stderr,
                    )
                    return 1
                time.sleep(0.5)
            for name in logs:
                drive(url, name, 4, 2.0)  # warm-up
                results[name] = {}
                _, skip, _ = read_exec_log(logs[name], 0)
                for c in levels:
                    s0 = client.get_inference_statistics(name).model_stats[0].inference_stats
                    r = results[name][c] = drive(url, name, c, args.seconds)
                    s1 = client.get_inference_statistics(name).model_stats[0].inference_stats
                    rows, skip_next, paths = read_exec_log(logs[name], skip)
                    skip = skip_next
                    per_batch.setdefault(name, []).extend(rows)
                    if c == 1:
                        n = max(1, s1.success.count - s0.success.count)
                        overhead[name] = {
                            "client_p50_ms": r["p50_ms"],
                            "exec_p50_ms": pct([ms for _, ms in rows], 50),
                            "server_request_us": (s1.success.ns - s0.success.ns) / n / 1e3,
                            "server_queue_us": (s1.queue.ns - s0.queue.ns) / n / 1e3,
                            "server_compute_us": (
                                (s1.compute_input.ns - s0.compute_input.ns)
                                + (s1.compute_infer.ns - s0.compute_infer.ns)
                                + (s1.compute_output.ns - s0.compute_output.ns)
                            )
                            / n
                            / 1e3,
                        }
                    print(
                        f"{name} c={c}: {r['images_s']:.0f} img/s p50 {r['p50_ms']:.2f} ms "
                        f"p99 {r['p99_ms']:.2f} ms errors {len(r['errors'])}",
                        flush=True,
                    )
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()
            server_log.close()

    lines = [
        "# GPU batching: batch-1 vs dynamic batching (Python backend, PyTorch, DLPack)",
        "",
        f"`python3 -m bench.gpu.batching {' '.join(sys.argv[1:])}`, commit {commit()}, run "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}.",
        "",
        f"Machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; GPU "
        f"{args.gpu}: {gpu_name}; torch {torch_version}. Inputs reached the model through: "
        f"{paths} (dlpack = zero-copy import).",
        "",
        f"Model alone in-process: batch 1 {alone[1]:.0f} images/s, batch 32 {alone[32]:.0f} "
        f"images/s ({alone[32] / alone[1]:.1f}x).",
        "",
        "| concurrency | batch-1 images/s | p50 / p99 ms | dynamic images/s | p50 / p99 ms | "
        "dynamic / batch-1 |",
        "|---|---|---|---|---|---|",
    ]
    for c in levels:
        a, b = results["gpu_net_b1"][c], results["gpu_net_dyn"][c]
        lines.append(
            f"| {c} | {a['images_s']:.0f} | {a['p50_ms']:.2f} / {a['p99_ms']:.2f} | "
            f"{b['images_s']:.0f} | {b['p50_ms']:.2f} / {b['p99_ms']:.2f} | "
            f"{b['images_s'] / a['images_s']:.2f}x |"
        )
    errors = sum(len(r["errors"]) for m in results.values() for r in m.values())
    lines += [
        "",
        f"Failed requests: {errors}.",
        "",
        "Per executed batch size (every concurrency, both models; execution = input "
        "import, copy to the GPU, the network, copy back):",
        "",
        "| model | batch size | executions | p50 ms | p99 ms | images/s at this size |",
        "|---|---|---|---|---|---|",
    ]
    for name, rows in per_batch.items():
        for size in sorted({b for b, _ in rows}):
            ms = [m for b, m in rows if b == size]
            lines.append(
                f"| {name} | {size} | {len(ms)} | {pct(ms, 50):.2f} | {pct(ms, 99):.2f} "
                f"| {size * 1e3 / np.mean(ms):.0f} |"
            )
    lines += ["", "Server overhead per request at concurrency 1:", ""]
    for name, o in overhead.items():
        lines.append(
            f"- {name}: client p50 {o['client_p50_ms']:.2f} ms - model execution p50 "
            f"{o['exec_p50_ms']:.2f} ms = {o['client_p50_ms'] - o['exec_p50_ms']:.2f} ms outside "
            f"the model (gRPC, core, Python stub IPC); server statistics: request "
            f"{o['server_request_us']:.0f} us = queue {o['server_queue_us']:.0f} + compute "
            f"{o['server_compute_us']:.0f} + other "
            f"{o['server_request_us'] - o['server_queue_us'] - o['server_compute_us']:.0f} us"
        )
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
