"""The ``segmentation`` output format: a per-pixel class output -> ``sensor_msgs/Image`` (mono8
class ids) in the source image's own pixels, and optionally the mask coloured by class (rgb8, for
rviz's Image display) on ``<output topic>/overlay``.

Accepted outputs (without the batch dimension; a non-batching model's leading 1 is absorbed):

- ``[C, H, W]`` with C >= 2: per-class scores (logits or probabilities, any numeric type); the
  class of a pixel is the argmax over C (the first on ties);
- ``[H, W]`` or ``[1, H, W]``: class ids (integers, or floats holding integers, rounded).

Class ids index the output's ``label_filename`` (or ``class_names``), as for detections; mono8
holds ids 0-255, so a frame with a larger id fails decoding (``failed_decode``, with the reason).

``H x W`` is the model input's grid or a coarser one (a decoder at stride 4 or 8): the output is
taken to cover the model input. The letterbox (or stretch) the input kind made is undone by
nearest sampling: source pixel ``(x, y)`` takes the class at its centre, ``(x + 0.5) *
scale_x + pad_x`` in model pixels (the input kind's
:class:`~triton_ros.ros.codec.preprocess.Letterbox`, which for a reduced-size JPEG already maps
to the full image), scaled to the output grid. Only the part of the grid that the image covers is
argmaxed; the two index vectors are kept per image geometry. The mask has the source's size,
stamp and frame_id, whatever the model's input size.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.errors import invalid_arg
from ...settings import setting, shared
from ..targets.spec import ModelSpec
from .base import FrameOutputs, OutputFormat
from .messages import uint8_array
from .preprocess import InputPlan, Letterbox

_GEOMETRY_CACHE = 32  # index vectors kept per plan (image sizes, letterboxes)


@dataclass(frozen=True)
class SegmentationConfig:
    """The segmentation format's settings; ``class_names`` is the binding's."""

    output: str = setting(
        "",
        "Format segmentation: the output holding per-pixel class scores [C,H,W] (argmax in "
        "the node) or class ids [H,W] or [1,H,W]; empty: the model's first output.",
        name="segmentation_output",
    )
    overlay: bool = setting(
        False,
        "Format segmentation: also publish the mask alone, coloured by class (rgb8, for "
        "rviz; not drawn over the camera image), on <output topic>/overlay.",
        name="segmentation_overlay",
    )
    class_names: tuple[str, ...] = shared(())


@dataclass(frozen=True)
class SegmentationPlan:
    output: str
    input_width: int  # the model input's size, which the output covers
    input_height: int
    overlay: bool
    labels: tuple[str, ...]

    @property
    def requested(self) -> tuple[str, ...]:
        return (self.output,)


def voc_palette(n: int = 256) -> np.ndarray:
    """The PASCAL VOC colour map (class 0 black, 1 dark red, 2 dark green, ...), [n, 3] uint8:
    the bits of the class id spread over the channels' high bits."""
    ids = np.arange(n)
    palette = np.zeros((n, 3), np.int64)
    for shift in range(8):
        for channel in range(3):
            palette[:, channel] |= ((ids >> (3 * shift + channel)) & 1) << (7 - shift)
    return palette.astype(np.uint8)


PALETTE = voc_palette()


