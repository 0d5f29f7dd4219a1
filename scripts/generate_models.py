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
IR_VERSION = 8           # loadable by onnxruntime >= 1.10 (JetPack 5 ships 1.1x)

DETECTOR_SIZE = 256
DETECTOR_STRIDE = 16
DETECTOR_CLASSES = ["person", "bicycle", "car", "motorcycle", "bus", "truck", "robot", "pallet"]
COLOR_CLASSES = ["red", "green", "blue", "yellow", "black", "white"]
SEGMENTER_SIZE = 256
SEGMENTER_CLASSES = ["background", *COLOR_CLASSES]     # class ids of color_segmenter's masks
COLOR_MIN_PIXELS = 16.0          # an object smaller than this (model pixels) scores below 1
DETECTOR_CHANNELS = [(3, 16, 2), (16, 32, 2), (32, 64, 2), (64, 64, 1),
                     (64, 128, 2), (128, 128, 1)]


def build_detector(seed: int = 20261129) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "images"
    for i, (cin, cout, stride) in enumerate(DETECTOR_CHANNELS):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"conv{i}.w"), numpy_helper.from_array(b, f"conv{i}.b")]
        nodes.append(helper.make_node("Conv", [x, f"conv{i}.w", f"conv{i}.b"], [f"conv{i}"],
                                      kernel_shape=[3, 3], strides=[stride, stride],
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"conv{i}"], [f"act{i}"]))
        x = f"act{i}"

    n_cls = len(DETECTOR_CLASSES)
    cin = DETECTOR_CHANNELS[-1][1]
    head_w = (rng.standard_normal((4 + n_cls, cin, 1, 1)) * np.sqrt(1.0 / cin)).astype(np.float32)
    prior = -np.log((1 - 0.01) / 0.01)           # focal-loss prior: p = 0.01
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
        helper.make_node("Reshape", ["head", "flat_shape"], ["head_flat"]),        # [N, 4+C, cells]
        helper.make_node("Transpose", ["head_flat"], ["pred"], perm=[0, 2, 1]),    # [N, cells, 4+C]
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
        nodes, "detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                       ["N", 3, DETECTOR_SIZE, DETECTOR_SIZE])],
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", cells, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", cells, n_cls])],
        initializer=inits)
    return _finish(graph)


def _constant(name: str, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _color_margins() -> tuple[list, list]:
    """The nodes and initializers of the per-pixel colour margins that ``color_detector`` and
    ``color_segmenter`` share: ``images`` [N,3,H,W] -> ``smooth`` [N,6,H,W], > 0 where a pixel
    (averaged over 3x3) is of the class."""
    c, n_cls = _constant, len(COLOR_CLASSES)
    inits = [
        c("split_rgb", [1, 1, 1], np.int64),
        # Per-class thresholds on the margins below; black and white are absolute levels.
        c("thresholds", np.array([0.35, 0.35, 0.35, 0.35, -0.25, 0.80]).reshape(1, n_cls, 1, 1)),
        c("black_sign", np.array([1, 1, 1, 1, -1, 1]).reshape(1, n_cls, 1, 1)),
    ]
    nodes = [
        helper.make_node("Split", ["images", "split_rgb"], ["r", "g", "b"], axis=1),
        helper.make_node("Max", ["g", "b"], ["max_gb"]),
        helper.make_node("Max", ["r", "b"], ["max_rb"]),
        helper.make_node("Max", ["r", "g"], ["max_rg"]),
        helper.make_node("Min", ["r", "g"], ["min_rg"]),
        helper.make_node("Max", ["r", "g", "b"], ["max_rgb"]),
        helper.make_node("Min", ["r", "g", "b"], ["min_rgb"]),
        helper.make_node("Sub", ["r", "max_gb"], ["red"]),           # red: R above G and B
        helper.make_node("Sub", ["g", "max_rb"], ["green"]),
        helper.make_node("Sub", ["b", "max_rg"], ["blue"]),
        helper.make_node("Sub", ["min_rg", "b"], ["yellow"]),        # yellow: R and G above B
        # [N,6,H,W]: "black" holds max(R,G,B), turned into -max(R,G,B) by black_sign, so that
        # margin = value * sign - threshold is > 0 for max(R,G,B) < 0.25; white: min(R,G,B) > 0.8.
        helper.make_node("Concat", ["red", "green", "blue", "yellow", "max_rgb", "min_rgb"],
                         ["values"], axis=1),
        helper.make_node("Mul", ["values", "black_sign"], ["signed"]),
        helper.make_node("Sub", ["signed", "thresholds"], ["margin"]),
        helper.make_node("AveragePool", ["margin"], ["smooth"], kernel_shape=[3, 3],
                         strides=[1, 1], pads=[1, 1, 1, 1]),
    ]
    return nodes, inits


def build_color_detector() -> onnx.ModelProto:
    size, n_cls = DETECTOR_SIZE, len(COLOR_CLASSES)
    c = _constant
    nodes, inits = _color_margins()
    inits += [
        c("zero", 0.0), c("one", 1.0), c("min_pixels", COLOR_MIN_PIXELS),
        c("class_ids", np.arange(n_cls).reshape(1, n_cls)),
        c("hw_axes", [2, 3], np.int64), c("last_axis", [2], np.int64),
    ]
    nodes += [
        helper.make_node("Greater", ["smooth", "zero"], ["mask_bool"]),
        helper.make_node("Cast", ["mask_bool"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["mask"], ["rows"], axes=[3], keepdims=0),   # [N,6,H]
        helper.make_node("ReduceMax", ["mask"], ["cols"], axes=[2], keepdims=0),   # [N,6,W]
        helper.make_node("ArgMax", ["rows"], ["y_first"], axis=2, keepdims=0),
        helper.make_node("ArgMax", ["rows"], ["y_last"], axis=2, keepdims=0, select_last_index=1),
        helper.make_node("ArgMax", ["cols"], ["x_first"], axis=2, keepdims=0),
        helper.make_node("ArgMax", ["cols"], ["x_last"], axis=2, keepdims=0, select_last_index=1),
    ]
    for name in ("y_first", "y_last", "x_first", "x_last"):
        nodes.append(helper.make_node("Cast", [name], [name + "_f"], to=TensorProto.FLOAT))
    nodes += [
        helper.make_node("Add", ["x_last_f", "one"], ["x_end"]),        # exclusive right edge
        helper.make_node("Add", ["y_last_f", "one"], ["y_end"]),
        helper.make_node("ReduceSum", ["mask", "hw_axes"], ["count"], keepdims=0),  # [N,6]
        helper.make_node("Sub", ["x_end", "x_first_f"], ["box_w"]),
        helper.make_node("Sub", ["y_end", "y_first_f"], ["box_h"]),
        helper.make_node("Mul", ["box_w", "box_h"], ["box_area"]),       # >= 1: never divides by 0
        helper.make_node("Div", ["count", "box_area"], ["fill"]),
        helper.make_node("Div", ["count", "min_pixels"], ["size_ratio"]),
        helper.make_node("Min", ["size_ratio", "one"], ["size_score"]),
        helper.make_node("Mul", ["fill", "size_score"], ["score"]),
        helper.make_node("Min", ["count", "one"], ["present"]),          # 0 for an absent class
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
        nodes, "color_detector",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["N", n_cls, 6])],
        initializer=inits)
    return _finish(graph)


