"""The ROS demo (scripts/run.sh): many robots' cameras of several kinds, one node, batched.

``python -m triton_ros.ros.tools.demo [--seconds 20] [--rate 30] [--params-file FILE]``

1. starts ``inference_node`` with config/inference.yaml (every ``/robot*/camera*/image_raw`` topic,
   raw or image_transport's ``/compressed`` -> the bundled ``color_detector``, which sees what the
   synthetic cameras draw; every ``/robot*/rgbd*`` RGB-D camera's colour, depth and CameraInfo,
   matched by stamp -> the bundled ``rgbd_locator``, which locates the same objects in 3D), its gRPC
   endpoint on a free port;
2. starts robot1's synthetic cameras, robot4's compressed ones (``sensor_msgs/CompressedImage``,
   one JPEG and one PNG) and robot3's RGB-D cameras (one 16UC1 raw, one 32FC1 compressedDepth;
   depth and CameraInfo stamped up to 3 ms off the colour image's), robot5's and robot6's LiDARs
   (``synthetic_lidar``, two field layouts, 10 Hz; boxes scored by BEV IoU against the ground
   truth it publishes, with their centre error), then
   robot2's cameras a few seconds later, as separate processes (at ``--rate`` Hz, several
   resolutions and encodings): the node finds robot2 through its topic pattern while running;
3. sends gRPC requests to the same detector meanwhile (tritonclient), which share its batcher
   with the camera frames: synthetic frames whose boxes are checked against their ground truth;
4. prints live, every ``--interval`` seconds, the model's and the binding's status (~/status)
   and each camera's detections (rate, end-to-end latency, best boxes) with their recall,
   precision and mean IoU against the ground truth the cameras publish next to each image
   (``.../ground_truth``, matched by header stamp and frame_id; see ``detection_metrics``), and
   each RGB-D camera's 3D detections with their recall and position error against the 3D
   ground truth (``.../ground_truth_3d``);
5. after ``--seconds``, runs on (at most ``--grace`` seconds more) while a camera has fewer than
   ``--min-frames`` frames scored: a camera process that starts late on a loaded host is scored
   rather than failing the demo unseen;
6. at the end prints the per-model statistics (~/get_model_statistics) and the per-camera
   scores, stops the cameras and the node with SIGINT and checks that everything exited 0.

Exits 0 when every camera's detections arrived with recall >= ``--min-recall`` (0.95) and mean
IoU >= ``--min-iou`` (0.8) against the ground truth, every RGB-D camera's objects with recall >=
``--min-recall`` within ``--max-position-error`` (2 %) of their distance, every LiDAR's boxes
with recall >= ``--min-recall`` at BEV IoU >= 0.5 and a mean centre error <=
``--max-centre-error-m``
(0.2 m), every gRPC answer
found the objects of its frame, and every process exited cleanly; 1 otherwise, saying which.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..codec.messages import DETECTIONS3D_TYPE, DETECTIONS_TYPE
from ..package_files import package_file
from ..ros_process import init_ros, strip_ros_args
from .detection_metrics import FrameMatcher, Score3D, ScoreBEV, match
from .synthetic_cameras import (
    CLASS_NAMES,
    DEFAULT_CAMERAS,
    CameraSpec,
    RgbdSpec,
    SyntheticScene,
    ground_truth_topic,
    parse_camera,
    parse_rgbd,
)
from .synthetic_lidar import parse_lidar

ROBOT1 = tuple(c for c in DEFAULT_CAMERAS if c.startswith("robot1/"))
ROBOT2 = tuple(c for c in DEFAULT_CAMERAS if c.startswith("robot2/"))
# RGB-D cameras (config/inference.yaml's binding rgbd: /robot*/rgbd* -> rgbd_locator)
ROBOT3 = ("robot3/rgbd_front:640x480:16UC1:raw", "robot3/rgbd_rear:424x240:32FC1:compressedDepth")
SYNC_JITTER_MS = 3.0
# Cameras publishing sensor_msgs/CompressedImage on .../image_raw/compressed, as image_transport
# does (decoded by the node; batched with the raw cameras' frames in color_detector)
ROBOT4 = ("robot4/camera_front:640x480:rgb8:jpeg", "robot4/camera_rear:424x240:mono8:png")
# LiDARs (config/inference.yaml's binding lidar: /robot*/lidar/points -> lidar_detector), two
# field layouts, 10 Hz; scenes cast once and sent in turn (casting would cost the host more than
# the node does)
LIDARS = ("robot5:velodyne", "robot6:f64pad")
LIDAR_RATE = 10.0
NODE = "/inference_node"
GRPC_MODEL = "color_detector"  # the model config/inference.yaml binds the cameras to


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CameraWatch:
    """Detections received on one camera's output topic."""

    def __init__(self, topic: str, matcher: FrameMatcher | None = None) -> None:
        self.topic = topic
        self.count = 0
        self.window = 0
        self.latency_ms: collections.deque[float] = collections.deque(maxlen=300)
        self.last = None
        self.lock = threading.Lock()
        self.matcher = matcher or FrameMatcher()

    def on_message(self, msg, now_ns: int) -> None:
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self.lock:
            self.count += 1
            self.window += 1
            self.latency_ms.append((now_ns - stamp) / 1e6)
            self.last = msg

    def _window(self, interval: float):
        """(rate, median latency, last message) of the last report interval."""
        with self.lock:
            rate = self.window / interval
            self.window = 0
            lat = np.median(self.latency_ms) if self.latency_ms else float("nan")
            return rate, lat, self.last

    def line(self, interval: float) -> str:
        rate, lat, last = self._window(interval)
        score = self.matcher.snapshot()
        text = (
            f"  {self.topic:36s} {rate:5.1f} Hz  e2e p50 {lat:6.1f} ms  recall "
            f"{score.recall:5.3f} precision {score.precision:5.3f} IoU {score.mean_iou:5.3f}"
        )
        if last is None:
            return text + "  (no detections yet)"
        best = sorted(last.detections, key=lambda d: -d.results[0].hypothesis.score)[:2]
        boxes = ", ".join(
            f"{d.results[0].hypothesis.class_id} {d.results[0].hypothesis.score:.3f} @ "
            f"({d.bbox.center.position.x:.0f},{d.bbox.center.position.y:.0f} "
            f"{d.bbox.size_x:.0f}x{d.bbox.size_y:.0f})"
            for d in best
        )
        return text + f"  {len(last.detections):3d} boxes [{last.header.frame_id}]  {boxes}"


