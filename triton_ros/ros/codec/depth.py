"""The ``depth`` input kind: depth images -> one depth input of the model, in metres; and what
every depth kind shares (:class:`DepthKind`: its settings, plan and encoder; the
``compressed_depth`` kind is :mod:`.compressed_depth`).

What is read (REP 118): ``sensor_msgs/Image`` with encoding ``16UC1`` (unsigned millimetres by
REP 118; the unit is the binding's ``depth_scale``, metres per unit, 0.001 by default) or
``32FC1`` (metres, as they are).

Per frame: the depth image is resized into the model's input size (``resize``: letterbox or
stretch, as colour images) with **nearest-neighbour** sampling (OpenCV's
``INTER_NEAREST_EXACT``) - never bilinear - and then converted to metres: an invalid pixel
is never blended with valid ones into an invented depth. Invalid are 0 (REP 118's "no
depth" of 16UC1, and compressedDepth's), NaN (no measurement), +inf (REP 117: nothing within
the sensor's range), -inf (REP 117: too close to measure), a negative depth, and a depth
outside ``[depth_min_m, depth_max_m]`` (``depth_max_m`` 0: no upper limit): the limits mark
depths the model must not trust as invalid, never clip them to the limit, which would invent a
surface there.
Nearest rather than a mask-aware average because even among valid pixels an average invents
depths between a foreground object and the background behind it (the "flying pixels" at
edges); nearest keeps every value one the sensor measured, and it is the cheapest. Invalid
pixels, and the letterbox padding, get ``depth_fill`` (0.0 by default: "no depth", which models
tell from a real distance). The model input is floating point (FP32, FP16 or FP64), one channel:
dims ``[1, H, W]`` (NCHW), ``[H, W, 1]`` (NHWC) or ``[H, W]``. The placement handed to decoders
is the :class:`~triton_ros.ros.codec.preprocess.Letterbox`, as for colour images, so that an
aligned depth image and its colour image map to the same model pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

try:
    import cv2
except ImportError:  # pragma: no cover - a requirement; numpy path then
    cv2 = None

from ...core.errors import invalid_arg
from ...core.model_config import TensorConfig
from ...settings import Namer, setting, shared
from .base import ImageGeometry, InputKind, MalformedInput
from .preprocess import RESIZE_MODES, Letterbox, _size, float_input_dtype, letterbox_for
from .serialized_image import IMAGE_TYPE, ImageReader

# encoding -> little-endian pixel type; big-endian images are byte-swapped
DEPTH_ENCODINGS: dict[str, np.dtype] = {"16UC1": np.dtype("<u2"), "32FC1": np.dtype("<f4")}


@dataclass(frozen=True)
class DepthConfig:
    """A depth input's settings (parameters ``depth_*``), with the image inputs' geometry
    settings (``resize``, ``layout``, ``width``, ``height``: declared by the preprocessing)."""

    scale: float = setting(
        0.001,
        "Depth inputs: metres per unit of a 16UC1 image (0.001: millimetres, REP 118); "
        "32FC1 images are metres.",
        name="depth_scale",
        low=0,
        above=True,
    )
    min_m: float = setting(
        0.0,
        "Depth inputs: depths below this are invalid (get depth_fill; never clipped), metres.",
        name="depth_min_m",
        low=0,
    )
    max_m: float = setting(
        0.0,
        "Depth inputs: depths above this are invalid (get depth_fill; never clipped), "
        "metres; 0: no upper limit.",
        name="depth_max_m",
        low=0,
    )
    fill: float = setting(
        0.0,
        "Depth inputs: the value of invalid pixels (0, NaN, +inf, -inf, negative, or "
        "outside [depth_min_m, depth_max_m]) and of the letterbox padding, metres.",
        name="depth_fill",
    )
    resize: str = shared("letterbox")
    layout: str = shared("auto")  # "auto", "NCHW", "NHWC"
    width: int = shared(0)
    height: int = shared(0)

    def validate(self, name: Namer) -> "DepthConfig":
        if self.max_m and self.max_m <= self.min_m:
            raise invalid_arg(
                f"{name('min_m')} and {name('max_m')} must make a range (0 <= "
                f"min < max; max 0: no upper limit), got [{self.min_m}, "
                f"{self.max_m}]"
            )
        return self


@dataclass(frozen=True)
class DepthPlan:
    """Depth input resolved against one model input."""

    layout: str  # "NCHW", "NHWC" or "HW"
    height: int
    width: int
    dtype: np.dtype
    resize: str
    config: DepthConfig
    interpolation: str = "nearest"  # always: see the module docstring

    @property
    def shape(self) -> tuple[int, ...]:
        return {
            "NCHW": (1, self.height, self.width),
            "NHWC": (self.height, self.width, 1),
            "HW": (self.height, self.width),
        }[self.layout]

    @property
    def geometry(self) -> DepthPlan:
        return self

    @property
    def summary(self) -> str:
        c = self.config
        top = f"{c.max_m:g}" if c.max_m > 0 else "inf"
        return (
            f"depth {self.layout} {self.dtype} {self.width}x{self.height}, metres in "
            f"[{c.min_m:g}, {top}], invalid -> {c.fill:g}, {self.resize} nearest"
        )


def plan_depth(config: DepthConfig, tensor: TensorConfig, *, model: str) -> DepthPlan:
    """Resolve layout, size and dtype of a depth input; INVALID_ARG if they cannot fit."""
    where = f"model '{model}' input '{tensor.name}'"
    dims = tuple(tensor.dims)
    layout = config.layout
    if len(dims) == 2:
        layout = "HW"
    elif len(dims) != 3:
        raise invalid_arg(
            f"{where} has dims {list(dims)}: a depth input needs [1, H, W], "
            f"[H, W, 1] or [H, W] (without the batch dimension)"
        )
    elif layout == "auto":
        if tensor.format == "FORMAT_NCHW" or (dims[0] == 1 and dims[2] != 1):
            layout = "NCHW"
        elif tensor.format == "FORMAT_NHWC" or dims[2] == 1:
            layout = "NHWC"
        else:
            raise invalid_arg(f"{where} has dims {list(dims)}: a depth input has one channel")
    if layout == "NCHW":
        c, h, w = dims
    elif layout == "NHWC":
        h, w, c = dims
    else:
        (h, w), c = dims, 1
    if c not in (1, -1):
        raise invalid_arg(f"{where} has {c} channels; a depth image gives 1")
    h = _size(h, config.height, "height", where)
    w = _size(w, config.width, "width", where)
    dtype = float_input_dtype(tensor, where, "depth in metres")
    if config.resize not in RESIZE_MODES:
        raise invalid_arg(
            f"{where}: resize '{config.resize}' is not one of {', '.join(RESIZE_MODES)}"
        )
    return DepthPlan(
        layout=layout, height=h, width=w, dtype=dtype, resize=config.resize, config=config
    )


class DepthEncoder:
    """Depth pixels (as they arrived: millimetres, metres or quantised inverse depth) -> the
    model's depth input in metres, and the Letterbox (thread-safe: nothing is kept per frame)."""

    def __init__(self, plan: DepthPlan, *, cache_size: int = 16) -> None:
        self.plan = plan
        c = plan.config
        self._scale = np.float32(c.scale)
        self._low = np.float32(c.min_m)
        self._high = np.float32(c.max_m) if c.max_m > 0 else np.float32(np.inf)
        self._fill = c.fill
        self._geometry: dict[tuple[int, int], tuple[Letterbox, int, int]] = {}
        self._cache_size = cache_size

    def _place(self, w: int, h: int) -> tuple[Letterbox, int, int]:
        geometry = self._geometry.get((w, h))
        if geometry is None:
            if len(self._geometry) >= self._cache_size:
                self._geometry.clear()
            geometry = self._geometry[(w, h)] = letterbox_for(w, h, self.plan)
        return geometry

    def __call__(
        self, pixels: np.ndarray, unit: str, inverse: tuple[float, float] | None = None
    ) -> tuple[np.ndarray, Letterbox]:
        """``pixels`` [H, W]: uint16 ``unit="mm"`` (times depth_scale), float32 ``"m"``, or
        uint16 ``"inverse"`` (compressedDepth's quantised inverse depth, ``inverse=(A, B)``)."""
        h, w = pixels.shape
        letterbox, nw, nh = self._place(w, h)
        small = _nearest(pixels, nw, nh) if (nw, nh) != (w, h) else pixels
        if unit == "mm":
            valid = small != 0
            metres = small.astype(np.float32)
            metres *= self._scale
        elif unit == "inverse":
            a, b = inverse
            valid = small != 0
            with np.errstate(divide="ignore", invalid="ignore"):
                metres = np.float32(a) / (small.astype(np.float32) - np.float32(b))
            valid &= np.isfinite(metres) & (metres > 0)
        else:
            metres = np.array(small, np.float32)  # a copy: the fill writes into it
            with np.errstate(invalid="ignore"):
                valid = np.isfinite(metres) & (metres > 0)
        with np.errstate(invalid="ignore"):
            valid &= (metres >= self._low) & (metres <= self._high)
        metres[~valid] = self._fill
        plan = self.plan
        out = np.full(plan.shape, self._fill, plan.dtype)
        px, py = int(letterbox.pad_x), int(letterbox.pad_y)
        region = (slice(py, py + nh), slice(px, px + nw))
        if plan.layout == "NCHW":
            out[0][region] = metres
        elif plan.layout == "NHWC":
            out[region + (0,)] = metres
        else:
            out[region] = metres
        return out, letterbox


