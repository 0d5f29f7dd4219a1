"""The pointcloud input kind on its own: every field layout read alike (datatypes, offsets,
padding, byte order, organised row_step padding, NaN), malformed clouds refused with their
cause, the BEV grid's channels and the points tensor's subsampling, padding and count/mask
inputs; and the bundled lidar_detector with the bev_cells decoder against synthetic_lidar's
ground truth (recall at BEV IoU >= 0.5, centre error), without ROS processes."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from triton_ros.ros.codec.base import FrameOutputs, MalformedInput, check_input
from triton_ros.ros.codec.detection3d import Detection3DConfig, decode_bev_cells
from triton_ros.ros.codec.pointcloud import (
    POINTCLOUD,
    PointCloudConfig,
    PointCloudReader,
    plan_cloud,
)
from triton_ros.ros.tools import synthetic_lidar as sl

from ros_probe import ROOT

pytestmark = pytest.mark.unit

FIVE = ("occupancy", "max_height", "min_height", "mean_intensity", "density")


def tensor(dims, name="BEV", datatype="FP32"):
    return NS(name=name, dims=tuple(dims), datatype=datatype, format="FORMAT_NONE")


def cloud(
    points: dict,
    layout: list[tuple[str, int, int]],
    step: int,
    *,
    big=False,
    height=1,
    row_pad=0,
    dense=True,
):
    """A typed PointCloud2 of ``points`` (name -> values) in ``layout`` (name, offset, type)."""
    from sensor_msgs.msg import PointCloud2, PointField

    from triton_ros.ros.codec.messages import uint8_array

    order = ">" if big else "<"
    dtype = np.dtype(
        {
            "names": [f[0] for f in layout],
            "formats": [order + sl.NUMPY[f[2]] for f in layout],
            "offsets": [f[1] for f in layout],
            "itemsize": step,
        }
    )
    n = len(next(iter(points.values())))
    arr = np.zeros(n, dtype)
    for name, values in points.items():
        arr[name] = values
    width = n // height
    raw = arr.tobytes()
    if row_pad:
        rows = np.frombuffer(raw, np.uint8).reshape(height, width * step)
        raw = np.concatenate([rows, np.full((height, row_pad), 0xEE, np.uint8)], 1).tobytes()
    msg = PointCloud2(
        height=height,
        width=width,
        is_bigendian=big,
        point_step=step,
        row_step=width * step + row_pad,
        is_dense=dense,
    )
    msg.fields = [PointField(name=a, offset=o, datatype=t, count=1) for a, o, t in layout]
    msg.data = uint8_array(raw)
    return msg


POINTS = {
    "x": [1.05, 2.05, 2.15, -3.0, np.nan, 60.0],
    "y": [0.05, 0.05, 0.05, 1.0, 0.0, 0.0],
    "z": [-1.0, 0.5, -0.5, 0.0, 0.0, 0.0],
    "intensity": [10, 20, 40, 80, 0, 0],
}
LAYOUTS = {
    "f32": ([("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 12, 7)], 16, False),
    "f64_padded_big": ([("x", 0, 8), ("y", 12, 8), ("z", 24, 8), ("intensity", 40, 8)], 56, True),
    "ints_shuffled": (
        [("intensity", 0, 2), ("z", 2, 7), ("ring", 6, 4), ("x", 8, 8), ("y", 16, 7)],
        23,
        False,
    ),
    "int16_coords_big": ([("x", 0, 3), ("y", 2, 3), ("z", 4, 3), ("intensity", 6, 6)], 12, True),
}
CONFIG = PointCloudConfig(
    x_range=(-4.0, 4.0), y_range=(-2.0, 2.0), z_range=(-2.0, 2.0), resolution=1.0, channels=FIVE
)


def grid_of(msg, config=CONFIG):
    plan = plan_cloud(config, tensor((len(config.channels), 4, 8)), model="m")
    POINTCLOUD.check(msg)
    return POINTCLOUD.encoder(plan)(msg)


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if not k.startswith("int16")])
def test_every_layout_gives_the_same_grid(layout):
    fields, step, big = LAYOUTS[layout]
    grid, placement = grid_of(cloud(POINTS, fields, step, big=big, dense=False))
    assert placement.points == 4  # NaN and out-of-range left out
    occ, maxh, minh, inten, dens = grid
    # cells: column floor(x + 4), row floor(y + 2)
    assert occ.sum() == 3 and occ[2, 5] == 1 and occ[2, 6] == 1 and occ[3, 1] == 1
    assert maxh[2, 6] == pytest.approx(2.5) and minh[2, 6] == pytest.approx(1.5)
    assert maxh[2, 5] == pytest.approx(1.0) and minh[2, 5] == pytest.approx(1.0)
    assert inten[2, 6] == pytest.approx(30.0) and inten[3, 1] == pytest.approx(80.0)
    assert dens[2, 6] == pytest.approx(math.log(3) / math.log(64))


def test_integer_coordinates_and_big_endian():
    fields, step, big = LAYOUTS["int16_coords_big"]
    pts = {"x": [1, -3, 3], "y": [0, 1, -2], "z": [1, 0, -1], "intensity": [7, 9, 70000]}
    grid, placement = grid_of(cloud(pts, fields, step, big=big))
    assert placement.points == 3
    assert grid[0][2, 5] == 1 and grid[0][3, 1] == 1 and grid[0][0, 7] == 1
    assert grid[3][0, 7] == 70000 and grid[1][2, 5] == pytest.approx(3.0)


def test_organised_cloud_with_row_padding_and_nan():
    fields, step, _ = LAYOUTS["f32"]
    pts = {k: v[:4] for k, v in POINTS.items()}
    pts["x"] = [1.05, np.nan, 2.15, -3.0]
    msg = cloud(pts, fields, step, height=2, row_pad=13, dense=False)
    assert msg.row_step == 2 * 16 + 13
    grid, placement = grid_of(msg)
    assert placement.points == 3
    assert grid[0].sum() == 3 and grid[0][2, 6] == 1
    # a reader of the serialized bytes sees the same cloud
    from rclpy.serialization import serialize_message

    received = PointCloudReader()(serialize_message(msg))
    again, _ = grid_of(received)
    assert np.array_equal(again, grid)


def test_unpadded_clouds_are_views_of_the_message_bytes():
    from triton_ros.ros.codec.pointcloud import cloud_view

    fields, step, big = LAYOUTS["f64_padded_big"]
    msg = cloud(POINTS, fields, step, big=big)
    from rclpy.serialization import serialize_message

    raw = serialize_message(msg)
    received = PointCloudReader()(raw)
    view = cloud_view(received)
    assert np.shares_memory(view, received.data)
    assert view["x"][0] == pytest.approx(1.05)


@pytest.mark.parametrize(
    "case, cause",
    [
        ("offset_past_step", "past point_step"),
        ("short_data", "fewer than"),
        ("short_row_step", "row_step"),
        ("no_z", "no field z"),
        ("bad_datatype", "datatype 11"),
    ],
)
def test_malformed_clouds_are_refused_with_their_cause(case, cause):
    from sensor_msgs.msg import PointField

    fields, step, _ = LAYOUTS["f32"]
    msg = cloud(POINTS, fields, step)
    if case == "offset_past_step":
        msg.fields[3] = PointField(name="intensity", offset=14, datatype=7, count=1)
    elif case == "short_data":
        msg.data = msg.data[: len(msg.data) - 5]
    elif case == "short_row_step":
        msg.row_step = 10
    elif case == "no_z":
        msg.fields = [f for f in msg.fields if f.name != "z"]
    else:
        msg.fields[0] = PointField(name="x", offset=0, datatype=11, count=1)
    with pytest.raises(MalformedInput, match=cause):
        check_input(POINTCLOUD, msg)


def test_points_tensor_subsampled_padded_with_count_and_mask():
    config = PointCloudConfig(
        x_range=(-50.0, 50.0),
        y_range=(-50.0, 50.0),
        z_range=(-5.0, 5.0),
        point_fields=("x", "y", "z", "intensity", "ring"),
        count_input="NUM",
        mask_input="MASK",
        subsample="voxel",
        voxel_size=1.0,
    )
    with pytest.raises(Exception, match="set cloud_max_points"):
        plan_cloud(config, tensor((-1, 5), "POINTS"), model="m")
    config = PointCloudConfig(**{**config.__dict__, "max_points": 8})
    plan = plan_cloud(config, tensor((-1, 5), "POINTS"), model="m")
    assert plan.shape == (8, 5) and plan.companions == ("NUM", "MASK")
    fields, step, big = LAYOUTS["ints_shuffled"]
    few = {k: v for k, v in POINTS.items()}
    few["ring"] = [1, 2, 3, 4, 5, 6]
    out, placement = POINTCLOUD.encoder(plan)(_stamped(cloud(few, fields, step, dense=False)))
    assert placement.points == 4  # NaN and x = 60 m left out
    assert out[:4, 4].tolist() == [1, 2, 3, 4] and not out[4:].any()
    assert placement.companions["NUM"].tolist() == [4]
    assert placement.companions["MASK"].tolist() == [1] * 4 + [0] * 4
    # many points, many in one voxel: one per voxel first, then random down to 8
    rng = np.random.default_rng(3)
    many = {
        "x": np.r_[rng.uniform(-20, 20, 30), np.full(100, 0.5)],
        "y": np.r_[rng.uniform(-20, 20, 30), np.full(100, 0.5)],
        "z": np.zeros(130),
        "intensity": np.zeros(130),
        "ring": np.zeros(130),
    }
    out, placement = POINTCLOUD.encoder(plan)(_stamped(cloud(many, fields, step)))
    assert placement.points == 8
    assert (np.abs(out[:, 0] - 0.5) < 1e-6).sum() <= 1  # the 100 duplicates are one voxel


def _stamped(msg):
    msg.header.stamp.sec = 12
    return msg


def test_companion_inputs_reach_the_request():
    from triton_ros.ros.binding.plan import build_plan
    from triton_ros.ros.codec.registry import output_format
    from triton_ros.ros.parameters import BINDING_PARAMS, binding_config
    from triton_ros.ros.targets.spec import ModelSpec, TensorSpec

    raw = {s.name: s.default for s in BINDING_PARAMS}
    raw.update(
        model="pp",
        topics=["/cloud"],
        input_kind="pointcloud",
        input="POINTS",
        format="tensors",
        cloud_max_points=16,
        cloud_count_input="NUM",
    )
    config = binding_config("lidar", raw)
    spec = ModelSpec(
        name="pp",
        version=1,
        platform="onnxruntime_onnx",
        max_batch_size=4,
        inputs=(TensorSpec("POINTS", "FP32", (16, 4)), TensorSpec("NUM", "INT32", (1,))),
        outputs=(TensorSpec("OUT", "FP32", (4,)),),
    )
    plan = build_plan(config, spec, POINTCLOUD, output_format("tensors"))
    fields, step, big = LAYOUTS["f32"]
    tensors, placement, _ = plan.encode_request(_stamped(cloud(POINTS, fields, step)))
    assert tensors["POINTS"].shape == (1, 16, 4)
    assert tensors["NUM"].dtype == np.int32 and tensors["NUM"].tolist() == [
        [4]
    ]  # NaN and x = 60 m left out


def test_the_bundled_detector_finds_synthetic_lidars_boxes():
    import onnxruntime as ort
    from std_msgs.msg import Header

    lidar = sl.SyntheticLidars.__new__(sl.SyntheticLidars)
    lidar.dirs, lidar.beams, lidar.azimuths = sl.ray_directions(32, 1024), 32, 1024
    lidar.noise_m, lidar.dropout, lidar.rng = 0.02, 0.05, np.random.default_rng(1)
    config = PointCloudConfig(channels=FIVE, intensity_scale=1 / 255)
    plan = plan_cloud(config, tensor((5, 512, 512)), model="lidar_detector")
    encode = POINTCLOUD.encoder(plan)
    session = ort.InferenceSession(str(ROOT / "model_repository/lidar_detector/1/model.onnx"))
    decode = Detection3DConfig(decode="bev_cells")
    errors, found, total = [], 0, 0
    for seed in range(3):
        for layout in sl.LAYOUTS:
            boxes = sl.Scene(seed).boxes(seed * 1.3)
            msg = lidar.cloud_message(Header(frame_id="r"), layout, boxes)
            POINTCLOUD.check(msg)
            grid, placement = encode(msg)
            s, h, g = session.run(None, {"BEV": grid[None]})
            frame = FrameOutputs(
                None, {"scores": s[0], "heights": h[0], "ground": g[0]}, True, "m", 1, placement
            )
            result = decode_bev_cells(frame, decode)
            for b in boxes:
                total += 1
                best, error = 0.0, None
                for i in range(len(result)):
                    iou = bev_iou(
                        (b.x, b.y, b.length, b.width, b.yaw),
                        (*result.positions[i, :2], *result.sizes[i, :2], result.yaws[i]),
                    )
                    if iou > best:
                        best = iou
                        error = float(np.linalg.norm(result.positions[i] - (b.x, b.y, b.z)))
                if best >= 0.5:
                    found += 1
                    errors.append(error)
    assert found / total >= 0.95, (found, total)
    assert np.mean(errors) <= 0.2 and max(errors) <= 0.35, errors


def bev_iou(a, b) -> float:
    from triton_ros.ros.tools.detection_metrics import bev_iou as iou

    return iou(a, b)


@pytest.mark.parametrize("ground_z, with_ground", [(0.0, False), (0.0, True), (-1.7, True)])
def test_the_bundled_detector_needs_no_ground_plane_nor_a_ray_cast_cloud(ground_z, with_ground):
    """Points sampled on every face of boxes (not ray-cast), FLOAT64 with padding, with ground
    at the sensor's height, below it, or none at all: each box found, centred within 0.1 m."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    boxes = [
        (8, 3, 0.3, 4.2, 1.8, 1.5),
        (-6, -7, 1.0, 2, 2, 1.0),
        (15, -10, -0.5, 1.0, 0.8, 1.8),
        (-12, 9, 2.0, 3, 1.5, 2.5),
    ]  # x, y, yaw, length, width, height
    parts = []
    for x, y, yaw, length, width, height in boxes:
        size = np.array([length, width, height])
        u = rng.uniform(-0.5, 0.5, (3000, 3)) * size
        face = rng.integers(0, 6, 3000)
        u[np.arange(3000), face // 2] = np.where(face % 2, 0.5, -0.5) * size[face // 2]
        c, s = math.cos(yaw), math.sin(yaw)
        parts.append(
            np.stack(
                [
                    x + c * u[:, 0] - s * u[:, 1],
                    y + s * u[:, 0] + c * u[:, 1],
                    ground_z + height / 2 + u[:, 2],
                ],
                1,
            )
        )
    if with_ground:
        g = rng.uniform(-40, 40, (40000, 2))
        parts.append(np.c_[g, ground_z + rng.normal(0, 0.02, len(g))])
    p = np.concatenate(parts)
    msg = cloud(
        {"x": p[:, 0], "y": p[:, 1], "z": p[:, 2], "intensity": np.full(len(p), 5.0)},
        [("x", 0, 8), ("y", 8, 8), ("z", 16, 8), ("intensity", 28, 8)],
        40,
    )
    plan = plan_cloud(PointCloudConfig(channels=FIVE), tensor((5, 512, 512)), model="m")
    grid, placement = POINTCLOUD.encoder(plan)(msg)
    session = ort.InferenceSession(str(ROOT / "model_repository/lidar_detector/1/model.onnx"))
    s, h, g = session.run(None, {"BEV": grid[None]})
    frame = FrameOutputs(
        None, {"scores": s[0], "heights": h[0], "ground": g[0]}, True, "m", 1, placement
    )
    result = decode_bev_cells(frame, Detection3DConfig(decode="bev_cells"))
    assert len(result) == len(boxes)
    for x, y, yaw, length, width, height in boxes:
        ious = [
            bev_iou(
                (x, y, length, width, yaw),
                (*result.positions[i, :2], *result.sizes[i, :2], result.yaws[i]),
            )
            for i in range(len(result))
        ]
        best = int(np.argmax(ious))
        assert ious[best] >= 0.6, (x, y, ious)
        centre = np.linalg.norm(result.positions[best] - (x, y, ground_z + height / 2))
        assert centre <= 0.1, (x, y, result.positions[best])
