"""Hostile gRPC clients against a real triton-ros-server (raw grpc stubs and tritonclient).

Every case sends one malformed or hostile message, asserts the status tritonserver gives, and
then checks that a normal inference right after it still succeeds with the right answer (so a
case that broke the server, or left it stalled, fails). Model control cases also check that the
server stays ready and that no temporary folder of a ``file:`` override is left behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from server_process import MODEL_REPOSITORY, copy_models
from simple_model import simple_array, simple_inputs


pytestmark = pytest.mark.integration

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND  # an unknown model, as tritonserver
INTERNAL = grpc.StatusCode.INTERNAL
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    """Explicit model control on a private repository copy, with a private TMPDIR so that the
    temporary folders of file overrides can be counted."""
    base = tmp_path_factory.mktemp("adversarial_grpc")
    repo = copy_models(base / "models")
    tmp = base / "tmp"
    tmp.mkdir()
    proc = start_module_server(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--load-model",
        "simple_string",
        "--allow-client-shm",
        "true",
        env={"TMPDIR": str(tmp)},
        quiet=True,
    )
    proc.repo, proc.tmp = repo, tmp
    return proc


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def _simple_request(
    a: np.ndarray | None = None, b: np.ndarray | None = None
) -> pb.ModelInferRequest:
    a = np.arange(16, dtype=np.int32).reshape(1, 16) if a is None else a
    b = np.ones((1, 16), np.int32) if b is None else b
    msg = pb.ModelInferRequest(model_name="simple")
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        msg.inputs.add(name=name, datatype="INT32", shape=list(arr.shape))
        msg.raw_input_contents.append(arr.tobytes())
    return msg


def assert_healthy(server, stub) -> None:
    """A normal request right after a hostile one succeeds with the right answer, and the
    server is live and ready."""
    a = np.arange(16, dtype=np.int32).reshape(1, 16) * 3
    reply = stub.ModelInfer(_simple_request(a), timeout=30)
    out = np.frombuffer(reply.raw_output_contents[0], np.int32).reshape(1, 16)
    np.testing.assert_array_equal(out, a + 1)
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
    assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
    assert server.proc.poll() is None


def call_status(fn, request) -> tuple[grpc.StatusCode, str]:
    try:
        fn(request, timeout=30)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return OK, ""


def leftover_temp_dirs(server) -> list[str]:
    return sorted(p.name for p in Path(server.tmp).iterdir() if p.name.startswith("triton_ros_"))


# -------------------------------------------------------------------------------------------
# Inference requests
# -------------------------------------------------------------------------------------------


def _with_shape(shape, raw: bytes = b"", datatype: str = "INT32") -> pb.ModelInferRequest:
    msg = _simple_request()
    del msg.inputs[0].shape[:]
    msg.inputs[0].shape.extend(shape)
    msg.inputs[0].datatype = datatype
    msg.raw_input_contents[0] = raw
    return msg


def _typed_contents(shape) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="simple")
    msg.inputs.add(name="INPUT0", datatype="INT32", shape=shape)
    msg.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    msg.inputs[1].contents.int_contents.extend([1] * 16)
    return msg


def _param(msg: pb.ModelInferRequest, key: str, **value) -> pb.ModelInferRequest:
    msg.parameters[key].MergeFrom(pb.InferParameter(**value))
    return msg


def _output_param(key: str, **value) -> pb.ModelInferRequest:
    msg = _simple_request()
    out = msg.outputs.add(name="OUTPUT0")
    out.parameters[key].MergeFrom(pb.InferParameter(**value))
    return msg


HOSTILE_INFER = {
    "overflowing shape [0, 2**62, 2**62]": (_with_shape([0, 2**62, 2**62]), INVALID, "overflows"),
    "overflowing shape, typed contents": (
        _typed_contents([2**31, 2**31, 2**31]),
        INVALID,
        "overflows",
    ),
    "overflowing shape, BYTES": (
        _with_shape([0, 2**62, 2**62], datatype="BYTES"),
        INVALID,
        "overflows",
    ),
    "40 dimensions": (_with_shape([1] * 40), INVALID, "dimensions"),
    "negative dimension": (_with_shape([1, -16]), INVALID, "dimensions should be specified"),
    "max int64 dimension": (_with_shape([1, 2**63 - 1]), INVALID, "overflows"),
    "raw size mismatch": (_with_shape([1, 16], raw=b"\0" * 7), INVALID, "byte size mismatch"),
    "unknown datatype": (
        _with_shape([1, 16], raw=b"\0" * 64, datatype="FP128"),
        INVALID,
        "invalid datatype",
    ),
    "BF16 datatype": (_with_shape([1, 16], raw=b"\0" * 32, datatype="BF16"), INVALID, "BF16"),
    "string classification parameter": (
        _output_param("classification", string_param="3"),
        INVALID,
        "classification",
    ),
    "negative classification": (
        _output_param("classification", int64_param=-2),
        INVALID,
        "classification",
    ),
    "bool classification": (
        _output_param("classification", bool_param=True),
        INVALID,
        "classification",
    ),
    "string priority": (
        _param(_simple_request(), "priority", string_param="high"),
        INVALID,
        "priority",
    ),
    "negative priority": (
        _param(_simple_request(), "priority", int64_param=-1),
        INVALID,
        "priority",
    ),
    "bool timeout": (_param(_simple_request(), "timeout", bool_param=True), INVALID, "timeout"),
    "string sequence_start": (
        _param(_simple_request(), "sequence_start", string_param="yes"),
        INVALID,
        "sequence_start",
    ),
    "double sequence_id": (
        _param(_simple_request(), "sequence_id", double_param=1.5),
        INVALID,
        "sequence_id",
    ),
    "reserved triton_ parameter": (
        _param(_simple_request(), "triton_frobnicate", bool_param=True),
        INVALID,
        "reserved",
    ),
    "string triton_enable_empty_final_response": (
        _param(_simple_request(), "triton_enable_empty_final_response", string_param="yes"),
        INVALID,
        "triton_enable_empty_final_response",
    ),
    "raw contents count mismatch": (
        (lambda m: (m.raw_input_contents.append(b"\0" * 64), m)[1])(_simple_request()),
        INVALID,
        "raw input contents",
    ),
    "duplicate input": (
        (
            lambda m: (
                m.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16]),
                m.raw_input_contents.append(b"\0" * 64),
                m,
            )[2]
        )(_simple_request()),
        INVALID,
        "already exists",
    ),
    "typed contents count lies": (_typed_contents([1, 17]), INVALID, "unexpected number"),
    "model version not a number": (
        pb.ModelInferRequest(model_name="simple", model_version="1e3"),
        INVALID,
        "version",
    ),
    "model version below -1": (
        pb.ModelInferRequest(model_name="simple", model_version="-7"),
        INVALID,
        "version",
    ),
    "unknown requested output": (
        (lambda m: (m.outputs.add(name="NOPE"), m)[1])(_simple_request()),
        INVALID,
        "unexpected inference output",
    ),
    "unknown model with 8 MB payload": (
        pb.ModelInferRequest(
            model_name="no_such_model",
            inputs=[
                pb.ModelInferRequest.InferInputTensor(name="X", datatype="UINT8", shape=[8 << 20])
            ],
            raw_input_contents=[b"\0" * (8 << 20)],
        ),
        NOT_FOUND,
        "unknown model",
    ),
    "20 000-character model name": (
        pb.ModelInferRequest(model_name="m" * 20000),
        NOT_FOUND,
        "more characters",
    ),
    "wrong datatype for the model": (
        _with_shape([1, 16], raw=b"\0" * 64, datatype="FP32"),
        INVALID,
        "data-type",
    ),
    "batch larger than max_batch_size": (
        _simple_request(np.zeros((9, 16), np.int32), np.zeros((9, 16), np.int32)),
        INVALID,
        "batch-size must be <= 8",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE_INFER))
def test_hostile_infer_request_gets_its_status(server, stub, case):
    request, code, fragment = HOSTILE_INFER[case]
    got, details = call_status(stub.ModelInfer, request)
    assert got == code, (case, got, details)
    assert fragment.lower() in details.lower(), (case, details)
    assert "Traceback" not in details and str(server.tmp) not in details
    assert_healthy(server, stub)


def test_malformed_bytes_tensor_is_invalid(server, stub):
    msg = pb.ModelInferRequest(model_name="simple_string")
    for name in ("INPUT0", "INPUT1"):
        msg.inputs.add(name=name, datatype="BYTES", shape=[1, 16])
        msg.raw_input_contents.append(b"\xff\xff\xff\x7f" + b"1")  # length runs past the end
    got, details = call_status(stub.ModelInfer, msg)
    assert got == INVALID and "BYTES" in details
    assert_healthy(server, stub)


def test_sequence_parameters_are_ignored_on_models_without_sequence_batching(server, stub):
    """tritonserver ignores sequence_id/start/end on a model without sequence_batching."""
    client = grpcclient.InferenceServerClient(server.url)
    a = simple_array()
    inputs = simple_inputs(grpcclient, a)
    for kwargs in (
        {"sequence_id": 42, "sequence_start": True},
        {"sequence_id": "robot-1", "sequence_end": True},
    ):
        result = client.infer("simple", inputs, **kwargs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    client.close()
    assert_healthy(server, stub)


def test_user_parameters_of_every_type_reach_the_request(server, stub):
    msg = _simple_request()
    _param(msg, "tag", string_param="bob")
    _param(msg, "gain", double_param=0.5)
    _param(msg, "n", int64_param=-3)
    _param(msg, "flag", bool_param=False)
    reply = stub.ModelInfer(msg, timeout=30)
    assert len(reply.raw_output_contents) == 2
    assert_healthy(server, stub)


# -------------------------------------------------------------------------------------------
# Log settings
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, value, code",
    [
        ("log_verbose_level", {"uint32_param": 2**32 - 1}, INVALID),
        ("log_verbose_level", {"string_param": "1e20"}, INVALID),
        ("log_verbose_level", {"bool_param": True}, INVALID),
        ("log_info", {"uint32_param": 1}, INVALID),
        ("log_format", {"string_param": "%(message)s" * 1000}, INVALID),
        ("log_file", {"string_param": "/etc/cron.d/x"}, UNIMPLEMENTED),
        ("no_such_setting", {"bool_param": True}, INVALID),
    ],
)
def test_hostile_log_settings_are_refused_and_settings_still_answer(
    server, stub, setting, value, code
):
    request = pb.LogSettingsRequest()
    request.settings[setting].MergeFrom(pb.LogSettingsRequest.SettingValue(**value))
    got, details = call_status(stub.LogSettings, request)
    assert got == code, details
    settings = stub.LogSettings(pb.LogSettingsRequest(), timeout=10).settings
    assert settings["log_verbose_level"].uint32_param == 0
    assert_healthy(server, stub)


def test_log_verbose_level_over_http_is_bounded_and_grpc_answers_after(server, stub):
    http = server.http_client()
    for value in (10**20, 2**31):
        with pytest.raises(InferenceServerException) as err:
            http.update_log_settings({"log_verbose_level": value})
        assert "log_verbose_level" in err.value.message()
    assert (
        stub.LogSettings(pb.LogSettingsRequest(), timeout=10)
        .settings["log_verbose_level"]
        .uint32_param
        == 0
    )
    http.close()
    assert_healthy(server, stub)


# -------------------------------------------------------------------------------------------
# Model control
# -------------------------------------------------------------------------------------------


def _load(stub, name: str, config: str | None = None, files: dict | None = None):
    request = pb.RepositoryModelLoadRequest(model_name=name)
    if config is not None:
        request.parameters["config"].string_param = config
    for key, content in (files or {}).items():
        request.parameters[key].bytes_param = content
    return call_status(stub.RepositoryModelLoad, request)


def _simple_config(**changes) -> str:
    config = {
        "name": "simple",
        "backend": "onnxruntime",
        "max_batch_size": 8,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
            {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
            {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]},
        ],
    }
    config.update(changes)
    return json.dumps(config)


def _labelled(label: str) -> str:
    config = json.loads(_simple_config())
    config["output"][0]["label_filename"] = label
    return json.dumps(config)


def test_loading_an_unknown_name_keeps_the_server_ready(server, stub):
    """tritonserver: INTERNAL 'failed to poll', and the server stays ready; no trace in the
    index; unloading it afterwards is harmless."""
    for _ in range(3):
        got, details = _load(stub, "wrong_model_name")
        assert got == INTERNAL
        assert details == "failed to load 'wrong_model_name', failed to poll from model repository"
        assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
    index = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=10)
    assert "wrong_model_name" not in {m.name for m in index.models}
    stub.RepositoryModelUnload(
        pb.RepositoryModelUnloadRequest(model_name="wrong_model_name"), timeout=10
    )
    assert_healthy(server, stub)


@pytest.mark.parametrize(
    "config",
    [
        '"parameters": {"config": {{"max_batch_size": "16"}}}',  # Triton's example, verbatim
        "{not json",
        '{"max_batch_size": "sixteen"}',
        '{"no_such_field": 1}',
        "[]",
    ],
)
def test_config_override_that_does_not_parse_is_internal_failed_to_poll(server, stub, config):
    got, details = _load(stub, "simple", config=config)
    assert got == INTERNAL, details
    assert details == "failed to load 'simple', failed to poll from model repository"
    assert_healthy(server, stub)


def test_triton_model_control_example_sequence(server, stub):
    """What Triton's simple_grpc_model_control.py does, step by step, with its checks."""
    client = grpcclient.InferenceServerClient(server.url)
    client.load_model("simple")
    assert client.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as err:
        client.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert "failed to load" in err.value.message()
    client.load_model("simple", config='{"max_batch_size":"16"}')
    assert client.get_model_config("simple").config.max_batch_size == 16
    client.unload_model("simple")
    assert not client.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as err:
        client.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
    assert err.value.status() == "StatusCode.INTERNAL"
    assert "failed to poll from model repository" in err.value.message()
    assert client.is_server_live()
    with pytest.raises(InferenceServerException) as err:
        client.load_model("wrong_model_name")
    assert "failed to load" in err.value.message()
    # Back to the repository's own configuration (max_batch_size 8), not the override's.
    client.load_model("simple")
    assert client.get_model_config("simple").config.max_batch_size == 8
    client.close()
    assert leftover_temp_dirs(server) == []
    assert_healthy(server, stub)


