"""The points form across processes: PointCloud2 of two robots -> a points tensor [N, 4] padded to
the model's N plus a count input, batched together, -> box rows with yaw.

The model (``points_centroid``, built here) answers one row per cloud: the centroid of its real
points (the sum of the rows over the count input: padding rows are zero, so a count that did not
arrive, or padding that was not zero, moves the centroid), size 1 x 2 x 3, score 1, yaw 0.5. The
test process publishes clouds (big-endian FLOAT64 with padding bytes; NaN points, not dense) of a
cluster around a known centre, some of more points than N (voxel-subsampled by the node), and
checks each box's centre against the cluster's (exactly where every point was kept), its yaw as a
quaternion and its header; and that
the two robots' clouds ran in one batch (the count input batched with the points).
"""

from __future__ import annotations

import math
import signal
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from model_factory import save
from ros_env import TOKEN
from ros_probe import NodeProcess, Probe, wait_until
from triton_ros.ros.codec.messages import DETECTIONS3D_TYPE

pytestmark = pytest.mark.system

N = 4096
NS = f"/pts{TOKEN}"
ROBOTS = ("p1", "p2")
CONFIG = f"""name: "points_centroid"
backend: "onnxruntime"
max_batch_size: 4
input [
  {{ name: "points" data_type: TYPE_FP32 dims: [ {N}, 4 ] }},
  {{ name: "num_points" data_type: TYPE_INT32 dims: [ 1 ] }}
]
output [
  {{ name: "boxes" data_type: TYPE_FP32 dims: [ 1, 9 ] }}
]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
"""


def centroid_model(repo) -> None:
    tail = numpy_helper.from_array(np.array([[1, 2, 3, 1, 0, 0.5]], np.float32), "tail")
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
    ends = numpy_helper.from_array(np.array([3], np.int64), "ends")
    nodes = [
        helper.make_node("ReduceSum", ["points", "axes"], ["sum"], keepdims=0),  # [B, 4]
        helper.make_node("Cast", ["num_points"], ["count"], to=TensorProto.FLOAT),  # [B, 1]
        helper.make_node("Div", ["sum", "count"], ["mean"]),
        helper.make_node("Slice", ["mean", "starts", "ends", "axes"], ["xyz"]),  # [B, 3]
        helper.make_node("Mul", ["count", "zero"], ["nothing"]),  # [B, 1]
        helper.make_node("Add", ["nothing", "tail"], ["rest"]),  # [B, 6]
        helper.make_node("Concat", ["xyz", "rest"], ["row"], axis=1),
        helper.make_node("Unsqueeze", ["row", "axes"], ["boxes"]),
    ]
    graph = helper.make_graph(
        nodes,
        "points_centroid",
        [
            helper.make_tensor_value_info("points", TensorProto.FLOAT, ["B", N, 4]),
            helper.make_tensor_value_info("num_points", TensorProto.INT32, ["B", 1]),
        ],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["B", 1, 9])],
        initializer=[tail, zero, axes, starts, ends],
    )
    save(graph, repo / "points_centroid" / "1" / "model.onnx")
    (repo / "points_centroid" / "config.pbtxt").write_text(CONFIG)


def cloud_message(centre, count: int, stamp, frame_id: str, rng):
    from sensor_msgs.msg import PointCloud2, PointField

    from triton_ros.ros.codec.messages import uint8_array

    # a cube of points around the centre, on a 5 cm lattice shifted at random: the voxel
    # subsampling of a larger cloud (0.1 m) keeps its centroid
    side = int(math.ceil(count ** (1 / 3) - 1e-9))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    pts = (grid[:count] - (side - 1) / 2) * 0.05 + centre
    pts = pts - pts.mean(0) + centre
    dtype = np.dtype(
        {
            "names": ["x", "y", "z", "intensity"],
            "formats": [">f8"] * 4,
            "offsets": [0, 12, 24, 40],
            "itemsize": 56,
        }
    )
    arr = np.zeros(count + 7, dtype)
    arr["x"][:count], arr["y"][:count], arr["z"][:count] = pts.T
    arr["x"][count:] = np.nan  # no returns: not dense
    arr["intensity"] = rng.uniform(0, 100, len(arr))
    msg = PointCloud2(
        height=1,
        width=len(arr),
        is_bigendian=True,
        point_step=56,
        row_step=56 * len(arr),
        is_dense=False,
    )
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.fields = [
        PointField(name=n, offset=o, datatype=8, count=1)
        for n, o in (("x", 0), ("y", 12), ("z", 24), ("intensity", 40))
    ]
    msg.data = uint8_array(arr.tobytes())
    return msg