class RgbdWatch(CameraWatch):
    """3D detections received on one RGB-D camera's output topic."""

    def __init__(self, spec: RgbdSpec, max_error: float) -> None:
        super().__init__(
            f"{spec.namespace()}/detections3d", FrameMatcher(score=Score3D(max_error=max_error))
        )
        self.spec = spec

    def line(self, interval: float) -> str:
        rate, lat, last = self._window(interval)
        score = self.matcher.snapshot()
        text = (
            f"  {self.topic:36s} {rate:5.1f} Hz  e2e p50 {lat:6.1f} ms  recall "
            f"{score.recall:5.3f} position error mean {100 * score.mean_error:4.2f} % max "
            f"{100 * score.error_max:4.2f} % of the distance"
        )
        if last is None:
            return text + "  (no detections yet)"
        best = sorted(last.detections, key=lambda d: -d.results[0].hypothesis.score)[:2]
        where = ", ".join(
            f"{d.results[0].hypothesis.class_id} @ ({d.bbox.center.position.x:+.2f}, "
            f"{d.bbox.center.position.y:+.2f}, {d.bbox.center.position.z:.2f}) m"
            for d in best
        )
        return text + f"  {len(last.detections)} objects [{last.header.frame_id}]  {where}"


class LidarWatch(CameraWatch):
    """3D boxes received on one LiDAR's output topic, scored by BEV IoU."""

    def __init__(self, spec) -> None:
        super().__init__(
            spec.topic().rsplit("/", 1)[0] + "/detections3d", FrameMatcher(score=ScoreBEV())
        )
        self.spec = spec

    def line(self, interval: float) -> str:
        rate, lat, last = self._window(interval)
        score = self.matcher.snapshot()
        text = (
            f"  {self.topic:36s} {rate:5.1f} Hz  e2e p50 {lat:6.1f} ms  recall "
            f"{score.recall:5.3f} (BEV IoU >= 0.5) centre error mean {score.mean_error:4.2f}"
            f" m max {score.error_max:4.2f} m"
        )
        if last is None:
            return text + "  (no detections yet)"
        return text + f"  {len(last.detections)} boxes [{last.header.frame_id}]"


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "w")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())


