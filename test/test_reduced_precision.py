"""FP16 and INT8 (QDQ) versions of the bundled color_detector, made by
scripts/quantize_color_detector.py (INT8 calibrated on synthetic camera frames), served by ONNX
Runtime and by OpenVINO from one server: each answers as its runtime does run directly, and
finds the objects of synthetic_cameras' scenes (recall, mean IoU against the ground truth, scored
as the ROS demo scores) within 0.05 of FP32."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("openvino", reason="openvino is not installed (requirements.txt)")

import onnxruntime as ort  # noqa: E402
import openvino as ov  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from server_process import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import quantize_color_detector as quant  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("precision")
    names = quant.write_repository(repo, 16)
    assert sorted(names) == sorted(
        f"color_detector_{p}{s}" for p in ("fp32", "fp16", "int8") for s in ("", "_openvino")
    )
    return repo


@pytest.fixture(scope="module")
def server(start_module_server, repository):
    return start_module_server("--model-repository", str(repository), timeout=180)


def test_the_models_are_what_their_names_say(repository):
    fp16 = onnx.load(str(repository / "color_detector_fp16" / "1" / "model.onnx"))
    int8 = onnx.load(str(repository / "color_detector_int8" / "1" / "model.onnx"))
    # FP16 weights and arithmetic, FP32 at the edges (the same contract as FP32)
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in fp16.graph.initializer)
    assert fp16.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    ops = [n.op_type for n in int8.graph.node]
    assert ops.count("QuantizeLinear") >= 10 and ops.count("DequantizeLinear") >= 10
    # the input itself is quantized to 8 bits: the calibration saw pixel values in [0, 1]
    (scale,) = [i for i in int8.graph.initializer if i.name == "images_scale"]
    assert 0.9 / 255 < onnx.numpy_helper.to_array(scale) < 1.1 / 255


def direct(model_file: Path, runtime: str, frames: np.ndarray) -> np.ndarray:
    if runtime == "onnxruntime":
        session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
        run = lambda x: session.run(None, {"images": x})[0]  # noqa: E731
    else:
        compiled = ov.Core().compile_model(
            str(model_file), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
        )
        request = compiled.create_infer_request()
        run = lambda x: request.infer({"images": x})[0]  # noqa: E731
    return np.concatenate([run(frames[i : i + 8]) for i in range(0, len(frames), 8)])


def served(server, name: str, frames: np.ndarray, protocol: str) -> np.ndarray:
    module = grpcclient if protocol == "grpc" else httpclient
    client = server.client() if protocol == "grpc" else server.http_client()
    out = []
    for i in range(0, len(frames), 8):
        x = frames[i : i + 8]
        inp = module.InferInput("images", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out.append(client.infer(name, [inp]).as_numpy("detections"))
    return np.concatenate(out)


@pytest.mark.parametrize("runtime, protocol", [("onnxruntime", "grpc"), ("openvino", "http")])
def test_each_precision_answers_as_its_runtime_and_keeps_its_accuracy(
    server, repository, runtime, protocol
):
    frames, truths = quant.evaluation_set(48)
    suffix = "_openvino" if runtime == "openvino" else ""
    scores = {}
    for precision in ("fp32", "fp16", "int8"):
        name = f"color_detector_{precision}{suffix}"
        answers = served(server, name, frames, protocol)
        want = direct(repository / name / "1" / "model.onnx", runtime, frames)
        np.testing.assert_allclose(answers, want, rtol=1e-5, atol=1e-4, err_msg=name)
        scores[precision] = quant.score(answers, truths)
    fp32 = scores["fp32"]
    assert fp32.truths == sum(len(t.classes) for t in truths) > 100
    assert fp32.recall == 1.0 and fp32.precision == 1.0 and fp32.mean_iou > 0.95
    for precision in ("fp16", "int8"):
        s = scores[precision]
        assert s.recall >= fp32.recall - 0.05, (precision, s)
        assert s.mean_iou >= fp32.mean_iou - 0.05, (precision, s)
        assert s.precision >= 0.95, (precision, s)
