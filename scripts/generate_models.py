#!/usr/bin/env python3
"""Generate the bundled ONNX models of model_repository/ with fixed seeds (no downloads).

- ``detector``: a small anchor-free convolutional detector in the style of one-stage detectors
  (six 3x3 convolutions, stride 16, a 1x1 head). Input ``images`` FP32 [N,3,256,256] in [0,1];
  outputs ``boxes`` FP32 [N,256,4] (x1,y1,x2,y2 in input pixels, one box per 16x16 cell) and
  ``scores`` FP32 [N,256,8] (per-class sigmoid scores; the class bias starts at the usual focal-loss
  prior so that only a few boxes pass a threshold). No NMS inside: the ROS node or the ensemble's
  postprocess step does it. About 0.14 GMAC per image. The weights are random (seeded): the model
  is realistic in shape and cost, not trained.
- ``color_detector``: a detector that sees what ``synthetic_cameras`` draws, with weights
  *constructed*, not trained: six classes of solid shapes (``red``, ``green``, ``blue``, ``yellow``
  by hue; ``black`` and ``white`` by brightness, which also works on mono8 cameras) on a mid-grey
  background. Input ``images`` FP32 [N,3,256,256] RGB in [0,1] (the ``detector``'s contract);
  output ``detections`` FP32 [N,6,6]: one row per class, (x1, y1, x2, y2, score, class_id) in
  input pixels (x2, y2 exclusive: the box covers pixels x1..x2-1). Per class a per-pixel margin is
  computed by channel arithmetic (e.g. red: R - max(G, B) - 0.35), averaged over 3x3 (an isolated
  noisy pixel does not pass), thresholded at 0 into a mask; the box is the first and last
  occupied row and column of the mask (ReduceMax + ArgMax). Its score is the mask's fill of the box
  times min(1, pixels / 16): a solid object scores 1, an absent class 0 (its row is all zero).
  At most one object per class per image, which is how the synthetic scenes are drawn; a
  swapped channel order turns red into blue, so a wrong rgb8/bgr8 conversion cannot pass.
- ``color_segmenter``: the per-pixel counterpart of ``color_detector`` (constructed, not
  trained): input ``images`` FP32 [N,3,256,256] RGB in [0,1]; output ``scores`` FP32
  [N,7,256,256], class 0 ``background`` a constant 0 and classes 1-6 (``red`` ... ``white``)
  ``color_detector``'s per-pixel margins averaged over 3x3, positive on the class. The argmax over
  the 7 (the node's ``segmentation`` format) is each pixel's class: the masks that
  ``synthetic_cameras --ground-truth-masks`` publishes.
- ``rgbd_locator``: locates what ``color_detector`` sees in 3D, from a colour image, the aligned
  depth image and the camera matrix (constructed, not trained): inputs ``COLOR`` FP32
  [N,3,256,256] (RGB in [0,1], as ``color_detector``'s ``images``), ``DEPTH`` FP32 [N,1,256,256]
  (metres, 0 where invalid) and ``K`` FP32 [N,3,3] (the camera matrix in those 256x256 pixels);
  output ``detections3d`` FP32 [N,6,8]: one row per colour class, (x, y, z, size_x, size_y,
  size_z, score, class_id) in metres in the camera's optical frame. Per class: the colour mask of
  ``color_detector``; its pixel centroid (u, v); its median valid depth z, taken at every other
  pixel of the mask eroded by one pixel (so that no edge pixel of the background counts; the
  whole mask where the eroded one has no valid depth) by TopK over the masked depths (lower
  median); back-projected with K:
  x = (u - cx) z / fx, y = (v - cy) z / fy. size_x and size_y are the mask's extent at z (size_z
  0: a flat object). Score as ``color_detector``'s, 0 where the class has no valid depth. The
  answer is right only when the depth image is the colour image's: another frame's depth puts
  the objects elsewhere and at other distances.
- ``lidar_detector``: finds obstacles in a LiDAR's bird's-eye-view grid (constructed, not
  trained): input ``BEV`` FP32 [N,5,512,512], the ``pointcloud`` input kind's grid over x and y in
  [-51.2, 51.2) m at 0.2 m a cell (channels occupancy, max_height, min_height, mean_intensity,
  density; heights in metres above z_min). Per cell: the local ground is the lowest point within
  15 cells (3 m; a separable max-pool of the negated min heights, empty cells counted as far
  above), so ground that slopes or a sensor mounted at any height do not matter, and clouds
  without ground points still give their objects a bottom; the cell's object score is
  occupancy x sigmoid(10 (max_height - ground - 0.4 m)). Outputs ``scores``, ``heights`` (the
  max_height channel) and ``ground`` FP32 [N,512,512], which the node's ``detections3d`` format
  (``detections3d_decode: bev_cells``) turns into boxes: connected cells are hard in ONNX.
- ``simple``: Triton's classic two-input example: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 -
  INPUT1, INT32 [N,16].
- ``simple_string``: Triton's string variant of ``simple``: the same sums and differences of
  decimal numbers held in BYTES [N,16] tensors (ONNX Cast string <-> int32 around Add and Sub).

Usage: ``python scripts/generate_models.py [--check]``. ``--check`` regenerates in memory and
fails if the committed files differ in graph or weights.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
REPO = ROOT / "model_repository"
OPSET = 17
IR_VERSION = 8  # loadable by onnxruntime >= 1.10 (JetPack 5 ships 1.1x)

DETECTOR_SIZE = 256
DETECTOR_STRIDE = 16
DETECTOR_CLASSES = ["person", "bicycle", "car", "motorcycle", "bus", "truck", "robot", "pallet"]
COLOR_CLASSES = ["red", "green", "blue", "yellow", "black", "white"]
SEGMENTER_SIZE = 256
SEGMENTER_CLASSES = ["background", *COLOR_CLASSES]  # class ids of color_segmenter's masks
COLOR_MIN_PIXELS = 16.0  # an object smaller than this (model pixels) scores below 1
DETECTOR_CHANNELS = [(3, 16, 2), (16, 32, 2), (32, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1)]


def build_detector(seed: int = 20261129) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "images"
    for i, (cin, cout, stride) in enumerate(DETECTOR_CHANNELS):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"conv{i}.w"),
            numpy_helper.from_array(b, f"conv{i}.b"),
        ]
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"conv{i}.w", f"conv{i}.b"],
                [f"conv{i}"],
                kernel_shape=[3, 3],
                strides=[stride, stride],
                pads=[1, 1, 1, 1],
            )
        )
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"act{i}"]))
        x = f"act{i}"

    n_cls = len(DETECTOR_CLASSES)
    cin = DETECTOR_CHANNELS[-1][1]
    head_w = (rng.standard_normal((4 + n_cls, cin, 1, 1)) * np.sqrt(1.0 / cin)).astype(np.float32)
    prior = -np.log((1 - 0.01) / 0.01)  # focal-loss prior: p = 0.01
    head_b = np.concatenate([np.zeros(4), np.full(n_cls, prior)]).astype(np.float32)
    inits += [numpy_helper.from_array(head_w, "head.w"), numpy_helper.from_array(head_b, "head.b")]
    nodes.append(helper.make_node("Conv", [x, "head.w", "head.b"], ["head"], kernel_shape=[1, 1]))

    grid = DETECTOR_SIZE // DETECTOR_STRIDE
    cells = grid * grid
    ys, xs = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
    offsets = np.stack([xs.reshape(-1), ys.reshape(-1)], axis=-1).astype(np.float32)  # [cells, 2]
    inits += [
        numpy_helper.from_array(np.array([0, 4 + n_cls, cells], np.int64), "flat_shape"),
        numpy_helper.from_array(offsets[None], "grid_xy"),
        numpy_helper.from_array(np.array(DETECTOR_STRIDE, np.float32), "stride"),
        numpy_helper.from_array(np.array(4.0 * DETECTOR_STRIDE, np.float32), "anchor"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(-4.0, np.float32), "clip_lo"),
        numpy_helper.from_array(np.array(4.0, np.float32), "clip_hi"),
        numpy_helper.from_array(np.array([2, 2, n_cls], np.int64), "split_sizes"),
    ]
    nodes += [
        helper.make_node("Reshape", ["head", "flat_shape"], ["head_flat"]),  # [N, 4+C, cells]
        helper.make_node("Transpose", ["head_flat"], ["pred"], perm=[0, 2, 1]),  # [N, cells, 4+C]
        helper.make_node("Split", ["pred", "split_sizes"], ["xy_raw", "wh_raw", "cls_raw"], axis=2),
        helper.make_node("Sigmoid", ["xy_raw"], ["xy_sig"]),
        helper.make_node("Add", ["xy_sig", "grid_xy"], ["xy_cell"]),
        helper.make_node("Mul", ["xy_cell", "stride"], ["center"]),
        helper.make_node("Clip", ["wh_raw", "clip_lo", "clip_hi"], ["wh_clip"]),
        helper.make_node("Exp", ["wh_clip"], ["wh_exp"]),
        helper.make_node("Mul", ["wh_exp", "anchor"], ["wh"]),
        helper.make_node("Mul", ["wh", "half"], ["half_wh"]),
        helper.make_node("Sub", ["center", "half_wh"], ["xy1"]),
        helper.make_node("Add", ["center", "half_wh"], ["xy2"]),
        helper.make_node("Concat", ["xy1", "xy2"], ["boxes"], axis=2),
        helper.make_node("Sigmoid", ["cls_raw"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "detector",
        [
            helper.make_tensor_value_info(
                "images", TensorProto.FLOAT, ["N", 3, DETECTOR_SIZE, DETECTOR_SIZE]
            )
        ],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", cells, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", cells, n_cls]),
        ],
        initializer=inits,
    )
    return _finish(graph)


def _const(name: str, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _color_margins(image: str) -> tuple[list, list]:
    """(initializers, nodes) of the per-pixel colour margins that ``color_detector``,
    ``color_segmenter`` and ``rgbd_locator`` share: the RGB input ``image`` [N,3,H,W] ->
    ``smooth`` [N,6,H,W], > 0 where a pixel (averaged over 3x3) is of the class."""
    n_cls = len(COLOR_CLASSES)
    c = _const
    inits = [
        c("split_rgb", [1, 1, 1], np.int64),
        # Per-class thresholds on the margins below; black and white are absolute levels.
        c("thresholds", np.array([0.35, 0.35, 0.35, 0.35, -0.25, 0.80]).reshape(1, n_cls, 1, 1)),
        c("black_sign", np.array([1, 1, 1, 1, -1, 1]).reshape(1, n_cls, 1, 1)),
    ]
    nodes = [
        helper.make_node("Split", [image, "split_rgb"], ["r", "g", "b"], axis=1),
        helper.make_node("Max", ["g", "b"], ["max_gb"]),
        helper.make_node("Max", ["r", "b"], ["max_rb"]),
        helper.make_node("Max", ["r", "g"], ["max_rg"]),
        helper.make_node("Min", ["r", "g"], ["min_rg"]),
        helper.make_node("Max", ["r", "g", "b"], ["max_rgb"]),
        helper.make_node("Min", ["r", "g", "b"], ["min_rgb"]),
        helper.make_node("Sub", ["r", "max_gb"], ["red"]),  # red: R above G and B
        helper.make_node("Sub", ["g", "max_rb"], ["green"]),
        helper.make_node("Sub", ["b", "max_rg"], ["blue"]),
        helper.make_node("Sub", ["min_rg", "b"], ["yellow"]),  # yellow: R and G above B
        # [N,6,H,W]: "black" holds max(R,G,B), turned into -max(R,G,B) by black_sign, so that
        # margin = value * sign - threshold is > 0 for max(R,G,B) < 0.25; white: min(R,G,B) > 0.8.
        helper.make_node(
            "Concat", ["red", "green", "blue", "yellow", "max_rgb", "min_rgb"], ["values"], axis=1
        ),
        helper.make_node("Mul", ["values", "black_sign"], ["signed"]),
        helper.make_node("Sub", ["signed", "thresholds"], ["margin"]),
        helper.make_node(
            "AveragePool",
            ["margin"],
            ["smooth"],
            kernel_shape=[3, 3],
            strides=[1, 1],
            pads=[1, 1, 1, 1],
        ),
    ]
    return inits, nodes


def _color_mask(image: str) -> tuple[list, list]:
    """(initializers, nodes) of color_detector's per-class masks: ``mask`` [N,6,H,W] (0/1) from
    the RGB input ``image``, with its rows and columns (``y_first_f``... ``x_end``, ``y_end``)
    and ``count`` [N,6]."""
    n_cls = len(COLOR_CLASSES)
    c = _const
    inits, nodes = _color_margins(image)
    inits += [
        c("zero", 0.0),
        c("one", 1.0),
        c("min_pixels", COLOR_MIN_PIXELS),
        c("class_ids", np.arange(n_cls).reshape(1, n_cls)),
        c("hw_axes", [2, 3], np.int64),
        c("last_axis", [2], np.int64),
    ]
    nodes += [
        helper.make_node("Greater", ["smooth", "zero"], ["mask_bool"]),
        helper.make_node("Cast", ["mask_bool"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["mask"], ["rows"], axes=[3], keepdims=0),  # [N,6,H]
        helper.make_node("ReduceMax", ["mask"], ["cols"], axes=[2], keepdims=0),  # [N,6,W]
        helper.make_node("ArgMax", ["rows"], ["y_first"], axis=2, keepdims=0),
        helper.make_node("ArgMax", ["rows"], ["y_last"], axis=2, keepdims=0, select_last_index=1),
        helper.make_node("ArgMax", ["cols"], ["x_first"], axis=2, keepdims=0),
        helper.make_node("ArgMax", ["cols"], ["x_last"], axis=2, keepdims=0, select_last_index=1),
    ]
    for name in ("y_first", "y_last", "x_first", "x_last"):
        nodes.append(helper.make_node("Cast", [name], [name + "_f"], to=TensorProto.FLOAT))
    nodes += [
        helper.make_node("Add", ["x_last_f", "one"], ["x_end"]),  # exclusive right edge
        helper.make_node("Add", ["y_last_f", "one"], ["y_end"]),
        helper.make_node("ReduceSum", ["mask", "hw_axes"], ["count"], keepdims=0),  # [N,6]
    ]
    return inits, nodes


def build_color_detector() -> onnx.ModelProto:
    size, n_cls = DETECTOR_SIZE, len(COLOR_CLASSES)
    inits, nodes = _color_mask("images")
    nodes += [
        helper.make_node("Sub", ["x_end", "x_first_f"], ["box_w"]),
        helper.make_node("Sub", ["y_end", "y_first_f"], ["box_h"]),
        helper.make_node("Mul", ["box_w", "box_h"], ["box_area"]),  # >= 1: never divides by 0
        helper.make_node("Div", ["count", "box_area"], ["fill"]),
        helper.make_node("Div", ["count", "min_pixels"], ["size_ratio"]),
        helper.make_node("Min", ["size_ratio", "one"], ["size_score"]),
        helper.make_node("Mul", ["fill", "size_score"], ["score"]),
        helper.make_node("Min", ["count", "one"], ["present"]),  # 0 for an absent class
        helper.make_node("Mul", ["x_first_f", "present"], ["x1"]),
        helper.make_node("Mul", ["y_first_f", "present"], ["y1"]),
        helper.make_node("Mul", ["x_end", "present"], ["x2"]),
        helper.make_node("Mul", ["y_end", "present"], ["y2"]),
        helper.make_node("Mul", ["present", "class_ids"], ["class_id"]),
    ]
    columns = ["x1", "y1", "x2", "y2", "score", "class_id"]
    for name in columns:
        nodes.append(helper.make_node("Unsqueeze", [name, "last_axis"], [name + "_col"]))
    nodes.append(helper.make_node("Concat", [n + "_col" for n in columns], ["detections"], axis=2))
    graph = helper.make_graph(
        nodes,
        "color_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["N", n_cls, 6])],
        initializer=inits,
    )
    return _finish(graph)


def build_color_segmenter() -> onnx.ModelProto:
    """Per-pixel classes of what ``synthetic_cameras`` draws: ``scores`` [N,7,H,W], class 0
    ``background`` a constant 0 and classes 1-6 the colour margins of ``color_detector`` (> 0
    on the class); the argmax is the pixel's class (background where no margin is positive)."""
    size = SEGMENTER_SIZE
    inits, nodes = _color_margins("images")
    inits.append(_const("background", np.zeros((1, 1, 1, 1), np.float32)))
    nodes += [
        # a zero plane as wide as the image: 0 * the first margin + 0
        helper.make_node("Slice", ["smooth", "first", "second", "channel_axis"], ["plane"]),
        helper.make_node("Mul", ["plane", "background"], ["background_plane"]),
        helper.make_node("Concat", ["background_plane", "smooth"], ["scores"], axis=1),
    ]
    inits += [
        _const("first", [0], np.int64),
        _const("second", [1], np.int64),
        _const("channel_axis", [1], np.int64),
    ]
    graph = helper.make_graph(
        nodes,
        "color_segmenter",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [
            helper.make_tensor_value_info(
                "scores", TensorProto.FLOAT, ["N", len(SEGMENTER_CLASSES), size, size]
            )
        ],
        initializer=inits,
    )
    return _finish(graph)


