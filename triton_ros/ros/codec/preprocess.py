"""Camera image -> model input tensor, with OpenCV (numpy where OpenCV is not installed).

A binding's preprocessing settings (:class:`PreprocessConfig`, from ROS parameters) are resolved
once per loaded model version against the model's input (:func:`plan_input`): layout (NCHW or
NHWC), size, channels, data type and normalization. Each frame then goes through
:class:`Preprocessor`: check the image (:func:`check_image`), resize it with its aspect ratio
kept (letterbox, the default) or stretched, convert its channels to what the model expects,
normalize ``(pixel * scale - mean) / std`` and write it into a tensor of the model's input size.
Cameras of any resolution therefore give tensors of one shape, so their frames batch together. The
returned :class:`Letterbox` maps boxes back to the source image's pixels.

Nothing here imports rclpy: images arrive as (encoding, height, width, step, data).

The work is done by OpenCV (``opencv-python-headless``, the library under cv_bridge) when it can
be imported: resize (bilinear with half-pixel centres, or exact nearest) and colour conversion
run in its vectorized C++ on 8-bit pixels, written straight into a letterbox canvas, and a float
NCHW input is normalized by OpenCV plane by plane into the output tensor (:class:`_CvPipeline`),
several times less CPU than numpy's gathers; the numpy path (:class:`_Sampler`) stays for
machines without OpenCV.
With OpenCV, a resized 8-bit pixel is rounded to an integer before normalization (as cv_bridge
pipelines do), so float inputs may differ from exact bilinear values by half a grey level.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

try:
    import cv2
except ImportError:  # pragma: no cover - a requirement; numpy path then
    cv2 = None

from ...core.datatypes import to_numpy_dtype
from ...core.errors import invalid_arg
from ...core.model_config import WILDCARD_DIM, TensorConfig
from ...settings import setting
from .base import MalformedInput

# sensor_msgs/image_encodings: encoding -> (channels, channel order)
ENCODINGS: dict[str, tuple[int, str]] = {
    "rgb8": (3, "rgb"),
    "bgr8": (3, "bgr"),
    "rgba8": (4, "rgba"),
    "bgra8": (4, "bgra"),
    "mono8": (1, "mono"),
    "8UC1": (1, "mono"),
}
RESIZE_MODES = ("letterbox", "stretch")
INTERPOLATIONS = ("bilinear", "nearest")
LAYOUTS = ("auto", "NCHW", "NHWC")
COLORS = ("rgb", "bgr")
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601, as cv2.COLOR_RGB2GRAY


class MalformedImage(MalformedInput):
    """An image that cannot be read as its header claims; the message says why."""


@dataclass(frozen=True)
class PreprocessConfig:
    """An image input's settings: how its pixels become the model input (0 / "auto": take it
    from the model). Each field is a setting, the binding's parameter of its name."""

    resize: str = setting(
        "letterbox",
        "letterbox: keep the aspect ratio and pad (boxes are mapped back to the "
        "source image); stretch: resize to the input size. Done with OpenCV "
        "straight from the message's bytes (numpy where OpenCV is missing).",
        choices=RESIZE_MODES,
    )
    interpolation: str = setting("bilinear", "Resize interpolation.", choices=INTERPOLATIONS)
    pad_value: int = setting(114, "Letterbox padding, as a pixel value (0-255).", low=0, high=255)
    color: str = setting(
        "rgb",
        "Channel order of a 3-channel model input (images are "
        "converted from their encoding; a 1-channel input gets mono).",
        choices=COLORS,
    )
    layout: str = setting(
        "auto",
        "Model input layout; auto: from the input's format in config.pbtxt, else from its dims.",
        choices=LAYOUTS,
    )
    width: int = setting(0, "Model input width; 0: from the model's dims.", low=0)
    height: int = setting(0, "Model input height; 0: from the model's dims.", low=0)
    scale: float = setting(
        0.0,
        "Input value = (pixel * scale - mean) / std, per channel, in the model input's "
        "data type. 0: 1/255 for floating-point inputs, 1 for integer inputs (raw pixels).",
    )
    mean: tuple[float, ...] = setting([0.0], "Per-channel mean (one value: all channels).")
    std: tuple[float, ...] = setting([1.0], "Per-channel standard deviation (one value: all).")