def _nearest(pixels: np.ndarray, nw: int, nh: int) -> np.ndarray:
    """Nearest-neighbour resize: each output pixel takes the source pixel its centre falls in."""
    if cv2 is not None:
        return cv2.resize(pixels, (nw, nh), interpolation=cv2.INTER_NEAREST_EXACT)
    h, w = pixels.shape  # pragma: no cover - without OpenCV
    rows = np.minimum(((np.arange(nh) + 0.5) * (h / nh)).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(nw) + 0.5) * (w / nw)).astype(np.int64), w - 1)
    return pixels[rows[:, None], cols[None, :]]


# --------------------------------------------------------------------------------------------
# sensor_msgs/Image: 16UC1, 32FC1
# --------------------------------------------------------------------------------------------


def check_depth_image(encoding: str, height: int, width: int, step: int, data_len: int) -> None:
    dtype = DEPTH_ENCODINGS.get(encoding)
    if dtype is None:
        raise MalformedInput(
            f"encoding '{encoding}' is not a depth encoding (depth inputs "
            f"read {', '.join(DEPTH_ENCODINGS)})"
        )
    if height <= 0 or width <= 0:
        raise MalformedInput(f"empty image ({width}x{height})")
    if step < width * dtype.itemsize:
        raise MalformedInput(
            f"step {step} is smaller than width x {dtype.itemsize} bytes = {width * dtype.itemsize}"
        )
    if data_len < step * height:
        raise MalformedInput(
            f"data has {data_len} bytes, fewer than step x height = "
            f"{step} x {height} = {step * height}"
        )


