"""The ``detections`` output format: model outputs -> detections in the source image's pixels.

Two output layouts are understood, chosen by the binding's ``detection_layout`` (``auto`` picks
from the model's outputs):

- ``boxes_scores``: raw head tensors, boxes [A, 4] and per-class scores [A, C] (like the bundled
  ``detector``). The node applies the score threshold, keeps the best ``pre_nms_top_k``
  candidates, runs class-wise (or class-agnostic) NMS and keeps ``top_k``.
- ``detections``: an already decoded tensor [K, 6] of rows (x1, y1, x2, y2, score, class_id),
  padding rows having score 0 (what an ensemble with its own postprocessing step returns). The
  threshold, optional NMS and ``top_k`` apply as well.

Boxes are in model-input pixels (``xyxy``, ``xywh`` or ``cxcywh``; or normalized to [0, 1] of the
input size) and are mapped back through the :class:`~triton_ros.ros.codec.preprocess.Letterbox`.
Decoding is numpy; the detections are published as ``vision_msgs/Detection2DArray`` (or the
package's fallback, :mod:`.messages`), one result per box with its class name and score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ...core.errors import invalid_arg
from ...settings import setting, shared
from ..targets.spec import ModelSpec
from .base import FrameOutputs, OutputFormat
from .messages import DETECTION_RESULT_TYPE, DETECTION_TYPE, DETECTIONS_TYPE, label_of
from .preprocess import InputPlan, Letterbox

DETECTION_LAYOUTS = ("auto", "boxes_scores", "detections")
BOX_FORMATS = ("xyxy", "xywh", "cxcywh")


@dataclass(frozen=True)
class DetectionConfig:
    """The detections format's settings; ``class_names`` is the binding's."""

    layout: str = setting(
        "auto",
        "boxes_scores: raw boxes [A,4] and class scores [A,C] outputs; detections: one "
        "decoded [K,6] output of rows (x1, y1, x2, y2, score, class_id), padding rows "
        "with score 0; auto: detections if the model has detections_output, else "
        "boxes_scores.",
        name="detection_layout",
        choices=DETECTION_LAYOUTS,
    )
    boxes_output: str = setting("boxes", "Output holding boxes (boxes_scores layout).")
    scores_output: str = setting("scores", "Output holding per-class scores (boxes_scores layout).")
    detections_output: str = setting(
        "detections", "Output holding decoded detections (detections layout)."
    )
    track_ids_output: str = setting(
        "track_ids",
        "Output holding a track ID per row of detections_output ([K] integers, "
        "the detections layout of a tracking model, e.g. the bundled "
        "color_tracker): each detection's id is its track ID. A model without it: "
        "the detection's index in the message.",
    )
    box_format: str = setting("xyxy", "Box coordinates in the model's output.", choices=BOX_FORMATS)
    box_normalized: bool = setting(
        False, "Boxes are fractions of the model input size instead of its pixels."
    )
    score_threshold: float = setting(
        0.25, "Detections scoring at or below this are dropped.", low=0.0, high=1.0
    )
    nms: bool = setting(
        True, "Run non-maximum suppression in the node (set false when the model already did)."
    )
    nms_iou_threshold: float = setting(
        0.45,
        "Boxes overlapping a better one by more than this IoU are suppressed.",
        low=0.0,
        high=1.0,
    )
    class_agnostic_nms: bool = setting(False, "NMS across classes instead of per class.")
    pre_nms_top_k: int = setting(1000, "Best candidates kept before NMS (0: all).", low=0)
    top_k: int = setting(100, "Detections kept per image after NMS (0: all).", low=0)
    class_names: tuple[str, ...] = shared(())


@dataclass(frozen=True)
class DetectionPlan:
    """Decoding resolved against one model version."""

    config: DetectionConfig
    layout: str  # "boxes_scores" or "detections"
    outputs: tuple[str, ...]  # model outputs to request
    labels: tuple[str, ...]
    input_width: int
    input_height: int
    track_ids: str = ""  # the output of track IDs; "": none

    @property
    def requested(self) -> tuple[str, ...]:
        return self.outputs


@dataclass
class DetectionResult:
    """Detections of one image: boxes xyxy in source pixels [M, 4], scores [M], classes [M]."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    ids: np.ndarray | None = None  # track IDs [M]; None: the model does not track

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def plan_detections(
    config: DetectionConfig,
    model: ModelSpec,
    labels: Mapping[str, Sequence[str]],
    input_plan: InputPlan,
) -> DetectionPlan:
    """Resolve the layout and labels against the model's outputs; INVALID_ARG if they do not fit."""
    names = {t.name: t for t in model.outputs}
    layout = config.layout
    if layout == "auto":
        if config.detections_output in names:
            layout = "detections"
        elif config.boxes_output in names and config.scores_output in names:
            layout = "boxes_scores"
        else:
            raise invalid_arg(
                f"model '{model.name}' has outputs {sorted(names)}: neither a decoded "
                f"'{config.detections_output}' output nor '{config.boxes_output}' and "
                f"'{config.scores_output}'; set the binding's detection output names"
            )
    if layout == "detections":
        wanted = (config.detections_output,)
        tensor = names.get(config.detections_output)
        if tensor is None:
            raise invalid_arg(f"model '{model.name}' has no output '{config.detections_output}'")
        if not tensor.dims or tensor.dims[-1] not in (6, -1):
            raise invalid_arg(
                f"model '{model.name}' output '{tensor.name}' has dims "
                f"{list(tensor.dims)}; decoded detections need rows of 6 "
                f"(x1, y1, x2, y2, score, class_id)"
            )
        label_source = tensor.name
        if config.track_ids_output in names:
            wanted += (config.track_ids_output,)
    else:
        wanted = (config.boxes_output, config.scores_output)
        for name in wanted:
            if name not in names:
                raise invalid_arg(f"model '{model.name}' has no output '{name}'")
        label_source = config.scores_output
    chosen = config.class_names or tuple(labels.get(label_source, ()))
    return DetectionPlan(
        config=config,
        layout=layout,
        outputs=wanted,
        labels=tuple(chosen),
        input_width=input_plan.width,
        input_height=input_plan.height,
        track_ids=config.track_ids_output if config.track_ids_output in wanted else "",
    )


