"""The OpenVINO backend: IR (model.xml + model.bin, exported here from the bundled ONNX models
with OpenVINO's own converter) and ONNX, served by a real server over gRPC and HTTP, the outputs
compared with ONNX Runtime run directly on the source ONNX model; auto-complete, batching
(dynamic and fixed batch dimensions), Triton's parameters, load failures."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino", reason="openvino is not installed (requirements.txt)")

import onnxruntime as ort  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from model_factory import add_sub_graph, save  # noqa: E402
from server_process import MODEL_REPOSITORY  # noqa: E402

pytestmark = pytest.mark.integration

DETECTOR = MODEL_REPOSITORY / "detector" / "1" / "model.onnx"
COLOR = MODEL_REPOSITORY / "color_detector" / "1" / "model.onnx"


def export_ir(onnx_path: Path, folder: Path, **convert) -> Path:
    """model.xml + model.bin from an ONNX model, as a user exports one (weights kept FP32)."""
    folder.mkdir(parents=True, exist_ok=True)
    model = ov.convert_model(str(onnx_path), **convert)
    ov.save_model(model, str(folder / "model.xml"), compress_to_fp16=False)
    return folder / "model.xml"


@pytest.fixture(scope="module")
def ov_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("openvino_models")
    # IR, no config.pbtxt: backend, inputs, outputs and batching all auto-completed
    export_ir(DETECTOR, repo / "ir_auto" / "1")
    (repo / "ir_auto" / "labels.txt").write_text("")
    # IR with a full configuration and Triton's parameters
    export_ir(COLOR, repo / "ir_color" / "1")
    (repo / "ir_color" / "config.pbtxt").write_text("""
backend: "openvino"
max_batch_size: 8
input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 256, 256 ] } ]
output [ { name: "detections" data_type: TYPE_FP32 dims: [ 6, 6 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
parameters { key: "PERFORMANCE_HINT" value: { string_value: "THROUGHPUT" } }
parameters { key: "NUM_STREAMS" value: { string_value: "2" } }
parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "2" } }
""")
    # ONNX read by OpenVINO itself, two inputs and two outputs, latency hint
    save(add_sub_graph("FP32", ["N", 4]), repo / "onnx_add_sub" / "1" / "model.onnx")
    (repo / "onnx_add_sub" / "config.pbtxt").write_text("""
backend: "openvino"
default_model_filename: "model.onnx"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "PERFORMANCE_HINT" value: { string_value: "latency" } }
parameters { key: "NUM_STREAMS" value: { string_value: "1" } }
""")
    # an IR exported with a fixed batch of 1: reshaped to a dynamic batch at load
    export_ir(COLOR, repo / "ir_fixed_batch" / "1", input=[1, 3, 256, 256])
    (repo / "ir_fixed_batch" / "config.pbtxt").write_text(
        (repo / "ir_color" / "config.pbtxt").read_text().replace("count: 2", "count: 1")
    )
    # Triton's fixed batch of max_batch_size, smaller batches padded
    export_ir(COLOR, repo / "ir_padded" / "1", input=[1, 3, 256, 256])
    (repo / "ir_padded" / "config.pbtxt").write_text("""