@dataclass(frozen=True)
class InputPlan:
    """Preprocessing resolved against one model input."""

    layout: str  # "NCHW" or "NHWC"
    height: int
    width: int
    channels: int  # 1 or 3
    color: str  # "rgb", "bgr" or "mono"
    dtype: np.dtype
    resize: str
    interpolation: str
    pad_value: int
    gain: np.ndarray | None  # per channel: x * gain + offset; None: raw pixel values
    offset: np.ndarray | None

    @property
    def shape(self) -> tuple[int, ...]:
        if self.layout == "NCHW":
            return (self.channels, self.height, self.width)
        return (self.height, self.width, self.channels)

    @property
    def summary(self) -> str:
        return (
            f"{self.layout} {self.dtype} {self.width}x{self.height}x{self.channels}, {self.resize}"
        )

    @property
    def geometry(self) -> InputPlan:
        return self


@dataclass(frozen=True)
class Letterbox:
    """How a source image was placed in the model input: x_model = x_src * scale_x + pad_x."""

    src_width: int
    src_height: int
    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float

    def to_source(self, boxes: np.ndarray) -> np.ndarray:
        """xyxy boxes in model-input pixels -> source-image pixels, clipped to the image."""
        out = np.empty_like(boxes, dtype=np.float64)
        out[:, 0] = (boxes[:, 0] - self.pad_x) / self.scale_x
        out[:, 2] = (boxes[:, 2] - self.pad_x) / self.scale_x
        out[:, 1] = (boxes[:, 1] - self.pad_y) / self.scale_y
        out[:, 3] = (boxes[:, 3] - self.pad_y) / self.scale_y
        np.clip(out[:, 0::2], 0.0, float(self.src_width), out=out[:, 0::2])
        np.clip(out[:, 1::2], 0.0, float(self.src_height), out=out[:, 1::2])
        return out


# --------------------------------------------------------------------------------------------
# Resolving a binding's settings against the model input
# --------------------------------------------------------------------------------------------


def plan_input(config: PreprocessConfig, tensor: TensorConfig, *, model: str) -> InputPlan:
    """Resolve layout, size, channels, dtype and normalization; INVALID_ARG if they cannot fit."""
    where = f"model '{model}' input '{tensor.name}'"
    if len(tensor.dims) != 3:
        raise invalid_arg(
            f"{where} has dims {list(tensor.dims)}: an image input needs 3 dims "
            f"(CHW or HWC, without the batch dimension)"
        )
    layout = config.layout
    if layout == "auto":
        if tensor.format == "FORMAT_NCHW":
            layout = "NCHW"
        elif tensor.format == "FORMAT_NHWC":
            layout = "NHWC"
        elif tensor.dims[0] in (1, 3) and tensor.dims[2] not in (1, 3):
            layout = "NCHW"
        elif tensor.dims[2] in (1, 3) and tensor.dims[0] not in (1, 3):
            layout = "NHWC"
        else:
            raise invalid_arg(
                f"{where}: cannot tell NCHW from NHWC from dims "
                f"{list(tensor.dims)}; set the binding's 'layout' parameter"
            )
    if layout == "NCHW":
        c, h, w = tensor.dims
    else:
        h, w, c = tensor.dims
    if c == WILDCARD_DIM:
        c = 3
    if c not in (1, 3):
        raise invalid_arg(f"{where} has {c} channels; images give 1 (mono) or 3 (color)")
    h = _size(h, config.height, "height", where)
    w = _size(w, config.width, "width", where)

    try:
        dtype = to_numpy_dtype(tensor.datatype)
    except Exception:
        dtype = None
    if dtype is None or dtype.kind not in "uif":
        raise invalid_arg(f"{where} has data type {tensor.datatype}; images need a numeric type")
    floating = dtype.kind == "f"
    scale = config.scale if config.scale != 0.0 else (1.0 / 255.0 if floating else 1.0)
    mean = _per_channel(config.mean, c, "mean", where)
    std = _per_channel(config.std, c, "std", where)
    if np.any(std == 0):
        raise invalid_arg(f"{where}: std must not contain 0")
    gain, offset = scale / std, -mean / std
    if not floating and np.all(gain == 1.0) and np.all(offset == 0.0):
        gain = offset = None  # raw pixel values into an integer tensor
    return InputPlan(
        layout=layout,
        height=h,
        width=w,
        channels=c,
        color="mono" if c == 1 else config.color,
        dtype=dtype,
        resize=config.resize,
        interpolation=config.interpolation,
        pad_value=int(config.pad_value),
        gain=gain,
        offset=offset,
    )


