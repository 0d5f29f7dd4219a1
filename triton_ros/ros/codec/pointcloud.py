"""The ``pointcloud`` input kind: ``sensor_msgs/PointCloud2`` -> one model input (and, for a
points tensor, its count or mask inputs).

What is read: any field layout. ``x``, ``y`` and ``z`` are required; ``intensity`` (or the
fields the binding names) optional; every PointField datatype (INT8 .. FLOAT64) and ``count``;
each field at its ``offset`` within ``point_step``; ``is_bigendian`` honoured; organised clouds
(``height`` > 1) with ``row_step`` padding after each row; NaN or infinite points (a cloud that is
not ``is_dense``) left out. The message buffer is read through one structured numpy dtype built
from the fields (names, formats, offsets, ``itemsize=point_step``, byte order): a view of the
bytes as they arrived, no copy; only the columns used are gathered, once, into float32.
``sensor_msgs_py.point_cloud2.read_points_numpy`` does the same for typed messages, but it
copies the whole cloud into a plain array and has no ``row_step`` padding nor a view of rosbags'
buffer, so the dtype is built here (it is the few lines of its ``dtype_from_fields``).

Two model input forms (``cloud_form``; ``auto``: by the model input's dims):

- ``bev``: a bird's-eye-view grid ``[C, H, W]`` over ``cloud_x_range`` x ``cloud_y_range``
  (points outside ``cloud_z_range`` left out) at ``cloud_resolution`` metres a cell. Column ``j``
  of the grid is ``x = x_min + (j + 0.5) * resolution``, row ``i`` is ``y = y_min + (i + 0.5) *
  resolution`` (x forward, y left, as REP 103). The channels are ``cloud_bev_channels``, in
  order, from: ``occupancy`` (1 where a point fell), ``max_height`` and ``min_height`` (of the
  cell's points, metres above ``z_min``; 0 where empty), ``mean_intensity`` (times
  ``cloud_intensity_scale``) and ``density`` (``min(1, log(n + 1) / log(64))``, as MV3D).
  Grids are fixed-size, so clouds of several robots batch as they are.
- ``points``: a points tensor ``[N, C]``, columns ``cloud_point_fields`` (a field the cloud lacks
  is 0; intensity scaled), points outside the three ranges left out. N is the model input's or
  ``cloud_max_points``; a cloud of more points is subsampled to N (``voxel``: one point per
  ``cloud_voxel_size`` voxel, picked at random, then random if still more; ``random``: a random N;
  both
  deterministic per cloud), a cloud of fewer is padded with zeros to N (every tensor of a batch
  has N rows: batches of any robots' clouds). ``cloud_count_input`` names a model input that
  gets the number of real rows (``[1]``), ``cloud_mask_input`` one that gets ``[N]`` 1/0.

Malformed clouds (fields past ``point_step``, an unknown datatype for x/y/z, ``row_step`` under
``width * point_step``, data shorter than the rows claim, no x/y/z) raise
:class:`~triton_ros.ros.codec.base.MalformedInput`: counted as ``dropped_malformed``, logged and
on /diagnostics as every kind's. Vectorised throughout: the BEV grid is one sort of the points by
cell and height (one int64 key) and reductions over each occupied cell's run, written into the
occupied cells only; numpy releases the GIL in its sorts and numeric ufunc loops, so the node's
worker threads may overlap a cloud's work (bench/lidar/README.md: not conclusive on a shared
2-core host).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ...core.errors import invalid_arg
from ...settings import Namer, setting
from .base import ImageGeometry, InputKind, MalformedInput
from .serialized_image import _SerializedReader

POINTCLOUD2_TYPE = "sensor_msgs/msg/PointCloud2"
# sensor_msgs/PointField datatypes -> numpy type codes (byte order added per cloud)
DATATYPES: dict[int, str] = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}
BEV_CHANNELS = ("occupancy", "max_height", "min_height", "mean_intensity", "density")
FORMS = ("auto", "bev", "points")
DENSITY_NORM = np.log(64.0)  # MV3D's density: min(1, log(n + 1) / log(64))


@dataclass(frozen=True)
class PointCloudConfig:
    """A point cloud input's settings (parameters ``cloud_*``)."""

    form: str = setting(
        "auto",
        "Point cloud inputs: the model input's form: bev (a [C, H, W] bird's-eye-view "
        "grid), points (an [N, C] points tensor) or auto (by the input's dims: 3 bev, "
        "2 points).",
        name="cloud_form",
        choices=FORMS,
    )
    x_range: tuple[float, ...] = setting(
        [-51.2, 51.2],
        "Point cloud inputs: [min, max] x of the points used, metres in the "
        "cloud's frame (the BEV grid's width).",
        name="cloud_x_range",
    )
    y_range: tuple[float, ...] = setting(
        [-51.2, 51.2],
        "Point cloud inputs: [min, max] y of the points used, metres (the BEV grid's height).",
        name="cloud_y_range",
    )
    z_range: tuple[float, ...] = setting(
        [-3.0, 3.0],
        "Point cloud inputs: [min, max] z of the points used, metres; BEV heights "
        "are metres above min.",
        name="cloud_z_range",
    )
    resolution: float = setting(
        0.2,
        "Point cloud inputs, bev: metres per grid cell.",
        name="cloud_resolution",
        low=0,
        above=True,
    )
    channels: tuple[str, ...] = setting(
        ["occupancy", "max_height", "mean_intensity", "density"],
        "Point cloud inputs, bev: the grid's channels in order, from occupancy, max_height, "
        "min_height, mean_intensity, density.",
        name="cloud_bev_channels",
    )
    point_fields: tuple[str, ...] = setting(
        ["x", "y", "z", "intensity"],
        "Point cloud inputs, points: the tensor's columns, "
        "PointCloud2 field names (a field the cloud lacks is 0).",
        name="cloud_point_fields",
    )
    max_points: int = setting(
        0,
        "Point cloud inputs, points: rows of the points tensor (0: the model input's N).",
        name="cloud_max_points",
        low=0,
    )
    subsample: str = setting(
        "voxel",
        "Point cloud inputs, points: how a cloud of more points is reduced: voxel "
        "(one point per voxel, then random) or random.",
        name="cloud_subsample",
        choices=("voxel", "random"),
    )
    voxel_size: float = setting(
        0.1,
        "Point cloud inputs, points: the voxel edge of voxel subsampling, metres.",
        name="cloud_voxel_size",
        low=0,
        above=True,
    )
    count_input: str = setting(
        "",
        "Point cloud inputs, points: a model input that gets the number of real points "
        "([1]); empty: none.",
        name="cloud_count_input",
    )
    mask_input: str = setting(
        "",
        "Point cloud inputs, points: a model input that gets [N] 1 for real points, 0 for "
        "padding; empty: none.",
        name="cloud_mask_input",
    )
    intensity_scale: float = setting(
        1.0,
        "Point cloud inputs: intensity is multiplied by this (1/255 for 0-255 sensors).",
        name="cloud_intensity_scale",
    )

    def validate(self, name: Namer) -> "PointCloudConfig":
        for key in ("x_range", "y_range", "z_range"):
            r = getattr(self, key)
            if len(r) != 2 or not r[0] < r[1]:
                raise invalid_arg(f"{name(key)} must be [min, max] with min < max, got {list(r)}")
        unknown = [c for c in self.channels if c not in BEV_CHANNELS]
        if unknown or not self.channels:
            raise invalid_arg(
                f"{name('channels')}: {unknown or 'none'} (channels: {', '.join(BEV_CHANNELS)})"
            )
        if not self.point_fields:
            raise invalid_arg(f"{name('point_fields')} names no field")
        return self


