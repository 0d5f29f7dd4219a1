"""Benchmark: what receiving camera frames costs in rclpy alone, before any work of ours.

A subscriber process with one subscription per camera and a callback that only counts, against
the synthetic cameras (``triton_ros.ros.tools.synthetic_cameras``, 640x480 rgb8 at 30 Hz by default,
another process) over Fast DDS shared memory (config/fastdds.xml), as in
bench/ros/node.py. The ways to receive, in alternating rounds:

- ``events``: rclpy's EventsExecutor (the node's default where rclpy has it), typed messages;
- ``events-kept``: the same in a process that first calls the node's
  ``triton_ros.core.memory.keep_freed_buffers()`` (glibc keeps freed frame buffers for reuse);
- ``events-raw``: the same as ``events``, ``raw=True`` subscriptions (serialized bytes, no
  deserialization); ``events-raw-kept`` with ``keep_freed_buffers()`` as below;
- ``wait_set``: rclpy's SingleThreadedExecutor (the wait-set executor: Humble's), typed
  messages; ``wait_set-kept`` with ``keep_freed_buffers()`` as above.

Reported per received frame: the subscriber's CPU time (/proc, exact) by thread, and its minor
page faults. This is the floor under the node's "outside the model" cost: the node does the
same take and then its own work.

    .venv/bin/python -m bench.ros.receive --rounds 3

Results, with the machine and the commit, go to ``--out`` (default bench/out/ros-receive.md).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

from bench.common import (
    ROOT,
    commit,
    default_out,
    emit,
    machine_lines,
    minor_faults,
    thread_cpu_seconds,
)

MODES = ("events", "events-kept", "events-raw", "events-raw-kept", "wait_set", "wait_set-kept")

CHILD = r"""
import sys, time, json
import rclpy
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
mode, cameras, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
if mode.endswith("-kept"):
    sys.path.insert(0, sys.argv[4])
    from triton_ros.core.memory import keep_freed_buffers
    assert keep_freed_buffers(), "keep_freed_buffers() did nothing"
rclpy.init()
node = rclpy.create_node("bench_receive")
count = [0]
def on_frame(msg):
    count[0] += 1
subs = [node.create_subscription(Image, f"/bench/cam{i}/image_raw", on_frame,
                                 qos_profile_sensor_data, raw=mode.startswith("events-raw"))
        for i in range(cameras)]
if mode.startswith("events"):
    from rclpy.experimental import EventsExecutor
    executor = EventsExecutor()
else:
    from rclpy.executors import SingleThreadedExecutor
    executor = SingleThreadedExecutor()
executor.add_node(node)
print("ready", flush=True)
for line in sys.stdin:                  # S: spin S seconds, then print the count; "stop": end
    if line.strip() == "stop":
        break
    end = time.monotonic() + float(line)
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.05)
    print(count[0], flush=True)
executor.shutdown()
node.destroy_node()
rclpy.try_shutdown()
"""


def run(mode: str, args) -> dict:
    sub = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(args.cameras), str(args.seconds), str(ROOT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cams = None
    try:
        if sub.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{mode}: the subscriber did not start (exit status {sub.poll()})")
        cams = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.ros.tools.synthetic_cameras",
                "--rate",
                str(args.rate),
                "--quiet",
            ]
            + [
                a
                for i in range(args.cameras)
                for a in ("--camera", f"bench/cam{i}:{args.width}x{args.height}:rgb8")
            ]
        )
        sub.stdin.write(f"{args.warmup}\n")
        sub.stdin.flush()
        n0 = int(sub.stdout.readline())
        t0, f0 = thread_cpu_seconds(sub.pid), minor_faults(sub.pid)
        sub.stdin.write(f"{args.seconds}\n")
        sub.stdin.flush()
        n1 = int(sub.stdout.readline())
        t1, f1 = thread_cpu_seconds(sub.pid), minor_faults(sub.pid)
        frames = n1 - n0
        if frames <= 0:  # no per-frame figure to give: say so, do not divide by 1
            raise RuntimeError(
                f"{mode}: no frame received in {args.seconds:g} s after a "
                f"{args.warmup:g} s warm-up (cameras not discovered?)"
            )
        threads: dict[str, float] = {}
        for tid, (name, cpu) in t1.items():
            used = cpu - t0.get(tid, (name, 0.0))[1]
            kind = (
                name.split(".")[0]
                if name.startswith("dds.")
                else ("Python (executor, callbacks)" if name == "python" else name)
            )
            threads[kind] = threads.get(kind, 0.0) + used
        return {
            "frames_per_s": frames / args.seconds,
            "cpu_us": sum(threads.values()) * 1e6 / frames,
            "threads": {k: v * 1e6 / frames for k, v in threads.items()},
            "faults": (f1 - f0) / frames,
        }
    finally:
        if cams is not None:
            cams.terminate()
            cams.wait(timeout=30)
        try:
            sub.stdin.write("stop\n")
            sub.stdin.flush()
            sub.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            sub.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--out", default=default_out("ros-receive"), help="also write the results to this file"
    )
    args = parser.parse_args()
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(101, 200)))
    modes = [m for m in args.modes.split(",") if m]
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load0 = os.getloadavg()
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes:
            results[mode].append(run(mode, args))
            x = results[mode][-1]
            print(
                f"round {r + 1} {mode}: {x['frames_per_s']:.1f} frames/s, "
                f"{x['cpu_us']:.0f} us CPU per frame, {x['faults']:.1f} faults per frame",
                flush=True,
            )

    kinds = sorted({k for rs in results.values() for x in rs for k in x["threads"]})
    lines = [
        "# Receiving frames in rclpy, no work done: CPU per frame",
        "",
        f"`python -m bench.ros.receive {' '.join(sys.argv[1:])}`, run {started}, commit "
        f"{commit()}.",
        "",
        machine_lines(),
        f"- load average at start: {[f'{v:.2f}' for v in load0]}, at end: "
        f"{[f'{v:.2f}' for v in os.getloadavg()]}",
        "",
        f"{args.cameras} cameras x {args.rate:g} Hz, {args.width}x{args.height} rgb8; "
        f"{args.seconds:g} s per run, {args.rounds} alternating rounds, medians.",
        "",
        "| | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
        "| frames/s received | "
        + " | ".join(
            f"{statistics.median([x['frames_per_s'] for x in results[m]]):.1f}" for m in modes
        )
        + " |",
        "| **CPU per frame (us)** | "
        + " | ".join(
            f"**{statistics.median([x['cpu_us'] for x in results[m]]):.0f}**" for m in modes
        )
        + " |",
    ]
    for kind in kinds:
        lines.append(
            f"| thread: {kind} | "
            + " | ".join(
                f"{statistics.median([x['threads'].get(kind, 0.0) for x in results[m]]):.0f}"
                for m in modes
            )
            + " |"
        )
    lines.append(
        "| minor page faults per frame | "
        + " | ".join(f"{statistics.median([x['faults'] for x in results[m]]):.1f}" for m in modes)
        + " |"
    )
    lines += [
        "",
        "Every run (CPU us per frame): "
        + "; ".join(f"{m}: " + ", ".join(f"{x['cpu_us']:.0f}" for x in results[m]) for m in modes),
    ]
    return emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    sys.exit(main())
