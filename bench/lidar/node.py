#!/usr/bin/env python3
"""Benchmark: LiDARs of several robots into one inference node, end to end.

``.venv/bin/python -m bench.lidar.node [--robots 4] [--rate 10] [--seconds 15] [--rounds 2]``
(FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds.xml is set when missing)

One node on the bundled ``lidar_detector`` (one ``pointcloud`` binding, BEV form, ``bev_cells``
decoding), fed by ``synthetic_lidar`` in a process of its own (``--robots`` sensors of 32 beams x
1024 azimuths at ``--rate`` Hz, Velodyne layout; 20 scenes a robot cast once and sent in turn,
freshly stamped, so that casting does not compete with the node for the host's cores). After
``--warmup`` seconds, for ``--seconds``:
clouds published per second, end-to-end latency p50 and p99 (the cloud's stamp to the receipt of
its detections3d in this process), the node's drops by reason (``~/status``), its CPU in cores
and per cloud, and the batch sizes the model ran (statistics service). ``--rounds`` runs, the
median round (by clouds published) reported, every round's p50/p99 listed as the spread.

Checks (exit status 1 when one fails), of the median round: at least 0.9 of the offered clouds
published of those the node received, no malformed or failed cloud.
"""

from __future__ import annotations

import argparse
import os
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
)

DROPS = (
    "dropped_stale",
    "dropped_superseded",
    "dropped_malformed",
    "dropped_unavailable",
    "failed",
)


@dataclass
class Result:
    offered_per_s: float
    received_per_s: float
    published_per_s: float
    p50_ms: float
    p99_ms: float
    drops: dict
    node_cores: float
    cpu_ms_per_cloud: float
    batches: dict = field(default_factory=dict)


def run(index: int, args, tmp: Path, probe) -> Result:
    from triton_ros.ros.codec.messages import DETECTIONS3D_TYPE

    node_name = f"bench_lidar_{index}"
    prefix = f"/bench_lidar{index}"
    robots = [f"r{i}" for i in range(args.robots)]
    params = {
        "/**": {
            "ros__parameters": {
                "model_repository": str(ROOT / "model_repository"),
                "startup_models": ["lidar_detector"],
                "grpc": {"enable": False},
                "http": {"enable": False},
                "metrics": {"enable": False},
                "bindings": ["lidar"],
                "lidar": {
                    "model": "lidar_detector",
                    "input_kind": "pointcloud",
                    "topics": [f"{prefix}/{r}/lidar/points" for r in robots],
                    "format": "detections3d",
                    "detections3d_decode": "bev_cells",
                    "cloud_bev_channels": [
                        "occupancy",
                        "max_height",
                        "min_height",
                        "mean_intensity",
                        "density",
                    ],
                    "cloud_intensity_scale": 1 / 255,
                    "score_threshold": 0.5,
                },
            }
        }
    }
    node, log = start_inference_node(
        params, tmp / f"{node_name}.yaml", tmp / f"{node_name}.log", node_name
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
            DETECTIONS3D_TYPE, f"{prefix}/{r}/lidar/detections3d", on_detections, 100
        )
        for r in robots
    ]
    fresh_status = follow_status(
        probe, node_name, subs, node=node, what=node_name, log_name=log.name
    )
    lidars = None
    try:
        fresh_status(0)
        lidars = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.ros.tools.synthetic_lidar",
                "--prefix",
                prefix,
                "--rate",
                str(args.rate),
                "--quiet",
                "--cycle",
                "20",
                *[a for r in robots for a in ("--lidar", r)],
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        time.sleep(args.warmup)
        s0 = fresh_status(probe.get_clock().now().nanoseconds)
        c0, t0 = cpu_seconds(node.pid), time.monotonic()
        measuring.set()
        time.sleep(args.seconds)
        measuring.clear()
        c1, elapsed = cpu_seconds(node.pid), time.monotonic() - t0
        s1 = fresh_status(probe.get_clock().now().nanoseconds)
        batches = batch_sizes(probe, node_name)
    finally:
        stop_run(node, lidars, log, probe, subs)
    b0 = next(b for b in s0.bindings if b.name == "lidar")
    b1 = next(b for b in s1.bindings if b.name == "lidar")
    node_elapsed = (stamp_ns(s1.header.stamp) - stamp_ns(s0.header.stamp)) / 1e9
    published = b1.published - b0.published
    received = b1.received - b0.received
    lat = np.array(latencies) if latencies else np.array([np.nan])
    return Result(
        offered_per_s=args.robots * args.rate,
        received_per_s=received / node_elapsed,
        published_per_s=published / node_elapsed,
        p50_ms=float(np.percentile(lat, 50)),
        p99_ms=float(np.percentile(lat, 99)),
        drops={k: getattr(b1, k) - getattr(b0, k) for k in DROPS},
        node_cores=(c1 - c0) / elapsed,
        cpu_ms_per_cloud=(c1 - c0) / max(published, 1) * 1e3,
        batches=batches,
    )