def _size(model_dim: int, param: int, what: str, where: str) -> int:
    if model_dim == WILDCARD_DIM:
        if param <= 0:
            raise invalid_arg(
                f"{where} has a variable {what}; set the binding's '{what}' parameter"
            )
        return param
    if param > 0 and param != model_dim:
        raise invalid_arg(f"{where} has {what} {model_dim} but the binding's '{what}' is {param}")
    return model_dim


def _per_channel(values: tuple[float, ...], channels: int, what: str, where: str) -> np.ndarray:
    arr = np.asarray(values, np.float32).reshape(-1)
    if arr.size == 1:
        return np.repeat(arr, channels)
    if arr.size != channels:
        raise invalid_arg(f"{where}: '{what}' has {arr.size} values for {channels} channels")
    return arr


# --------------------------------------------------------------------------------------------
# Per frame
# --------------------------------------------------------------------------------------------


def check_image(encoding: str, height: int, width: int, step: int, data_len: int) -> int:
    """Check an image header against its data; return its channel count or raise MalformedImage."""
    spec = ENCODINGS.get(encoding)
    if spec is None:
        raise MalformedImage(
            f"unsupported encoding '{encoding}' (supported: {', '.join(ENCODINGS)})"
        )
    channels = spec[0]
    if height <= 0 or width <= 0:
        raise MalformedImage(f"empty image ({width}x{height})")
    if step < width * channels:
        raise MalformedImage(f"step {step} is smaller than width x channels = {width * channels}")
    if data_len < step * height:
        raise MalformedImage(
            f"data has {data_len} bytes, fewer than step x height = "
            f"{step} x {height} = {step * height}"
        )
    return channels


def letterbox_for(src_w: int, src_h: int, plan: InputPlan) -> tuple[Letterbox, int, int]:
    """Where the resized image goes: the Letterbox and the resized (width, height)."""
    if plan.resize == "stretch":
        return (
            Letterbox(src_w, src_h, plan.width / src_w, plan.height / src_h, 0.0, 0.0),
            plan.width,
            plan.height,
        )
    r = min(plan.width / src_w, plan.height / src_h)
    nw = max(1, min(plan.width, int(round(src_w * r))))
    nh = max(1, min(plan.height, int(round(src_h * r))))
    pad_x = (plan.width - nw) // 2
    pad_y = (plan.height - nh) // 2
    return Letterbox(src_w, src_h, nw / src_w, nh / src_h, float(pad_x), float(pad_y)), nw, nh


class Preprocessor:
    """Turns frames into input tensors for one :class:`InputPlan`.

    Resizing, channel conversion and layout are one gather: for each source geometry (size,
    step, encoding) a :class:`_Sampler` precomputes, for every output element, the byte offsets
    of its source pixels in the image data and their bilinear weights. A frame then costs one
    ``np.take`` per tap (4 for bilinear, 1 for nearest) straight from the message's bytes, a
    weighted sum and the normalization, with no intermediate image.
    """

    def __init__(self, plan: InputPlan, *, cache_size: int = 16, use_opencv: bool = True) -> None:
        self.plan = plan
        self._cache_size = cache_size
        self._samplers: dict[tuple, _Sampler | _CvPipeline] = {}
        self.uses_opencv = use_opencv and cv2 is not None

    def __call__(
        self, data, encoding: str, height: int, width: int, step: int
    ) -> tuple[np.ndarray, Letterbox]:
        """Checked image data -> (tensor without batch dimension, Letterbox)."""
        key = (height, width, step, encoding)
        sampler = self._samplers.get(key)
        if sampler is None:
            if len(self._samplers) >= self._cache_size:  # cameras changed: start over
                self._samplers.clear()
            cls = _CvPipeline if self.uses_opencv else _Sampler
            sampler = self._samplers[key] = cls(self.plan, height, width, step, encoding)
        flat = np.frombuffer(data, np.uint8, count=step * height)
        return sampler.run(flat), sampler.letterbox


