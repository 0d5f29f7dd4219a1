#!/usr/bin/env python3
"""Benchmark: compressed cameras into one inference node, beside the same cameras raw.

``.venv/bin/python -m bench.sensors.node [--cameras 8] [--rate 30] [--seconds 15] [--rounds 2]``
(FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds.xml is set when missing; py-spy, from
``bench/requirements-bench.txt``, names the node's threads.)

One node on the bundled ``color_detector`` (one binding, its topics bound by name, no input_kind
parameter: the graph's type decides), fed by ``bench.sensors.cameras`` in a process of its own
(``--cameras`` synthetic 640x480 cameras at ``--rate`` Hz, frames encoded once, so that
publishing costs little). Two configurations alternate, ``--rounds`` times each: ``raw``
(``sensor_msgs/Image`` rgb8) and ``jpeg`` (``CompressedImage``, OpenCV's JPEG quality 75, as
image_transport sends it). After ``--warmup`` seconds, for ``--seconds``: frames published per
second, end-to-end latency p50 and p99 (the camera's stamp to the receipt of the detections in
this process), the node's drops by reason (``~/status``), its CPU in cores and per frame, and each
worker thread's CPU seconds per wall second (``/proc``): JPEG frames decode on the workers, so
their CPU shows whether decoding spreads over threads or serializes on one.

Checks (exit status 1 when one fails), of the median round: ``jpeg`` has no malformed or failed
frame; it publishes at least 0.9x the frames ``raw`` publishes and drops at most 5 points more;
and its decoding is spread: at least two worker threads each carry 20 % or more of the workers'
CPU.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.common import (
    start_inference_node,
    LOAD_AT_START,
    ROOT,
    commit,
    cpu_seconds,
    emit_checked,
    follow_status,
    machine,
    stamp_ns,
    stop_run,
    thread_cpu_seconds,
)
from bench.sensors.cameras import topic

DROPS = (
    "dropped_stale",
    "dropped_superseded",
    "dropped_malformed",
    "dropped_unavailable",
    "failed",
)


@dataclass
class Result:
    name: str
    offered_per_s: float
    published_per_s: float
    p50_ms: float
    p99_ms: float
    drops: dict
    drop_fraction: float
    node_cores: float
    cpu_us_per_frame: float
    workers: list[float] = field(default_factory=list)  # CPU s per wall s, each worker


def run(name: str, args, tmp: Path, probe) -> Result:

    from triton_ros.ros.codec.messages import DETECTIONS_TYPE

    node_name = f"bench_sensors_{name}"
    topics = [topic(i, name) for i in range(args.cameras)]
    params = {
        "/**": {
            "ros__parameters": {
                "model_repository": str(ROOT / "model_repository"),
                "startup_models": ["color_detector"],
                "grpc": {"enable": False},
                "http": {"enable": False},
                "metrics": {"enable": False},
                "bindings": ["cams"],
                "cams": {"model": "color_detector", "topics": topics},
            }
        }
    }
    node, log = start_inference_node(
        params, tmp / f"{name}.yaml", tmp / f"{name}-node.log", node_name
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
        probe.create_subscription(
            DETECTIONS_TYPE, t.rsplit("/", 1)[0] + "/detections", on_detections, 100
        )
        for t in topics
    ]
    fresh_status = follow_status(probe, node_name, subs, node=node, what=name, log_name=log.name)

    cameras = None
    try:
        fresh_status(0)
        cameras = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.sensors.cameras",
                "--cameras",
                str(args.cameras),
                "--rate",
                str(args.rate),
                "--transport",
                name,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        time.sleep(args.warmup)
        s0 = fresh_status(probe.get_clock().now().nanoseconds)
        c0, threads0, t0 = cpu_seconds(node.pid), thread_cpu_seconds(node.pid), time.monotonic()
        measuring.set()
        time.sleep(args.seconds)
        measuring.clear()
        c1, threads1 = cpu_seconds(node.pid), thread_cpu_seconds(node.pid)
        elapsed = time.monotonic() - t0
        names = python_thread_names(node.pid)
        s1 = fresh_status(probe.get_clock().now().nanoseconds)
    finally:
        stop_run(node, cameras, log, probe, subs)
    b0 = next(b for b in s0.bindings if b.name == "cams")
    b1 = next(b for b in s1.bindings if b.name == "cams")
    node_elapsed = (stamp_ns(s1.header.stamp) - stamp_ns(s0.header.stamp)) / 1e9
    drops = {k: getattr(b1, k) - getattr(b0, k) for k in DROPS}
    received, published = b1.received - b0.received, b1.published - b0.published
    workers = sorted(
        (
            (threads1[tid][1] - threads0[tid][1]) / elapsed
            for tid in threads1
            if tid in threads0 and names.get(tid, "").startswith("triton_ros_worker")
        ),
        reverse=True,
    )
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return Result(
        name=name,
        offered_per_s=args.cameras * args.rate,
        published_per_s=published / node_elapsed,
        p50_ms=float(np.percentile(lat, 50)),
        p99_ms=float(np.percentile(lat, 99)),
        drops=drops,
        drop_fraction=sum(drops.values()) / received if received else 1.0,
        node_cores=(c1 - c0) / elapsed,
        cpu_us_per_frame=(c1 - c0) / max(published, 1) * 1e6,
        workers=workers,
    )


def python_thread_names(pid: int) -> dict[int, str]:
    """OS thread id -> Python thread name (``py-spy dump``; CPython 3.11 does not name its
    threads for the OS, so /proc shows them all as ``python``)."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.exists():
        raise SystemExit("py-spy is needed: .venv/bin/pip install -r bench/requirements-bench.txt")
    out = subprocess.run(
        [str(spy), "dump", "--pid", str(pid), "--nonblocking"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)
    }