def depth_pixels(
    data, encoding: str, height: int, width: int, step: int, is_bigendian: int
) -> np.ndarray:
    """A checked depth image's pixels as [H, W] (a view where the bytes allow)."""
    dtype = DEPTH_ENCODINGS[encoding]
    if is_bigendian:
        dtype = dtype.newbyteorder(">")
    flat = np.frombuffer(data, np.uint8, count=step * height)
    rows = flat.reshape(height, step)[:, : width * dtype.itemsize]
    if rows.ctypes.data % dtype.itemsize or step % dtype.itemsize:
        rows = np.ascontiguousarray(rows)  # unaligned: one copy
    pixels = rows.view(dtype).reshape(height, width)
    return pixels.astype(dtype.newbyteorder("="), copy=False) if is_bigendian else pixels


class DepthKind(InputKind):
    """What every depth input kind has: its settings and plan."""

    family = "depth"
    settings = DepthConfig

    def configure(self, values: Mapping[str, Any], name: Namer) -> DepthConfig:
        return super().configure(values, name).validate(name)

    def plan(
        self, settings: DepthConfig, tensor, *, model: str, image: ImageGeometry | None = None
    ) -> DepthPlan:
        return plan_depth(settings, tensor, model=model)


class DepthInput(DepthKind):
    """``sensor_msgs/Image`` depth (16UC1, 32FC1) in."""

    name = "depth"
    ros_type = IMAGE_TYPE

    def message_class(self) -> type:
        from sensor_msgs.msg import Image

        return Image

    def reader(self) -> ImageReader:
        return ImageReader()

    def check(self, msg: Any) -> None:
        check_depth_image(msg.encoding, msg.height, msg.width, msg.step, len(msg.data))

    def decoded_size(self, msg: Any) -> tuple[int, int]:
        return int(msg.width), int(msg.height)

    def encoder(self, plan: DepthPlan) -> Callable[[Any], tuple[np.ndarray, Letterbox]]:
        encode = DepthEncoder(plan)

        def run(msg: Any) -> tuple[np.ndarray, Letterbox]:
            pixels = depth_pixels(
                msg.data, msg.encoding, msg.height, msg.width, msg.step, msg.is_bigendian
            )
            return encode(pixels, "mm" if msg.encoding == "16UC1" else "m")

        return run


DEPTH = DepthInput()
