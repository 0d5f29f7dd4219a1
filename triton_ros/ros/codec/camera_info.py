"""The ``camera_info`` input kind: ``sensor_msgs/CameraInfo`` -> the camera matrix K as a model
input, in the pixels of the model's image inputs.

A synchronized binding (``inputs``) may feed a CameraInfo topic to a model input of 9 values
(dims ``[3, 3]`` or ``[9]``, floating point): the row-major camera matrix
``[[fx, s, cx], [0, fy, cy], [0, 0, 1]]`` of the image the model sees. Which one the CameraInfo
holds depends on the image (``CameraInfoConfig.matrix``, the binding's ``camera_matrix``): ``K``
describes the raw (distorted) image; a rectified image's intrinsics are the left 3x3 of the
projection matrix ``P``, as image_geometry's PinholeCameraModel and depth_image_proc read them.
The binding's image inputs are resized into the
model (letterbox or stretch), so K is mapped the same way before the model sees it: with the
scale ``(sx, sy)`` and padding ``(px, py)`` that an image of the CameraInfo's ``width`` x
``height`` gets in the binding's first image input (the same
:func:`~triton_ros.ros.codec.preprocess.letterbox_for`),
``fx' = fx sx``, ``s' = s sx``, ``cx' = (cx + 0.5) sx - 0.5 + px`` (pixel centres at integer
coordinates, as K's and OpenCV's half-pixel-centre resize have them), and likewise for y. A
model then back-projects a model pixel ``(u, v)`` at depth ``z`` as
``((u - cx') z / fx', (v - cy') z / fy', z)`` in the camera's optical frame. Without an image
input, the matrix goes in as it is. Distortion is not applied: K serves raw images whose lens
distortion the model ignores, P rectified ones (``image_rect``).

The placement handed to decoders is an :class:`Intrinsics` (the matrix as received and in
model pixels, the image size), so a decoder can back-project too. A CameraInfo that cannot serve
(K zero: an uncalibrated camera; not 9 finite values; P zero where P is used; no width and height
where the matrix must be mapped; a size over the node's pixel limit, or, in a set, not the size
of the image it describes: :mod:`~triton_ros.ros.binding.sync_inputs`) is malformed, counted as
``dropped_malformed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import numpy as np

from ...core.errors import invalid_arg
from ...settings import Namer, setting
from .base import ImageGeometry, InputKind, MalformedInput
from .headers import MAX_PIXELS
from .preprocess import Letterbox, float_input_dtype, letterbox_for
from .serialized_message import SerializedReader

CAMERA_INFO_TYPE = "sensor_msgs/msg/CameraInfo"
MATRICES = ("K", "P")  # K: of the raw image; P (its left 3x3): of the rectified


@dataclass(frozen=True)
class CameraInfoConfig:
    """A CameraInfo input's settings: which matrix it feeds (``auto`` is resolved by
    :meth:`CameraInfoInput.configure` from the binding's input topics)."""

    matrix: str = setting(
        "auto",
        "With a camera_info input: the CameraInfo matrix fed to the model, K (the raw, "
        "distorted image's) or P (its left 3x3: the rectified image's, as image_geometry "
        "and depth_image_proc read it); auto: P where an image or depth input's topic is "
        "a rectified one (image_rect...), else K.",
        name="camera_matrix",
        choices=("auto", *MATRICES),
    )


@dataclass(frozen=True)
class CameraInfoPlan:
    shape: tuple[int, ...]
    dtype: np.dtype
    image: ImageGeometry | None  # the image geometry K is mapped into, or None
    matrix: str = "K"  # one of MATRICES

    @property
    def geometry(self) -> None:
        return None  # no pixels of its own

    @property
    def summary(self) -> str:
        where = (
            f"in the {self.image.width}x{self.image.height} model pixels of the image "
            f"inputs ({self.image.resize})"
            if self.image is not None
            else "as received"
        )
        what = "K" if self.matrix == "K" else "P's left 3x3"
        return f"camera matrix {what} {list(self.shape)} {self.dtype}, {where}"


@dataclass(frozen=True)
class Intrinsics:
    """A CameraInfo input's placement: the camera matrix as received and as the model got it."""

    k: np.ndarray  # [3, 3], the source image's pixels (K or P's left 3x3)
    model_k: np.ndarray  # [3, 3], the model input's pixels
    width: int
    height: int
    letterbox: Letterbox | None


@dataclass(frozen=True)
class ReceivedCameraInfo:
    """The fields of a sensor_msgs/CameraInfo the node reads."""

    header: Any
    width: int
    height: int
    k: np.ndarray  # 9 values, row-major
    p: np.ndarray = field(default_factory=lambda: np.zeros(12))  # 12 values, row-major