def decode_detections(
    outputs: Mapping[str, np.ndarray], plan: DetectionPlan, letterbox: Letterbox
) -> DetectionResult:
    """One image's outputs (batch dimension removed) -> its detections in source pixels."""
    cfg = plan.config
    ids = None  # track IDs, carried along with each row kept
    if plan.layout == "detections":
        rows = np.asarray(outputs[cfg.detections_output], np.float32).reshape(-1, 6)
        keep = rows[:, 4] > cfg.score_threshold
        if plan.track_ids:
            ids = np.asarray(outputs[plan.track_ids]).reshape(-1)
            if ids.shape[0] != rows.shape[0]:
                raise ValueError(
                    f"output '{plan.track_ids}' holds {ids.shape[0]} track IDs "
                    f"for {rows.shape[0]} detections"
                )
            ids = ids[keep].astype(np.int64)
        rows = rows[keep]
        boxes, scores, classes = rows[:, :4], rows[:, 4], rows[:, 5].astype(np.int64)
    else:
        raw_boxes = np.asarray(outputs[cfg.boxes_output], np.float32).reshape(-1, 4)
        raw_scores = np.asarray(outputs[cfg.scores_output], np.float32)
        raw_scores = raw_scores.reshape(raw_boxes.shape[0], -1)
        anchor, classes = np.nonzero(raw_scores > cfg.score_threshold)
        scores = raw_scores[anchor, classes]
        boxes = raw_boxes[anchor]
    if scores.shape[0] == 0:  # nothing over the threshold (most frames of a scene)
        return DetectionResult(
            np.empty((0, 4)),
            np.empty(0),
            np.empty(0, np.int64),
            None if ids is None else np.empty(0, np.int64),
        )
    if scores.shape[0] > cfg.pre_nms_top_k > 0:
        best = np.argpartition(-scores, cfg.pre_nms_top_k - 1)[: cfg.pre_nms_top_k]
        boxes, scores, classes = boxes[best], scores[best], classes[best]
        ids = ids[best] if ids is not None else None

    boxes = to_xyxy(boxes, cfg.box_format)
    if cfg.box_normalized:
        boxes = boxes * np.array([plan.input_width, plan.input_height] * 2, np.float32)
    order = np.argsort(-scores, kind="stable")
    boxes, scores, classes = boxes[order], scores[order], classes[order]
    ids = ids[order] if ids is not None else None
    if cfg.nms and scores.shape[0] > 1:
        keep = nms(
            boxes, scores, cfg.nms_iou_threshold, None if cfg.class_agnostic_nms else classes
        )
        boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
        ids = ids[keep] if ids is not None else None
    mapped = letterbox.to_source(boxes)
    # A box lying wholly in the letterbox padding has no area left in the image: not a detection.
    inside = (mapped[:, 2] > mapped[:, 0]) & (mapped[:, 3] > mapped[:, 1])
    mapped, scores, classes = mapped[inside], scores[inside], classes[inside]
    ids = ids[inside] if ids is not None else None
    if cfg.top_k > 0:
        mapped, scores, classes = mapped[: cfg.top_k], scores[: cfg.top_k], classes[: cfg.top_k]
        ids = ids[: cfg.top_k] if ids is not None else None
    return DetectionResult(mapped, scores.astype(np.float64), classes, ids)