def preprocess(
    image: np.ndarray, encoding: str, plan: InputPlan, *, use_opencv: bool = True
) -> tuple[np.ndarray, Letterbox]:
    """One contiguous (H, W, C) uint8 image -> (tensor, Letterbox); for tools and tests."""
    h, w = image.shape[:2]
    data = np.ascontiguousarray(image)
    return Preprocessor(plan, use_opencv=use_opencv)(
        data.reshape(-1), encoding, h, w, data.strides[0]
    )


# OpenCV colour conversion from a source channel order to the model's
_CV_COLOR = {
    ("rgb", "bgr"): "COLOR_RGB2BGR",
    ("bgr", "rgb"): "COLOR_BGR2RGB",
    ("rgba", "rgb"): "COLOR_RGBA2RGB",
    ("rgba", "bgr"): "COLOR_RGBA2BGR",
    ("bgra", "rgb"): "COLOR_BGRA2RGB",
    ("bgra", "bgr"): "COLOR_BGRA2BGR",
    ("mono", "rgb"): "COLOR_GRAY2RGB",
    ("mono", "bgr"): "COLOR_GRAY2BGR",
    ("rgb", "mono"): "COLOR_RGB2GRAY",
    ("bgr", "mono"): "COLOR_BGR2GRAY",
    ("rgba", "mono"): "COLOR_RGBA2GRAY",
    ("bgra", "mono"): "COLOR_BGRA2GRAY",
}


class _CvPipeline:
    """One source geometry into one InputPlan with OpenCV.

    The resized (and colour-converted) pixels are written straight into the inside of a
    letterbox canvas that each thread keeps (its border is filled with the pad value once), so
    no padded copy is made per frame. A floating-point NCHW input, the common case, is then
    normalized plane by plane by OpenCV (``cv2.split`` and ``cv2.addWeighted`` into each
    channel of the output tensor: ``x * gain + offset`` in one C++ pass per plane) instead of
    numpy's strided transpose-and-multiply. The planes are split into buffers each thread keeps,
    and an RGB <-> BGR conversion there is only the order in which the planes are read. Other
    layouts and data types take one numpy pass."""

    def __init__(self, plan: InputPlan, h: int, w: int, step: int, encoding: str) -> None:
        self.plan = plan
        self.letterbox, self.nw, self.nh = letterbox_for(w, h, plan)
        self.h, self.w, self.step = h, w, step
        self.src_channels, order = ENCODINGS[encoding]
        code = _CV_COLOR.get((order, plan.color))
        self.color = getattr(cv2, code) if code else None
        self.same_size = (self.nw, self.nh) == (w, h)
        self.interpolation = (
            cv2.INTER_LINEAR if plan.interpolation == "bilinear" else cv2.INTER_NEAREST_EXACT
        )
        px, py = int(self.letterbox.pad_x), int(self.letterbox.pad_y)
        self.inside = (slice(py, py + self.nh), slice(px, px + self.nw))
        self.padded = (self.nw, self.nh) != (plan.width, plan.height)
        nchw = plan.layout == "NCHW"
        shape = (-1, 1, 1) if nchw else (1, 1, -1)
        self.gain = None if plan.gain is None else plan.gain.reshape(shape).astype(np.float32)
        self.offset = None if plan.offset is None else plan.offset.reshape(shape).astype(np.float32)
        # cv2.addWeighted into float32 planes: NCHW float32 with a gain (always, for floats)
        self.planes = nchw and plan.dtype == np.float32 and plan.gain is not None
        # Which split plane feeds each output channel. RGB <-> BGR is only an order of planes:
        # the planes path reads them swapped instead of converting the pixels (a full pass).
        self.plane_order = (0, 1, 2)
        if self.planes:
            self.plane_gain = [float(g) for g in plan.gain.astype(np.float32)]
            self.plane_offset = [float(o) for o in plan.offset.astype(np.float32)]
            if code in ("COLOR_BGR2RGB", "COLOR_RGB2BGR"):
                self.color, self.plane_order = None, (2, 1, 0)
        self._local = threading.local()

    def _kept(self, name: str, make: Callable[[], Any]) -> Any:
        """This thread's buffer ``name``, made by ``make()`` at its first use: several threads
        may preprocess frames of one geometry at once, each into buffers of its own."""
        value = getattr(self._local, name, None)
        if value is None:
            value = make()
            setattr(self._local, name, value)
        return value

    def _canvas(self) -> np.ndarray:
        """This thread's letterbox canvas."""
        return self._kept(
            "canvas",
            lambda: np.full(
                (self.plan.height, self.plan.width, self.plan.channels),
                self.plan.pad_value,
                np.uint8,
            ),
        )

    def _planes(self) -> list[np.ndarray]:
        """This thread's three 8-bit planes that cv2.split writes into (a fresh allocation per
        frame costs about 10 us of its 220)."""
        return self._kept(
            "planes",
            lambda: [np.empty((self.plan.height, self.plan.width), np.uint8) for _ in range(3)],
        )

    def run(self, flat: np.ndarray) -> np.ndarray:
        plan = self.plan
        rows = flat.reshape(self.h, self.step)[:, : self.w * self.src_channels]
        image = rows.reshape(self.h, self.w, self.src_channels)
        if self.padded:
            canvas = self._canvas()
            inside = canvas[self.inside]
            if plan.channels == 1:
                inside = inside[:, :, 0]
            if self.color is None:
                cv2.resize(image, (self.nw, self.nh), dst=inside, interpolation=self.interpolation)
            elif self.same_size:
                cv2.cvtColor(image, self.color, dst=inside)
            else:
                cv2.cvtColor(
                    cv2.resize(image, (self.nw, self.nh), interpolation=self.interpolation),
                    self.color,
                    dst=inside,
                )
            image = canvas
        else:
            if not self.same_size:
                image = cv2.resize(image, (self.nw, self.nh), interpolation=self.interpolation)
            if self.color is not None:
                image = cv2.cvtColor(image, self.color)
            if image.ndim == 2:
                image = image[:, :, None]
        out = np.empty(plan.shape, plan.dtype)
        if self.planes:
            if plan.channels > 1:
                split = cv2.split(image, self._planes())
                sources = [split[i] for i in self.plane_order]
            else:
                sources = [image[:, :, 0]]
            for c, src in enumerate(sources):
                cv2.addWeighted(
                    src,
                    self.plane_gain[c],
                    src,
                    0.0,
                    self.plane_offset[c],
                    dst=out[c],
                    dtype=cv2.CV_32F,
                )
            return out
        if plan.layout == "NCHW":
            image = image.transpose(2, 0, 1)
        if self.gain is None:
            out[...] = image
        elif plan.dtype == np.float32:
            np.multiply(image, self.gain, out=out)
            out += self.offset
        else:
            out[...] = (
                image * self.gain + self.offset
                if plan.dtype.kind == "f"
                else np.rint(image * self.gain + self.offset)
            )
        return out


