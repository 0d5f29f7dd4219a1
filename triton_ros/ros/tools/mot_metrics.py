"""CLEAR-MOT scores of a tracker against ground-truth identities (Bernardin and Stiefelhagen,
"Evaluating Multiple Object Tracking Performance: The CLEAR MOT Metrics", 2008).

:class:`ClearMot` takes one frame at a time: the ground truth's boxes with their identities and
the tracker's boxes with their track IDs. Per frame, as the paper and py-motmetrics do:

1. a ground-truth object matched in an earlier frame keeps its track if that track is still
   there and overlaps it (IoU >= ``iou_threshold``);
2. the others are matched to the remaining tracks by the assignment that maximises the total
   IoU over pairs of at least ``iou_threshold`` (the Hungarian algorithm, as
   :func:`scipy.optimize.linear_sum_assignment` where scipy is installed; else an exhaustive
   search over the few objects of a frame, and greedy, best pair first, past
   :data:`EXHAUSTIVE_MAX` of them);
3. a ground-truth object matched to another track than its last one is an *ID switch*; an
   unmatched ground-truth object a *miss* (false negative), an unmatched track a *false
   positive*.

MOTA = 1 - (misses + false positives + ID switches) / ground-truth objects; MOTP the mean IoU
of the matches. Written here rather than taken from py-motmetrics (the maintained library)
because that one needs pandas and scipy, some 100 MB, for these fifty lines of counting; the
tests check this implementation against hand-counted sequences (test/test_mot_metrics.py).
Plain numpy; no ROS.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

EXHAUSTIVE_MAX = 7


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4] (x1, y1, x2, y2)."""
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-12)


def _assign(scores: np.ndarray) -> list[tuple[int, int]]:
    """Pairs (row, column) maximising the summed score over entries > 0."""
    rows, cols = scores.shape
    if rows == 0 or cols == 0:
        return []
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError:
        linear_sum_assignment = None
    if linear_sum_assignment is not None:
        r, c = linear_sum_assignment(-scores)
        return [(int(i), int(j)) for i, j in zip(r, c) if scores[i, j] > 0]
    if min(rows, cols) <= EXHAUSTIVE_MAX and max(rows, cols) <= EXHAUSTIVE_MAX:
        best, best_pairs = -1.0, []
        if rows <= cols:
            for perm in itertools.permutations(range(cols), rows):
                pairs = [(i, j) for i, j in enumerate(perm) if scores[i, j] > 0]
                total = sum(scores[i, j] for i, j in pairs)
                if total > best:
                    best, best_pairs = total, pairs
        else:
            for perm in itertools.permutations(range(rows), cols):
                pairs = [(i, j) for j, i in enumerate(perm) if scores[i, j] > 0]
                total = sum(scores[i, j] for i, j in pairs)
                if total > best:
                    best, best_pairs = total, pairs
        return best_pairs
    pairs, used_r, used_c = [], set(), set()
    for flat in np.argsort(-scores, axis=None, kind="stable"):
        i, j = divmod(int(flat), cols)
        if scores[i, j] <= 0:
            break
        if i not in used_r and j not in used_c:
            pairs.append((i, j))
            used_r.add(i)
            used_c.add(j)
    return pairs


@dataclass
class ClearMot:
    """CLEAR-MOT counts of one camera, frame after frame."""

    iou_threshold: float = 0.5
    frames: int = 0
    objects: int = 0  # ground-truth objects over all frames
    matches: int = 0
    misses: int = 0
    false_positives: int = 0
    id_switches: int = 0
    iou_sum: float = 0.0
    _last: dict = field(default_factory=dict, repr=False)  # ground-truth id -> track id

    def update(self, truth_boxes, truth_ids, track_boxes, track_ids) -> None:
        """One frame: ground-truth boxes [N, 4] and identities [N]; tracker boxes [M, 4] and
        track IDs [M] (any hashable)."""
        truth_ids = list(truth_ids)
        track_ids = list(track_ids)
        ious = iou_matrix(truth_boxes, track_boxes)
        valid = ious >= self.iou_threshold
        matched: dict[int, int] = {}  # truth row -> track row
        for i, gt in enumerate(truth_ids):  # 1. correspondences kept
            last = self._last.get(gt)
            if last is not None and last in track_ids:
                j = track_ids.index(last)
                if valid[i, j] and j not in matched.values():
                    matched[i] = j
        free_r = [i for i in range(len(truth_ids)) if i not in matched]
        free_c = [j for j in range(len(track_ids)) if j not in matched.values()]
        sub = np.where(valid[np.ix_(free_r, free_c)], ious[np.ix_(free_r, free_c)], 0.0)
        for a, b in _assign(sub):  # 2. the rest, by the best assignment
            matched[free_r[a]] = free_c[b]
        for i, j in matched.items():  # 3. switches
            gt, tr = truth_ids[i], track_ids[j]
            if gt in self._last and self._last[gt] != tr:
                self.id_switches += 1
            self._last[gt] = tr
            self.iou_sum += float(ious[i, j])
        self.frames += 1
        self.objects += len(truth_ids)
        self.matches += len(matched)
        self.misses += len(truth_ids) - len(matched)
        self.false_positives += len(track_ids) - len(matched)

    @property
    def mota(self) -> float:
        if not self.objects:
            return 1.0
        return 1.0 - (self.misses + self.false_positives + self.id_switches) / self.objects

    @property
    def motp(self) -> float:
        """Mean IoU of the matches (higher is better)."""
        return self.iou_sum / self.matches if self.matches else 0.0

    @property
    def switches_per_100(self) -> float:
        """ID switches per 100 ground-truth object-frames."""
        return 100.0 * self.id_switches / self.objects if self.objects else 0.0

    def summary(self) -> str:
        return (
            f"MOTA {self.mota:.3f}, ID switches {self.id_switches} "
            f"({self.switches_per_100:.2f} per 100 object-frames), misses {self.misses}, "
            f"false positives {self.false_positives}, MOTP {self.motp:.3f} over "
            f"{self.frames} frames, {self.objects} objects"
        )


def message_ids(msg) -> list[str]:
    """The ``id`` of each detection of a Detection2DArray (or the fallback)."""
    return [d.id for d in msg.detections]


def score_pairs(pairs, iou_threshold: float = 0.5) -> ClearMot:
    """CLEAR-MOT of one camera from (ground truth, detections) message pairs of the same frames
    (detection_metrics.FrameMatcher's), taken in stamp order: the ground truth's ``id`` is the
    object's identity, the detections' ``id`` the track's."""
    from .detection_metrics import message_boxes

    mot = ClearMot(iou_threshold=iou_threshold)
    for truth, det in sorted(
        pairs, key=lambda p: (p[0].header.stamp.sec, p[0].header.stamp.nanosec)
    ):
        mot.update(
            message_boxes(truth)[0], message_ids(truth), message_boxes(det)[0], message_ids(det)
        )
    return mot
