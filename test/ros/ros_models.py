"""Model repositories for the ROS tests: the bundled detector plus small exact models.

- ``detector``: the bundled model; ``detector_b``: a copy under another name (load/unload tests).
- ``decoded``: UINT8 [256,256,3] HWC in, decoded ``detections`` FP32 [100,6] out, like an ensemble
  with its own postprocessing. Row 0 is the box (64,64)-(192,192) of class 2 whose score is the
  mean input pixel / 255 (so the test sees whether raw pixels and the letterbox padding arrived);
  row 1 is a box inside the letterbox padding of a wide image (score 0.8, class 1); the other
  rows are padding (score 0).
- ``classifier``: FP32 [3,32,32] in, ``probs`` [4] out = (mean R, mean G, mean B, 0.5), labels
  red, green, blue, bias.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from model_factory import save  # test/: on sys.path through its conftest
from server_process import copy_models

ROOT = Path(__file__).resolve().parents[2]


def decoded_detector(path: Path) -> None:
    base = np.zeros((1, 100, 6), np.float32)
    base[0, 0] = (64, 64, 192, 192, 0, 2)
    base[0, 1] = (0, 0, 256, 32, 0.8, 1)
    mask = np.zeros((1, 100, 6), np.float32)
    mask[0, 0, 4] = 1.0
    nodes = [
        helper.make_node("Cast", ["images"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["f"], ["m"], axes=[1, 2, 3], keepdims=1),
        helper.make_node("Reshape", ["m", "shape"], ["m3"]),
        helper.make_node("Div", ["m3", "k255"], ["score"]),
        helper.make_node("Mul", ["mask", "score"], ["scores"]),
        helper.make_node("Add", ["base", "scores"], ["detections"]),
    ]
    inits = [
        numpy_helper.from_array(base, "base"),
        numpy_helper.from_array(mask, "mask"),
        numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "shape"),
        numpy_helper.from_array(np.array(255.0, np.float32), "k255"),
    ]
    graph = helper.make_graph(
        nodes,
        "decoded",
        [helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", 256, 256, 3])],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["N", 100, 6])],
        initializer=inits,
    )
    save(graph, path / "1" / "model.onnx")
    (path / "config.pbtxt").write_text(
        'name: "decoded"\nbackend: "onnxruntime"\nmax_batch_size: 16\n'
        'input [ { name: "images" data_type: TYPE_UINT8 dims: [ 256, 256, 3 ] } ]\n'
        'output [ { name: "detections" data_type: TYPE_FP32 dims: [ 100, 6 ] } ]\n'
        "dynamic_batching { max_queue_delay_microseconds: 1000 }\n"
    )


def classifier(path: Path) -> None:
    weights = np.zeros((3, 4), np.float32)
    weights[0, 0] = weights[1, 1] = weights[2, 2] = 1.0
    nodes = [
        helper.make_node("ReduceMean", ["image"], ["means"], axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", ["means", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["probs"]),
    ]
    inits = [
        numpy_helper.from_array(weights, "w"),
        numpy_helper.from_array(np.array([0, 0, 0, 0.5], np.float32), "b"),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 4])],
        initializer=inits,
    )
    save(graph, path / "1" / "model.onnx")
    (path / "labels.txt").write_text("red\ngreen\nblue\nbias\n")
    (path / "config.pbtxt").write_text(
        'name: "classifier"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        'input [ { name: "image" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 32, 32 ] } ]\n'
        'output [ { name: "probs" data_type: TYPE_FP32 dims: [ 4 ]\n'
        '           label_filename: "labels.txt" } ]\n'
        "dynamic_batching { }\n"
    )


def make_repository(dest: Path) -> Path:
    copy_models(dest, "detector", detector_b="detector")
    # The bundled detector batches only what queues while its instances are busy (no delay); here
    # a 20 ms window makes the frames of several cameras meet in one batch on any machine.
    config = dest / "detector" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "max_queue_delay_microseconds: 0", "max_queue_delay_microseconds: 20000"
        )
    )
    config = dest / "detector_b" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "detector"', 'name: "detector_b"'))
    decoded_detector(dest / "decoded")
    classifier(dest / "classifier")
    return dest


# --------------------------------------------------------------------------------------------
# Python models and ensembles (model kinds other than ONNX), and models that fail
# --------------------------------------------------------------------------------------------

PY_VISION_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "image" data_type: TYPE_UINT8 format: FORMAT_NHWC dims: [ 64, 64, 3 ] }} ]
output [
  {{ name: "detections" data_type: TYPE_FP32 dims: [ 4, 6 ] label_filename: "labels.txt" }},
  {{ name: "probs" data_type: TYPE_FP32 dims: [ 3 ] label_filename: "colours.txt" }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{batching}
"""