backend: "openvino"
max_batch_size: 4
input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 256, 256 ] } ]
output [ { name: "detections" data_type: TYPE_FP32 dims: [ 6, 6 ] } ]
parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }
parameters { key: "ENABLE_BATCH_PADDING" value: { string_value: "YES" } }
""")
    for name, text in {
        "bad_hint": 'parameters { key: "PERFORMANCE_HINT" value: { string_value: "FAST" } }',
        "bad_streams": 'parameters { key: "NUM_STREAMS" value: { string_value: "many" } }',
        "bad_kind": "instance_group [ { count: 1 kind: KIND_GPU gpus: [ ] } ]",
        "bad_device": 'parameters { key: "TARGET_DEVICE" value: { string_value: "NPU" } }',
        "bad_input": "",
    }.items():
        shutil.copytree(repo / "ir_color" / "1", repo / name / "1")
        config = (
            'backend: "openvino"\nmax_batch_size: 8\n'
            'input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 256, 256 ] } ]\n'
            'output [ { name: "detections" data_type: TYPE_FP32 dims: [ 6, 6 ] } ]\n'
        )
        if name == "bad_input":
            config = config.replace('name: "images"', 'name: "pixels"')
        if name == "bad_kind":
            text = ""
        (repo / name / "config.pbtxt").write_text(config + text + "\n")
    return repo


@pytest.fixture(scope="module")
def server(start_module_server, ov_repo):
    return start_module_server("--model-repository", str(ov_repo), timeout=120)


def run_onnxruntime(path: Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def images(n: int, seed: int) -> np.ndarray:
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    scene = SyntheticScene(parse_camera("r/c:256x256:rgb8"), seed)
    frames = [scene.render(0.1 * i)[0] for i in range(n)]
    return np.stack(frames).transpose(0, 3, 1, 2).astype(np.float32) / 255.0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_an_auto_completed_ir_matches_onnxruntime_on_the_source_model(server, protocol):
    module = grpcclient if protocol == "grpc" else httpclient
    client = server.client() if protocol == "grpc" else server.http_client()
    config = client.get_model_config("ir_auto")
    config = config.config if protocol == "grpc" else config
    if protocol == "grpc":
        assert config.backend == "openvino" and config.max_batch_size == 4
        assert [i.name for i in config.input] == ["images"]
        assert sorted(o.name for o in config.output) == ["boxes", "scores"]
    x = images(3, 1)
    inp = module.InferInput("images", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("ir_auto", [inp])
    boxes, scores = run_onnxruntime(DETECTOR, {"images": x})
    np.testing.assert_allclose(result.as_numpy("boxes"), boxes, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(result.as_numpy("scores"), scores, rtol=1e-4, atol=1e-4)


def test_two_inputs_two_outputs_onnx_read_by_openvino(server):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 0.25, np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", [3, 4], "FP32"),
        httpclient.InferInput("INPUT1", [3, 4], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = server.http_client().infer("onnx_add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("model", ["ir_color", "ir_fixed_batch"])
def test_concurrent_requests_are_batched_and_match_onnxruntime(server, model):
    client = server.client()
    before = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    batches = [images(1 + i % 2, 10 + i) for i in range(16)]

    def one(x):
        inp = grpcclient.InferInput("images", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        return server.client().infer(model, [inp]).as_numpy("detections")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, batches))
    for x, got in zip(batches, results):
        (want,) = run_onnxruntime(COLOR, {"images": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    after = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    assert executions < len(batches), "no two requests ran in one batch"


def test_fixed_batch_with_padding_answers_smaller_batches(server):
    x = images(3, 5)
    inp = grpcclient.InferInput("images", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    got = server.client().infer("ir_padded", [inp]).as_numpy("detections")
    (want,) = run_onnxruntime(COLOR, {"images": x})
    assert got.shape == (3, 6, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_load_failures_say_what_is_wrong_and_the_rest_serves(server):
    states = {
        m.name: (m.state, m.reason) for m in server.client().get_model_repository_index().models
    }
    expected = {
        "bad_hint": "LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got fast",
        "bad_streams": "AUTO/NUMA/<int_value>, got many",
        "bad_device": "TARGET_DEVICE 'NPU' is not available",
        "bad_input": "unexpected inference input 'pixels', allowed inputs are: images",
    }
    for name, reason in expected.items():
        assert states[name][0] == "UNAVAILABLE", (name, states[name])
        assert reason in states[name][1], (name, states[name])
    assert server.client().is_model_ready("ir_color")
    assert "Traceback" not in server.log()


def test_parameters_reach_the_compiled_model(explicit_core, ov_repo):
    repo = explicit_core.repo_path
    shutil.copytree(ov_repo / "ir_color", repo / "tuned")
    explicit_core.load_model("tuned")
    compiled = explicit_core.get_model("tuned").backend.compiled
    assert str(compiled.get_property("PERFORMANCE_HINT")) == "THROUGHPUT"
    assert int(compiled.get_property("NUM_STREAMS")) == 2
    assert int(compiled.get_property("INFERENCE_NUM_THREADS")) == 2
    # FP32 compute unless HINT_BF16 (OpenVINO's CPU default is bf16 on CPUs that have it)
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    shutil.copytree(ov_repo / "ir_color", repo / "bf16")
    config = repo / "bf16" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "HINT_BF16" value: { string_value: "YES" } }\n'
    )
    explicit_core.load_model("bf16")
    compiled = explicit_core.get_model("bf16").backend.compiled
    has_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == (
        ov.Type.bf16 if has_bf16 else ov.Type.f32
    )
    shutil.copytree(ov_repo / "onnx_add_sub", repo / "latency")
    explicit_core.load_model("latency")
    compiled = explicit_core.get_model("latency").backend.compiled
    assert str(compiled.get_property("PERFORMANCE_HINT")) == "LATENCY"


def test_kind_gpu_is_refused_as_triton_does(explicit_core, ov_repo):
    from triton_ros.core.backends.openvino_backend import OpenVINOModel
    from triton_ros.core.errors import TritonRosError
    from triton_ros.core.model_config import load_model_config

    folder = ov_repo / "ir_color"
    config = load_model_config("ir_color", folder)
    model = OpenVINOModel(config, version=1, model_path=folder, version_path=folder / "1")
    with pytest.raises(TritonRosError) as err:
        model.create_instance(name="x", kind="KIND_GPU", device_id=0)
    assert "supports only Kind CPU and AUTO" in err.value.message
