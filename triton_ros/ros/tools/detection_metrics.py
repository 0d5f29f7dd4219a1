"""Detections scored against ground truth: recall, precision and mean IoU per camera; masks
scored per class (:func:`class_ious`, :class:`MaskScore`).

Used by the demo (``triton_ros.ros.tools.demo``) and the tests, with the ground truth that
``synthetic_cameras`` publishes next to each image. Frames are matched by header (stamp and
frame_id); within a frame each ground-truth object is matched greedily, best IoU first, to an
unmatched detection of the same class whose IoU is at least ``min_iou`` (0.5, as PASCAL VOC).
Both sides may arrive in any order: :class:`FrameMatcher` holds each until the other comes.

3D detections (``vision_msgs/Detection3DArray`` or the fallback, from a synchronized RGB-D
binding) are scored by :class:`Score3D` against ``synthetic_cameras``' ``ground_truth_3d``: a
ground-truth object counts as found when a detection of its class lies within ``max_error``
(2 %) of its distance from it, greedily, nearest first; the relative errors of the found ones
are summed up too (mean and worst).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np


def message_boxes(msg) -> tuple[np.ndarray, list[str], np.ndarray]:
    """A Detection2DArray (or triton_ros_interfaces/Detections): boxes xyxy [M, 4], class ids,
    scores [M]."""
    boxes, classes, scores = [], [], []
    for d in msg.detections:
        cx, cy = d.bbox.center.position.x, d.bbox.center.position.y
        boxes.append(
            (
                cx - d.bbox.size_x / 2,
                cy - d.bbox.size_y / 2,
                cx + d.bbox.size_x / 2,
                cy + d.bbox.size_y / 2,
            )
        )
        best = max(d.results, key=lambda r: r.hypothesis.score) if d.results else None
        classes.append(best.hypothesis.class_id if best is not None else "")
        scores.append(best.hypothesis.score if best is not None else 0.0)
    return (np.array(boxes, np.float64).reshape(-1, 4), classes, np.array(scores, np.float64))


def iou(a: np.ndarray, b: np.ndarray) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0.0) * max(h, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def match(
    truth_boxes: np.ndarray,
    truth_classes: list[str],
    boxes: np.ndarray,
    classes: list[str],
    *,
    min_iou: float = 0.5,
) -> list[tuple[int, int, float]]:
    """(truth index, detection index, IoU) of the matched pairs, greedy by IoU."""
    pairs = sorted(
        (
            (iou(tb, db), i, j)
            for i, (tb, tc) in enumerate(zip(truth_boxes, truth_classes))
            for j, (db, dc) in enumerate(zip(boxes, classes))
            if tc == dc
        ),
        reverse=True,
    )
    used_t, used_d, out = set(), set(), []
    for value, i, j in pairs:
        if value < min_iou or i in used_t or j in used_d:
            continue
        used_t.add(i)
        used_d.add(j)
        out.append((i, j, value))
    return out


@dataclass
class Score:
    """Running totals of one camera."""

    frames: int = 0
    truths: int = 0
    detections: int = 0
    matched: int = 0
    iou_sum: float = 0.0

    def add(self, truth_msg, detection_msg, *, min_iou: float = 0.5) -> None:
        tb, tc, _ = message_boxes(truth_msg)
        db, dc, _ = message_boxes(detection_msg)
        pairs = match(tb, tc, db, dc, min_iou=min_iou)
        self.frames += 1
        self.truths += len(tc)
        self.detections += len(dc)
        self.matched += len(pairs)
        self.iou_sum += sum(v for _, _, v in pairs)

    @property
    def recall(self) -> float:
        return self.matched / self.truths if self.truths else float("nan")

    @property
    def precision(self) -> float:
        return self.matched / self.detections if self.detections else float("nan")

    @property
    def mean_iou(self) -> float:
        return self.iou_sum / self.matched if self.matched else float("nan")


class FrameMatcher:
    """Pairs ground truth and detections of the same frame (stamp, frame_id), in any order.

    Each side waits at most ``keep`` frames for the other: ground truth of a frame the node
    dropped (superseded or stale, counted in its diagnostics) is forgotten, and so counted in
    ``unanswered``, never as a miss.
    """

    def __init__(self, *, keep: int = 300, min_iou: float = 0.5, on_pair=None, score=None) -> None:
        self.score = score if score is not None else Score()  # or a Score3D
        self._on_pair = on_pair  # called with (truth, detections) of each matched frame
        self.unanswered = 0  # ground truth frames with no detections (dropped by the node)
        self.unknown = 0  # detections with no ground truth (should stay 0)
        self._truths: OrderedDict = OrderedDict()
        self._detections: OrderedDict = OrderedDict()
        self._keep = keep
        self._min_iou = min_iou
        self._lock = threading.Lock()

    @staticmethod
    def key(msg) -> tuple[int, int, str]:
        return (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id)

    def on_truth(self, msg) -> None:
        self._arrive(msg, self._truths, self._detections, truth_first=False)

    def on_detections(self, msg) -> None:
        self._arrive(msg, self._detections, self._truths, truth_first=True)

    def _arrive(self, msg, mine: OrderedDict, other: OrderedDict, *, truth_first: bool) -> None:
        key = self.key(msg)
        with self._lock:
            partner = other.pop(key, None)
            if partner is not None:
                truth, det = (partner, msg) if truth_first else (msg, partner)
                self.score.add(truth, det, min_iou=self._min_iou)
                if self._on_pair is not None:
                    self._on_pair(truth, det)
                return
            mine[key] = msg
            while len(mine) > self._keep:
                mine.popitem(last=False)
                if mine is self._truths:
                    self.unanswered += 1
                else:
                    self.unknown += 1

    def unmatched_truths(self) -> int:
        """Ground truth frames without detections so far: forgotten ones and those waiting."""
        with self._lock:
            return self.unanswered + len(self._truths)

    def unmatched_detections(self) -> int:
        """Detections whose ground truth has not arrived (lost or late): not scored."""
        with self._lock:
            return self.unknown + len(self._detections)

    def snapshot(self):
        with self._lock:
            return replace(self.score)


# ------------------------------------------------------------------------------------------
# Segmentation masks
# ------------------------------------------------------------------------------------------


def mask_overlap(
    pred: np.ndarray, truth: np.ndarray, classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per class ``0 .. classes-1``: pixels where both masks have it (intersection) and where
    either has it (union). Masks are class ids of one shape; ``truth`` below ``classes``."""
    pred = np.asarray(pred, np.int64).reshape(-1)
    truth = np.asarray(truth, np.int64).reshape(-1)
    if pred.shape != truth.shape:
        raise ValueError(f"masks of {pred.size} and {truth.size} pixels")
    width = max(classes, int(pred.max(initial=0)) + 1)
    confusion = np.bincount(truth * width + pred, minlength=classes * width).reshape(-1, width)
    confusion = confusion[:classes]
    inter = np.array([confusion[k, k] for k in range(classes)], np.int64)
    union = confusion.sum(axis=1) + confusion[:, :classes].sum(axis=0) - inter
    return inter, union


