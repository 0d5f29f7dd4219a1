"""The server demo: serve the bundled repository, drive it for a bounded time, print statistics.

``python -m triton_ros.demo [--seconds N]`` starts ``triton-ros-server`` on a free 127.0.0.1 port,
checks the detector's answer over gRPC against onnxruntime run directly, loads it with
perf_analyzer (when installed) at concurrency 1, 4 and 16, prints the per-model statistics
(inference and execution counts, mean executed batch) and stops the server with SIGINT.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(client, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if client.is_server_ready():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise TimeoutError("server did not become ready")


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort
    import tritonclient.grpc as grpcclient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="perf_analyzer window per level")
    parser.add_argument("--model-repository", default=str(ROOT / "model_repository"))
    args = parser.parse_args(argv)

    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            args.model_repository,
            "--grpc-port",
            str(port),
        ]
    )
    url = f"127.0.0.1:{port}"
    try:
        client = grpcclient.InferenceServerClient(url)
        wait_ready(client)
        images = np.random.default_rng(0).random((2, 3, 256, 256), dtype=np.float32)
        x = grpcclient.InferInput("images", list(images.shape), "FP32")
        x.set_data_from_numpy(images)
        served = client.infer("detector", [x])
        session = ort.InferenceSession(
            str(Path(args.model_repository) / "detector" / "1" / "model.onnx"),
            providers=["CPUExecutionProvider"],
        )
        direct = session.run(None, {"images": images})
        same = all(
            np.allclose(served.as_numpy(n), d, atol=1e-5)
            for n, d in zip(("boxes", "scores"), direct)
        )
        print(f"detector over gRPC equals onnxruntime run directly: {same}")

        perf = shutil.which("perf_analyzer") or str(Path(sys.executable).parent / "perf_analyzer")
        if os.path.exists(perf):
            for concurrency in (1, 4, 16):
                out = subprocess.run(
                    [
                        perf,
                        "-m",
                        "detector",
                        "-i",
                        "grpc",
                        "-u",
                        url,
                        "--concurrency-range",
                        str(concurrency),
                        "--measurement-interval",
                        str(int(args.seconds * 1000)),
                        "--input-data",
                        "zero",
                        "-s",
                        "100000",
                        "--max-trials",
                        "3",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                line = next(
                    (ln.strip() for ln in out.stdout.splitlines() if ln.startswith("Concurrency:")),
                    out.stdout[-300:],
                )
                print(f"perf_analyzer: {line}")
        else:
            print("perf_analyzer is not installed; skipped the load run")

        stats = client.get_inference_statistics(as_json=True)
        print("\nper-model statistics:")
        for s in stats.get("model_stats", []):
            inf = int(s.get("inference_count", 0))
            exe = int(s.get("execution_count", 0))
            mean = inf / exe if exe else 0.0
            print(
                f"  {s['name']:10s} v{s['version']}: {inf} inferences in {exe} executions "
                f"(mean executed batch {mean:.2f})"
            )
        return 0 if same else 1
    finally:
        server.send_signal(signal.SIGINT)
        try:
            rc = server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            rc = -9
        print(f"server exited with {rc}")


if __name__ == "__main__":
    sys.exit(main())
