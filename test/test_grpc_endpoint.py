"""Every GRPCInferenceService RPC, with tritonclient over 127.0.0.1 against a real server
process."""

from __future__ import annotations

import queue
from functools import partial

import grpc
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from server_process import MODEL_REPOSITORY, copy_models
from model_factory import identity_graph, write_model
from simple_model import simple_inputs


pytestmark = pytest.mark.integration

NUMERIC_TYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
]


def identity_config(name: str, datatype: str) -> str:
    cfg_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: {cfg_type} dims: [ 3 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {cfg_type} dims: [ 3 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ }}
"""


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = copy_models(tmp_path_factory.mktemp("grpc") / "models")
    for datatype in NUMERIC_TYPES + ["BYTES"]:
        name = f"identity_{datatype.lower()}"
        write_model(repo, name, identity_graph(datatype, ["N", 3]), identity_config(name, datatype))
    return start_module_server("--model-repository", str(repo))


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def sample(datatype: str, rows: int = 2) -> np.ndarray:
    rng = np.random.default_rng(7)
    if datatype == "BYTES":
        return np.array(
            [[f"r{r}c{c}".encode() for c in range(3)] for r in range(rows)], dtype=np.object_
        )
    if datatype == "BOOL":
        return rng.random((rows, 3)) > 0.5
    dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
    if dtype is not None:
        return rng.random((rows, 3)).astype(dtype)
    info = np.iinfo(getattr(np, datatype.lower()))
    return rng.integers(
        info.min, info.max, (rows, 3), dtype=getattr(np, datatype.lower()), endpoint=True
    )


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("detector")
    assert client.is_model_ready("detector", "1")
    assert not client.is_model_ready("no_such_model")
    assert not client.is_model_ready("detector", "7")
    md = client.get_server_metadata()
    assert md.name == "triton"
    assert "model_repository" in md.extensions and "statistics" in md.extensions


def test_model_metadata_and_config(client):
    md = client.get_model_metadata("detector")
    assert md.name == "detector" and list(md.versions) == ["1"]
    assert md.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [
        ("images", "FP32", [-1, 3, 256, 256])
    ]
    assert [(t.name, list(t.shape)) for t in md.outputs] == [
        ("boxes", [-1, 256, 4]),
        ("scores", [-1, 256, 8]),
    ]
    config = client.get_model_config("detector").config
    assert config.max_batch_size == 16
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.instance_group[0].count == 2
    assert config.version_policy.HasField("latest")  # normalized like Triton's
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("no_such_model")
    assert err.value.status() == "StatusCode.NOT_FOUND"


def test_detector_outputs_equal_onnxruntime_run_directly(client):
    images = np.random.default_rng(3).random((3, 3, 256, 256), dtype=np.float32)
    x = grpcclient.InferInput("images", list(images.shape), "FP32")
    x.set_data_from_numpy(images)
    result = client.infer("detector", [x])
    session = ort.InferenceSession(
        str(MODEL_REPOSITORY / "detector" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    boxes, scores = session.run(["boxes", "scores"], {"images": images})
    np.testing.assert_allclose(result.as_numpy("boxes"), boxes, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(result.as_numpy("scores"), scores, rtol=1e-5, atol=1e-6)
    assert result.get_response().model_version == "1"


@pytest.mark.parametrize("datatype", NUMERIC_TYPES + ["BYTES"])
def test_every_datatype_round_trips(client, datatype):
    data = sample(datatype)
    x = grpcclient.InferInput("INPUT0", list(data.shape), datatype)
    x.set_data_from_numpy(data)
    result = client.infer(f"identity_{datatype.lower()}", [x])
    out = result.as_numpy("OUTPUT0")
    assert out.shape == data.shape
    if datatype == "BYTES":
        assert out.tolist() == data.tolist()
    else:
        assert out.dtype == data.dtype
        np.testing.assert_array_equal(out, data)


def test_typed_contents_are_accepted(server):
    """Requests may carry data in InferTensorContents instead of raw_input_contents."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.url))
    request = pb.ModelInferRequest(model_name="simple")
    for name, values in (("INPUT0", range(16)), ("INPUT1", [2] * 16)):
        t = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(values)
    response = stub.ModelInfer(request)
    out0 = np.frombuffer(response.raw_output_contents[0], np.int32)
    np.testing.assert_array_equal(out0, np.arange(16) + 2)
    bytes_request = pb.ModelInferRequest(model_name="identity_bytes")
    t = bytes_request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 3])
    t.contents.bytes_contents.extend([b"a", b"bb", b"ccc"])
    reply = stub.ModelInfer(bytes_request)
    assert reply.outputs[0].datatype == "BYTES"
    assert reply.raw_output_contents[0] == b"\x01\x00\x00\x00a\x02\x00\x00\x00bb\x03\x00\x00\x00ccc"