def class_ious(pred: np.ndarray, truth: np.ndarray, classes: int) -> np.ndarray:
    """IoU of each class in one pair of masks; NaN for a class in neither."""
    inter, union = mask_overlap(pred, truth, classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.maximum(union, 1), np.nan)


@dataclass
class MaskScore:
    """Running per-class intersections and unions of one camera's masks (IoU over every pixel
    of every frame scored)."""

    classes: int
    frames: int = 0
    inter: np.ndarray | None = None
    union: np.ndarray | None = None

    def add(self, pred: np.ndarray, truth: np.ndarray) -> None:
        inter, union = mask_overlap(pred, truth, self.classes)
        self.frames += 1
        self.inter = inter if self.inter is None else self.inter + inter
        self.union = union if self.union is None else self.union + union

    def ious(self) -> np.ndarray:
        if self.inter is None:
            return np.full(self.classes, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.union > 0, self.inter / np.maximum(self.union, 1), np.nan)


# --------------------------------------------------------------------------------------------
# 3D detections
# --------------------------------------------------------------------------------------------


def message_positions(msg) -> tuple[np.ndarray, list[str], np.ndarray]:
    """A Detection3DArray (or triton_ros_interfaces/Detections3D): positions [M, 3], class ids,
    scores [M]."""
    positions, classes, scores = [], [], []
    for d in msg.detections:
        p = d.bbox.center.position
        positions.append((p.x, p.y, p.z))
        best = max(d.results, key=lambda r: r.hypothesis.score) if d.results else None
        classes.append(best.hypothesis.class_id if best is not None else "")
        scores.append(best.hypothesis.score if best is not None else 0.0)
    return (np.array(positions, np.float64).reshape(-1, 3), classes, np.array(scores, np.float64))


