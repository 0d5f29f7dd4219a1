"""The ``detections3d`` output format: objects located in 3D -> ``vision_msgs/Detection3DArray``.

The model has one decoded output (``detections3d_output``, ``detections3d`` by default) of rows
``(x, y, z, size_x, size_y, size_z, score, class_id)``: the object's centre in metres in the
frame of the binding's reference input (a camera's optical frame: x right, y down, z forward),
its extent along those axes (0 where unknown), its score and its class index; padding rows have
score 0. Rows scoring at or below ``score_threshold`` or with a position that is not finite are
left out; the best ``top_k`` are kept. Each row becomes a ``Detection3D`` whose
``bbox.center.position`` is the object's position and ``bbox.size`` its extent, with one result
(class name, score); with vision_msgs, the result's ``pose.pose.position`` is the position too.
Rows of 9 carry a yaw too (x, y, z, size_x, size_y, size_z, score, class_id, yaw: radians about
the frame's z axis, size_x along the heading, as PointPillars and CenterPoint give boxes):
``bbox.center.orientation`` is then that rotation as a quaternion.

``detections3d_decode: bev_cells`` reads a BEV model instead (a ``pointcloud`` binding's grid):
per-cell outputs ``scores`` [H, W] (an object above the ground there), ``heights`` and
``ground`` [H, W] (metres above the grid's z_min) become boxes by :mod:`.bev_boxes` (connected
cells, a minimum-area rectangle each: centre, size and yaw). The message carries the reference
input's header (stamp and frame_id), so that a consumer (tf2, rviz) places the positions in that
frame at that time. Published as
``triton_ros_interfaces/Detections3D`` where vision_msgs is absent (:mod:`.messages`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.errors import invalid_arg
from ...settings import setting, shared
from ..targets.spec import ModelSpec
from .base import FrameOutputs, OutputFormat
from .messages import DETECTION3D_TYPE, DETECTION_RESULT_TYPE, DETECTIONS3D_TYPE, label_of

ROW = 8  # x, y, z, size_x, size_y, size_z, score, class_id
ROW_YAW = 9  # ... and yaw
DECODERS = ("rows", "bev_cells")


@dataclass(frozen=True)
class Detection3DConfig:
    """The detections3d format's settings; it keeps rows as the detections format does
    (``score_threshold``, ``top_k``), with the binding's ``class_names``."""

    output: str = setting(
        "detections3d",
        "Format detections3d: the output holding rows (x, y, z, size_x, size_y, "
        "size_z, score, class_id), metres in the reference input's frame.",
        name="detections3d_output",
    )
    decode: str = setting(
        "rows",
        "Format detections3d: rows (the output holds box rows) or bev_cells (per-cell "
        "scores, heights and ground of a BEV model, clustered into boxes).",
        name="detections3d_decode",
        choices=DECODERS,
    )
    cell_outputs: tuple[str, ...] = setting(
        ["scores", "heights", "ground"],
        "Format detections3d, bev_cells: the outputs holding "
        "per-cell scores, heights and ground heights [H, W].",
        name="detections3d_cell_outputs",
    )
    cell_threshold: float = setting(
        0.5,
        "Format detections3d, bev_cells: cells scoring above this are object cells.",
        name="detections3d_cell_threshold",
    )
    min_cells: int = setting(
        3,
        "Format detections3d, bev_cells: fewer connected object cells are no object.",
        name="detections3d_min_cells",
        low=1,
    )
    score_threshold: float = shared(0.25)
    top_k: int = shared(100)
    class_names: tuple[str, ...] = shared(())


@dataclass(frozen=True)
class Detection3DPlan:
    config: Detection3DConfig
    labels: tuple[str, ...]

    @property
    def requested(self) -> tuple[str, ...]:
        return (self.config.output,)


@dataclass
class Detection3DResult:
    """Objects of one set: positions [M, 3] and sizes [M, 3] in metres, scores [M], classes."""

    positions: np.ndarray
    sizes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    yaws: np.ndarray | None = None  # radians about z; None: axis-aligned

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def decode_detections3d(rows: np.ndarray, config: Detection3DConfig) -> Detection3DResult:
    rows = np.asarray(rows, np.float64)
    width = rows.shape[-1] if rows.ndim and rows.shape[-1] in (ROW, ROW_YAW) else ROW
    rows = rows.reshape(-1, width)
    keep = (rows[:, 6] > config.score_threshold) & np.all(np.isfinite(rows[:, :3]), axis=1)
    rows = rows[keep]
    rows = rows[np.argsort(-rows[:, 6], kind="stable")]
    if config.top_k > 0:
        rows = rows[: config.top_k]
    yaws = np.nan_to_num(rows[:, 8]) if width == ROW_YAW else None
    return Detection3DResult(
        rows[:, :3], np.nan_to_num(rows[:, 3:6]), rows[:, 6], rows[:, 7].astype(np.int64), yaws
    )