def _stop(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def _grpc_load(url: str, stop: threading.Event, counts: dict) -> None:
    """Batch-1 requests at about 10 Hz from a gRPC client, into the same detector: synthetic
    256x256 frames, each answer checked against the frame's ground truth."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    scene = SyntheticScene(parse_camera("grpc/client:256x256:rgb8"), seed=99)
    t = 0.0
    while not stop.wait(0.1):
        t += 0.1
        frame, truth = scene.render(t)
        image = (frame.transpose(2, 0, 1)[None] / np.float32(255.0)).astype(np.float32)
        x = grpcclient.InferInput("images", list(image.shape), "FP32")
        x.set_data_from_numpy(image)
        try:
            rows = client.infer(GRPC_MODEL, [x]).as_numpy("detections")[0]
        except Exception as exc:
            counts["failed"] += 1
            counts["last_error"] = str(exc)
            continue
        counts["ok"] += 1
        rows = rows[rows[:, 4] > 0.5]
        names = [CLASS_NAMES[int(c)] for c in truth.classes]
        found = match(
            truth.boxes, names, rows[:, :4], [CLASS_NAMES[int(c)] for c in rows[:, 5]], min_iou=0.8
        )
        if len(found) == len(names) and len(rows) == len(names):
            counts["correct"] += 1


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from triton_ros_interfaces.msg import InferenceStatus
    from triton_ros_interfaces.srv import GetModelStatistics

    argv = sys.argv if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the demo runs")
    parser.add_argument("--rate", type=float, default=30.0, help="camera frame rate, Hz")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between reports")
    parser.add_argument(
        "--params-file",
        default=str(package_file("config", "inference.yaml")),
        help="the node's parameters",
    )
    parser.add_argument(
        "--min-recall",
        type=float,
        default=0.95,
        help="fail when a camera's recall against the ground truth is lower",
    )
    parser.add_argument(
        "--min-iou",
        type=float,
        default=0.8,
        help="fail when a camera's mean IoU of matched boxes is lower",
    )
    parser.add_argument(
        "--max-position-error",
        type=float,
        default=0.02,
        help="fail when an RGB-D camera locates an object farther than this "
        "fraction of its distance from where it is (default 0.02)",
    )
    parser.add_argument(
        "--max-centre-error-m",
        type=float,
        default=0.2,
        help="fail when a LiDAR's boxes are centred farther than this from the "
        "ground truth's on average, metres (default 0.2)",
    )
    parser.add_argument(
        "--min-frames",
        type=int,
        default=30,
        help="frames each camera should have scored by the end: the demo runs "
        "on, up to --grace seconds, until every camera has (default 30)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="the most seconds the demo runs past --seconds waiting for "
        "--min-frames on every camera (default 30)",
    )
    args = parser.parse_args(strip_ros_args(argv)[1:])

    if not os.environ.get("ROS_DOMAIN_ID"):
        # A domain of its own, so that other ROS programs on this host neither see nor disturb it.
        os.environ["ROS_DOMAIN_ID"] = str(random.randint(1, 100))
    logs = Path(tempfile.mkdtemp(prefix="triton_ros_demo_"))
    port = free_port()
    py = sys.executable
    print(
        f"triton_ros ROS demo: {args.seconds:g} s, 2 robots x 2 cameras -> inference_node "
        f"({GRPC_MODEL}) and 1 robot x 2 RGB-D cameras -> (rgbd_locator), at {args.rate:g} Hz"
        f", 1 robot x 2 compressed cameras (JPEG, PNG) -> ({GRPC_MODEL}), 2 robots' LiDARs "
        f"-> (lidar_detector) at {LIDAR_RATE:g} Hz"
        f"; ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']} (to watch: ros2 topic echo "
        f"/robot1/camera_front/detections, /robot3/rgbd_front/detections3d); logs in {logs}",
        flush=True,
    )
    node_proc = _start(
        [
            py,
            "-m",
            "triton_ros.ros.inference_node",
            "--ros-args",
            "--params-file",
            args.params_file,
            "-p",
            f"grpc.port:={port}",
            "-p",
            "http.port:=0",
            "-p",
            "metrics.port:=0",
        ],
        logs / "inference_node.log",
    )
    cameras: list[subprocess.Popen] = []
    stop = init_ros(argv)
    node = Node("triton_ros_demo")
    specs: list[CameraSpec] = [parse_camera(c) for c in ROBOT1 + ROBOT2 + ROBOT4]
    watches = {s.topic(): CameraWatch(s.topic().rsplit("/", 1)[0] + "/detections") for s in specs}
    rgbd_specs: list[RgbdSpec] = [parse_rgbd(c) for c in ROBOT3]
    rgbd_watches = [RgbdWatch(s, args.max_position_error) for s in rgbd_specs]
    lidar_watches = [LidarWatch(parse_lidar(t)) for t in LIDARS]
    for lw in lidar_watches:
        node.create_subscription(
            DETECTIONS3D_TYPE,
            lw.topic,
            lambda msg, w=lw: (
                w.on_message(msg, node.get_clock().now().nanoseconds),
                w.matcher.on_detections(msg),
            ),
            200,
        )
        node.create_subscription(DETECTIONS3D_TYPE, lw.spec.truth_topic(), lw.matcher.on_truth, 200)
    for rw in rgbd_watches:
        node.create_subscription(
            DETECTIONS3D_TYPE,
            rw.topic,
            lambda msg, w=rw: (
                w.on_message(msg, node.get_clock().now().nanoseconds),
                w.matcher.on_detections(msg),
            ),
            200,
        )
        node.create_subscription(DETECTIONS3D_TYPE, rw.spec.truth_topic(), rw.matcher.on_truth, 200)
    for spec in specs:
        watch = watches[spec.topic()]
        node.create_subscription(
            DETECTIONS_TYPE,
            watch.topic,
            lambda msg, w=watch: (
                w.on_message(msg, node.get_clock().now().nanoseconds),
                w.matcher.on_detections(msg),
            ),
            200,
        )
        node.create_subscription(
            DETECTIONS_TYPE, ground_truth_topic(spec.topic()), watch.matcher.on_truth, 200
        )
    status: dict = {}
    node.create_subscription(
        InferenceStatus, f"{NODE}/status", lambda msg: status.__setitem__("last", msg), 10
    )
    stats_client = node.create_client(GetModelStatistics, f"{NODE}/get_model_statistics")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name="demo_executor")
    spinner.start()
    grpc_stop = threading.Event()
    grpc_counts = {"ok": 0, "failed": 0, "correct": 0, "last_error": ""}
    grpc_thread = None
    ok = True
    try:
        if not stats_client.wait_for_service(timeout_sec=60.0):
            raise RuntimeError("the node did not come up (see its log)")
        print(f"inference_node is up (gRPC at 127.0.0.1:{port}); starting robot1", flush=True)
        cameras.append(
            _start(
                [py, "-m", "triton_ros.ros.tools.synthetic_cameras", "--rate", str(args.rate)]
                + [a for c in ROBOT1 for a in ("--camera", c)],
                logs / "robot1.log",
            )
        )
        print(
            "starting robot3's RGB-D cameras (colour, depth and CameraInfo, matched by stamp)",
            flush=True,
        )
        cameras.append(
            _start(
                [
                    py,
                    "-m",
                    "triton_ros.ros.tools.synthetic_cameras",
                    "--rate",
                    str(args.rate),
                    "--sync-jitter-ms",
                    str(SYNC_JITTER_MS),
                ]
                + [a for c in ROBOT3 for a in ("--rgbd", c)],
                logs / "robot3.log",
            )
        )
        print(
            "starting robot4's compressed cameras (JPEG and PNG, on .../image_raw/compressed)",
            flush=True,
        )
        cameras.append(
            _start(
                [py, "-m", "triton_ros.ros.tools.synthetic_cameras", "--rate", str(args.rate)]
                + [a for c in ROBOT4 for a in ("--camera", c)],
                logs / "robot4.log",
            )
        )
        print("starting robot5's and robot6's LiDARs (PointCloud2, two field layouts)", flush=True)
        cameras.append(
            _start(
                [
                    py,
                    "-m",
                    "triton_ros.ros.tools.synthetic_lidar",
                    "--rate",
                    str(LIDAR_RATE),
                    "--cycle",
                    "30",
                ]
                + [a for t in LIDARS for a in ("--lidar", t)],
                logs / "lidars.log",
            )
        )
        grpc_thread = threading.Thread(
            target=_grpc_load, daemon=True, args=(f"127.0.0.1:{port}", grpc_stop, grpc_counts)
        )
        grpc_thread.start()
        start = time.monotonic()
        robot2_at = min(4.0, args.seconds / 3)
        next_report = start + args.interval
        waiting_for: list[str] = []
        while not stop.is_set():
            elapsed = time.monotonic() - start
            if elapsed >= args.seconds:
                # A camera process that started late on a loaded host (robot2 joins seconds in)
                # gets its frames scored before the end, rather than failing the demo unseen.
                short = [
                    w.topic
                    for w in list(watches.values()) + rgbd_watches + lidar_watches
                    if w.matcher.snapshot().frames < args.min_frames
                ]
                if not short or elapsed >= args.seconds + args.grace:
                    break
                if short != waiting_for:
                    print(
                        f"[{elapsed:5.1f} s] running on (at most {args.grace:g} s past "
                        f"--seconds) until {', '.join(short)} "
                        f"{'has' if len(short) == 1 else 'have'} {args.min_frames} frames "
                        f"scored",
                        flush=True,
                    )
                    waiting_for = short
            if len(cameras) == 4 and elapsed >= robot2_at:
                print("starting robot2 (the node finds it by its topic pattern)", flush=True)
                cameras.append(
                    _start(
                        [
                            py,
                            "-m",
                            "triton_ros.ros.tools.synthetic_cameras",
                            "--rate",
                            str(args.rate),
                        ]
                        + [a for c in ROBOT2 for a in ("--camera", c)],
                        logs / "robot2.log",
                    )
                )
            if node_proc.poll() is not None:
                raise RuntimeError(f"inference_node exited with {node_proc.returncode}")
            if time.monotonic() >= next_report:
                _report(
                    time.monotonic() - start,
                    status.get("last"),
                    watches,
                    args.interval,
                    grpc_counts,
                    rgbd_watches + lidar_watches,
                )
                next_report += args.interval
            stop.wait(0.1)
        grpc_stop.set()
        _final_statistics(stats_client)
    except Exception as exc:
        print(f"demo failed: {exc}", flush=True)
        ok = False
    finally:
        grpc_stop.set()
        if grpc_thread is not None:
            grpc_thread.join(timeout=10)
        camera_rcs = [_stop(p) for p in cameras]
        node_rc = _stop(node_proc)
        executor.shutdown()
        spinner.join()
        node.destroy_node()
        rclpy.try_shutdown()

    print(
        f"\ndetections per camera against the ground truth (matched by stamp and frame_id; a "
        f"detection counts when its class is right and IoU >= 0.5; the demo fails below recall "
        f"{args.min_recall:g} or mean IoU {args.min_iou:g}):"
    )
    for spec in specs:
        watch = watches[spec.topic()]
        score = watch.matcher.snapshot()
        verdict = []
        if watch.count == 0 or score.frames == 0:
            verdict.append("NO FRAMES SCORED")
        else:
            if not score.recall >= args.min_recall:
                verdict.append(f"RECALL BELOW {args.min_recall:g}")
            if not score.mean_iou >= args.min_iou:
                verdict.append(f"MEAN IoU BELOW {args.min_iou:g}")
        print(
            f"  {watch.topic:36s} {watch.count:5d} messages, {score.frames:5d} frames scored "
            f"({spec.width}x{spec.height} {spec.encoding}): recall {score.recall:.3f} "
            f"({score.matched}/{score.truths}), precision {score.precision:.3f} "
            f"({score.matched}/{score.detections}), mean IoU {score.mean_iou:.3f}; "
            f"not scored: {watch.matcher.unmatched_truths()} frames without detections "
            f"(sent before the node bound the topic, dropped by the node as its status counts, "
            f"or in flight at the end), {watch.matcher.unmatched_detections()} detections "
            f"without ground truth (sent before this subscription matched)"
            + (f"  <- {', '.join(verdict)}" if verdict else "")
        )
        ok = ok and not verdict
    print(
        f"\n3D detections per RGB-D camera against the 3D ground truth (matched by stamp and "
        f"frame_id; an object counts when a detection of its class is within "
        f"{100 * args.max_position_error:g} % of its distance from it; the demo fails below "
        f"recall {args.min_recall:g}):"
    )
    for rw in rgbd_watches:
        score = rw.matcher.snapshot()
        verdict = []
        if rw.count == 0 or score.frames == 0:
            verdict.append("NO FRAMES SCORED")
        elif not score.recall >= args.min_recall:
            verdict.append(f"RECALL BELOW {args.min_recall:g}")
        spec = rw.spec
        print(
            f"  {rw.topic:36s} {rw.count:5d} messages, {score.frames:5d} frames scored "
            f"({spec.width}x{spec.height}, depth {spec.depth_encoding} "
            f"{spec.depth_transport}): recall {score.recall:.3f} ({score.matched}/"
            f"{score.truths}), precision {score.precision:.3f}, position error mean "
            f"{100 * score.mean_error:.2f} % max {100 * score.error_max:.2f} % of the distance"
            + (f"  <- {', '.join(verdict)}" if verdict else "")
        )
        ok = ok and not verdict
    print(
        f"\n3D boxes per LiDAR against the ground truth (matched by stamp and frame_id; a box "
        f"counts when a detection's BEV IoU with it is >= 0.5; the demo fails below recall "
        f"{args.min_recall:g} or a mean centre error above {args.max_centre_error_m:g} m):"
    )
    for lw in lidar_watches:
        score = lw.matcher.snapshot()
        verdict = []
        if lw.count == 0 or score.frames == 0:
            verdict.append("NO FRAMES SCORED")
        else:
            if not score.recall >= args.min_recall:
                verdict.append(f"RECALL BELOW {args.min_recall:g}")
            if not score.mean_error <= args.max_centre_error_m:
                verdict.append(f"CENTRE ERROR ABOVE {args.max_centre_error_m:g} m")
        print(
            f"  {lw.topic:36s} {lw.count:5d} messages, {score.frames:5d} clouds scored "
            f"({lw.spec.layout} layout): recall {score.recall:.3f} ({score.matched}/"
            f"{score.truths}), precision {score.precision:.3f}, mean BEV IoU "
            f"{score.mean_iou:.3f}, centre error mean {score.mean_error:.3f} m max "
            f"{score.error_max:.3f} m" + (f"  <- {', '.join(verdict)}" if verdict else "")
        )
        ok = ok and not verdict
    print(
        f"gRPC requests answered meanwhile: {grpc_counts['ok']} (failed {grpc_counts['failed']}"
        f"{': ' + grpc_counts['last_error'] if grpc_counts['failed'] else ''}), "
        f"{grpc_counts['correct']} with every object found at IoU >= 0.8"
    )
    if (
        grpc_counts["ok"] == 0
        or grpc_counts["correct"] != grpc_counts["ok"]
        or grpc_counts["failed"]
    ):
        print("  <- the gRPC client's answers were not all right")
        ok = False
    print(f"cameras exited with {camera_rcs}, inference_node exited with {node_rc}")
    ok = ok and node_rc == 0 and all(rc == 0 for rc in camera_rcs)
    if node_rc != 0:
        print((logs / "inference_node.log").read_text(errors="replace")[-3000:])
    print("demo " + ("OK" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


def _report(
    elapsed: float, status, watches: dict, interval: float, grpc_counts: dict, rgbd_watches: list
) -> None:
    lines = [f"[{elapsed:5.1f} s]"]
    if status is not None:
        bound = {b.model for b in status.bindings}
        for m in status.models:
            if m.name not in bound and not m.input_rate:
                continue  # loaded but idle: nothing to show
            lines.append(
                f"  model {m.name} v{m.version} {m.state}: {m.input_rate:6.1f} req/s, "
                f"{m.execution_rate:5.1f} exec/s, mean batch {m.mean_batch_size:4.2f}, "
                f"queue {m.queue_depth}, latency p50 {m.latency_p50_ms:5.1f} ms "
                f"p99 {m.latency_p99_ms:5.1f} ms"
            )
        for b in status.bindings:
            lines.append(
                f"  binding {b.name}: {b.source_count} topics, in {b.input_rate:5.1f}/s, "
                f"out {b.output_rate:5.1f}/s, drops {b.drop_rate:4.1f}/s (since start: "
                f"stale {b.dropped_stale}, superseded {b.dropped_superseded}, malformed "
                f"{b.dropped_malformed}"
                + (
                    f", input messages without partners {unmatched}"
                    if (
                        unmatched := b.unmatched_too_old
                        + b.unmatched_no_partner
                        + b.unmatched_queue_overflow
                    )
                    else ""
                )
                + f"), e2e p50 {b.latency_p50_ms:5.1f} ms p99 "
                f"{b.latency_p99_ms:5.1f} ms"
            )
    lines += [w.line(interval) for w in watches.values()]
    lines += [w.line(interval) for w in rgbd_watches]
    lines.append(f"  gRPC client: {grpc_counts['ok']} requests answered")
    print("\n".join(lines), flush=True)


def _final_statistics(client) -> None:
    from triton_ros_interfaces.srv import GetModelStatistics

    future = client.call_async(GetModelStatistics.Request())
    deadline = time.monotonic() + 30
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not future.done():
        print("~/get_model_statistics did not answer")
        return
    response = future.result()
    print(
        "\nper-model statistics (~/get_model_statistics; camera frames and gRPC requests together):"
    )
    for s in response.model_stats:
        sizes = ", ".join(f"{b.batch_size}x{b.compute_infer.count}" for b in s.batch_stats)
        queue = s.queue.ns / s.success.count / 1e6 if s.success.count else 0.0
        infer = s.compute_infer.ns / s.success.count / 1e6 if s.success.count else 0.0
        print(
            f"  {s.name} v{s.version}: {s.inference_count} inferences in {s.execution_count} "
            f"executions (mean executed batch {s.mean_batch_size:.2f}); requests ok "
            f"{s.success.count}, failed {s.fail.count}; avg queue {queue:.1f} ms, avg compute "
            f"{infer:.1f} ms"
        )
        if sizes:
            print(f"    executions by batch size: {sizes}")


if __name__ == "__main__":
    sys.exit(main())