def check_camera_info(k, width: int, height: int) -> np.ndarray:
    if width < 0 or height < 0:
        raise MalformedInput(f"CameraInfo has a negative size {width}x{height}")
    if width * height > MAX_PIXELS:
        raise MalformedInput(
            f"CameraInfo claims a {width}x{height} image, more than the "
            f"{MAX_PIXELS >> 20} Mpixel any image input may have"
        )
    return _matrix(k, 9, "K")


def camera_matrix_of(msg: Any, matrix: str) -> np.ndarray:
    """The [3, 3] camera matrix ``matrix`` (K, or P's left 3x3) of a checked CameraInfo."""
    if matrix == "K":
        return _matrix(msg.k, 9, "K")
    return _matrix(msg.p, 12, "P")[:, :3]


def _matrix(values, size: int, name: str) -> np.ndarray:
    values = np.asarray(values, np.float64).reshape(-1)
    if values.size != size:
        raise MalformedInput(f"CameraInfo {name} has {values.size} values, not {size}")
    if not np.all(np.isfinite(values)):
        raise MalformedInput(f"CameraInfo {name} has values that are not finite")
    rows = values.reshape(3, -1)
    if rows[0, 0] <= 0 or rows[1, 1] <= 0:
        raise MalformedInput(
            f"CameraInfo {name} has fx {rows[0, 0]:g}, fy {rows[1, 1]:g}: an "
            f"uncalibrated camera ({name} must have positive focal lengths)"
        )
    return rows


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


class CameraInfoInput(InputKind):
    """``sensor_msgs/CameraInfo`` in."""

    name = "camera_info"
    ros_type = CAMERA_INFO_TYPE
    settings = CameraInfoConfig
    # Planned after the binding's image inputs, whose geometry K is mapped into.
    after_images = True

    def configure(self, values: Mapping[str, Any], name: Namer) -> CameraInfoConfig:
        """``camera_matrix`` auto: P where an image or depth input's topic is a rectified one
        (image_pipeline names them image_rect...), else K."""
        config = super().configure(values, name)
        if config.matrix != "auto":
            return config
        topics = (values.get("inputs") or {}).values()
        rectified = any(
            part.startswith("image_rect") for topic in topics for part in topic.split("/")
        )
        return replace(config, matrix="P" if rectified else "K")

    def message_class(self) -> type:
        from sensor_msgs.msg import CameraInfo

        return CameraInfo

    def reader(self) -> SerializedReader:
        return SerializedReader(
            CAMERA_INFO_TYPE,
            lambda msg, header: ReceivedCameraInfo(
                header=header,
                width=int(msg.width),
                height=int(msg.height),
                k=np.asarray(msg.k, np.float64),
                p=np.asarray(msg.p, np.float64),
            ),
        )

    def check(self, msg: Any) -> None:
        check_camera_info(msg.k, msg.width, msg.height)

    def decoded_size(self, msg: Any) -> None:
        return None  # no pixels: its size is checked against the image's

    def plan(
        self, settings: CameraInfoConfig, tensor, *, model: str, image: ImageGeometry | None = None
    ) -> CameraInfoPlan:
        where = f"model '{model}' input '{tensor.name}'"
        dims = tuple(int(d) for d in tensor.dims)
        if -1 in dims or int(np.prod(dims)) != 9:
            raise invalid_arg(
                f"{where} has dims {list(dims)}: a CameraInfo gives the 9 values "
                f"of K ([3, 3] or [9])"
            )
        dtype = float_input_dtype(tensor, where, "K")
        matrix = "K" if settings.matrix == "auto" else settings.matrix  # no rectified input
        if matrix not in MATRICES:
            raise invalid_arg(
                f"{where}: camera matrix '{matrix}' is not one of {', '.join(MATRICES)}"
            )
        return CameraInfoPlan(shape=dims, dtype=dtype, image=image, matrix=matrix)

    def encoder(self, plan: CameraInfoPlan) -> Callable[[Any], tuple[np.ndarray, Intrinsics]]:
        def encode(msg: Any) -> tuple[np.ndarray, Intrinsics]:
            check_camera_info(msg.k, msg.width, msg.height)
            k = camera_matrix_of(msg, plan.matrix)
            letterbox = None
            model_k = k
            if plan.image is not None:
                if msg.width <= 0 or msg.height <= 0:
                    raise MalformedInput(
                        "CameraInfo has no width and height: K cannot be "
                        "mapped into the model input's pixels"
                    )
                letterbox, _, _ = letterbox_for(int(msg.width), int(msg.height), plan.image)
                model_k = model_camera_matrix(k, letterbox)
            tensor = model_k.astype(plan.dtype).reshape(plan.shape)
            return tensor, Intrinsics(
                k=k,
                model_k=model_k,
                width=int(msg.width),
                height=int(msg.height),
                letterbox=letterbox,
            )

        return encode


CAMERA_INFO = CameraInfoInput()