class SegmentationFormat(OutputFormat):
    """Per-pixel classes -> ``sensor_msgs/Image`` mono8 in the source's pixels."""

    name = "segmentation"
    settings = SegmentationConfig

    def __init__(self) -> None:
        self._geometry: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()

    def message_class(self) -> type:
        from sensor_msgs.msg import Image

        return Image

    def extra_outputs(self, settings: SegmentationConfig) -> tuple[tuple[str, type], ...]:
        """Further topics of each source, by suffix of its output topic, and their type."""
        return (("overlay", self.message_class()),) if settings.overlay else ()

    def plan(
        self, settings: SegmentationConfig, spec: ModelSpec, input_plan: InputPlan
    ) -> SegmentationPlan:
        if settings.output:
            tensor = spec.output(settings.output)
            if tensor is None:
                raise invalid_arg(
                    f"model '{spec.name}' has no output '{settings.output}' "
                    f"(outputs: {', '.join(t.name for t in spec.outputs)})"
                )
        elif spec.outputs:
            tensor = spec.outputs[0]
        else:
            raise invalid_arg(f"model '{spec.name}' has no outputs")
        dims = list(tensor.dims)
        if spec.max_batch_size == 0 and len(dims) == 4 and dims[0] in (1, -1):
            dims = dims[1:]
        if len(dims) not in (2, 3):
            raise invalid_arg(
                f"model '{spec.name}' output '{tensor.name}' has dims {dims}: "
                f"format segmentation takes [C,H,W] class scores or [H,W] "
                f"([1,H,W]) class ids"
            )
        labels = settings.class_names or spec.labels_of(tensor.name)
        return SegmentationPlan(
            output=tensor.name,
            input_width=input_plan.width,
            input_height=input_plan.height,
            overlay=settings.overlay,
            labels=tuple(labels),
        )

    def decode(self, plan: SegmentationPlan, frame: FrameOutputs) -> Any:
        out = np.asarray(frame.outputs[plan.output])
        while out.ndim > 3 and out.shape[0] == 1:
            out = out[0]
        if out.ndim == 3 and out.shape[0] == 1:
            out = out[0]
        if out.ndim not in (2, 3) or 0 in out.shape:
            raise ValueError(
                f"output '{plan.output}' has shape {list(out.shape)}: expected "
                f"[C,H,W] class scores or [H,W] class ids"
            )
        letterbox = frame.placement
        rows, cols = self._indices(plan, letterbox, out.shape[-2], out.shape[-1])
        y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        if out.ndim == 3:  # scores: argmax of the covered part only
            ids = np.argmax(out[:, y0:y1, x0:x1], axis=0)
        else:
            ids = out[y0:y1, x0:x1]
            if ids.dtype.kind == "f":
                ids = np.rint(ids)
        mask = ids.take(rows - y0, axis=0).take(cols - x0, axis=1)
        low, high = int(mask.min()), int(mask.max())
        if low < 0 or high > 255:
            raise ValueError(f"class ids {low}..{high} do not fit a mono8 mask (0-255)")
        return mono8_image(frame.header, mask.astype(np.uint8, copy=False))

    def extras(self, plan: SegmentationPlan, msg: Any) -> dict[str, Any]:
        """The further messages of one frame (:meth:`extra_outputs`), from its mask message."""
        if not plan.overlay:
            return {}
        mask = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width)
        return {"overlay": rgb8_image(msg.header, PALETTE[mask])}

    def _indices(
        self, plan: SegmentationPlan, box: Letterbox, out_h: int, out_w: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each source row and column, the output row and column at its centre."""
        key = (box, out_h, out_w, plan.input_width, plan.input_height)
        found = self._geometry.get(key)
        if found is None:
            rows = _nearest(
                box.src_height, box.scale_y, box.pad_y, out_h / plan.input_height, out_h
            )
            cols = _nearest(box.src_width, box.scale_x, box.pad_x, out_w / plan.input_width, out_w)
            found = (rows, cols)
            with self._lock:
                if len(self._geometry) >= _GEOMETRY_CACHE:
                    self._geometry.clear()
                self._geometry[key] = found
        return found


def _nearest(size: int, scale: float, pad: float, grid: float, limit: int) -> np.ndarray:
    """Output index of each source pixel's centre along one axis (non-decreasing)."""
    centre = (np.arange(size, dtype=np.float64) + 0.5) * scale + pad
    return np.clip(np.floor(centre * grid).astype(np.int64), 0, limit - 1)


def mono8_image(header: Any, mask: np.ndarray) -> Any:
    from sensor_msgs.msg import Image

    h, w = mask.shape
    return Image(
        header=header,
        height=h,
        width=w,
        encoding="mono8",
        is_bigendian=0,
        step=w,
        data=uint8_array(np.ascontiguousarray(mask).data),
    )


def rgb8_image(header: Any, pixels: np.ndarray) -> Any:
    from sensor_msgs.msg import Image

    h, w = pixels.shape[:2]
    return Image(
        header=header,
        height=h,
        width=w,
        encoding="rgb8",
        is_bigendian=0,
        step=w * 3,
        data=uint8_array(np.ascontiguousarray(pixels).data),
    )


SEGMENTATION = SegmentationFormat()