# Good behaviour: row 0 of detections is the box (16,16)-(48,48) in the 64x64 input, class 1,
# score = mean input byte / 255; other rows padding. probs = mean R, G, B / 255 of the input.
PY_VISION_GOOD = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()
            batched = image.ndim == 4                             # max_batch_size > 0
            image = (image if batched else image[None]).astype(np.float32) / 255.0
            n = image.shape[0]                                    # [N, 64, 64, 3]
            det = np.zeros((n, 4, 6), np.float32)
            det[:, 0, :4] = (16, 16, 48, 48)
            det[:, 0, 4] = image.mean(axis=(1, 2, 3))
            det[:, 0, 5] = 1
            probs = image.mean(axis=(1, 2)).astype(np.float32)    # [N, 3]
            if not batched:
                det, probs = det[0], probs[0]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("detections", det), pb_utils.Tensor("probs", probs)]))
        return responses
"""

# Answers every request with a pb_utils.TritonError (the model stays loaded and READY).
PY_VISION_TRITON_ERROR = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            error=pb_utils.TritonError("camera model rejected the frame: calibration missing"))
            for _ in requests]
"""

# Raises a plain Python exception from execute.
PY_VISION_RAISES = """class TritonPythonModel:
    def execute(self, requests):
        raise ZeroDivisionError("exposure divided by zero in the model")
"""

# Fails to load: initialize raises (the model is UNAVAILABLE with this reason).
PY_VISION_LOAD_FAILS = """class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("no calibration file for this camera model")

    def execute(self, requests):
        return []
"""


def python_vision(
    path: Path, name: str, model_py: str, version: int = 1, *, max_batch_size: int = 8
) -> None:
    """A Python model with a UINT8 HWC image input and both a decoded ``detections`` output and
    a class-score output (``probs``), each with its own labels (``max_batch_size`` 0: no batch
    dimension anywhere)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.pbtxt").write_text(
        PY_VISION_CONFIG.format(
            name=name,
            max_batch_size=max_batch_size,
            batching="dynamic_batching { }" if max_batch_size else "",
        )
    )
    (path / "labels.txt").write_text("zero\none\ntwo\nthree\n")
    (path / "colours.txt").write_text("red\ngreen\nblue\n")
    write_version(path, model_py, version)


def write_version(path: Path, model_py: str, version: int) -> None:
    (path / str(version)).mkdir(parents=True, exist_ok=True)
    (path / str(version) / "model.py").write_text(model_py)


def classify_pipeline(path: Path) -> None:
    """An ensemble of one step over ``classifier`` with labels of its own (``R``, ``G``, ``B``,
    ``bias``), so that a binding must read the ensemble's label file, not the step's."""
    (path / "1").mkdir(parents=True, exist_ok=True)
    (path / "labels.txt").write_text("R\nG\nB\nbias\n")
    (path / "config.pbtxt").write_text(
        'name: "classify_pipeline"\nplatform: "ensemble"\nmax_batch_size: 8\n'
        'input [ { name: "pixels" data_type: TYPE_FP32 format: FORMAT_NCHW\n'
        "          dims: [ 3, 32, 32 ] } ]\n"
        'output [ { name: "classes" data_type: TYPE_FP32 dims: [ 4 ]\n'
        '           label_filename: "labels.txt" } ]\n'
        'ensemble_scheduling { step [ { model_name: "classifier" model_version: -1\n'
        '  input_map { key: "image" value: "pixels" }\n'
        '  output_map { key: "probs" value: "classes" } } ] }\n'
    )


def classifier_batch_of_one(path: Path) -> None:
    """``classifier`` exported the way many detectors are: no batching (max_batch_size 0) and a
    fixed leading batch of one, input [1, 3, 32, 32], output [1, 4]."""
    classifier(path)
    (path / "config.pbtxt").write_text(
        'name: "classifier_b1"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        'input [ { name: "image" data_type: TYPE_FP32 dims: [ 1, 3, 32, 32 ] } ]\n'
        'output [ { name: "probs" data_type: TYPE_FP32 dims: [ 1, 4 ]\n'
        '           label_filename: "labels.txt" } ]\n'
    )


def make_kinds_repository(dest: Path) -> Path:
    """ONNX (detector, classifier, classifier_b1), Python (py_vision, py_vision_nb without
    batching) and ensembles (the bundled detector_pipeline verbatim, classify_pipeline)."""
    copy_models(
        dest,
        "detector",
        "color_detector",
        "detector_pipeline",
        "detector_preprocess",
        "detector_postprocess",
    )
    classifier(dest / "classifier")
    classify_pipeline(dest / "classify_pipeline")
    python_vision(dest / "py_vision", "py_vision", PY_VISION_GOOD)
    python_vision(dest / "py_vision_nb", "py_vision_nb", PY_VISION_GOOD, max_batch_size=0)
    classifier_batch_of_one(dest / "classifier_b1")
    return dest