ONNX = (MODEL_REPOSITORY / "simple" / "1" / "model.onnx").read_bytes()


@pytest.mark.parametrize(
    "files, code, fragment",
    [
        ({"file:" + "A" * 256: b"a"}, INTERNAL, "failed to poll from model repository"),
        ({"file:1/" + "B" * 300: ONNX}, INTERNAL, "failed to poll from model repository"),
        ({"file:../escape": b"x"}, INVALID, "outside the model directory"),
        ({"file:/etc/cron.d/x": b"x"}, INVALID, "outside the model directory"),
        (
            {"file:1/model.onnx": ONNX, "file:1/model.onnx/x": b"x"},
            INVALID,
            "needs it to be a folder",
        ),
        ({"file:1/model.onnx": ONNX, "file:1//model.onnx": ONNX}, INVALID, "name the same file"),
        ({"file:1/model.onnx": ONNX, "file:./1/model.onnx": ONNX}, INVALID, "name the same file"),
        ({"file:": b"x"}, INVALID, "file override"),
        ({"file:1/model.onnx": b"not an onnx model"}, INVALID, "load failed for model 'added'"),
    ],
)
def test_hostile_file_overrides_leave_nothing_behind(server, stub, files, code, fragment):
    got, details = _load(stub, "added", config=_simple_config(name="added"), files=files)
    assert got == code, details
    assert fragment in details
    assert str(server.tmp) not in details and "triton_ros_" not in details
    assert leftover_temp_dirs(server) == []
    assert not (server.repo / "added").exists()
    # A model that failed to load leaves the server unready (strict readiness) until unloaded.
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="added"), timeout=30)
    assert_healthy(server, stub)


