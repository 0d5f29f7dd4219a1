#!/usr/bin/env python3
"""Benchmark: what a LiDAR cloud costs the node per cloud, in each input form.

``.venv/bin/python -m bench.lidar.codec [--rounds 5] [--out FILE]``

In one process, side by side and alternating round by round, on clouds of ``synthetic_lidar``
(Velodyne layout, ray-cast scenes): 32 beams x 1024 azimuths (about 31k points after dropped
returns and no-returns into the sky, "32k") and 128 x 1024 ("128k"). Per cloud, from the
serialized message (rclpy's CDR, as the node's subscription hands it over) to the model input:

- ``bev``: the bundled ``lidar_detector``'s grid (5 x 512 x 512, 0.2 m);
- ``points``: a points tensor of 32768 rows (x, y, z, intensity, voxel subsampling at 0.1 m
  when the cloud has more points, a count input);
- ``decode``: the ``bev_cells`` decoder of the model's per-cell outputs into boxes (the model
  itself run once per cloud beforehand, not timed).

CPU per cloud is the thread's CPU time (``time.thread_time``) over 20 clouds, per round; the
table gives the median over rounds and the spread (min-max).

**Two threads** (does the GIL serialize a cloud's work?): each form of the 128k cloud run flat
out for ``--seconds`` on one thread, then on two; the work two threads get done over what one
gets, beside two controls measured the same way in the same run: OpenCV's blur of a large image
(GIL-free C: what the host lets two threads have) and a pure-Python loop (what the GIL lets
them have). When the GIL-free control gets under 1.2x, the output says the host was too busy to
tell (not a failed check: the per-cloud table stands). Check (exit status 1): every form
of the 32k cloud costs under 100 ms of CPU (a 10 Hz sensor on one core).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

from bench.common import LOAD_AT_START, ROOT, commit, emit_checked, machine

CLOUDS = {"32k": 32, "128k": 128}  # beams x 1024 azimuths
REPEAT = 20


def make_cloud(beams: int):
    from rclpy.serialization import serialize_message
    from std_msgs.msg import Header

    from triton_ros.ros.tools import synthetic_lidar as sl

    lidar = sl.SyntheticLidars.__new__(sl.SyntheticLidars)
    lidar.dirs, lidar.beams, lidar.azimuths = sl.ray_directions(beams, 1024), beams, 1024
    lidar.noise_m, lidar.dropout, lidar.rng = 0.02, 0.05, np.random.default_rng(1)
    msg = lidar.cloud_message(Header(frame_id="bench"), "velodyne", sl.Scene(3).boxes(0.0))
    return serialize_message(msg), msg.width * msg.height


def paths():
    import onnxruntime as ort

    from triton_ros.ros.codec.base import FrameOutputs, check_input
    from triton_ros.ros.codec.detection3d import Detection3DConfig, decode_bev_cells
    from triton_ros.ros.codec.pointcloud import POINTCLOUD, PointCloudConfig, plan_cloud

    reader = POINTCLOUD.reader()
    five = ("occupancy", "max_height", "min_height", "mean_intensity", "density")
    bev = POINTCLOUD.encoder(
        plan_cloud(
            PointCloudConfig(channels=five, intensity_scale=1 / 255),
            SimpleNamespace(name="BEV", dims=(5, 512, 512), datatype="FP32", format=""),
            model="lidar_detector",
        )
    )
    points = POINTCLOUD.encoder(
        plan_cloud(
            PointCloudConfig(count_input="NUM", intensity_scale=1 / 255),
            SimpleNamespace(name="POINTS", dims=(32768, 4), datatype="FP32", format=""),
            model="pointpillars",
        )
    )
    session = ort.InferenceSession(str(ROOT / "model_repository/lidar_detector/1/model.onnx"))
    config = Detection3DConfig(decode="bev_cells")

    def encode_bev(raw):
        msg = reader(raw)
        check_input(POINTCLOUD, msg)
        return bev(msg)

    def encode_points(raw):
        msg = reader(raw)
        check_input(POINTCLOUD, msg)
        return points(msg)

    def decoder(raw):
        grid, placement = encode_bev(raw)
        s, h, g = session.run(None, {"BEV": grid[None]})
        frame = FrameOutputs(
            None,
            {"scores": s[0], "heights": h[0], "ground": g[0]},
            True,
            "lidar_detector",
            1,
            placement,
        )
        return lambda _raw: decode_bev_cells(frame, config)

    return {"bev": encode_bev, "points": encode_points, "decode": decoder}


def cpu_per_call(fn, raw) -> float:
    fn(raw)
    t0 = time.thread_time()
    for _ in range(REPEAT):
        fn(raw)
    return (time.thread_time() - t0) / REPEAT * 1e3


def throughput(fn, threads: int, seconds: float) -> float:
    """Calls per second of ``fn`` on ``threads`` threads, flat out."""
    import threading

    stop = threading.Event()
    counts = [0] * threads

    def loop(i: int) -> None:
        while not stop.is_set():
            fn()
            counts[i] += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / (time.monotonic() - t0)


def scaling(fn, seconds: float) -> float:
    return throughput(fn, 2, seconds) / throughput(fn, 1, seconds)


def controls():
    import cv2

    cv2.setNumThreads(1)  # one thread a call: OpenCV's own pool would take both
    image = np.random.default_rng(0).integers(0, 255, (1080, 1920, 3), np.uint8)

    def python_loop() -> None:
        total = 0
        for i in range(20000):
            total += i * i

    return {
        "control: OpenCV blur (GIL-free C)": lambda: cv2.blur(image, (9, 9)),
        "control: pure-Python loop": python_loop,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="each two-thread measurement runs this long"
    )
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    clouds = {name: make_cloud(beams) for name, beams in CLOUDS.items()}
    forms = paths()
    fns = {}
    for cloud, (raw, _) in clouds.items():
        for form, fn in forms.items():
            fns[(cloud, form)] = fn(raw) if form == "decode" else fn
    samples: dict = {key: [] for key in fns}
    for _ in range(args.rounds):
        for key, fn in fns.items():  # alternating, round by round
            samples[key].append(cpu_per_call(fn, clouds[key[0]][0]))
    lines = [
        f"# LiDAR cloud -> model input, CPU per cloud ({started}, {commit()})",
        "",
        machine(),
        f"load average at start: {' '.join(LOAD_AT_START)}; median of "
        f"{args.rounds} rounds of {REPEAT} clouds, spread min-max",
        "",
        "| cloud | points | form | CPU ms/cloud | spread ms |",
        "|---|---|---|---|---|",
    ]
    failures = []
    for (cloud, form), values in samples.items():
        med = statistics.median(values)
        lines.append(
            f"| {cloud} | {clouds[cloud][1]} | {form} | {med:.1f} | "
            f"{min(values):.1f}-{max(values):.1f} |"
        )
        if cloud == "32k" and med > 100:
            failures.append(f"{form} of the 32k cloud costs {med:.1f} ms")
    raw128 = clouds["128k"][0]
    parallel = {
        f"128k {form}": (lambda fn=fns[("128k", form)]: fn(raw128))
        for form in ("bev", "points", "decode")
    }
    parallel.update(controls())
    ratios = {name: scaling(fn, args.seconds) for name, fn in parallel.items()}
    lines += [
        "",
        f"Two threads over one, work done per second ({args.seconds:g} s each; 2.0: no "
        "serialization, 1.0: fully serialized):",
        "",
        "| path | 2 threads / 1 |",
        "|---|---|",
    ]
    lines += [f"| {name} | {ratio:.2f} |" for name, ratio in ratios.items()]
    if ratios["control: OpenCV blur (GIL-free C)"] < 1.2:
        lines += [
            "",
            "The GIL-free control got under 1.2x: the host did not give two threads two "
            "cores during the run, so these ratios cannot tell the GIL from the host.",
        ]
    return emit_checked(lines, failures, args.out)


if __name__ == "__main__":
    sys.exit(main())
