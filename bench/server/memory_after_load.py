"""Memory a ``triton-ros-server`` keeps after large requests, and how fast it gives it back.

One run drives each checkout given (``--checkout PATH --label NAME``, repeatable: a before/after
A/B side by side; each runs ``python -m triton_ros.server_main`` from that checkout with this
environment's interpreter) through the same load, alternating checkouts per round:

1. start the server on the bundled model repository plus ``identity_fp32`` (an ONNX Identity,
   FP32 ``[-1]``, no batching), wait for it, record its RSS: the baseline;
2. ``--requests`` sequential requests of ``--mb`` MB over HTTP (binary tensor extension), then as
   many over gRPC, with tritonclient; each response is checked against its input;
3. idle: the server's RSS each second for ``--idle`` seconds.

It reports, per checkout, the baseline, the RSS at the end of the load and after the idle time,
the seconds of idle until the RSS is back within ``--budget-mb`` of the baseline, and the
requests per second of each phase (a throughput check of the large-request path; the peer
benchmark checks small requests). Exit status 1 when the last checkout does not get back within
the budget by the end of the idle time (the issue 34 target: 50 MB within 15 s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test"))  # the test suite's model factory

from bench.common import (  # noqa: E402
    LOAD_AT_START,
    cpu_model,
    cpu_seconds,
    emit,
    free_port,
    minor_faults,
    proc_status_kb,
)
from model_factory import identity_config, identity_graph, write_model  # noqa: E402


def make_repository(where: Path) -> Path:
    repo = where / "models"
    shutil.copytree(ROOT / "model_repository", repo)
    write_model(
        repo, "identity_fp32", identity_graph("FP32", [-1]), identity_config("identity_fp32")
    )
    return repo


def rss_mb(pid: int) -> float:
    return proc_status_kb(pid, "VmRSS") / 1024


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("server did not start")


def drive(checkout: Path, repo: Path, args) -> dict:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    log = open(Path(tempfile.gettempdir()) / f"memory-bench-{grpc_port}.log", "w")
    proc = subprocess.Popen(  # this environment's interpreter, the checkout's package
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            str(repo),
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
            "--metrics-port",
            str(metrics_port),
        ],
        cwd=str(checkout),
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    try:
        wait_port(metrics_port, proc)
        time.sleep(2.0)
        out = {"baseline": rss_mb(proc.pid)}
        data = np.random.default_rng(0).random(int(args.mb * 1e6) // 4, dtype=np.float32)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=120)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        for name, client, module, kwargs in (
            ("http", http, httpclient, {"binary_data": True}),
            ("grpc", grpc, grpcclient, {}),
        ):
            started = time.monotonic()
            cpu, faults = cpu_seconds(proc.pid), minor_faults(proc.pid)
            for _ in range(args.requests):
                x = module.InferInput("INPUT0", [data.size], "FP32")
                x.set_data_from_numpy(data, **kwargs)
                outputs = [module.InferRequestedOutput("OUTPUT0", **kwargs)]
                result = client.infer("identity_fp32", [x], outputs=outputs)
                if not np.array_equal(result.as_numpy("OUTPUT0"), data):
                    raise AssertionError(f"{name}: the identity model's output differs")
            out[f"{name}_rps"] = args.requests / (time.monotonic() - started)
            out[f"{name}_cpu_ms"] = (cpu_seconds(proc.pid) - cpu) * 1e3 / args.requests
            out[f"{name}_faults"] = (minor_faults(proc.pid) - faults) / args.requests
        http.close()
        grpc.close()
        out["loaded"] = rss_mb(proc.pid)
        out["peak"] = proc_status_kb(proc.pid, "VmHWM") / 1024
        samples = []
        idle_start = time.monotonic()
        while time.monotonic() - idle_start < args.idle:
            time.sleep(1.0)
            samples.append((time.monotonic() - idle_start, rss_mb(proc.pid)))
        out["idle"] = samples[-1][1]
        back = [t for t, rss in samples if rss <= out["baseline"] + args.budget_mb]
        out["back_after_s"] = back[0] if back else None
        return out
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--checkout",
        action="append",
        type=Path,
        default=[],
        help="a checkout whose server to run, with this environment's interpreter "
        "(repeatable; default: this one)",
    )
    p.add_argument("--label", action="append", default=[])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--mb", type=float, default=30.0)
    p.add_argument("--idle", type=float, default=15.0)
    p.add_argument("--budget-mb", type=float, default=50.0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="")
    args = p.parse_args()
    checkouts = [c.resolve() for c in args.checkout] or [ROOT]
    labels = args.label + [c.name for c in checkouts[len(args.label) :]]
    results: dict[str, list[dict]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repository(Path(tmp))
        for round_index in range(args.rounds):
            order = list(zip(labels, checkouts))
            if round_index % 2:
                order.reverse()
            for label, checkout in order:
                results[label].append(drive(checkout, repo, args))
                print(label, results[label][-1], flush=True)
    lines = [
        f"`{' '.join(sys.argv)}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"Machine: {cpu_model()}, {os.cpu_count()} cores; load average at start "
        f"{LOAD_AT_START}, at end {open('/proc/loadavg').read().split()[:3]}.",
        "",
        f"{args.requests} sequential {args.mb:g} MB requests over HTTP (binary), then "
        f"{args.requests} over gRPC; RSS in MB; idle {args.idle:g} s after the load.",
        "",
        "| checkout | baseline | end of load | peak | after idle | back within "
        f"{args.budget_mb:g} MB after | HTTP req/s, server CPU ms/req, faults/req | gRPC "
        "req/s, CPU ms/req, faults/req |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label in labels:
        for r in results[label]:
            back = f"{r['back_after_s']:.0f} s" if r["back_after_s"] is not None else "never"
            lines.append(
                f"| {label} | {r['baseline']:.0f} | {r['loaded']:.0f} | {r['peak']:.0f} "
                f"| {r['idle']:.0f} | {back} | {r['http_rps']:.1f}, {r['http_cpu_ms']:.0f}, "
                f"{r['http_faults']:.0f} | {r['grpc_rps']:.1f}, {r['grpc_cpu_ms']:.0f}, "
                f"{r['grpc_faults']:.0f} |"
            )
    if len(labels) > 1:
        lines.append("")
        first, last = results[labels[0]], results[labels[-1]]
        for phase, what in (
            ("http_rps", "HTTP requests/s"),
            ("grpc_rps", "gRPC requests/s"),
            ("http_cpu_ms", "HTTP server CPU/request"),
            ("grpc_cpu_ms", "gRPC server CPU/request"),
        ):
            ratio = np.median([r[phase] for r in last]) / np.median([r[phase] for r in first])
            lines.append(f"- {what}, {labels[-1]} / {labels[0]}: {ratio:.2f}x")
    last = results[labels[-1]]
    ok = all(r["idle"] <= r["baseline"] + args.budget_mb for r in last)
    lines.append(
        f"\nCheck ({labels[-1]}: RSS within {args.budget_mb:g} MB of its baseline after "
        f"{args.idle:g} s idle): {'pass' if ok else 'FAIL'}"
    )
    emit("\n".join(lines) + "\n", args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
