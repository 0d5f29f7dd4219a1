#!/usr/bin/env python3
"""Check: consecutive SIGINT stops of the inference node under camera load all exit 0 in time.

``.venv/bin/python -m bench.ros.stops [--stops 50] [--limit 3] [--rate 30] [--load 0]``

The issue it checks (34, item 10): one ``ros2 launch`` in seven, on a loaded host, logged
``stopped`` and then nothing for 4 s, until launch escalated to SIGTERM. Here the real
``synthetic_cameras`` tool publishes its four default cameras at ``--rate`` Hz (its own process,
for the whole run) and ``inference_node`` is started ``--stops`` times in a row, each time with the
package's own ``config/inference.yaml`` (every bundled model loaded, the three network endpoints
on free ports, the ``cameras`` binding finding the cameras by pattern): once it serves frames
(its plan line is logged), after a random 0.2-1.5 s, it gets SIGINT, and must exit 0 within
``--limit`` seconds. ``--load N`` adds N busy processes (a loaded host). A stop that misses gets
SIGUSR1 (the node writes every thread's stack to its log) before it is killed; its log is kept
in ``--out``. At the end the cameras get SIGINT too and must exit 0 within the limit.

It prints one line per stop and a summary (stop times: median, p90, max), and exits 1 when any
stop (or the cameras' stop) missed.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT

PLAN = "binding 'cameras': model 'color_detector' version"


def node_command(domain_name: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "triton_ros.ros.inference_node",
        "--ros-args",
        "--params-file",
        str(ROOT / "config" / "inference.yaml"),
        "-p",
        "grpc.port:=0",
        "-p",
        "http.port:=0",
        "-p",
        "metrics.port:=0",
        "-r",
        f"__node:={domain_name}",
    ]


def busy() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if text in path.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


def phases(log: str, signalled_wall: float, exited_wall: float) -> str:
    """'orderly X s, exit Y s': SIGINT to the node's ``stopped`` line (its wall-clock stamp), and
    from there to the process's end."""
    match = re.search(r"\[(\d+\.\d+)\] \[[^\]]+\]: stopped$", log, re.M)
    if match is None:
        return "no 'stopped' line"
    stopped = float(match.group(1))
    return f"orderly {stopped - signalled_wall:.2f} s, exit {exited_wall - stopped:.2f} s"


def stop_one(i: int, args, out: Path) -> tuple[bool, float, int | None, str]:
    """Start the node, let it serve, SIGINT it: (in time and 0, seconds, exit status, note)."""
    log_path = out / f"node-{i:03d}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            node_command(f"stops_node_{i}"), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT
        )
    if not wait_for(log_path, PLAN, proc, args.start_timeout):
        proc.kill()
        proc.wait()
        return False, 0.0, proc.returncode, "never served a frame (see its log)"
    time.sleep(random.uniform(0.2, 1.5))
    signalled, signalled_wall = time.monotonic(), time.time()
    proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=args.limit)
        took = time.monotonic() - signalled
        split = phases(log_path.read_text(errors="replace"), signalled_wall, time.time())
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)  # every thread's stack into its log
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        took = time.monotonic() - signalled
        return False, took, rc, f"over {args.limit:g} s (stacks in {log_path})"
    ok = rc == 0
    if ok and not args.keep_logs:
        log_path.unlink()
    return ok, took, rc, split if ok else f"exit status {rc} (see {log_path})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stops", type=int, default=50)
    parser.add_argument("--limit", type=float, default=3.0, help="seconds a stop may take")
    parser.add_argument("--rate", type=float, default=30.0, help="camera rate, Hz")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the node")
    parser.add_argument("--start-timeout", type=float, default=90.0)
    parser.add_argument("--keep-logs", action="store_true", help="keep every node's log")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for the logs (default: a new temporary folder)",
    )
    args = parser.parse_args()
    os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    out = args.out or Path(tempfile.mkdtemp(prefix="stops-"))
    out.mkdir(parents=True, exist_ok=True)
    cameras_log = out / "cameras.log"
    with open(cameras_log, "w") as log:
        cameras = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "triton_ros.ros.tools.synthetic_cameras",
                "--rate",
                str(args.rate),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    load = [busy() for _ in range(args.load)]
    times: list[float] = []
    misses: list[str] = []
    try:
        for i in range(args.stops):
            ok, took, rc, note = stop_one(i, args, out)
            if ok:
                times.append(took)
            else:
                misses.append(f"stop {i + 1}: {note}")
            print(
                f"stop {i + 1}/{args.stops}: {'ok' if ok else 'MISS'} {took:.2f} s, exit "
                f"status {rc}{'; ' + note if note else ''}",
                flush=True,
            )
    finally:
        for proc in load:
            proc.kill()
            proc.wait()
        signalled = time.monotonic()
        cameras.send_signal(signal.SIGINT)
        try:
            cameras_rc = cameras.wait(timeout=args.limit)
        except subprocess.TimeoutExpired:
            cameras.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            cameras.kill()
            cameras_rc = cameras.wait()
        cameras_took = time.monotonic() - signalled
    if cameras_rc != 0:
        misses.append(
            f"synthetic_cameras: exit status {cameras_rc} after {cameras_took:.2f} s "
            f"(see {cameras_log})"
        )
    if times:
        ordered = sorted(times)
        print(
            f"{len(times)} of {args.stops} stops exited 0 within {args.limit:g} s: median "
            f"{statistics.median(ordered):.2f} s, p90 {ordered[int(0.9 * (len(ordered) - 1))]:.2f}"
            f" s, max {ordered[-1]:.2f} s; cameras stopped in {cameras_took:.2f} s "
            f"(exit status {cameras_rc}); load average "
            f"{' '.join(open('/proc/loadavg').read().split()[:3])}; logs in {out}"
        )
    for miss in misses:
        print(f"MISS {miss}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