def test_file_override_temp_dir_lives_while_loaded_and_goes_with_unload(server, stub):
    got, details = _load(
        stub, "added", config=_simple_config(name="added"), files={"file:1/model.onnx": ONNX}
    )
    assert got == OK, details
    assert len(leftover_temp_dirs(server)) == 1
    stub.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="added"), timeout=30)
    assert leftover_temp_dirs(server) == []
    assert_healthy(server, stub)


@pytest.mark.parametrize(
    "label",
    ["/etc/passwd", "../simple_string/config.pbtxt", "1/../../simple/config.pbtxt", "labels\0.txt"],
)
def test_label_filename_outside_the_model_folder_is_refused(server, stub, label):
    got, details = _load(stub, "simple", config=_labelled(label))
    assert got == INVALID, details
    assert "label_filename" in details and "root:" not in details
    assert_healthy(server, stub)


def test_label_filename_symlink_leading_out_is_refused(server, stub):
    link = server.repo / "simple" / "evil_labels.txt"
    os.symlink("/etc/passwd", link)
    try:
        got, details = _load(stub, "simple", config=_labelled("evil_labels.txt"))
    finally:
        link.unlink()
    assert got == INVALID, details
    assert "outside the model's folder" in details
    assert_healthy(server, stub)


def test_label_file_inside_the_model_folder_labels_classification(server, stub):
    labels = server.repo / "simple" / "labels.txt"
    labels.write_text("\n".join(f"class{i}" for i in range(16)) + "\n")
    try:
        got, details = _load(stub, "simple", config=_labelled("labels.txt"))
        assert got == OK, details
        msg = _simple_request()
        out = msg.outputs.add(name="OUTPUT0")
        out.parameters["classification"].int64_param = 1
        reply = stub.ModelInfer(msg, timeout=30)
        assert b"class15" in reply.raw_output_contents[0]
    finally:
        labels.unlink()
        got, details = _load(stub, "simple")
        assert got == OK, details
    assert_healthy(server, stub)


