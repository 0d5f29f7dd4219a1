#!/usr/bin/env python3
"""The bundled tracker's cost per frame at 8 cameras x 30 Hz (issue 43, item 7).

In process, through the core's data plane (``InferenceServer.infer``), the bundled models:
8 cameras (``synthetic_cameras``' moving scenes, preprocessed once beforehand: ``--frames``
frames each, played forwards then backwards so that the motion stays continuous) paced at
``--rate`` frames per second each, all cameras' frames of a tick sent at once, as the node
sends them. Three variants, alternating within each round (``--rounds``):

- ``detector``: ``color_detector`` alone (stateless, its dynamic batcher);
- ``detector+tracker``: ``color_tracker``, the ensemble of the detector and the stateful
  ``tracker`` (one sequence per camera, START on its first frame, END on its last);
- ``tracker``: the ``tracker`` alone, fed the detector's rows of the same frames (computed
  beforehand): the tracker's own cost, sequence batcher included.

Per variant: the process's CPU time per frame (all threads), p50 and p99 latency of a frame
(request to response), the frames answered late (after the next tick), and the mean batch the
tracker executed. The tracker's cost per frame is ``detector+tracker`` - ``detector`` (CPU per
frame), given with its min..max over the rounds, beside the ``tracker`` alone. Writes
bench/out/server-tracker.md (``--out``) naming the machine and the commit; a failed request ends
the run with a non-zero exit status.

Usage: ``.venv/bin/python -m bench.server.tracker_cost [--seconds 5] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import numpy as np

from bench.common import commit, default_out, emit_checked, machine

ROOT = Path(__file__).resolve().parents[2]
CAMERAS = (
    "r/a:640x480:rgb8",
    "r/b:320x240:bgr8",
    "r/c:424x240:mono8",
    "r/d:848x480:rgb8",
    "r/e:640x480:bgr8",
    "r/f:320x240:rgb8",
    "r/g:640x480:rgb8",
    "r/h:424x240:bgr8",
)
VARIANTS = ("detector", "detector+tracker", "tracker")
MODEL = {"detector": "color_detector", "detector+tracker": "color_tracker", "tracker": "tracker"}


def camera_inputs(frames: int, rate: float) -> list[list[np.ndarray]]:
    """Each camera's preprocessed frames (FP32 [1, 3, 256, 256])."""
    from triton_ros.core.model_config import TensorConfig
    from triton_ros.ros.codec.preprocess import PreprocessConfig, plan_input, preprocess
    from triton_ros.ros.tools.synthetic_cameras import MovingScene, parse_camera

    plan = plan_input(
        PreprocessConfig(),
        TensorConfig(name="images", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW"),
        model="color_detector",
    )
    out = []
    for index, text in enumerate(CAMERAS):
        spec = parse_camera(text)
        scene = MovingScene(spec, index)
        out.append(
            [
                preprocess(scene.render(f / rate)[0], spec.encoding, plan)[0][None]
                for f in range(frames)
            ]
        )
    return out


def detector_rows(core, inputs) -> list[list[np.ndarray]]:
    """The detector's rows of every frame (the tracker-alone variant's inputs)."""
    from triton_ros.core.infer_request import InferRequest

    out = []
    for frames in inputs:
        rows = []
        for x in frames:
            r = InferRequest(model_name="color_detector", inputs={"images": x})
            core.infer(r)
            rows.append(r.future.result(30).outputs["detections"])
        out.append(rows)
    return out


def tracker_batches(core) -> tuple[int, int]:
    """(executions, rows executed) of the tracker so far."""
    stats = core.model_statistics("tracker")[0]
    return (
        sum(b.compute_infer.count for b in stats.batch_stats),
        sum(b.batch_size * b.compute_infer.count for b in stats.batch_stats),
    )


def run(core, variant: str, feeds, seconds: float, rate: float, first_id: int) -> dict:
    from triton_ros.core.infer_request import InferRequest

    name = MODEL[variant]
    key = "detections" if variant == "tracker" else "images"
    stateful = variant != "detector"
    period = 1.0 / rate
    ticks = int(seconds * rate)
    frames = len(feeds[0])
    order = list(range(frames)) + list(range(frames - 2, 0, -1))  # forwards, backwards
    latencies: list[float] = []
    late = 0
    failures: list[str] = []
    executions0, rows0 = tracker_batches(core)
    cpu0 = time.process_time()
    start = time.monotonic()
    pending: list = []
    for tick in range(ticks):
        due = start + tick * period
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sent = time.monotonic()
        batch = []
        for c, camera in enumerate(feeds):
            request = InferRequest(model_name=name, inputs={key: camera[order[tick % len(order)]]})
            if stateful:
                request.sequence_id = first_id + c
                request.sequence_start = tick == 0
                request.sequence_end = tick == ticks - 1
            request.future.add_done_callback(
                lambda f, t=sent: latencies.append(time.monotonic() - t)
            )
            core.infer(request)
            batch.append(request.future)
        pending.extend(batch)
    for future in pending:
        try:
            future.result(60)
        except Exception as exc:  # a failed request fails the run
            failures.append(f"{variant}: {type(exc).__name__}: {exc}")
    cpu = time.process_time() - cpu0
    executions1, rows1 = tracker_batches(core)
    late = sum(1 for x in latencies if x > period)
    n = ticks * len(feeds)
    lat = sorted(latencies)
    return {
        "cpu_us": cpu / n * 1e6,
        "p50": lat[len(lat) // 2] * 1e3,
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3,
        "late": late / n,
        "batch": (rows1 - rows0) / max(1, executions1 - executions0) if stateful else 0.0,
        "failures": failures,
    }


def _median(rounds: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each variant, each round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=30.0, help="frames per second per camera")
    parser.add_argument("--frames", type=int, default=45, help="distinct frames per camera")
    parser.add_argument("--out", default=default_out("server-tracker"))
    args = parser.parse_args()

    from triton_ros.core.server import InferenceServer, ServerOptions

    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    inputs = camera_inputs(args.frames, args.rate)
    core = InferenceServer(
        ServerOptions((str(ROOT / "model_repository"),), model_control_mode="explicit")
    )
    core.start()
    failures: list[str] = []
    rounds: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    try:
        core.load_model("color_tracker")  # with color_detector and tracker
        rows = detector_rows(core, inputs)
        feeds = {"detector": inputs, "detector+tracker": inputs, "tracker": rows}
        next_id = 1
        for _ in range(args.rounds):
            for variant in VARIANTS:
                result = run(core, variant, feeds[variant], args.seconds, args.rate, next_id)
                next_id += len(CAMERAS)
                failures += result.pop("failures")
                rounds[variant].append(result)
    finally:
        core.stop()
    extra = [
        r["cpu_us"] - d["cpu_us"] for r, d in zip(rounds["detector+tracker"], rounds["detector"])
    ]
    lines = [
        f"# The tracker's cost per frame ({started} UTC, commit {commit()})",
        "",
        f"Machine: {machine()}",
        "",
        f"{len(CAMERAS)} cameras x {args.rate:g} Hz, in process, {args.seconds:g} s a "
        f"variant, {args.rounds} rounds, variants alternating; medians over the rounds.",
        "",
        "| variant | CPU a frame (us) | p50 ms | p99 ms | frames later than a period | "
        "mean tracker batch |",
        "|---|---|---|---|---|---|",
    ]
    for variant in VARIANTS:
        r = rounds[variant]
        lines.append(
            f"| {variant} | {_median(r, 'cpu_us'):.0f} | {_median(r, 'p50'):.2f} | "
            f"{_median(r, 'p99'):.2f} | {_median(r, 'late'):.1%} | "
            + (f"{_median(r, 'batch'):.2f} |" if variant != "detector" else "- |")
        )
    lines += [
        "",
        f"The tracker's cost a frame (detector+tracker - detector, CPU): "
        f"{statistics.median(extra):.0f} us (min..max {min(extra):.0f}..{max(extra):.0f}"
        f" over the rounds); the tracker alone: "
        f"{_median(rounds['tracker'], 'cpu_us'):.0f} us "
        f"({min(r['cpu_us'] for r in rounds['tracker']):.0f}.."
        f"{max(r['cpu_us'] for r in rounds['tracker']):.0f}).",
    ]
    return emit_checked(lines, failures, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