@dataclass(frozen=True)
class BevGrid:
    """Where a BEV grid lies: the placement handed to decoders (``bev_cells`` of detections3d)."""

    x_min: float
    y_min: float
    z_min: float
    resolution: float
    height: int  # rows (y)
    width: int  # columns (x)

    def cell_centres(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """[M, 2] x, y of cells (rows, cols)."""
        return np.stack(
            [
                self.x_min + (cols + 0.5) * self.resolution,
                self.y_min + (rows + 0.5) * self.resolution,
            ],
            axis=1,
        )


@dataclass(frozen=True)
class CloudPlacement:
    """What a cloud became: its points used, and the companion tensors (count, mask) by model
    input (filled into the request beside the main input)."""

    points: int
    grid: BevGrid | None = None
    companions: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class PointCloudPlan:
    form: str  # "bev" or "points"
    shape: tuple[int, ...]
    dtype: np.dtype
    config: PointCloudConfig
    grid: BevGrid | None = None
    companions: tuple[str, ...] = ()  # model inputs filled beside this one

    @property
    def geometry(self) -> ImageGeometry | None:
        return None

    @property
    def summary(self) -> str:
        c = self.config
        if self.form == "bev":
            return (
                f"point cloud -> BEV {list(self.shape)} {self.dtype} ({', '.join(c.channels)}"
                f"), x {list(c.x_range)} y {list(c.y_range)} z {list(c.z_range)} at "
                f"{c.resolution:g} m"
            )
        extra = f", {' and '.join(self.companions)}" if self.companions else ""
        return (
            f"point cloud -> points {list(self.shape)} {self.dtype} "
            f"({', '.join(c.point_fields)}), {c.subsample} subsampling{extra}"
        )


def plan_cloud(config: PointCloudConfig, tensor, *, model: str) -> PointCloudPlan:
    where = f"model '{model}' input '{tensor.name}'"
    dims = tuple(tensor.dims)
    form = config.form
    if form == "auto":
        form = {3: "bev", 2: "points"}.get(len(dims), "")
        if not form:
            raise invalid_arg(
                f"{where} has dims {list(dims)}: a point cloud input is a BEV "
                f"grid [C, H, W] or a points tensor [N, C]"
            )
    dtype = _input_dtype(tensor, where)
    if form == "bev":
        if len(dims) != 3:
            raise invalid_arg(f"{where} has dims {list(dims)}; cloud_form bev needs [C, H, W]")
        res = config.resolution
        w = int(round((config.x_range[1] - config.x_range[0]) / res))
        h = int(round((config.y_range[1] - config.y_range[0]) / res))
        c = len(config.channels)
        for got, want, what in (
            (dims[0], c, "channels (cloud_bev_channels)"),
            (dims[1], h, "rows (cloud_y_range / cloud_resolution)"),
            (dims[2], w, "columns (cloud_x_range / cloud_resolution)"),
        ):
            if got not in (-1, want):
                raise invalid_arg(
                    f"{where} has dims {list(dims)}: the binding's settings give "
                    f"{want} {what}, the model {got}"
                )
        grid = BevGrid(config.x_range[0], config.y_range[0], config.z_range[0], res, h, w)
        return PointCloudPlan("bev", (c, h, w), dtype, config, grid)
    if len(dims) != 2:
        raise invalid_arg(f"{where} has dims {list(dims)}; cloud_form points needs [N, C]")
    n, c = dims
    if c not in (-1, len(config.point_fields)):
        raise invalid_arg(
            f"{where} has {c} columns; cloud_point_fields gives "
            f"{len(config.point_fields)} ({', '.join(config.point_fields)})"
        )
    if config.max_points and n not in (-1, config.max_points):
        raise invalid_arg(f"{where} has {n} rows; cloud_max_points is {config.max_points}")
    n = config.max_points or n
    if n <= 0:
        raise invalid_arg(f"{where} has a variable number of rows; set cloud_max_points")
    companions = tuple(x for x in (config.count_input, config.mask_input) if x)
    return PointCloudPlan(
        "points", (n, len(config.point_fields)), dtype, config, companions=companions
    )


def _input_dtype(tensor, where: str) -> np.dtype:
    from .preprocess import float_input_dtype

    return float_input_dtype(tensor, where, "point coordinates in metres")


# --------------------------------------------------------------------------------------------
# Reading the cloud
# --------------------------------------------------------------------------------------------


def check_cloud(
    fields, width: int, height: int, point_step: int, row_step: int, data_len: int
) -> None:
    """Raise MalformedInput where the cloud cannot be read as its header claims."""
    if width < 0 or height < 0:
        raise MalformedInput(f"negative size ({width}x{height})")
    names = {}
    for f in fields:
        names.setdefault(f.name, f)
    missing = [n for n in ("x", "y", "z") if n not in names]
    if missing:
        raise MalformedInput(
            f"no field {', '.join(missing)} (fields: {', '.join(f.name for f in fields) or 'none'})"
        )
    for f in names.values():
        code = DATATYPES.get(f.datatype)
        if code is None:
            if f.name in ("x", "y", "z"):
                raise MalformedInput(
                    f"field '{f.name}' has datatype {f.datatype}, not a PointField datatype (1-8)"
                )
            continue
        end = f.offset + int(code[1]) * max(int(f.count), 1)
        if f.offset < 0 or end > point_step:
            raise MalformedInput(
                f"field '{f.name}' ends at byte {end}, past point_step {point_step}"
            )
    if width * height == 0:
        return
    if row_step < width * point_step:
        raise MalformedInput(
            f"row_step {row_step} is smaller than width x point_step = "
            f"{width} x {point_step} = {width * point_step}"
        )
    need = row_step * (height - 1) + width * point_step
    if data_len < need:
        raise MalformedInput(
            f"data has {data_len} bytes, fewer than its {height} row(s) of "
            f"{width} x {point_step} bytes (row_step {row_step}) = {need}"
        )


def cloud_dtype(fields, point_step: int, is_bigendian: bool) -> np.dtype:
    """The structured dtype of one point: each known field at its offset, in the cloud's byte
    order, ``itemsize`` point_step (padding bytes skipped)."""
    order = ">" if is_bigendian else "<"
    names, formats, offsets = [], [], []
    for f in fields:
        code = DATATYPES.get(f.datatype)
        if code is None or f.name in names or not f.name:
            continue
        names.append(f.name)
        count = max(int(f.count), 1)
        formats.append(np.dtype(order + code) if count == 1 else (order + code, (count,)))
        offsets.append(int(f.offset))
    return np.dtype(
        {"names": names, "formats": formats, "offsets": offsets, "itemsize": int(point_step)}
    )


def cloud_view(msg) -> np.ndarray:
    """A checked cloud's points as a structured array ``[height * width]`` (organised clouds
    row-major), a view of the message's bytes: a copy only where row_step pads the rows."""
    width, height = int(msg.width), int(msg.height)
    dtype = cloud_dtype(msg.fields, int(msg.point_step), bool(msg.is_bigendian))
    n = width * height
    if n == 0:
        return np.zeros(0, dtype)
    step, row = int(msg.point_step), int(msg.row_step)
    if row == width * step or height == 1:
        return np.frombuffer(msg.data, dtype, count=n)
    raw = np.frombuffer(msg.data, np.uint8, count=row * (height - 1) + width * step)
    rows = np.lib.stride_tricks.as_strided(raw, (height, width * step), (row, 1))
    return np.ascontiguousarray(rows).view(dtype).reshape(n)  # padded rows: one copy


def _column(points: np.ndarray, name: str) -> np.ndarray | None:
    if name not in (points.dtype.names or ()):
        return None
    col = points[name]
    if col.ndim > 1:  # a field of count > 1: its first element
        col = col[:, 0]
    return col.astype(np.float32)


@dataclass
class Cloud:
    """The points of one cloud that lie within the ranges: xyz [n, 3] and intensity [n]."""

    xyz: np.ndarray
    intensity: np.ndarray | None
    extra: dict[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.xyz.shape[0])


def read_cloud(msg, config: PointCloudConfig, fields: tuple[str, ...] = ()) -> Cloud:
    """The finite points of a checked cloud within the configured x, y, z ranges."""
    points = cloud_view(msg)
    x, y, z = (_column(points, n) for n in ("x", "y", "z"))
    (x0, x1), (y0, y1), (z0, z1) = config.x_range, config.y_range, config.z_range
    with np.errstate(invalid="ignore"):
        keep = (x >= x0) & (x < x1) & (y >= y0) & (y < y1) & (z >= z0) & (z < z1)  # NaN: out
    xyz = np.stack([x[keep], y[keep], z[keep]], axis=1)
    inten = _column(points, "intensity")
    if inten is not None:
        inten = np.nan_to_num(inten[keep]) * np.float32(config.intensity_scale)
    extra = {}
    for name in fields:
        if name not in ("x", "y", "z", "intensity"):
            col = _column(points, name)
            extra[name] = (
                np.nan_to_num(col[keep]) if col is not None else np.zeros(len(xyz), np.float32)
            )
    return Cloud(xyz, inten, extra)


# --------------------------------------------------------------------------------------------
# Encoders
# --------------------------------------------------------------------------------------------


def bev_grid(cloud: Cloud, plan: PointCloudPlan) -> np.ndarray:
    """The [C, H, W] grid of one cloud's points."""
    grid, channels = plan.grid, plan.config.channels
    h, w, res = grid.height, grid.width, np.float32(grid.resolution)
    out = np.zeros((len(channels), h, w), plan.dtype)
    if not len(cloud):
        return out
    xyz = cloud.xyz
    col = ((xyz[:, 0] - np.float32(grid.x_min)) / res).astype(np.int64)
    row = ((xyz[:, 1] - np.float32(grid.y_min)) / res).astype(np.int64)
    ok = (col >= 0) & (col < w) & (row >= 0) & (row < h)  # float rounding at the edge
    cell = (row * w + col)[ok]
    height = xyz[ok, 2] - np.float32(grid.z_min)
    # One sort of the points by cell, then height: every channel is a reduction over each
    # occupied cell's run of points, written into those cells only (the grid's other cells
    # stay 0; nothing is computed over the whole grid).
    # (heights are >= 0 here: a non-negative float32's bits sort as its value does, so one
    # int64 key of cell and height sorts both at once, faster than np.lexsort)
    order = np.argsort((cell << 32) | np.maximum(height, 0).view(np.uint32).astype(np.int64))
    sc, sh = cell[order], height[order]
    first = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    last = np.r_[first[1:] - 1, len(sc) - 1]
    cells = sc[first]
    count = (last - first + 1).astype(np.float32)
    for i, name in enumerate(channels):
        flat = out[i].reshape(-1)
        if name == "occupancy":
            flat[cells] = 1
        elif name == "max_height":
            flat[cells] = sh[last]
        elif name == "min_height":
            flat[cells] = sh[first]
        elif name == "mean_intensity":
            if cloud.intensity is not None:
                flat[cells] = np.add.reduceat(cloud.intensity[ok][order], first) / count
        else:  # density
            flat[cells] = np.minimum(1.0, np.log1p(count) / DENSITY_NORM)
    return out


def subsample(cloud_xyz: np.ndarray, n: int, how: str, voxel: float, seed: int) -> np.ndarray:
    """Indices of at most ``n`` of the points, in their order (deterministic per ``seed``)."""
    count = len(cloud_xyz)
    if count <= n:
        return np.arange(count)
    rng = np.random.default_rng(seed)
    index = np.arange(count)
    if how == "voxel":
        cells = np.floor(cloud_xyz / np.float32(voxel)).astype(np.int64) + (1 << 20)
        keys = (cells[:, 0] << 42) | (cells[:, 1] << 21) | cells[:, 2]  # 21 bits an axis
        # one point of each voxel, picked at random within its run of sorted keys (the first in
        # the cloud's order would be a voxel's corner on a scan pattern, biasing the centroid)
        order = np.argsort(keys)
        sorted_keys = keys[order]
        first = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
        runs = np.diff(np.r_[first, count])
        index = np.sort(order[first + (rng.random(len(first)) * runs).astype(np.int64)])
        if len(index) <= n:
            return index
    return np.sort(rng.choice(index, n, replace=False))


def points_tensor(cloud: Cloud, plan: PointCloudPlan, seed: int) -> tuple[np.ndarray, int]:
    n, c = plan.shape
    config = plan.config
    keep = subsample(cloud.xyz, n, config.subsample, config.voxel_size, seed)
    out = np.zeros((n, c), plan.dtype)
    for j, name in enumerate(config.point_fields):
        if name in ("x", "y", "z"):
            col = cloud.xyz[:, "xyz".index(name)]
        elif name == "intensity":
            col = cloud.intensity
        else:
            col = cloud.extra.get(name)
        if col is not None:
            out[: len(keep), j] = col[keep]
    return out, len(keep)


class PointCloudEncoder:
    """A checked PointCloud2 -> (the model input, :class:`CloudPlacement`); thread-safe."""

    def __init__(self, plan: PointCloudPlan) -> None:
        self.plan = plan
        fields = plan.config.point_fields if plan.form == "points" else ()
        self._fields = tuple(fields)

    def __call__(self, msg) -> tuple[np.ndarray, CloudPlacement]:
        plan = self.plan
        cloud = read_cloud(msg, plan.config, self._fields)
        if plan.form == "bev":
            return bev_grid(cloud, plan), CloudPlacement(len(cloud), plan.grid)
        stamp = msg.header.stamp
        tensor, n = points_tensor(
            cloud, plan, seed=int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
        )
        companions = {}
        if plan.config.count_input:
            companions[plan.config.count_input] = np.array([n], np.int64)
        if plan.config.mask_input:
            mask = np.zeros(plan.shape[0], np.float32)
            mask[:n] = 1
            companions[plan.config.mask_input] = mask
        return tensor, CloudPlacement(n, None, companions)


@dataclass(frozen=True)
class ReceivedCloud:
    """The fields of a sensor_msgs/PointCloud2 the node reads, as a typed message has them."""

    header: Any
    height: int
    width: int
    fields: Any
    is_bigendian: bool
    point_step: int
    row_step: int
    data: np.ndarray  # uint8, a read-only view of the serialized bytes
    is_dense: bool


class PointCloudReader(_SerializedReader):
    """Serialized sensor_msgs/PointCloud2 bytes -> :class:`ReceivedCloud` (thread-safe)."""

    ros_type = POINTCLOUD2_TYPE

    def __call__(self, raw: bytes) -> ReceivedCloud:
        msg, header = self._read(raw)
        return ReceivedCloud(
            header=header,
            height=msg.height,
            width=msg.width,
            fields=msg.fields,
            is_bigendian=msg.is_bigendian,
            point_step=msg.point_step,
            row_step=msg.row_step,
            data=msg.data,
            is_dense=msg.is_dense,
        )


class PointCloudInput(InputKind):
    """``sensor_msgs/PointCloud2`` in."""

    name = "pointcloud"
    ros_type = POINTCLOUD2_TYPE
    settings = PointCloudConfig

    def configure(self, values: Mapping[str, Any], name: Namer) -> PointCloudConfig:
        return super().configure(values, name).validate(name)

    def message_class(self) -> type:
        from sensor_msgs.msg import PointCloud2

        return PointCloud2

    def reader(self) -> PointCloudReader:
        return PointCloudReader()

    def check(self, msg: Any) -> None:
        check_cloud(
            msg.fields,
            int(msg.width),
            int(msg.height),
            int(msg.point_step),
            int(msg.row_step),
            len(msg.data),
        )

    def decoded_size(self, msg: Any) -> tuple[int, int]:
        return int(msg.width), int(msg.height)  # points: held to the pixel limit

    def plan(
        self, settings: PointCloudConfig, tensor, *, model: str, image: ImageGeometry | None = None
    ) -> PointCloudPlan:
        return plan_cloud(settings, tensor, model=model)

    def encoder(self, plan: PointCloudPlan) -> Callable[[Any], tuple[np.ndarray, CloudPlacement]]:
        return PointCloudEncoder(plan)


POINTCLOUD = PointCloudInput()
