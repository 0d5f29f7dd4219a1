"""The tracking demo: cameras whose objects cross and hide, one sequence each, tracked by the
bundled ``color_tracker``; MOTA and ID switches per camera against the ground-truth identities.

``python -m triton_ros.ros.tools.tracking_demo [--seconds 20] [--rate 30] [--cameras 8]``

1. starts ``inference_node`` with one binding, every ``/track*/camera*/image_raw`` topic ->
   ``color_tracker`` (the bundled ``color_detector``, then the stateful ``tracker``: the node runs
   each camera as its own sequence, docs/stateful.md), its gRPC endpoint on a free port;
2. starts ``synthetic_cameras --moving`` with ``--cameras`` cameras (robots ``track1`` ... of two
   cameras each, several resolutions and encodings) as a separate process, at ``--rate`` Hz:
   objects that cross each other and pass behind a pillar, with each object's identity in the
   ground truth (``.../ground_truth``, Detection2D ``id``);
3. prints, every ``--interval`` seconds and at the end, each camera's CLEAR-MOT scores
   (:mod:`.mot_metrics`: MOTA, ID switches per 100 object-frames, misses, false positives) over
   the frames the node published (paired with their ground truth by stamp and frame_id; frames
   the node dropped are not scored);
4. stops the cameras and the node with SIGINT and checks that they exited 0.

Exits 0 when every camera scored at least ``--min-frames`` frames with MOTA >= ``--min-mota``
(0.9) and at most ``--max-switches`` (1) ID switch per 100 object-frames, and every process
exited cleanly; 1 otherwise, saying which.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from ..codec.messages import DETECTIONS_TYPE
from ..ros_process import init_ros, strip_ros_args
from .demo import _start, _stop, free_port
from .detection_metrics import FrameMatcher
from .mot_metrics import score_pairs
from .synthetic_cameras import ground_truth_topic, parse_camera

SIZES = ("640x480:rgb8", "320x240:bgr8", "424x240:mono8", "848x480:rgb8")
NODE = "/tracking_node"


class Pairs(FrameMatcher):
    """A camera's (ground truth, detections) pairs of the same frames."""

    def __init__(self) -> None:
        super().__init__(on_pair=lambda truth, det: self._pairs.append((truth, det)))
        self._pairs: list = []

    def pairs(self) -> list:
        with self._lock:
            return list(self._pairs)


def camera_specs(count: int) -> list[str]:
    return [f"track{i // 2 + 1}/camera{i % 2 + 1}:{SIZES[i % len(SIZES)]}" for i in range(count)]


def params_file(directory: Path) -> Path:
    path = directory / "tracking.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "/**": {
                    "ros__parameters": {
                        "startup_models": ["color_tracker"],
                        "diagnostics_period_s": 1.0,
                        "discovery_period_s": 0.5,
                        "bindings": ["tracks"],
                        "tracks": {
                            "model": "color_tracker",
                            "topic_patterns": ["/track*/camera*/image_raw"],
                            "score_threshold": 0.5,
                        },
                    }
                }
            }
        )
    )
    return path


def main(argv: list[str] | None = None) -> int:
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    argv = sys.argv if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the demo runs")
    parser.add_argument("--rate", type=float, default=30.0, help="camera frame rate, Hz")
    parser.add_argument("--cameras", type=int, default=8, help="how many cameras")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between reports")
    parser.add_argument(
        "--min-frames", type=int, default=30, help="frames each camera must have scored"
    )
    parser.add_argument("--min-mota", type=float, default=0.9)
    parser.add_argument(
        "--max-switches", type=float, default=1.0, help="ID switches per 100 object-frames, at most"
    )
    args = parser.parse_args(strip_ros_args(argv)[1:])

    if not os.environ.get("ROS_DOMAIN_ID"):
        os.environ["ROS_DOMAIN_ID"] = str(random.randint(1, 100))
    logs = Path(tempfile.mkdtemp(prefix="triton_ros_tracking_"))
    cams = camera_specs(args.cameras)
    specs = [parse_camera(c) for c in cams]
    print(
        f"triton_ros tracking demo: {args.seconds:g} s, {len(cams)} cameras at {args.rate:g} Hz "
        f"-> inference_node (color_tracker, one sequence per camera); ROS_DOMAIN_ID="
        f"{os.environ['ROS_DOMAIN_ID']}; logs in {logs}",
        flush=True,
    )
    node_proc = _start(
        [
            sys.executable,
            "-m",
            "triton_ros.ros.inference_node",
            "--ros-args",
            "--params-file",
            str(params_file(logs)),
            "-p",
            f"grpc.port:={free_port()}",
            "-p",
            "http.port:=0",
            "-p",
            "metrics.port:=0",
            "-r",
            f"__node:={NODE[1:]}",
        ],
        logs / "inference_node.log",
    )
    stop = init_ros(argv)
    node = Node("triton_ros_tracking_demo")
    pairs = {}
    for spec in specs:
        matcher = pairs[spec.topic()] = Pairs()
        node.create_subscription(
            DETECTIONS_TYPE,
            spec.topic().rsplit("/", 1)[0] + "/detections",
            matcher.on_detections,
            200,
        )
        node.create_subscription(
            DETECTIONS_TYPE, ground_truth_topic(spec.topic()), matcher.on_truth, 200
        )
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name="tracking_demo_executor")
    spinner.start()
    cameras = None
    problems: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while "ready:" not in (logs / "inference_node.log").read_text():
            if time.monotonic() > deadline or node_proc.poll() is not None:
                raise RuntimeError("the node did not come up (see its log)")
            time.sleep(0.2)
        cameras = _start(
            [
                sys.executable,
                "-m",
                "triton_ros.ros.tools.synthetic_cameras",
                "--moving",
                "--rate",
                str(args.rate),
            ]
            + [a for c in cams for a in ("--camera", c)],
            logs / "cameras.log",
        )
        start = time.monotonic()
        next_report = start + args.interval
        while not stop.is_set() and time.monotonic() - start < args.seconds:
            stop.wait(0.2)
            if time.monotonic() >= next_report:
                next_report += args.interval
                _report(time.monotonic() - start, pairs)
        print("final:", flush=True)
        scores = _report(time.monotonic() - start, pairs)
        for topic, mot in scores.items():
            if mot.frames < args.min_frames:
                problems.append(f"{topic}: {mot.frames} frames scored (< {args.min_frames})")
            elif mot.mota < args.min_mota or mot.switches_per_100 > args.max_switches:
                problems.append(f"{topic}: {mot.summary()}")
    except Exception as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        if cameras is not None and _stop(cameras) != 0:
            problems.append(f"synthetic_cameras exited {cameras.returncode}")
        if _stop(node_proc) != 0:
            problems.append(f"inference_node exited {node_proc.returncode} (see its log)")
        executor.shutdown()
        spinner.join(timeout=10)
        node.destroy_node()
    for problem in problems:
        print(f"FAILED: {problem}", flush=True)
    print(
        "tracking demo "
        + (
            "failed"
            if problems
            else "passed: every camera tracked with "
            f"MOTA >= {args.min_mota:g} and <= {args.max_switches:g} ID "
            f"switches per 100 object-frames"
        ),
        flush=True,
    )
    return 1 if problems else 0


def _report(elapsed: float, pairs: dict) -> dict:
    scores = {}
    for topic, matcher in pairs.items():
        mot = scores[topic] = score_pairs(matcher.pairs())
        print(f"[{elapsed:5.1f} s] {topic}: {mot.summary()}", flush=True)
    return scores


if __name__ == "__main__":
    raise SystemExit(main())