def to_xyxy(boxes: np.ndarray, box_format: str) -> np.ndarray:
    if box_format == "xyxy":
        return boxes
    out = np.empty_like(boxes)
    if box_format == "xywh":
        out[:, :2] = boxes[:, :2]
        out[:, 2:] = boxes[:, :2] + boxes[:, 2:]
    else:  # cxcywh
        half = boxes[:, 2:] / 2
        out[:, :2] = boxes[:, :2] - half
        out[:, 2:] = boxes[:, :2] + half
    return out


def nms(
    boxes: np.ndarray, scores: np.ndarray, iou_threshold: float, classes: np.ndarray | None = None
) -> np.ndarray:
    """Greedy NMS over boxes sorted by descending score; class-wise when classes are given.

    Returns the kept indices in score order. Class-wise NMS offsets each class's boxes by a
    distinct amount so that boxes of different classes never overlap (one pass for all classes).
    """
    if classes is not None and boxes.shape[0]:
        span = float(np.max(boxes) - np.min(boxes)) + 1.0
        boxes = boxes + (classes.astype(np.float32) * span)[:, None]
    order = np.argsort(-scores, kind="stable")
    b = boxes[order].astype(np.float32)
    areas = np.maximum(b[:, 2] - b[:, 0], 0) * np.maximum(b[:, 3] - b[:, 1], 0)
    # All pairwise IoUs at once (n <= pre_nms_top_k), then one cheap row test per kept box.
    w = np.clip(
        np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0]), 0, None
    )
    h = np.clip(
        np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1]), 0, None
    )
    inter = w * h
    overlap = inter > iou_threshold * np.maximum(areas[:, None] + areas[None, :] - inter, 1e-9)
    suppressed = np.zeros(len(order), bool)
    keep: list[int] = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= overlap[i]
    return order[np.asarray(keep, np.int64)]


def detections_message(header, result: DetectionResult, labels: Sequence[str]):
    """One image's detections as a Detection2DArray (or the fallback) with ``header``; each
    detection's ``id`` is its track ID where the model tracks, else its index."""
    msg = DETECTIONS_TYPE(header=header)
    ids = result.ids
    for i in range(len(result)):
        x1, y1, x2, y2 = (float(v) for v in result.boxes[i])
        det = DETECTION_TYPE(header=header, id=str(int(ids[i]) if ids is not None else i))
        det.bbox.center.position.x = (x1 + x2) / 2.0
        det.bbox.center.position.y = (y1 + y2) / 2.0
        det.bbox.size_x = x2 - x1
        det.bbox.size_y = y2 - y1
        hypothesis = DETECTION_RESULT_TYPE()
        hypothesis.hypothesis.class_id = label_of(int(result.classes[i]), labels)
        hypothesis.hypothesis.score = float(result.scores[i])
        det.results.append(hypothesis)
        msg.detections.append(det)
    return msg


class DetectionsFormat(OutputFormat):
    """``format: detections``."""

    name = "detections"
    settings = DetectionConfig

    def message_class(self) -> type:
        return DETECTIONS_TYPE

    def plan(
        self, settings: DetectionConfig, spec: ModelSpec, input_plan: InputPlan
    ) -> DetectionPlan:
        return plan_detections(settings, spec, spec.labels, input_plan)

    def decode(self, plan: DetectionPlan, frame: FrameOutputs):
        return detections_message(
            frame.header, decode_detections(frame.outputs, plan, frame.placement), plan.labels
        )


DETECTIONS = DetectionsFormat()