def test_requested_outputs_and_classification(client):
    inputs = []
    for name, data in (
        ("INPUT0", np.arange(16, dtype=np.int32)[None]),
        ("INPUT1", np.ones((1, 16), np.int32)),
    ):
        t = grpcclient.InferInput(name, [1, 16], "INT32")
        t.set_data_from_numpy(data)
        inputs.append(t)
    only1 = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert only1.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(only1.as_numpy("OUTPUT1"), np.arange(16)[None] - 1)
    top = client.infer(
        "simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    )
    # Triton's classification format: "value:index" for the top-k, largest first.
    assert [v.decode() for v in top.as_numpy("OUTPUT0")[0]] == ["16.000000:15", "15.000000:14"]


def test_stream_infer_answers_every_request(client):
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        expected = {}
        for i in range(10):
            client.async_stream_infer("simple", simple_inputs(grpcclient, i), request_id=str(i))
            expected[str(i)] = 2 * i
        bad = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        bad.set_data_from_numpy(np.zeros((1, 16), np.int32))
        client.async_stream_infer("simple", [bad], request_id="bad")  # missing INPUT1
        seen, errors = {}, []
        for _ in range(11):
            result, error = responses.get(timeout=60)
            if error is not None:
                errors.append(error)
            else:
                seen[result.get_response().id] = int(result.as_numpy("OUTPUT0")[0, 0])
        assert seen == expected
        assert len(errors) == 1 and "missing required input" in errors[0].message()
    finally:
        client.stop_stream()


def test_statistics_have_triton_fields(client):
    data = np.zeros((1, 3, 256, 256), np.float32)
    x = grpcclient.InferInput("images", list(data.shape), "FP32")
    x.set_data_from_numpy(data)
    before = client.get_inference_statistics("detector").model_stats[0]
    for _ in range(3):
        client.infer("detector", [x])
    stats = client.get_inference_statistics("detector", "1").model_stats[0]
    assert stats.name == "detector" and stats.version == "1"
    assert stats.inference_stats.success.count == before.inference_stats.success.count + 3
    assert stats.inference_count == before.inference_count + 3
    assert stats.execution_count >= before.execution_count + 1
    assert stats.last_inference > 0
    assert (
        sum(b.compute_infer.count * b.batch_size for b in stats.batch_stats)
        == stats.inference_count
    )
    assert stats.inference_stats.queue.count == stats.inference_stats.success.count
    every = client.get_inference_statistics()
    assert {s.name for s in every.model_stats} >= {"detector", "simple"}


def test_repository_index_lists_models_and_states(client):
    index = client.get_model_repository_index()
    states = {m.name: (m.version, m.state) for m in index.models}
    assert states["detector"] == ("1", "READY")
    assert states["simple"] == ("1", "READY")


def test_load_and_unload_refused_without_explicit_mode(client):
    with pytest.raises(InferenceServerException) as err:
        client.unload_model("simple")
    assert err.value.status() == "StatusCode.UNAVAILABLE"
    assert client.is_model_ready("simple")


def test_async_infer_many_concurrent_clients(client):
    results: queue.Queue = queue.Queue()
    sent = {}
    for i in range(40):
        client.async_infer(
            "simple",
            simple_inputs(grpcclient, i),
            partial(lambda i, result, error: results.put((i, result, error)), i),
        )
        sent[i] = 2 * i
    for _ in range(40):
        i, result, error = results.get(timeout=60)
        assert error is None
        assert int(result.as_numpy("OUTPUT0")[0, 0]) == sent[i]
