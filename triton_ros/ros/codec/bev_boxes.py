"""Per-cell scores of a BEV grid -> 3D boxes: the decoder stage of ``detections3d_decode:
bev_cells``.

Object cells (score above a threshold) are grouped into connected blobs (8-connectivity after
a 3x3 dilation that joins one-cell gaps, ``cv2.connectedComponents``: OpenCV is a requirement
already, scipy is not); each blob of at least ``min_cells`` becomes one box: its footprint is
the rectangle its cells hug best (L-shape fitting by the closeness criterion of Zhang et al.,
"Efficient L-Shape Fitting for Vehicle Detection Using Laser Scanners", IV 2017: over headings
0-89 degrees, the one whose bounding rectangle has the cells nearest its edges; a LiDAR sees one
or two faces of an object, an L of cells, and the minimum-area rectangle of an L is ambiguous: the
one along its hypotenuse has the same area), not grown (the object's extreme points fall anywhere
within their cells, so the extreme cells' centres lie on its faces on average: growing by a cell
lowered the mean BEV IoU from 0.83 to 0.76 on synthetic_lidar's scenes); its top is the highest
point of its
cells, its bottom the median ground under them. Connected components are hard to express in
ONNX, so the model stops at per-cell outputs and this stage (libraries, vectorised per blob)
does the grouping.
"""

from __future__ import annotations

import math

import numpy as np


def cell_boxes(
    scores: np.ndarray,
    heights: np.ndarray,
    ground: np.ndarray,
    grid,
    *,
    threshold: float,
    min_cells: int,
) -> np.ndarray:
    """Boxes [M, 8]: x, y, z, size_x, size_y, size_z, score, yaw (size_x along yaw, yaw in
    (-pi/2, pi/2]); metres in the grid's frame. ``grid``: a
    :class:`~triton_ros.ros.codec.pointcloud.BevGrid`."""
    import cv2  # a requirement of the package

    mask = (scores > threshold).astype(np.uint8)
    # blobs of the mask closed over gaps of up to two cells (a far object's sparse beams, a
    # face seen at a grazing angle, a roof a beam apart from its faces), each box fit to its
    # own cells only
    joined = cv2.dilate(mask, np.ones((5, 5), np.uint8))
    count, labels = cv2.connectedComponents(joined, connectivity=8, ltype=cv2.CV_32S)
    if count <= 1:  # label 0: the background
        return np.zeros((0, 8))
    rows, cols = np.nonzero(mask)
    blob = labels[rows, cols]
    order = np.argsort(blob, kind="stable")
    rows, cols, blob = rows[order], cols[order], blob[order]
    starts = np.flatnonzero(np.r_[True, blob[1:] != blob[:-1]])
    ends = np.r_[starts[1:], len(blob)]
    res = grid.resolution
    out = []
    for a, b in zip(starts, ends):
        if b - a < min_cells:
            continue
        r, c = rows[a:b], cols[a:b]
        (cx, cy), (w, h), yaw = l_shape(grid.cell_centres(r, c), res)
        w, h = max(w, res), max(h, res)  # a row of cells is a cell thick
        if w < h:  # size_x along the longer side
            w, h, yaw = h, w, yaw + math.pi / 2
        yaw = (yaw + math.pi / 2) % math.pi - math.pi / 2
        top = float(heights[r, c].max()) + grid.z_min
        bottom = float(np.median(ground[r, c])) + grid.z_min
        bottom = min(bottom, top)
        out.append(
            (cx, cy, (top + bottom) / 2, w, h, top - bottom, float(scores[r, c].mean()), yaw)
        )
    return suppress_inner(np.array(out, np.float64).reshape(-1, 8))


def suppress_inner(boxes: np.ndarray) -> np.ndarray:
    """Boxes whose centre lies inside a larger box left out (a part of an object, a roof seen
    apart from its faces, is no object of its own)."""
    if len(boxes) < 2:
        return boxes
    order = np.argsort(-(boxes[:, 3] * boxes[:, 4]), kind="stable")
    kept: list[int] = []
    for i in order:
        inside = False
        for j in kept:
            dx, dy = boxes[i, 0] - boxes[j, 0], boxes[i, 1] - boxes[j, 1]
            c, s = math.cos(boxes[j, 7]), math.sin(boxes[j, 7])
            if abs(dx * c + dy * s) <= boxes[j, 3] / 2 and abs(-dx * s + dy * c) <= boxes[j, 4] / 2:
                inside = True
                break
        if not inside:
            kept.append(int(i))
    return boxes[sorted(kept)]


HEADINGS = np.radians(np.arange(0.0, 90.0, 1.0))


def l_shape(xy: np.ndarray, res: float) -> tuple[tuple[float, float], tuple[float, float], float]:
    """((cx, cy), (size along yaw, across), yaw) of the rectangle whose edges the points ``xy``
    [M, 2] lie nearest (Zhang et al.'s closeness criterion, d0 half a cell)."""
    cos, sin = np.cos(HEADINGS), np.sin(HEADINGS)
    c1 = xy[:, :1] * cos + xy[:, 1:] * sin  # [M, T]
    c2 = -xy[:, :1] * sin + xy[:, 1:] * cos
    lo1, hi1, lo2, hi2 = c1.min(0), c1.max(0), c2.min(0), c2.max(0)
    d = np.minimum(np.minimum(hi1 - c1, c1 - lo1), np.minimum(hi2 - c2, c2 - lo2))
    best = int(np.argmax((1.0 / np.maximum(d, res / 2)).sum(0)))
    m1, m2 = (lo1[best] + hi1[best]) / 2, (lo2[best] + hi2[best]) / 2
    c, s = cos[best], sin[best]
    centre = (m1 * c - m2 * s, m1 * s + m2 * c)
    return centre, (hi1[best] - lo1[best], hi2[best] - lo2[best]), float(HEADINGS[best])