class _Sampler:
    """Precomputed gathers from one source geometry into one InputPlan."""

    def __init__(self, plan: InputPlan, h: int, w: int, step: int, encoding: str) -> None:
        self.plan = plan
        self.letterbox, nw, nh = letterbox_for(w, h, plan)
        self.nw, self.nh = nw, nh
        src_channels, order = ENCODINGS[encoding]
        nchw = plan.layout == "NCHW"

        # Spatial taps: (source rows, source columns, weights (nh, nw) or None).
        if (nw, nh) == (w, h):
            taps = [(np.arange(h), np.arange(w), None)]
        elif plan.interpolation == "nearest":
            taps = [(_nearest_axis(h, nh), _nearest_axis(w, nw), None)]
        else:
            y0, y1, wy = _bilinear_axis(h, nh)
            x0, x1, wx = _bilinear_axis(w, nw)
            taps = [
                (y0, x0, np.outer(1 - wy, 1 - wx)),
                (y0, x1, np.outer(1 - wy, wx)),
                (y1, x0, np.outer(wy, 1 - wx)),
                (y1, x1, np.outer(wy, wx)),
            ]

        # Channels: each output channel is a sum of (source channel, coefficient).
        sources = _channel_sources(order, plan.color)
        per_channel = all(len(s) == 1 and s[0][1] == 1.0 for s in sources)
        self.gathers: list[tuple[np.ndarray, np.ndarray | None]] = []
        for ys, xs, weight in taps:
            base = (ys[:, None] * step + xs[None, :] * src_channels).astype(np.int32)
            if per_channel:
                offsets = np.array([s[0][0] for s in sources], np.int32)
                groups = [(offsets, weight)]
            else:  # luma: one output channel from three source channels
                groups = [
                    (
                        np.array([c], np.int32),
                        coef * (weight if weight is not None else np.ones((nh, nw))),
                    )
                    for c, coef in sources[0]
                ]
            for offsets, wgt in groups:
                if nchw:
                    index = base[None, :, :] + offsets[:, None, None]
                    wgt = None if wgt is None else wgt[None, :, :].astype(np.float32)
                else:
                    index = base[:, :, None] + offsets[None, None, :]
                    wgt = None if wgt is None else wgt[:, :, None].astype(np.float32)
                self.gathers.append((index, wgt))
        shape = (-1, 1, 1) if nchw else (1, 1, -1)
        self.gain = None if plan.gain is None else plan.gain.reshape(shape)
        self.offset = None if plan.offset is None else plan.offset.reshape(shape)
        pad = np.full(plan.channels, plan.pad_value, np.float32)
        if plan.gain is not None:
            pad = pad * plan.gain + plan.offset
        self.pad = (
            pad.reshape(shape).astype(plan.dtype)
            if plan.dtype.kind == "f"
            else np.rint(pad).reshape(shape).astype(plan.dtype)
        )
        self.full = (nw, nh) == (plan.width, plan.height)

    def run(self, flat: np.ndarray) -> np.ndarray:
        region = None
        for index, weight in self.gathers:
            values = np.take(flat, index)
            if weight is None and len(self.gathers) == 1:
                region = values  # nearest or same size: raw bytes, no arithmetic
            elif region is None:
                region = values * weight if weight is not None else values.astype(np.float32)
            else:
                region += values * weight if weight is not None else values
        if self.gain is not None:
            region = region * self.gain
            region += self.offset
        plan = self.plan
        if plan.dtype.kind != "f" and region.dtype.kind == "f":
            region = np.rint(region)
        if self.full:
            return region.astype(plan.dtype, copy=False)
        out = np.empty(plan.shape, plan.dtype)
        out[...] = self.pad
        px, py = int(self.letterbox.pad_x), int(self.letterbox.pad_y)
        if plan.layout == "NCHW":
            out[:, py : py + self.nh, px : px + self.nw] = region
        else:
            out[py : py + self.nh, px : px + self.nw, :] = region
        return out