def test_unsupported_sequence_batching_field_is_refused_and_the_old_version_keeps_serving(
    server, stub
):
    config = json.loads(_simple_config())
    config["sequence_batching"] = {"iterative_sequence": True}
    got, details = _load(stub, "simple", config=json.dumps(config))
    assert got == UNIMPLEMENTED, details  # Triton's UNSUPPORTED on gRPC
    assert "iterative_sequence is not supported" in details
    assert_healthy(server, stub)


@pytest.mark.parametrize("name", ["../simple", "simple/1", "", " ", "..", "a\0b"])
def test_model_names_that_could_escape_are_invalid(server, stub, name):
    got, details = _load(stub, name)
    assert got == INVALID, (name, details)
    assert_healthy(server, stub)


def test_unknown_load_parameter_is_invalid(server, stub):
    request = pb.RepositoryModelLoadRequest(model_name="simple")
    request.parameters["frobnicate"].bool_param = True
    got, details = call_status(stub.RepositoryModelLoad, request)
    assert got == INVALID and "frobnicate" in details
    assert_healthy(server, stub)


# -------------------------------------------------------------------------------------------
# Response cache and request parameters; hostile requests inside a stream
# -------------------------------------------------------------------------------------------


def test_cached_response_is_never_served_for_other_parameters(start_server, tmp_path):
    """The same input with ``suffix: -bob`` must not get ``suffix: -alice``'s cached answer
    (a Python model reads the parameter); the same parameters do hit the cache."""
    import shutil as _shutil

    repo = tmp_path / "models"
    repo.mkdir()
    _shutil.copytree(Path(__file__).parent / "python_models" / "strings", repo / "strings")
    config = repo / "strings" / "config.pbtxt"
    config.write_text(config.read_text() + "response_cache { enable: true }\n")
    server = start_server("--model-repository", str(repo), "--cache-config", "local,size=1048576")
    client = grpcclient.InferenceServerClient(server.url)
    text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"robot"]], dtype=np.object_))
    for suffix in ("-alice", "-bob", "-alice", "-bob"):
        got = client.infer("strings", [text], parameters={"suffix": suffix}).as_numpy("UPPER")
        assert got[0][0] == b"ROBOT" + suffix.encode()
    got = client.infer("strings", [text]).as_numpy("UPPER")
    assert got[0][0] == b"ROBOT"
    stats = client.get_inference_statistics("strings").model_stats[0].inference_stats
    assert stats.cache_hit.count == 2 and stats.cache_miss.count == 3
    client.close()