def batch_sizes(probe, node_name: str) -> dict:
    from triton_ros_interfaces.srv import GetModelStatistics

    client = probe.create_client(GetModelStatistics, f"/{node_name}/get_model_statistics")
    try:
        if not client.wait_for_service(timeout_sec=10):
            return {}
        future = client.call_async(GetModelStatistics.Request())
        deadline = time.monotonic() + 10
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not future.done():
            return {}
        (model,) = [m for m in future.result().model_stats if m.name == "lidar_detector"]
        return {b.batch_size: b.compute_infer.count for b in model.batch_stats}
    finally:
        probe.destroy_client(client)


def main() -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--robots", type=int, default=4)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rclpy.init()
    probe = rclpy.create_node("bench_lidar_probe")
    executor = SingleThreadedExecutor()
    executor.add_node(probe)
    threading.Thread(target=executor.spin, daemon=True).start()
    results: list[Result] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-lidar-node-") as tmp:
            for i in range(args.rounds):
                r = run(i, args, Path(tmp), probe)
                results.append(r)
                print(
                    f"round {i}: {r.published_per_s:.1f}/s p50 {r.p50_ms:.1f} p99 "
                    f"{r.p99_ms:.1f} ms drops {r.drops} cores {r.node_cores:.2f} batches "
                    f"{r.batches}",
                    flush=True,
                )
    finally:
        executor.shutdown()
        probe.destroy_node()
        rclpy.try_shutdown()
    r = sorted(results, key=lambda x: x.published_per_s)[(len(results) - 1) // 2]
    drops = ", ".join(f"{k.replace('dropped_', '')} {v}" for k, v in r.drops.items() if v)
    lines = [
        f"# {args.robots} LiDARs (32 x 1024) at {args.rate:g} Hz into one node "
        f"({started}, {commit()})",
        "",
        machine(),
        f"load average at start: {' '.join(LOAD_AT_START)}; median of {args.rounds} "
        f"rounds of {args.seconds:g} s",
        "",
        "| offered/s | received/s | published/s | p50 ms | p99 ms | p50/p99 of every round "
        "| drops | node cores | node CPU ms/cloud | batches (size: count) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {r.offered_per_s:.0f} | {r.received_per_s:.1f} | {r.published_per_s:.1f} "
        f"| {r.p50_ms:.1f} | {r.p99_ms:.1f} "
        f"| {'; '.join(f'{x.p50_ms:.0f}/{x.p99_ms:.0f}' for x in results)} "
        f"| {drops or 'none'} | {r.node_cores:.2f} | {r.cpu_ms_per_cloud:.1f} | "
        f"{', '.join(f'{k}: {v}' for k, v in sorted(r.batches.items()))} |",
    ]
    failures = []
    if r.published_per_s < 0.9 * r.received_per_s:
        failures.append(
            f"published {r.published_per_s:.1f}/s of the {r.received_per_s:.1f}/s received"
        )
    if r.drops["dropped_malformed"] or r.drops["failed"]:
        failures.append(f"malformed or failed clouds: {r.drops}")
    return emit_checked(lines, failures, args.out)


if __name__ == "__main__":
    sys.exit(main())