def _nearest_axis(src: int, dst: int) -> np.ndarray:
    return np.minimum(((np.arange(dst) + 0.5) * (src / dst)).astype(np.int64), src - 1)


def _bilinear_axis(src: int, dst: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-pixel-center source coordinates (as cv2.INTER_LINEAR), clamped at the borders."""
    pos = np.clip((np.arange(dst) + 0.5) * (src / dst) - 0.5, 0.0, src - 1)
    i0 = np.floor(pos).astype(np.int64)
    i1 = np.minimum(i0 + 1, src - 1)
    return i0, i1, pos - i0


def _channel_sources(src: str, dst: str) -> list[list[tuple[int, float]]]:
    """For each output channel, its (source channel, coefficient) terms.

    src: "rgb", "bgr", "rgba", "bgra" or "mono"; dst: "rgb", "bgr" or "mono".
    """
    if src == "mono":
        return [[(0, 1.0)]] * (1 if dst == "mono" else 3)
    r, g, b = (0, 1, 2) if src.startswith("rgb") else (2, 1, 0)
    if dst == "mono":
        return [[(r, float(_LUMA[0])), (g, float(_LUMA[1])), (b, float(_LUMA[2]))]]
    order = (r, g, b) if dst == "rgb" else (b, g, r)
    return [[(c, 1.0)] for c in order]


def float_input_dtype(tensor: TensorConfig, where: str, what: str) -> np.dtype:
    """The numpy type of a floating-point model input (a depth image's metres, a camera
    matrix); INVALID_ARG saying that ``what`` needs one otherwise."""
    try:
        dtype = to_numpy_dtype(tensor.datatype)
    except Exception:
        dtype = None
    if dtype is None or dtype.kind != "f":
        raise invalid_arg(
            f"{where} has data type {tensor.datatype}; {what} needs a "
            f"floating-point input (FP32, FP16 or FP64)"
        )
    return dtype