def build_rgbd_locator() -> onnx.ModelProto:
    size, n_cls = DETECTOR_SIZE, len(COLOR_CLASSES)
    pixels = size * size
    c = _const
    inits, nodes = _color_mask("COLOR")
    inits += [
        c("xs", np.arange(size).reshape(1, 1, 1, size)),
        c("ys", np.arange(size).reshape(1, 1, size, 1)),
        c("far", 1e9),
        c("half_rank", 0.5),
        c("almost_one", 0.99),
        c("flat_shape", [0, n_cls, pixels // 4], np.int64),
        c("even_start", [0, 0], np.int64),
        c("even_end", [size, size], np.int64),
        c("even_step", [2, 2], np.int64),
        c("k_index", [0, 2, 4, 5], np.int64),
        c("k_flat", [0, 9], np.int64),
        c("k_split", [1, 1, 1, 1], np.int64),
        c("rank_axis", [2], np.int64),
        c("depth_zero", 0.0),
    ]
    nodes += [
        helper.make_node("Div", ["count", "min_pixels"], ["size_ratio"]),
        helper.make_node("Min", ["size_ratio", "one"], ["size_score"]),
        helper.make_node("Max", ["count", "one"], ["count_1"]),
        # pixel centroid of each class's mask [N,6]
        helper.make_node("Mul", ["mask", "xs"], ["mask_x"]),
        helper.make_node("Mul", ["mask", "ys"], ["mask_y"]),
        helper.make_node("ReduceSum", ["mask_x", "hw_axes"], ["sum_x"], keepdims=0),
        helper.make_node("ReduceSum", ["mask_y", "hw_axes"], ["sum_y"], keepdims=0),
        helper.make_node("Div", ["sum_x", "count_1"], ["u"]),
        helper.make_node("Div", ["sum_y", "count_1"], ["v"]),
        # Depth is sampled at every other pixel (a quarter of the work for the median): where
        # it is valid, and where the mask eroded by a pixel (its 3x3 all set) holds
        helper.make_node(
            "Slice", ["DEPTH", "even_start", "even_end", "hw_axes", "even_step"], ["depth_s"]
        ),
        helper.make_node(
            "Slice", ["mask", "even_start", "even_end", "hw_axes", "even_step"], ["mask_s"]
        ),
        helper.make_node("Greater", ["depth_s", "depth_zero"], ["valid_bool"]),
        helper.make_node("Cast", ["valid_bool"], ["valid"], to=TensorProto.FLOAT),
        helper.make_node(
            "AveragePool",
            ["mask"],
            ["mask_avg"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Greater", ["mask_avg", "almost_one"], ["core_bool"]),
        helper.make_node("Cast", ["core_bool"], ["core"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["core", "valid"], ["core_valid"]),
        helper.make_node("Mul", ["mask_s", "valid"], ["mask_valid"]),
        helper.make_node("ReduceSum", ["core_valid", "hw_axes"], ["core_count"], keepdims=1),
        helper.make_node("Greater", ["core_count", "zero"], ["use_core"]),  # [N,6,1,1]
        helper.make_node("Where", ["use_core", "core_valid", "mask_valid"], ["sample"]),
        helper.make_node("ReduceSum", ["sample", "hw_axes"], ["samples"], keepdims=0),  # [N,6]
        # median of the sampled depths: the smallest ceil(samples / 2) by TopK, the last of them
        helper.make_node("Greater", ["sample", "zero"], ["sample_bool"]),
        helper.make_node("Expand", ["depth_s", "flat_shape_4d"], ["depth_6"]),
        helper.make_node("Where", ["sample_bool", "depth_6", "far"], ["masked_depth"]),
        helper.make_node("Reshape", ["masked_depth", "flat_shape"], ["depth_flat"]),
        helper.make_node("Sub", ["samples", "one"], ["last_rank"]),
        helper.make_node("Mul", ["last_rank", "half_rank"], ["mid_rank"]),
        helper.make_node("Floor", ["mid_rank"], ["rank_f"]),
        helper.make_node("Max", ["rank_f", "zero"], ["rank_clip"]),
        helper.make_node("Cast", ["rank_clip"], ["rank"], to=TensorProto.INT64),  # [N,6]
        helper.make_node("ReduceMax", ["rank"], ["top_rank"], keepdims=0),  # scalar
        helper.make_node("Add", ["top_rank", "one_i"], ["k_scalar"]),
        helper.make_node("Reshape", ["k_scalar", "one_shape"], ["k"]),
        helper.make_node(
            "TopK", ["depth_flat", "k"], ["smallest", "smallest_i"], axis=2, largest=0, sorted=1
        ),
        helper.make_node("Unsqueeze", ["rank", "rank_axis"], ["rank_3d"]),
        helper.make_node("GatherElements", ["smallest", "rank_3d"], ["median_3d"], axis=2),
        helper.make_node("Squeeze", ["median_3d", "rank_axis"], ["median"]),  # [N,6]
        helper.make_node("Min", ["samples", "one"], ["has_depth"]),
        helper.make_node("Min", ["count", "one"], ["present"]),
        helper.make_node("Mul", ["median", "has_depth"], ["z"]),
        # K [N,3,3] -> fx, cx, fy, cy [N,1]
        helper.make_node("Reshape", ["K", "k_flat"], ["k9"]),
        helper.make_node("Gather", ["k9", "k_index"], ["k4"], axis=1),
        helper.make_node("Split", ["k4", "k_split"], ["fx", "cx", "fy", "cy"], axis=1),
        helper.make_node("Sub", ["u", "cx"], ["du"]),
        helper.make_node("Sub", ["v", "cy"], ["dv"]),
        helper.make_node("Mul", ["du", "z"], ["du_z"]),
        helper.make_node("Mul", ["dv", "z"], ["dv_z"]),
        helper.make_node("Div", ["du_z", "fx"], ["x"]),
        helper.make_node("Div", ["dv_z", "fy"], ["y"]),
        # extent at z, score
        helper.make_node("Sub", ["x_end", "x_first_f"], ["box_w"]),
        helper.make_node("Sub", ["y_end", "y_first_f"], ["box_h"]),
        helper.make_node("Mul", ["box_w", "box_h"], ["box_area"]),  # >= 1: never divides by 0
        helper.make_node("Div", ["count", "box_area"], ["fill"]),
        helper.make_node("Mul", ["box_w", "z"], ["box_w_z"]),
        helper.make_node("Mul", ["box_h", "z"], ["box_h_z"]),
        helper.make_node("Div", ["box_w_z", "fx"], ["size_x"]),
        helper.make_node("Div", ["box_h_z", "fy"], ["size_y"]),
        helper.make_node("Mul", ["x", "zero"], ["size_z"]),
        helper.make_node("Mul", ["fill", "size_score"], ["score_2d"]),
        helper.make_node("Mul", ["score_2d", "has_depth"], ["score"]),
        helper.make_node("Mul", ["present", "has_depth"], ["found"]),
        helper.make_node("Mul", ["found", "class_ids"], ["class_id"]),
    ]
    inits += [
        c("flat_shape_4d", [1, n_cls, 1, 1], np.int64),
        c("one_i", 1, np.int64),
        c("one_shape", [1], np.int64),
    ]
    columns = ["x", "y", "z", "size_x", "size_y", "size_z", "score", "class_id"]
    for name in columns:
        if name in ("score", "class_id"):
            src = name
        else:
            nodes.append(helper.make_node("Mul", [name, "found"], [name + "_found"]))
            src = name + "_found"
        nodes.append(helper.make_node("Unsqueeze", [src, "last_axis"], [name + "_col"]))
    nodes.append(
        helper.make_node("Concat", [n + "_col" for n in columns], ["detections3d"], axis=2)
    )
    graph = helper.make_graph(
        nodes,
        "rgbd_locator",
        [
            helper.make_tensor_value_info("COLOR", TensorProto.FLOAT, ["N", 3, size, size]),
            helper.make_tensor_value_info("DEPTH", TensorProto.FLOAT, ["N", 1, size, size]),
            helper.make_tensor_value_info("K", TensorProto.FLOAT, ["N", 3, 3]),
        ],
        [helper.make_tensor_value_info("detections3d", TensorProto.FLOAT, ["N", n_cls, 8])],
        initializer=inits,
    )
    return _finish(graph)


LIDAR_GRID = 512  # cells a side: [-51.2, 51.2) m at 0.2 m
LIDAR_CHANNELS = ["occupancy", "max_height", "min_height", "mean_intensity", "density"]
LIDAR_GROUND_CELLS = 15  # the local ground: the lowest point within this many cells
LIDAR_MIN_HEIGHT = 0.4  # metres above the local ground an object cell reaches
LIDAR_CLASSES = ["obstacle"]


def build_lidar_detector() -> onnx.ModelProto:
    size, k = LIDAR_GRID, LIDAR_GROUND_CELLS
    inits = [
        _const("starts", [0, 1, 2], np.int64),
        _const("ends", [1, 2, 3], np.int64),
        _const("channel_axis", [1], np.int64),
        _const("one", 1.0),
        _const("far", 100.0),
        _const("min_height", LIDAR_MIN_HEIGHT),
        _const("gain", 10.0),
    ]
    nodes = []
    for i, name in enumerate(("occ", "maxh", "minh")):
        inits += [_const(f"s{i}", [i], np.int64), _const(f"e{i}", [i + 1], np.int64)]
        nodes.append(helper.make_node("Slice", ["BEV", f"s{i}", f"e{i}", "channel_axis"], [name]))
    nodes += [
        helper.make_node("Sub", ["one", "occ"], ["empty"]),
        helper.make_node("Mul", ["empty", "far"], ["empty_far"]),
        helper.make_node("Add", ["minh", "empty_far"], ["low"]),
        helper.make_node("Neg", ["low"], ["neg_low"]),
        helper.make_node(
            "MaxPool", ["neg_low"], ["pool_x"], kernel_shape=[1, k], pads=[0, k // 2, 0, k // 2]
        ),
        helper.make_node(
            "MaxPool", ["pool_x"], ["pool_xy"], kernel_shape=[k, 1], pads=[k // 2, 0, k // 2, 0]
        ),
        helper.make_node("Neg", ["pool_xy"], ["ground4"]),
        helper.make_node("Sub", ["maxh", "ground4"], ["above"]),
        helper.make_node("Sub", ["above", "min_height"], ["margin"]),
        helper.make_node("Mul", ["margin", "gain"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["object"]),
        helper.make_node("Mul", ["object", "occ"], ["scores4"]),
        helper.make_node("Squeeze", ["scores4", "channel_axis"], ["scores"]),
        helper.make_node("Squeeze", ["maxh", "channel_axis"], ["heights"]),
        helper.make_node("Squeeze", ["ground4", "channel_axis"], ["ground"]),
    ]
    inits = [i for i in inits if i.name not in ("starts", "ends")]
    graph = helper.make_graph(
        nodes,
        "lidar_detector",
        [
            helper.make_tensor_value_info(
                "BEV", TensorProto.FLOAT, ["N", len(LIDAR_CHANNELS), size, size]
            )
        ],
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", size, size])
            for n in ("scores", "heights", "ground")
        ],
        initializer=inits,
    )
    return _finish(graph)


def build_simple() -> onnx.ModelProto:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "simple",
        [
            helper.make_tensor_value_info("INPUT0", TensorProto.INT32, ["N", 16]),
            helper.make_tensor_value_info("INPUT1", TensorProto.INT32, ["N", 16]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, ["N", 16]),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.INT32, ["N", 16]),
        ],
    )
    return _finish(graph)


def build_simple_string() -> onnx.ModelProto:
    def cast(src: str, dst: str, to: int):
        return helper.make_node("Cast", [src], [dst], to=to)

    graph = helper.make_graph(
        [
            cast("INPUT0", "a", TensorProto.INT32),
            cast("INPUT1", "b", TensorProto.INT32),
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Sub", ["a", "b"], ["diff"]),
            cast("sum", "OUTPUT0", TensorProto.STRING),
            cast("diff", "OUTPUT1", TensorProto.STRING),
        ],
        "simple_string",
        [
            helper.make_tensor_value_info("INPUT0", TensorProto.STRING, ["N", 16]),
            helper.make_tensor_value_info("INPUT1", TensorProto.STRING, ["N", 16]),
        ],
        [
            helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["N", 16]),
            helper.make_tensor_value_info("OUTPUT1", TensorProto.STRING, ["N", 16]),
        ],
    )
    return _finish(graph)


def _finish(graph) -> onnx.ModelProto:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="triton_ros.generate_models",
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


MODELS = {
    REPO / "detector" / "1" / "model.onnx": build_detector,
    REPO / "color_detector" / "1" / "model.onnx": build_color_detector,
    REPO / "color_segmenter" / "1" / "model.onnx": build_color_segmenter,
    REPO / "rgbd_locator" / "1" / "model.onnx": build_rgbd_locator,
    REPO / "lidar_detector" / "1" / "model.onnx": build_lidar_detector,
    REPO / "simple" / "1" / "model.onnx": build_simple,
    REPO / "simple_string" / "1" / "model.onnx": build_simple_string,
}


def _same(a: onnx.ModelProto, b: onnx.ModelProto) -> bool:
    """Equal graphs and weights (byte-exact serialization may differ across onnx versions)."""
    if [n.op_type for n in a.graph.node] != [n.op_type for n in b.graph.node]:
        return False
    wa = {i.name: numpy_helper.to_array(i) for i in a.graph.initializer}
    wb = {i.name: numpy_helper.to_array(i) for i in b.graph.initializer}
    return wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="verify the committed models instead of writing them"
    )
    args = parser.parse_args(argv)
    status = 0
    for path, build in MODELS.items():
        model = build()
        if args.check:
            if not path.is_file() or not _same(onnx.load(str(path)), model):
                print(f"{path.relative_to(ROOT)} differs from what the generator builds")
                status = 1
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
        print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    if not args.check:
        # The class names of detector, and of color_detector (and detector_pipeline, built on it).
        for model, classes in (
            ("detector", DETECTOR_CLASSES),
            ("color_detector", COLOR_CLASSES),
            ("detector_pipeline", COLOR_CLASSES),
            ("color_segmenter", SEGMENTER_CLASSES),
            ("rgbd_locator", COLOR_CLASSES),
            ("lidar_detector", LIDAR_CLASSES),
        ):
            (REPO / model / "labels.txt").write_text("\n".join(classes) + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