def match_positions(
    truth: np.ndarray,
    truth_classes: list[str],
    found: np.ndarray,
    classes: list[str],
    *,
    max_error: float = 0.02,
) -> list[tuple[int, int, float]]:
    """(truth index, detection index, error / distance) of the pairs of one class whose error is
    at most ``max_error`` of the ground truth's distance from the camera, nearest first."""
    pairs = sorted(
        (float(np.linalg.norm(found[j] - truth[i]) / max(np.linalg.norm(truth[i]), 1e-9)), i, j)
        for i, tc in enumerate(truth_classes)
        for j, dc in enumerate(classes)
        if tc == dc
    )
    used_t, used_d, out = set(), set(), []
    for error, i, j in pairs:
        if error > max_error or i in used_t or j in used_d:
            continue
        used_t.add(i)
        used_d.add(j)
        out.append((i, j, error))
    return out


@dataclass
class Score3D(Score):
    """Running totals of one RGB-D camera (``iou_sum`` unused)."""

    error_sum: float = 0.0  # relative errors of the matched objects
    error_max: float = 0.0
    max_error: float = 0.02

    def add(self, truth_msg, detection_msg, **_) -> None:
        tp, tc, _ = message_positions(truth_msg)
        dp, dc, _ = message_positions(detection_msg)
        pairs = match_positions(tp, tc, dp, dc, max_error=self.max_error)
        self.frames += 1
        self.truths += len(tc)
        self.detections += len(dc)
        self.matched += len(pairs)
        self.error_sum += sum(e for _, _, e in pairs)
        self.error_max = max([self.error_max] + [e for _, _, e in pairs])

    @property
    def mean_error(self) -> float:
        return self.error_sum / self.matched if self.matched else float("nan")


# --------------------------------------------------------------------------------------------
# 3D boxes of a LiDAR: BEV IoU
# --------------------------------------------------------------------------------------------


def bev_iou(a, b) -> float:
    """IoU of two rotated footprints (x, y, size_x, size_y, yaw radians), by OpenCV's rotated
    rectangle intersection."""
    import math

    import cv2

    ra = ((float(a[0]), float(a[1])), (float(a[2]), float(a[3])), math.degrees(float(a[4])))
    rb = ((float(b[0]), float(b[1])), (float(b[2]), float(b[3])), math.degrees(float(b[4])))
    _, inter = cv2.rotatedRectangleIntersection(ra, rb)
    common = float(cv2.contourArea(inter)) if inter is not None and len(inter) > 2 else 0.0
    union = a[2] * a[3] + b[2] * b[3] - common
    return common / union if union > 0 else 0.0


def message_boxes3d(msg) -> tuple[np.ndarray, list[str]]:
    """A Detection3DArray (or the fallback): [M, 6] x, y, z, size_x, size_y, yaw; class ids."""
    import math

    rows, classes = [], []
    for d in msg.detections:
        c, q, s = d.bbox.center.position, d.bbox.center.orientation, d.bbox.size
        yaw = 2 * math.atan2(q.z, q.w) if (q.z or q.w) else 0.0
        rows.append((c.x, c.y, c.z, s.x, s.y, yaw))
        best = max(d.results, key=lambda r: r.hypothesis.score) if d.results else None
        classes.append(best.hypothesis.class_id if best is not None else "")
    return np.array(rows, np.float64).reshape(-1, 6), classes


@dataclass
class ScoreBEV(Score):
    """Running totals of one LiDAR: a ground-truth box is found by the detection of best BEV
    IoU, at least ``min_iou``, greedily (class ignored: the class of a LiDAR box is the
    model's business); ``error_*``: the found boxes' centre errors in metres (3D)."""

    error_sum: float = 0.0
    error_max: float = 0.0

    def add(self, truth_msg, detection_msg, *, min_iou: float = 0.5) -> None:
        truth, _ = message_boxes3d(truth_msg)
        found, _ = message_boxes3d(detection_msg)
        pairs = sorted(
            (
                (bev_iou(truth[i, [0, 1, 3, 4, 5]], found[j, [0, 1, 3, 4, 5]]), i, j)
                for i in range(len(truth))
                for j in range(len(found))
            ),
            reverse=True,
        )
        used_t, used_d = set(), set()
        self.frames += 1
        self.truths += len(truth)
        self.detections += len(found)
        for iou, i, j in pairs:
            if iou < min_iou or i in used_t or j in used_d:
                continue
            used_t.add(i)
            used_d.add(j)
            error = float(np.linalg.norm(truth[i, :3] - found[j, :3]))
            self.matched += 1
            self.iou_sum += iou
            self.error_sum += error
            self.error_max = max(self.error_max, error)

    @property
    def mean_error(self) -> float:
        return self.error_sum / self.matched if self.matched else float("nan")
