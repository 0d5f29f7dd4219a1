#!/usr/bin/env python3
"""Reduced-precision versions of the bundled ``color_detector``: FP16 and INT8 (QDQ) ONNX.

- FP16: ONNX Runtime's converter (``onnxruntime.transformers.float16``) turns the graph's
  weights and arithmetic to float16 and keeps FP32 inputs and outputs (``keep_io_types``), so
  the model's contract, and its config.pbtxt, stay those of the FP32 model (the ROS node and
  every client use it unchanged).
- INT8: ONNX Runtime's static quantization (``onnxruntime.quantization.quantize_static``) in
  the QDQ format (QuantizeLinear/DequantizeLinear pairs around the quantized operators: the
  format ONNX Runtime, OpenVINO and TensorRT all read), unsigned 8-bit activations and signed
  8-bit weights, MinMax calibration on frames of ``synthetic_cameras``' scenes (the frames the
  demo's cameras draw, the detector's input: RGB in [0, 1], NCHW, 256x256), after ONNX Runtime's
  recommended pre-processing (``quant_pre_process``: shape inference and graph optimization).

``--repository DIR`` writes a Triton model repository of the three precisions, each served by
ONNX Runtime (``color_detector_<precision>``) and by OpenVINO reading the same ONNX file
(``color_detector_<precision>_openvino``): what bench/backends/bench_backends.py and the tests
serve. ``--out DIR`` writes only the ONNX files (``DIR/color_detector_<precision>.onnx``).
``--model detector`` converts the bundled convolutional ``detector`` too (the same input; its
weights are random, so only its speed means anything). :func:`calibration_frames` is also what
scripts/build_trt_engine.py calibrates TensorRT with; :func:`evaluation_set` and :func:`score`
measure a precision's accuracy against the scenes' ground truth.

Usage: ``python scripts/quantize_color_detector.py --repository /tmp/precision [--frames 64]``
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"
SOURCE = REPOSITORY / "color_detector"
# the bundled models with color_detector's input contract (images FP32 [N,3,256,256] in [0,1])
MODELS = ("color_detector", "detector")
PRECISIONS = ("fp32", "fp16", "int8")
SIZE = 256
CALIBRATION_SEED = 1000  # frames other than the evaluation's (bench: seeds from 0)


def calibration_frames(count: int, *, seed: int = CALIBRATION_SEED, size: int = SIZE) -> np.ndarray:
    """``count`` frames [N, 3, size, size] FP32 in [0, 1] from synthetic camera scenes (a new
    scene every 8 frames, its objects moving between frames), as the detector takes them."""
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    spec = parse_camera(f"calibration/camera:{size}x{size}:rgb8")
    frames = []
    for i in range(count):
        scene = SyntheticScene(spec, seed + i // 8)
        frames.append(scene.render(0.37 * (i % 8))[0])
    return np.stack(frames).transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)


def evaluation_set(count: int, *, seed: int = 0, size: int = SIZE):
    """``count`` frames [N, 3, size, size] (as :func:`calibration_frames`, from other scenes)
    and each frame's ground truth (:class:`~triton_ros.ros.tools.synthetic_cameras.GroundTruth`)."""
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    spec = parse_camera(f"evaluation/camera:{size}x{size}:rgb8")
    frames, truths = [], []
    for i in range(count):
        frame, truth = SyntheticScene(spec, seed + i // 8).render(0.29 * (i % 8))
        frames.append(frame)
        truths.append(truth)
    return np.stack(frames).transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0), truths


def score(detections: np.ndarray, truths, *, score_threshold: float = 0.5, min_iou: float = 0.5):
    """Recall, precision and mean IoU (a :class:`~triton_ros.ros.tools.detection_metrics.Score`) of
    color_detector's ``detections`` [N, 6, 6] against the frames' ground truth, decoded and
    matched as the ROS demo does (the node's decoder at the demo's score threshold 0.5, then
    greedy matching of the same class at IoU >= 0.5)."""
    from triton_ros.ros.codec.detection import DetectionConfig, DetectionPlan, decode_detections
    from triton_ros.ros.tools.detection_metrics import Score, match
    from triton_ros.ros.codec.preprocess import Letterbox
    from triton_ros.ros.tools.synthetic_cameras import CLASS_NAMES

    plan = DetectionPlan(
        config=DetectionConfig(layout="detections", score_threshold=score_threshold),
        layout="detections",
        outputs=("detections",),
        labels=CLASS_NAMES,
        input_width=SIZE,
        input_height=SIZE,
    )
    identity = Letterbox(SIZE, SIZE, 1.0, 1.0, 0.0, 0.0)
    total = Score()
    for rows, truth in zip(detections, truths):
        found = decode_detections({"detections": rows}, plan, identity)
        names = [CLASS_NAMES[int(c)] for c in found.classes]
        truth_names = [CLASS_NAMES[int(c)] for c in truth.classes]
        pairs = match(truth.boxes, truth_names, found.boxes, names, min_iou=min_iou)
        total.frames += 1
        total.truths += len(truth_names)
        total.detections += len(names)
        total.matched += len(pairs)
        total.iou_sum += sum(v for _, _, v in pairs)
    return total


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for index, node in enumerate(model.graph.node):
        # the casts around the operators kept in FP32 are named after their node: unnamed
        # nodes gave clashing names (onnxruntime 1.23, CPython 3.10's)
        node.name = node.name or f"{node.op_type}_{index}"
    converted = OnnxModel(convert_float_to_float16(model, keep_io_types=True))
    converted.topological_sort()  # the converter appends the input casts after their users
    return converted.model