def median(results: list[Result]) -> Result:
    """The round with the median frames published."""
    ordered = sorted(results, key=lambda r: r.published_per_s)
    return ordered[(len(ordered) - 1) // 2]


def main() -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rclpy.init()
    probe = rclpy.create_node("bench_sensors_probe")
    executor = SingleThreadedExecutor()
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    results: dict[str, list[Result]] = {"raw": [], "jpeg": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-sensors-node-") as tmp:
            for _ in range(args.rounds):
                for name in results:
                    results[name].append(run(name, args, Path(tmp), probe))
                    r = results[name][-1]
                    print(
                        f"{name}: {r.published_per_s:.1f}/s p50 {r.p50_ms:.1f} p99 "
                        f"{r.p99_ms:.1f} ms drops {r.drops} cores {r.node_cores:.2f}",
                        flush=True,
                    )
    finally:
        executor.shutdown()
        probe.destroy_node()
        rclpy.try_shutdown()
    raw, jpeg = median(results["raw"]), median(results["jpeg"])
    lines = [
        f"# {args.cameras} cameras x 640x480 at {args.rate:g} Hz into one node, raw and "
        f"JPEG ({started}, {commit()})",
        "",
        machine(),
        f"load average at start: {' '.join(LOAD_AT_START)}; median of {args.rounds} "
        f"rounds of {args.seconds:g} s",
        "",
        "| input | offered/s | published/s | p50 ms | p99 ms | drops (of received) | node "
        "cores | node CPU us/frame | worker threads, CPU s per wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in (raw, jpeg):
        drops = ", ".join(f"{k.replace('dropped_', '')} {v}" for k, v in r.drops.items() if v)
        lines.append(
            f"| {r.name} | {r.offered_per_s:.0f} | {r.published_per_s:.1f} | "
            f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.drop_fraction:.1%}"
            f"{' (' + drops + ')' if drops else ''} | {r.node_cores:.2f} | "
            f"{r.cpu_us_per_frame:.0f} | "
            f"{' + '.join(f'{w:.2f}' for w in r.workers)} |"
        )
    lines.append(
        f"| jpeg / raw | | {jpeg.published_per_s / raw.published_per_s:.2f}x | "
        f"{jpeg.p50_ms / raw.p50_ms:.2f}x | {jpeg.p99_ms / raw.p99_ms:.2f}x | | "
        f"{jpeg.node_cores / raw.node_cores:.2f}x | "
        f"{jpeg.cpu_us_per_frame / raw.cpu_us_per_frame:.2f}x | |"
    )
    failures = []
    if jpeg.drops["dropped_malformed"] or jpeg.drops["failed"]:
        failures.append(f"jpeg frames were malformed or failed: {jpeg.drops}")
    if jpeg.published_per_s < 0.9 * raw.published_per_s:
        failures.append(
            f"jpeg published {jpeg.published_per_s:.1f}/s against raw's {raw.published_per_s:.1f}/s"
        )
    if jpeg.drop_fraction > raw.drop_fraction + 0.05:
        failures.append(
            f"jpeg dropped {jpeg.drop_fraction:.1%} against raw's {raw.drop_fraction:.1%}"
        )
    total = sum(jpeg.workers)
    if sum(w >= 0.2 * total for w in jpeg.workers) < 2:
        failures.append(f"jpeg decoding ran on one worker thread: {jpeg.workers}")
    return emit_checked(lines, failures, args.out)


if __name__ == "__main__":
    sys.exit(main())