def build_color_segmenter() -> onnx.ModelProto:
    """Per-pixel classes of what ``synthetic_cameras`` draws: ``scores`` [N,7,H,W], class 0
    ``background`` a constant 0 and classes 1-6 the colour margins of ``color_detector`` (> 0
    on the class); the argmax is the pixel's class (background where no margin is positive)."""
    size = SEGMENTER_SIZE
    nodes, inits = _color_margins()
    inits.append(_constant("background", np.zeros((1, 1, 1, 1), np.float32)))
    nodes += [
        # a zero plane as wide as the image: 0 * the first margin + 0
        helper.make_node("Slice", ["smooth", "first", "second", "channel_axis"], ["plane"]),
        helper.make_node("Mul", ["plane", "background"], ["background_plane"]),
        helper.make_node("Concat", ["background_plane", "smooth"], ["scores"], axis=1),
    ]
    inits += [_constant("first", [0], np.int64), _constant("second", [1], np.int64),
              _constant("channel_axis", [1], np.int64)]
    graph = helper.make_graph(
        nodes, "color_segmenter",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT,
                                       ["N", len(SEGMENTER_CLASSES), size, size])],
        initializer=inits)
    return _finish(graph)


def build_simple() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "simple",
        [helper.make_tensor_value_info("INPUT0", TensorProto.INT32, ["N", 16]),
         helper.make_tensor_value_info("INPUT1", TensorProto.INT32, ["N", 16])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.INT32, ["N", 16]),
         helper.make_tensor_value_info("OUTPUT1", TensorProto.INT32, ["N", 16])])
    return _finish(graph)


def build_simple_string() -> onnx.ModelProto:
    def cast(src: str, dst: str, to: int):
        return helper.make_node("Cast", [src], [dst], to=to)

    graph = helper.make_graph(
        [cast("INPUT0", "a", TensorProto.INT32), cast("INPUT1", "b", TensorProto.INT32),
         helper.make_node("Add", ["a", "b"], ["sum"]),
         helper.make_node("Sub", ["a", "b"], ["diff"]),
         cast("sum", "OUTPUT0", TensorProto.STRING), cast("diff", "OUTPUT1", TensorProto.STRING)],
        "simple_string",
        [helper.make_tensor_value_info("INPUT0", TensorProto.STRING, ["N", 16]),
         helper.make_tensor_value_info("INPUT1", TensorProto.STRING, ["N", 16])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["N", 16]),
         helper.make_tensor_value_info("OUTPUT1", TensorProto.STRING, ["N", 16])])
    return _finish(graph)


def _finish(graph) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="triton_ros.generate_models")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


MODELS = {
    REPO / "detector" / "1" / "model.onnx": build_detector,
    REPO / "color_detector" / "1" / "model.onnx": build_color_detector,
    REPO / "color_segmenter" / "1" / "model.onnx": build_color_segmenter,
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
    parser.add_argument("--check", action="store_true",
                        help="verify the committed models instead of writing them")
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
        for model, classes in (("detector", DETECTOR_CLASSES), ("color_detector", COLOR_CLASSES),
                               ("detector_pipeline", COLOR_CLASSES),
                               ("color_segmenter", SEGMENTER_CLASSES)):
            (REPO / model / "labels.txt").write_text("\n".join(classes) + "\n", encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