def to_int8(source: Path, dest: Path, frames: np.ndarray) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Frames(CalibrationDataReader):
        def __init__(self) -> None:
            self._rows = iter(frames[i : i + 1] for i in range(len(frames)))

        def get_next(self):
            row = next(self._rows, None)
            return None if row is None else {"images": row}

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared))
        quantize_static(
            str(prepared),
            str(dest),
            Frames(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            per_channel=False,
        )


def build(out: Path, frames: int, model: str = "color_detector") -> dict[str, Path]:
    """The three precisions' ONNX files of bundled ``model`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    source = REPOSITORY / model / "1" / "model.onnx"
    paths = {p: out / f"{model}_{p}.onnx" for p in PRECISIONS}
    shutil.copyfile(source, paths["fp32"])
    onnx.save(to_fp16(onnx.load(str(source))), str(paths["fp16"]))
    to_int8(source, paths["int8"], calibration_frames(frames))
    for path in paths.values():
        onnx.checker.check_model(str(path))
    return paths


def config_for(model: str, name: str, runtime: str) -> str:
    """Bundled ``model``'s configuration, named ``name``, for ``runtime`` (its inputs, outputs,
    instances and batching; one thread per instance: ONNX Runtime's one intra-op thread, and
    for OpenVINO one stream per instance and as many threads)."""
    text = (REPOSITORY / model / "config.pbtxt").read_text(encoding="utf-8")
    body = text[text.index(f'name: "{model}"') :]
    body = body.replace(f'name: "{model}"', f'name: "{name}"', 1)
    if "parameters {" in body:
        body = body[: body.index("parameters {")]
    if runtime == "openvino":
        body = body.replace(
            'backend: "onnxruntime"', 'backend: "openvino"\ndefault_model_filename: "model.onnx"', 1
        )
        found = re.search(r"count:\s*(\d+)", body)
        instances = found.group(1) if found else "1"
        body += (
            'parameters { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } }\n'
            f'parameters {{ key: "NUM_STREAMS" value: {{ string_value: "{instances}" }} }}\n'
            f'parameters {{ key: "INFERENCE_NUM_THREADS" value: {{ string_value: '
            f'"{instances}" }} }}\n'
        )
    else:
        body += 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    return body


def write_repository(repository: Path, frames: int, models=("color_detector",)) -> list[str]:
    """``<model>_<precision>[_openvino]`` model folders; returns the model names."""
    names = []
    for model in models:
        files = build(repository / ".onnx", frames, model)
        for precision, path in files.items():
            for runtime, suffix in (("onnxruntime", ""), ("openvino", "_openvino")):
                name = f"{model}_{precision}{suffix}"
                folder = repository / name
                (folder / "1").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, folder / "1" / "model.onnx")
                labels = REPOSITORY / model / "labels.txt"
                if labels.is_file():
                    shutil.copyfile(labels, folder / "labels.txt")
                (folder / "config.pbtxt").write_text(
                    config_for(model, name, runtime), encoding="utf-8"
                )
                names.append(name)
        shutil.rmtree(repository / ".onnx")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the ONNX files into this folder")
    where.add_argument(
        "--repository", type=Path, help="write a model repository of every precision and runtime"
    )
    parser.add_argument(
        "--frames", type=int, default=64, help="calibration frames for INT8 (default 64)"
    )
    parser.add_argument(
        "--model",
        choices=MODELS,
        action="append",
        help="bundled model to convert (repeatable; default color_detector)",
    )
    args = parser.parse_args(argv)
    if args.frames < 1:
        parser.error("--frames must be at least 1")
    models = tuple(args.model or ("color_detector",))
    if args.out:
        for model in models:
            for precision, path in build(args.out, args.frames, model).items():
                print(f"{model} {precision}: {path} ({path.stat().st_size} bytes)")
    else:
        for name in write_repository(args.repository, args.frames, models):
            print(f"wrote {args.repository / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
