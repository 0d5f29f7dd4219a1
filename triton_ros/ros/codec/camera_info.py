"""The ``camera_info`` input kind: ``sensor_msgs/CameraInfo`` -> the camera matrix K as a model
input, in the pixels of the model's image inputs.

A synchronized binding (``inputs``) may feed a CameraInfo topic to a model input of 9 values
(dims ``[3, 3]`` or ``[9]``, floating point): the row-major camera matrix
``K = [[fx, s, cx], [0, fy, cy], [0, 0, 1]]``. The binding's image inputs are resized into the
model (letterbox or stretch), so K is mapped the same way before the model sees it: with the
scale ``(sx, sy)`` and padding ``(px, py)`` that an image of the CameraInfo's ``width`` x
``height`` gets in the binding's first image input (the same
:func:`~triton_ros.ros.codec.preprocess.letterbox_for`),
``fx' = fx sx``, ``s' = s sx``, ``cx' = (cx + 0.5) sx - 0.5 + px`` (pixel centres at integer
coordinates, as K's and OpenCV's half-pixel-centre resize have them), and likewise for y. A
model then back-projects a model pixel ``(u, v)`` at depth ``z`` as
``((u - cx') z / fx', (v - cy') z / fy', z)`` in the camera's optical frame. Without an image
input, K goes in as it is. Distortion is not applied: K is for rectified images
(``image_rect``) or for lenses whose distortion the model ignores.

The placement handed to decoders is an :class:`Intrinsics` (K as received, K in model pixels,
the image size), so a decoder can back-project too. A CameraInfo that cannot serve (K zero:
an uncalibrated camera; not 9 finite values; no width and height where K must be mapped) is
malformed, counted as ``dropped_malformed``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...core.errors import invalid_arg
from .base import MalformedInput
from .preprocess import Letterbox, float_input_dtype, letterbox_for
from .serialized_message import SerializedReader

CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"


@dataclass(frozen=True)
class CameraInfoConfig:
    """What planning a CameraInfo input needs: the geometry of the binding's image inputs (an
    input plan with ``width``, ``height`` and ``resize``), filled in by the binding's plan;
    None: K goes in as it is."""

    image: Any = None


@dataclass(frozen=True)
class CameraInfoPlan:
    shape: tuple[int, ...]
    dtype: np.dtype
    image: Any                          # the image geometry K is mapped into, or None

    @property
    def summary(self) -> str:
        where = (f"in the {self.image.width}x{self.image.height} model pixels of the image "
                 f"inputs ({self.image.resize})" if self.image is not None else "as received")
        return f"camera matrix K {list(self.shape)} {self.dtype}, {where}"


@dataclass(frozen=True)
class Intrinsics:
    """A CameraInfo input's placement: K as received and as the model got it."""

    k: np.ndarray                       # [3, 3], the source image's pixels
    model_k: np.ndarray                 # [3, 3], the model input's pixels
    width: int
    height: int
    letterbox: Letterbox | None


@dataclass(frozen=True)
class ReceivedCameraInfo:
    """The fields of a sensor_msgs/CameraInfo the node reads."""

    header: Any
    width: int
    height: int
    k: np.ndarray                       # 9 values, row-major


def check_camera_info(k, width: int, height: int) -> np.ndarray:
    values = np.asarray(k, np.float64).reshape(-1)
    if values.size != 9:
        raise MalformedInput(f"CameraInfo K has {values.size} values, not 9")
    if not np.all(np.isfinite(values)):
        raise MalformedInput("CameraInfo K has values that are not finite")
    if values[0] <= 0 or values[4] <= 0:
        raise MalformedInput(f"CameraInfo K has fx {values[0]:g}, fy {values[4]:g}: an "
                             f"uncalibrated camera (K must have positive focal lengths)")
    if width < 0 or height < 0:
        raise MalformedInput(f"CameraInfo has a negative size {width}x{height}")
    return values.reshape(3, 3)


def model_camera_matrix(k: np.ndarray, letterbox: Letterbox) -> np.ndarray:
    """K of a source image -> K of the same image resized as ``letterbox`` places it."""
    out = np.array(k, np.float64)
    sx, sy = letterbox.scale_x, letterbox.scale_y
    out[0, 0] = k[0, 0] * sx
    out[0, 1] = k[0, 1] * sx
    out[0, 2] = (k[0, 2] + 0.5) * sx - 0.5 + letterbox.pad_x
    out[1, 1] = k[1, 1] * sy
    out[1, 2] = (k[1, 2] + 0.5) * sy - 0.5 + letterbox.pad_y
    return out


class CameraInfoInput:
    """``sensor_msgs/CameraInfo`` in."""

    name = "camera_info"
    family = "camera_info"
    ros_type = CAMERA_INFO_TYPE
    # Planned after the binding's image inputs, whose geometry K is mapped into.
    after_images = True

    def message_class(self) -> type:
        from sensor_msgs.msg import CameraInfo
        return CameraInfo

    def reader(self) -> SerializedReader:
        return SerializedReader(CAMERA_INFO_TYPE, lambda msg, header: ReceivedCameraInfo(
            header=header, width=int(msg.width), height=int(msg.height),
            k=np.asarray(msg.k, np.float64)))

    def check(self, msg: Any) -> None:
        check_camera_info(msg.k, msg.width, msg.height)

    def plan(self, settings: CameraInfoConfig, tensor, *, model: str) -> CameraInfoPlan:
        where = f"model '{model}' input '{tensor.name}'"
        dims = tuple(int(d) for d in tensor.dims)
        if -1 in dims or int(np.prod(dims)) != 9:
            raise invalid_arg(f"{where} has dims {list(dims)}: a CameraInfo gives the 9 values "
                              f"of K ([3, 3] or [9])")
        dtype = float_input_dtype(tensor, where, "K")
        return CameraInfoPlan(shape=dims, dtype=dtype, image=settings.image)

    def encoder(self, plan: CameraInfoPlan) -> Callable[[Any], tuple[np.ndarray, Intrinsics]]:
        def encode(msg: Any) -> tuple[np.ndarray, Intrinsics]:
            k = check_camera_info(msg.k, msg.width, msg.height)
            letterbox = None
            model_k = k
            if plan.image is not None:
                if msg.width <= 0 or msg.height <= 0:
                    raise MalformedInput("CameraInfo has no width and height: K cannot be "
                                         "mapped into the model input's pixels")
                letterbox, _, _ = letterbox_for(int(msg.width), int(msg.height), plan.image)
                model_k = model_camera_matrix(k, letterbox)
            tensor = model_k.astype(plan.dtype).reshape(plan.shape)
            return tensor, Intrinsics(k=k, model_k=model_k, width=int(msg.width),
                                      height=int(msg.height), letterbox=letterbox)
        return encode


CAMERA_INFO = CameraInfoInput()