def test_hostile_requests_inside_a_stream_fail_alone(server, stub):
    """ModelStreamInfer: each hostile request gets its error in the stream; the good request
    after it on the same stream gets its right answer."""
    import queue

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    a = simple_array()
    good = simple_inputs(grpcclient, a)
    bad_shape = grpcclient.InferInput("INPUT0", [0, 2**62, 2**62], "INT32")
    bad_shape._raw_content = b""
    for bad, fragment in (([bad_shape, good[1]], "overflows"), (good, "classification")):
        if fragment == "classification":
            out = grpcclient.InferRequestedOutput("OUTPUT0")
            out._output.parameters["classification"].string_param = "3"
            client.async_stream_infer("simple", bad, outputs=[out], request_id="bad")
        else:
            client.async_stream_infer("simple", bad, request_id="bad")
        client.async_stream_infer("simple", good, request_id="good")
        got = [results.get(timeout=30) for _ in range(2)]
        errors = [e for _, e in got if e is not None]
        oks = [r for r, e in got if e is None]
        assert len(errors) == 1 and fragment in errors[0].message()
        assert len(oks) == 1
        np.testing.assert_array_equal(oks[0].as_numpy("OUTPUT0"), 2 * a)
    client.stop_stream()
    client.close()
    assert_healthy(server, stub)


def test_ten_thousand_inputs_are_refused_quickly(server, stub):
    msg = pb.ModelInferRequest(model_name="simple")
    for i in range(10_000):
        msg.inputs.add(name=f"X{i}", datatype="INT32", shape=[1, 16])
        msg.raw_input_contents.append(bytes(64))
    got, details = call_status(stub.ModelInfer, msg)
    assert got == INVALID and "unexpected inference input" in details
    assert_healthy(server, stub)


def test_overlong_model_name_with_file_overrides_leaves_nothing(server, stub):
    name = "m" * 300
    got, details = _load(
        stub, name, config=_simple_config(name=name), files={"file:1/model.onnx": ONNX}
    )
    assert got == INTERNAL and "failed to poll from model repository" in details
    assert leftover_temp_dirs(server) == []
    assert_healthy(server, stub)