def test_points_tensors_with_their_count_batch_across_robots(tmp_path):
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import PointCloud2
    from triton_ros_interfaces.srv import GetModelStatistics

    repo = tmp_path / "repo"
    centroid_model(repo)
    params = {
        "model_repository": str(repo),
        "startup_models": ["points_centroid"],
        "bindings": ["pts"],
        "pts": {
            "model": "points_centroid",
            "input_kind": "pointcloud",
            "input": "points",
            "topics": [f"{NS}/{r}/lidar/points" for r in ROBOTS],
            "max_age_ms": 0,
            "cloud_form": "points",
            "cloud_count_input": "num_points",
            "format": "detections3d",
            "detections3d_output": "boxes",
            "score_threshold": 0.5,
        },
    }
    node = NodeProcess(params, tmp_path, name=f"inference_node_pts_{TOKEN}")
    probe = Probe(f"probe_pts_{TOKEN}")
    try:
        node.wait_ready(probe)
        pubs = {
            r: probe.node.create_publisher(
                PointCloud2, f"{NS}/{r}/lidar/points", qos_profile_sensor_data
            )
            for r in ROBOTS
        }
        received = {
            r: probe.subscribe(DETECTIONS3D_TYPE, f"{NS}/{r}/lidar/detections3d", 100)
            for r in ROBOTS
        }
        rng = np.random.default_rng(5)
        sent: dict = {}  # (sec, nanosec, frame) -> centre
        wait_until(
            lambda: f"bound {NS}/{ROBOTS[-1]}/lidar/points" in node.log(),
            60,
            "the binding bound its topics",
        )
        rounds = 0

        def enough() -> bool:
            nonlocal rounds
            stamp = probe.node.get_clock().now().to_msg()
            rounds += 1
            for i, robot in enumerate(ROBOTS):
                centre = rng.uniform((-20, -20, -1.5), (20, 20, 1.5))  # within cloud_z_range
                # every third cloud a whole 18^3 cube: more points than N, voxel-subsampled
                count = 18**3 if (rounds + i) % 3 == 0 else int(rng.integers(200, 3000))
                frame = f"{robot}/lidar"
                sent[(stamp.sec, stamp.nanosec, frame)] = centre, count > N
                pubs[robot].publish(cloud_message(centre, count, stamp, frame, rng))
            return all(len(rec.messages()) >= 20 for rec in received.values())

        wait_until(enough, 120, "20 answers a robot", interval=0.1)
        checked = 0
        for robot, rec in received.items():
            for msg in rec.messages():
                key = (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id)
                assert key in sent, key
                (det,) = msg.detections
                c = det.bbox.center
                centre, subsampled = sent[key]
                error = np.linalg.norm(
                    np.array([c.position.x, c.position.y, c.position.z]) - centre
                )
                # every point kept: the exact centroid (float32); subsampled: one point a voxel
                assert error <= (0.03 if subsampled else 1e-3), (robot, key, error, subsampled)
                assert c.orientation.z == pytest.approx(math.sin(0.25), abs=1e-6)
                assert c.orientation.w == pytest.approx(math.cos(0.25), abs=1e-6)
                assert (det.bbox.size.x, det.bbox.size.y, det.bbox.size.z) == (1, 2, 3)
                checked += 1
        assert checked >= 40
        stats = probe.call(GetModelStatistics, node.service("get_model_statistics"))
        (model,) = [m for m in stats.model_stats if m.name == "points_centroid"]
        sizes = {b.batch_size: b.compute_infer.count for b in model.batch_stats}
        assert max(sizes) >= 2, f"every cloud ran alone: {sizes}"
        time.sleep(0.2)
        assert "Traceback" not in node.log()
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)
