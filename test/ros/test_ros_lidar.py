"""LiDARs across processes: PointCloud2 of three robots, each in a field layout of its own, batched
into ``lidar_detector``; 3D boxes against the ground truth; malformed clouds counted; a camera
binding publishing throughout.

``synthetic_lidar`` (its own process) publishes three robots' clouds - x, y, z, intensity as
big-endian FLOAT64 with padding bytes after each field (``f64pad``), an organised cloud with
NaN returns and row_step padding (``organised``), and the Velodyne layout - with their boxes on
``ground_truth``; ``synthetic_cameras`` (its own process) publishes a camera bound to
``color_detector``. The test process publishes a fourth robot's clouds, every one malformed (a
field past point_step, data shorter than its rows). The node (its own process) reads each cloud
into a BEV grid, batches the robots' grids, and decodes the per-cell scores into boxes; the test
pairs each ``detections3d`` message with the ground truth of the same cloud (stamp and frame_id)
and checks recall at BEV IoU >= 0.5 and the centre error per robot, the malformed count on
/diagnostics, that clouds of several robots ran in one batch, and that the camera's detections
never stopped.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import ROOT, TIMEOUT, NodeProcess, Probe, wait_until
from triton_ros.ros.codec.messages import DETECTIONS3D_TYPE, DETECTIONS_TYPE
from triton_ros.ros.tools.detection_metrics import FrameMatcher, ScoreBEV
from triton_ros.ros.tools.synthetic_cameras import ground_truth_topic, parse_camera
from triton_ros.ros.tools.synthetic_lidar import parse_lidar

pytestmark = pytest.mark.system

NS = f"/lidar{TOKEN}"
LIDARS = [parse_lidar(t) for t in ("l1:f64pad", "l2:organised", "l3:velodyne")]
PLAIN = parse_camera("cam/front:320x240:rgb8")
BAD = f"{NS}/lbad/lidar/points"
FRAMES = 30  # clouds scored per robot
RATE = 10.0


def params() -> dict:
    return {
        "model_repository": str(ROOT / "model_repository"),
        "startup_models": ["color_detector", "lidar_detector"],
        "diagnostics_period_s": 0.5,
        "discovery_period_s": 0.5,
        "bindings": ["plain", "lidar"],
        "plain": {
            "model": "color_detector",
            "topic_patterns": [f"{NS}/cam/*/image_raw"],
            "score_threshold": 0.5,
            "max_age_ms": 0,
        },
        "lidar": {
            "model": "lidar_detector",
            "input_kind": "pointcloud",
            "topic_patterns": [f"{NS}/*/lidar/points"],
            "max_age_ms": 0,
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


class BadLidar:
    """A robot whose every cloud is malformed: a field past point_step, or data too short."""

    def __init__(self, probe: Probe) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2

        self.probe = probe
        self.pub = probe.node.create_publisher(PointCloud2, BAD, qos_profile_sensor_data)
        self.sent = 0

    def publish(self) -> None:
        from sensor_msgs.msg import PointCloud2, PointField

        from triton_ros.ros.codec.messages import uint8_array

        msg = PointCloud2(height=1, width=100, point_step=16, row_step=1600, is_dense=True)
        msg.header.stamp = self.probe.node.get_clock().now().to_msg()
        msg.header.frame_id = "lbad/lidar"
        past = 14 if self.sent % 2 else 12
        msg.fields = [
            PointField(name=n, offset=o, datatype=7, count=1)
            for n, o in (("x", 0), ("y", 4), ("z", 8), ("intensity", past))
        ]
        msg.data = uint8_array(bytes(1600 if self.sent % 2 else 800))
        self.pub.publish(msg)
        self.sent += 1


@pytest.fixture(scope="module")
def lidar(tmp_path_factory):
    from diagnostic_msgs.msg import DiagnosticArray

    tmp = tmp_path_factory.mktemp("ros_lidar")
    node = NodeProcess(params(), tmp, name=f"inference_node_lidar_{TOKEN}")
    probe = Probe(f"probe_lidar_{TOKEN}")
    procs = []
    try:
        node.wait_ready(probe)
        matchers = {}
        for spec in LIDARS:
            matcher = FrameMatcher(score=ScoreBEV())
            probe.node.create_subscription(
                DETECTIONS3D_TYPE, spec.truth_topic(NS), matcher.on_truth, 100
            )
            probe.node.create_subscription(
                DETECTIONS3D_TYPE,
                spec.topic(NS).rsplit("/", 1)[0] + "/detections3d",
                matcher.on_detections,
                100,
            )
            matchers[spec.robot] = matcher
        plain_times: list[float] = []
        plain = FrameMatcher()
        probe.node.create_subscription(
            DETECTIONS_TYPE, ground_truth_topic(PLAIN.topic(NS)), plain.on_truth, 100
        )
        probe.node.create_subscription(
            DETECTIONS_TYPE,
            PLAIN.topic(NS).rsplit("/", 1)[0] + "/detections",
            lambda m: (plain_times.append(time.monotonic()), plain.on_detections(m)),
            100,
        )
        diagnostics = probe.subscribe(DiagnosticArray, "/diagnostics", qos=100)
        bad = BadLidar(probe)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "triton_ros.ros.tools.synthetic_lidar",
                    "--prefix",
                    NS,
                    "--rate",
                    str(RATE),
                    *[a for s in LIDARS for a in ("--lidar", f"{s.robot}:{s.layout}")],
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "triton_ros.ros.tools.synthetic_cameras",
                    "--prefix",
                    NS,
                    "--rate",
                    "10",
                    "--camera",
                    f"{PLAIN.robot}/{PLAIN.camera}:{PLAIN.width}x{PLAIN.height}",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )

        def enough() -> bool:
            bad.publish()
            return all(m.snapshot().frames >= FRAMES for m in matchers.values())

        try:
            wait_until(enough, 180, f"{FRAMES} scored clouds of every robot", interval=1 / RATE)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {[vars(m.snapshot()) for m in matchers.values()]}\n{node.log()[-4000:]}"
            ) from None
        time.sleep(1.5)  # a diagnostics period or two more
        status = binding_status(node, diagnostics, "lidar")
        outs = []
        for proc in procs:
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, out
            outs.append(out)
        procs = []
        yield {
            "node": node,
            "probe": probe,
            "matchers": matchers,
            "plain": plain,
            "plain_times": plain_times,
            "status": status,
            "bad": bad,
            "outs": outs,
        }
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()
        probe.close()
        node.stop_and_check(signal.SIGINT)


def binding_status(node, diagnostics, name: str):
    prefix = f"/{node.name}: binding {name}"
    for array in reversed(diagnostics.messages()):
        for status in array.status:
            if status.name == prefix:
                return {kv.key: kv.value for kv in status.values}
    raise AssertionError(f"no /diagnostics status of binding {name}")


def test_every_robots_boxes_are_found_in_place(lidar):
    for robot, matcher in lidar["matchers"].items():
        score = matcher.snapshot()
        print(
            f"{robot}: {score.frames} clouds, recall {score.recall:.3f}, precision "
            f"{score.precision:.3f}, BEV IoU {score.mean_iou:.3f}, centre error mean "
            f"{score.mean_error:.3f} m, max {score.error_max:.3f} m"
        )
        assert score.frames >= FRAMES, (robot, vars(score))
        assert score.recall >= 0.95, (robot, vars(score))
        assert score.mean_error <= 0.2, (robot, vars(score))
        assert score.mean_iou >= 0.7, (robot, vars(score))
        assert score.precision >= 0.95, (robot, vars(score))


def test_malformed_clouds_are_counted_logged_and_on_diagnostics(lidar):
    values = lidar["status"]
    assert int(values["dropped_malformed"]) >= lidar["bad"].sent // 4, values
    assert int(values["failed"]) == 0, values
    log = lidar["node"].log()
    assert f"malformed pointcloud on {BAD}" in log, log[-3000:]
    assert "past point_step" in log or "fewer than" in log, log[-3000:]
    assert "Traceback" not in log


def test_clouds_of_several_robots_were_batched_together(lidar):
    from triton_ros_interfaces.srv import GetModelStatistics

    node, probe = lidar["node"], lidar["probe"]
    stats = probe.call(GetModelStatistics, node.service("get_model_statistics"))
    (model,) = [m for m in stats.model_stats if m.name == "lidar_detector"]
    sizes = {b.batch_size: b.compute_infer.count for b in model.batch_stats}
    assert model.inference_count >= FRAMES * len(LIDARS), sizes
    assert max(sizes) >= 2, f"every cloud ran alone: {sizes}"


def test_the_camera_binding_kept_publishing_all_along(lidar):
    times = lidar["plain_times"]
    assert times, "no detections of the camera"
    windows = np.arange(times[0], max(times), 2.0)
    gaps = [w for w in windows if not any(w <= t < w + 2.0 for t in times)]
    assert not gaps, f"the camera's detections stopped for 2 s at {gaps}"
    score = lidar["plain"].snapshot()
    assert score.recall >= 0.95, vars(score)