def detections3d_message(header, result: Detection3DResult, labels) -> Any:
    msg = DETECTIONS3D_TYPE(header=header)
    for i in range(len(result)):
        det = DETECTION3D_TYPE(header=header, id=str(i))
        x, y, z = (float(v) for v in result.positions[i])
        det.bbox.center.position.x, det.bbox.center.position.y = x, y
        det.bbox.center.position.z = z
        if result.yaws is not None:
            half = float(result.yaws[i]) / 2
            det.bbox.center.orientation.z = math.sin(half)
            det.bbox.center.orientation.w = math.cos(half)
        else:
            det.bbox.center.orientation.w = 1.0
        det.bbox.size.x, det.bbox.size.y, det.bbox.size.z = (float(v) for v in result.sizes[i])
        hypothesis = DETECTION_RESULT_TYPE()
        hypothesis.hypothesis.class_id = label_of(int(result.classes[i]), labels)
        hypothesis.hypothesis.score = float(result.scores[i])
        pose = getattr(hypothesis, "pose", None)  # vision_msgs only
        if pose is not None:
            pose.pose.position = det.bbox.center.position
            pose.pose.orientation = det.bbox.center.orientation
        det.results.append(hypothesis)
        msg.detections.append(det)
    return msg


def plan_bev_cells(settings: Detection3DConfig, spec: ModelSpec, input_plan: Any):
    if getattr(input_plan, "grid", None) is None:
        raise invalid_arg(
            f"model '{spec.name}': detections3d_decode bev_cells needs a BEV grid "
            f"input (input_kind pointcloud, cloud_form bev)"
        )
    if len(settings.cell_outputs) != 3:
        raise invalid_arg(
            "detections3d_cell_outputs names three outputs (scores, heights, "
            f"ground), got {list(settings.cell_outputs)}"
        )
    missing = [n for n in settings.cell_outputs if spec.output(n) is None]
    if missing:
        raise invalid_arg(
            f"model '{spec.name}' has no output(s) {', '.join(missing)} (outputs: "
            f"{', '.join(t.name for t in spec.outputs)}); set the binding's "
            f"'detections3d_cell_outputs'"
        )
    labels = settings.class_names or spec.labels_of(settings.cell_outputs[0])
    return BevCellsPlan(settings, tuple(labels))


@dataclass(frozen=True)
class BevCellsPlan(Detection3DPlan):
    @property
    def requested(self) -> tuple[str, ...]:
        return tuple(self.config.cell_outputs)


def decode_bev_cells(frame: FrameOutputs, config: Detection3DConfig) -> Detection3DResult:
    from .bev_boxes import cell_boxes

    scores, heights, ground = (frame.outputs[n] for n in config.cell_outputs)
    grid = frame.placement.grid
    shape = (grid.height, grid.width)
    boxes = cell_boxes(
        np.asarray(scores).reshape(shape),
        np.asarray(heights).reshape(shape),
        np.asarray(ground).reshape(shape),
        grid,
        threshold=config.cell_threshold,
        min_cells=config.min_cells,
    )
    keep = boxes[:, 6] > config.score_threshold
    boxes = boxes[keep][np.argsort(-boxes[keep, 6], kind="stable")]
    if config.top_k > 0:
        boxes = boxes[: config.top_k]
    return Detection3DResult(
        boxes[:, :3], boxes[:, 3:6], boxes[:, 6], np.zeros(len(boxes), np.int64), boxes[:, 7]
    )


class Detections3DFormat(OutputFormat):
    """``format: detections3d``."""

    name = "detections3d"
    settings = Detection3DConfig

    def message_class(self) -> type:
        return DETECTIONS3D_TYPE

    def plan(
        self, settings: Detection3DConfig, spec: ModelSpec, input_plan: Any
    ) -> Detection3DPlan:
        if settings.decode == "bev_cells":
            return plan_bev_cells(settings, spec, input_plan)
        tensor = spec.output(settings.output)
        if tensor is None:
            raise invalid_arg(
                f"model '{spec.name}' has no output '{settings.output}' (outputs: "
                f"{', '.join(t.name for t in spec.outputs)}); set the binding's "
                f"'detections3d_output'"
            )
        if not tensor.dims or tensor.dims[-1] not in (ROW, ROW_YAW, -1):
            raise invalid_arg(
                f"model '{spec.name}' output '{tensor.name}' has dims "
                f"{list(tensor.dims)}; 3D detections need rows of {ROW} (x, y, z, "
                f"size_x, size_y, size_z, score, class_id) or {ROW_YAW} (and yaw)"
            )
        labels = settings.class_names or spec.labels_of(settings.output)
        return Detection3DPlan(settings, tuple(labels))

    def decode(self, plan: Detection3DPlan, frame: FrameOutputs):
        if plan.config.decode == "bev_cells":
            result = decode_bev_cells(frame, plan.config)
        else:
            result = decode_detections3d(frame.outputs[plan.config.output], plan.config)
        return detections3d_message(frame.header, result, plan.labels)


DETECTIONS3D = Detections3DFormat()
