#!/usr/bin/env python3
"""Benchmark: the node's model embedded vs served by a remote triton-ros-server on the same host.

``.venv/bin/python -m bench.remote.embedded_vs_remote [--cameras 8] [--rate 30] [--seconds 20]``

In one run, alternating, on the same machine and the same camera load (``--cameras`` synthetic
640x480 rgb8 cameras at ``--rate`` Hz from a separate process; this process receives every
camera's detections):

- ``embedded``: inference_node runs the bundled ``detector`` in its own core (as today);
- ``remote shm``: inference_node with ``server_urls: [grpc://127.0.0.1:PORT]``, the model served
  by a ``triton-ros-server`` process on this host; inputs through system shared memory
  (``shared_memory: auto``, the default);
- ``remote wire``: the same with ``shared_memory: off`` (what a remote on another machine costs
  the node: the tensor travels in the gRPC message).

Measured per configuration after a warm-up: frames/s published (the node's ~/status), end-to-end
p50/p99 (the camera's header stamp to the receipt here), drops, and CPU seconds per second of the
node process and of the remote server process. Results go to ``--out`` (default
bench/out/remote-embedded_vs_remote.md) with the machine, the commit and the ratios the issue
sets targets on (remote p99 / embedded p99 within 1.5x; node CPU saved).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import (
    start_inference_node,
    LOAD_AT_START,
    OUT,
    ROOT,
    ServerProcess,
    commit,
    cpu_seconds,
    default_out,
    follow_status,
    machine_lines,
    stamp_ns,
    stop_run,
)


@dataclass
class Result:
    name: str
    published_per_s: float
    received_per_s: float
    p50_ms: float
    p99_ms: float
    drop_fraction: float
    drops: dict
    node_cpu: float
    server_cpu: float

    @property
    def node_ms_per_frame(self) -> float:
        return 1000 * self.node_cpu / self.published_per_s if self.published_per_s else 0.0

    @property
    def node_ms_per_received(self) -> float:
        return 1000 * self.node_cpu / self.received_per_s if self.received_per_s else 0.0

    @property
    def server_ms_per_frame(self) -> float:
        return 1000 * self.server_cpu / self.published_per_s if self.published_per_s else 0.0


def machine() -> str:
    return f"{machine_lines()}\n- load average (1, 5, 15 min) at start: {LOAD_AT_START}"


def run_config(name: str, args, tmp: Path, probe, server) -> Result:

    from triton_ros.ros.codec.messages import DETECTIONS_TYPE

    node_name = f"bench_remote_{name.replace(' ', '_')}"
    cams = [f"bench/cam{i}" for i in range(args.cameras)]
    binding = {"model": "detector", "topics": [f"/{c}/image_raw" for c in cams]}
    node_params = {
        "grpc": {"enable": False},
        "http": {"enable": False},
        "metrics": {"enable": False},
        "bindings": ["cams"],
        "cams": binding,
    }
    if name == "embedded":
        node_params["startup_models"] = ["detector"]
    else:
        node_params["startup_models"] = []  # a robot's node: no model of its own
        binding["server_urls"] = [f"grpc://{server.url()}"]
        binding["shared_memory"] = "auto" if name == "remote shm" else "off"
    node, log = start_inference_node(
        {"/**": {"ros__parameters": node_params}},
        tmp / f"{node_name}.yaml",
        tmp / f"{node_name}.log",
        node_name,
    )
    latencies: list[float] = []
    measuring = threading.Event()
    lock = threading.Lock()

    def on_detections(msg) -> None:
        if measuring.is_set():
            now = probe.get_clock().now().nanoseconds
            with lock:
                latencies.append((now - stamp_ns(msg.header.stamp)) / 1e6)

    subs = [
        probe.create_subscription(DETECTIONS_TYPE, f"/{c}/detections", on_detections, 100)
        for c in cams
    ]
    fresh_status = follow_status(probe, node_name, subs, node=node, what=name, log_name=log.name)
    cameras = None

    try:
        fresh_status(0)
        cameras = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.ros.tools.synthetic_cameras",
                "--rate",
                str(args.rate),
            ]
            + [a for c in cams for a in ("--camera", f"{c}:{args.width}x{args.height}:rgb8")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        time.sleep(args.warmup)
        s0 = fresh_status(probe.get_clock().now().nanoseconds)
        c0, k0, t0 = cpu_seconds(node.pid), cpu_seconds(server.proc.pid), time.monotonic()
        measuring.set()
        time.sleep(args.seconds)
        measuring.clear()
        c1, k1, elapsed = cpu_seconds(node.pid), cpu_seconds(server.proc.pid), time.monotonic() - t0
        s1 = fresh_status(probe.get_clock().now().nanoseconds)
    finally:
        stop_run(node, cameras, log, probe, subs)
    b0 = next(b for b in s0.bindings if b.name == "cams")
    b1 = next(b for b in s1.bindings if b.name == "cams")
    node_elapsed = (stamp_ns(s1.header.stamp) - stamp_ns(s0.header.stamp)) / 1e9
    fields = [
        f
        for f in (
            "dropped_stale",
            "dropped_superseded",
            "dropped_malformed",
            "dropped_unavailable",
            "failed",
        )
        if hasattr(b1, f)
    ]
    drops = {f: getattr(b1, f) - getattr(b0, f) for f in fields}
    received = b1.received - b0.received
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return Result(
        name,
        (b1.published - b0.published) / node_elapsed,
        received / node_elapsed,
        float(np.percentile(lat, 50)),
        float(np.percentile(lat, 99)),
        sum(drops.values()) / received if received else 0.0,
        drops,
        (c1 - c0) / elapsed,
        (k1 - k0) / elapsed if name != "embedded" else 0.0,
    )


def model_alone(server, seconds: float, in_flight: int) -> dict[str, tuple[float, float, float]]:
    """Without ROS, in this process: requests/s, p50 and p99 (ms) with ``in_flight`` requests
    kept in flight, into an embedded core and through RemoteModel (shared memory) into the
    remote server: the cost of the hop itself."""
    from triton_ros.core.infer_request import InferRequest
    from triton_ros.core.server import InferenceServer, ServerOptions
    from triton_ros.ros.targets.remote.config import RemoteConfig
    from triton_ros.ros.targets.remote.model import RemoteModel

    x = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)

    def run(submit) -> tuple[float, float, float]:
        slots = threading.Semaphore(in_flight)
        lat: list[float] = []
        lock = threading.Lock()
        end = time.monotonic() + seconds
        started = time.monotonic()
        count = 0
        while time.monotonic() < end:
            slots.acquire()
            t = time.perf_counter()

            def done(_f, t=t):
                with lock:
                    lat.append(time.perf_counter() - t)
                slots.release()

            submit().add_done_callback(done)
            count += 1
        for _ in range(in_flight):
            slots.acquire()
        elapsed = time.monotonic() - started
        return count / elapsed, 1000 * float(np.median(lat)), 1000 * float(np.percentile(lat, 99))

    out = {}
    core = InferenceServer(
        ServerOptions(
            model_repositories=(str(ROOT / "model_repository"),),
            model_control_mode="explicit",
            startup_models=("detector",),
        )
    )
    core.start()
    try:
        out["embedded"] = run(
            lambda: core.infer(InferRequest(model_name="detector", inputs={"images": x}))
        )
    finally:
        core.stop()
    remote = RemoteModel("detector", -1, RemoteConfig(urls=(f"grpc://{server.url()}",)))
    remote.start()
    try:
        out["remote shm"] = run(lambda: remote.infer({"images": x}, ("boxes", "scores")))
    finally:
        remote.stop()
    return out


def median(results: list[Result], name: str) -> Result:
    rs = [r for r in results if r.name == name]
    pick = {
        f: float(np.median([getattr(r, f) for r in rs]))
        for f in (
            "published_per_s",
            "received_per_s",
            "p50_ms",
            "p99_ms",
            "drop_fraction",
            "node_cpu",
            "server_cpu",
        )
    }
    return Result(name=name, drops=rs[-1].drops, **pick)


def write(
    results: list[Result],
    names: list[str],
    args,
    out: Path,
    started: str,
    alone: dict[str, tuple[float, float, float]],
) -> str:
    med = {n: median(results, n) for n in names}
    e = med["embedded"]
    rows = [
        ("frames/s published", "published_per_s", "{:.1f}"),
        ("frames/s received by the node", "received_per_s", "{:.1f}"),
        ("end-to-end p50 (ms)", "p50_ms", "{:.1f}"),
        ("end-to-end p99 (ms)", "p99_ms", "{:.1f}"),
        ("dropped (of received)", "drop_fraction", "{:.1%}"),
        ("node CPU (cores)", "node_cpu", "{:.2f}"),
        ("node CPU per published frame (ms)", "node_ms_per_frame", "{:.2f}"),
        ("node CPU per received frame (ms)", "node_ms_per_received", "{:.2f}"),
        ("remote server CPU (cores)", "server_cpu", "{:.2f}"),
        ("server CPU per published frame (ms)", "server_ms_per_frame", "{:.2f}"),
    ]
    lines = [
        "# Remote inference benchmark: embedded core vs a remote triton-ros-server",
        "",
        f"`python -m bench.remote.embedded_vs_remote --cameras {args.cameras} --rate "
        f"{args.rate:g} --width {args.width} --height {args.height} --seconds "
        f"{args.seconds:g} --warmup {args.warmup:g} --rounds {args.rounds}`, run {started}, "
        f"commit {commit()}.",
        "",
        "## Machine",
        "",
        machine(),
        f"- load average at end: {open('/proc/loadavg').read().split()[:3]}",
        "",
        "## Set-up",
        "",
        f"- {args.cameras} synthetic cameras ({args.width}x{args.height} rgb8, "
        f"{args.rate:g} Hz, sensor_data QoS) in one process, inference_node in another, "
        "this script receives the detections in a third; the remote triton-ros-server "
        "(bundled `detector`, same config: 2 CPU instances, dynamic batching) in a fourth. "
        "All on this machine.",
        "- `embedded`: the node's own core. `remote shm`: `server_urls: [grpc://127.0.0.1:"
        "PORT]`, inputs through system shared memory (`shared_memory: auto`). `remote "
        "wire`: `shared_memory: off`, the tensor inside the gRPC message.",
        "- Configurations alternate; the tables give the median of the rounds.",
        "- CPU: seconds of CPU of the process per second of measurement (/proc/PID/stat). "
        "Per received frame: every frame the node received (ROS deserializes each image); "
        "per published frame: the frames that went through a model.",
        "",
        f"## {args.cameras} cameras at {args.rate:g} Hz",
        "",
        "| | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for label, field, fmt in rows:
        lines.append(
            f"| {label} | " + " | ".join(fmt.format(getattr(med[n], field)) for n in names) + " |"
        )
    lines += [
        "",
        "Ratios (target: remote on the same host p99 within 1.5x of the embedded core):",
        "",
    ]
    for n in names[1:]:
        r = med[n]
        lines.append(
            f"- {n}: p99 {r.p99_ms / e.p99_ms:.2f}x the embedded core's, p50 "
            f"{r.p50_ms / e.p50_ms:.2f}x, frames/s {r.published_per_s / e.published_per_s:.2f}x; "
            f"node CPU {r.node_cpu:.2f} vs {e.node_cpu:.2f} cores (saved "
            f"{1 - r.node_cpu / e.node_cpu:.0%}); per published frame "
            f"{r.node_ms_per_frame:.2f} vs {e.node_ms_per_frame:.2f} ms (saved "
            f"{1 - r.node_ms_per_frame / e.node_ms_per_frame:.0%}); per received frame "
            f"{r.node_ms_per_received:.2f} vs {e.node_ms_per_received:.2f} ms (saved "
            f"{1 - r.node_ms_per_received / e.node_ms_per_received:.0%}); node + server "
            f"{r.node_ms_per_frame + r.server_ms_per_frame:.2f} ms per published frame"
        )
    lines += [
        "",
        f"## The model alone, {args.cameras} requests in flight (no ROS)",
        "",
        "The same detector without ROS in this process: an embedded core, and "
        "RemoteModel through shared memory into the remote server (what the hop itself "
        "costs):",
        "",
        "| | requests/s | p50 (ms) | p99 (ms) |",
        "|---|---|---|---|",
    ]
    for name, (rate, p50, p99) in alone.items():
        lines.append(f"| {name} | {rate:.0f} | {p50:.1f} | {p99:.1f} |")
    lines += [
        "",
        "## Every round",
        "",
        "| config | frames/s | p50 ms | p99 ms | dropped | drops | node CPU | server CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        drops = ", ".join(f"{k.replace('dropped_', '')} {v}" for k, v in r.drops.items() if v)
        lines.append(
            f"| {r.name} | {r.published_per_s:.1f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | "
            f"{r.drop_fraction:.1%} | {drops or 'none'} | {r.node_cpu:.2f} | "
            f"{r.server_cpu:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=default_out("remote-embedded_vs_remote"))
    args = parser.parse_args()
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    names = ["embedded", "remote shm", "remote wire"]
    server = ServerProcess(
        "--model-repository",
        str(ROOT / "model_repository"),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "detector",
        "--allow-client-shm",
        "true",
        "--allow-metrics",
        "false",
        log=OUT / "remote-server.log",
    )
    rclpy.init()
    probe = rclpy.create_node("bench_remote_receiver")
    executor = SingleThreadedExecutor()
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    results: list[Result] = []
    alone = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench_remote_") as tmp:
            for i in range(args.rounds):
                for name in names:
                    print(f"round {i + 1}: {name} ...", flush=True)
                    r = run_config(name, args, Path(tmp), probe, server)
                    results.append(r)
                    print(
                        f"  {r.published_per_s:.1f} frames/s, p50 {r.p50_ms:.1f} ms, p99 "
                        f"{r.p99_ms:.1f} ms, dropped {r.drop_fraction:.1%}, node CPU "
                        f"{r.node_cpu:.2f}, server CPU {r.server_cpu:.2f}",
                        flush=True,
                    )
        print("the model alone ...", flush=True)
        alone = model_alone(server, args.seconds / 2, args.cameras)
    finally:
        executor.shutdown()
        spinner.join()
        probe.destroy_node()
        rclpy.try_shutdown()
        server.stop()
    print(write(results, names, args, Path(args.out), started, alone))
    return 0


if __name__ == "__main__":
    sys.exit(main())
