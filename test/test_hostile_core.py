"""The core's answers to hostile input, in process on the real core and real models: readiness
from memory, the cache key and request parameters, message bounds."""

from __future__ import annotations

import os

import numpy as np
import pytest

from server_process import MODEL_REPOSITORY
from triton_ros.core.cache_manager import request_cache_key
from triton_ros.core.errors import MAX_MESSAGE_CHARS, StatusCode, TritonRosError, invalid_arg
from triton_ros.core.infer_request import InferRequest
from triton_ros.core.request_parameters import classification_count, split_request_parameters
from triton_ros.core.server import InferenceServer, ServerOptions


pytestmark = pytest.mark.unit


@pytest.fixture
def core():
    server = InferenceServer(
        ServerOptions(
            (str(MODEL_REPOSITORY),), model_control_mode="explicit", startup_models=("simple",)
        )
    )
    server.start()
    yield server
    server.stop()


def test_readiness_answers_from_memory_without_scanning_the_disk(core, monkeypatch):
    """ServerReady is asked by every load balancer probe: it must not list directories."""
    calls = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda *a, **k: calls.append(a) or real(*a, **k))
    for _ in range(100):
        assert core.is_ready()
    assert calls == []


def test_failed_load_of_an_unknown_name_leaves_no_trace(core):
    for i in range(50):
        with pytest.raises(TritonRosError) as err:
            core.load_model(f"ghost{i}")
        assert err.value.code is StatusCode.INTERNAL
        assert err.value.message == (
            f"failed to load 'ghost{i}', failed to poll from model repository"
        )
    assert core.is_ready()
    assert not any(e.name.startswith("ghost") for e in core.repository_index())
    assert not any(name.startswith("ghost") for name in core.repository._records)
    core.unload_model("ghost1")
    assert core.is_ready()


def _request(**parameters) -> InferRequest:
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    return InferRequest("simple", {"INPUT0": x, "INPUT1": x}, parameters=parameters)


def test_cache_key_covers_request_parameters_and_their_types():
    keys = {
        request_cache_key("simple", 1, _request(**p))
        for p in (
            {},
            {"tag": "alice"},
            {"tag": "bob"},
            {"n": 1},
            {"n": 1.0},
            {"n": True},
            {"n": "1"},
            {"tag": "alice", "n": 1},
        )
    }
    assert len(keys) == 8
    assert request_cache_key("simple", 1, _request(a=1, b=2)) == request_cache_key(
        "simple", 1, _request(b=2, a=1)
    )


@pytest.mark.parametrize(
    "params",
    [
        {"priority": "1"},
        {"priority": True},
        {"priority": -1},
        {"priority": 2**64},
        {"timeout": 1.5},
        {"timeout": -5},
        {"sequence_id": 1.5},
        {"sequence_id": None},
        {"sequence_start": 1},
        {"sequence_end": "true"},
        {"triton_x": 1},
        {"tag": None},
        {"tag": [1, 2]},
        {"tag": {"a": 1}},
        {"big": 2**70},
    ],
)
def test_every_parameter_type_is_checked(params):
    with pytest.raises(TritonRosError) as err:
        split_request_parameters(params)
    assert err.value.code is StatusCode.INVALID_ARG


def test_valid_parameters_split_into_priority_timeout_and_the_models():
    got = split_request_parameters(
        {
            "priority": 2,
            "timeout": 100,
            "sequence_id": "r1",
            "sequence_start": True,
            "sequence_end": False,
            "tag": "bob",
            "gain": 0.5,
            "flag": True,
        }
    )
    assert (got.priority, got.timeout_us) == (2, 100)
    assert got.user == {"tag": "bob", "gain": 0.5, "flag": True}


@pytest.mark.parametrize(
    "sequence_id, refused",
    [
        ("x" * 128, False),
        ("x" * 129, True),
        ("\u00e9" * 64, False),
        ("\u00e9" * 65, True),
        ("x" * (1 << 20), True),
    ],
)
def test_a_string_sequence_id_is_at_most_128_bytes(sequence_id, refused):
    """tritonserver refuses a longer one (UNSUPPORTED, before any model sees it); the parity
    cases grpc-string-id-129 and http-huge-string-id in test_tritonserver_sequence_parity.py
    hold its answer."""
    if not refused:
        assert split_request_parameters({"sequence_id": sequence_id}).sequence_id == sequence_id
        return
    with pytest.raises(TritonRosError) as caught:
        split_request_parameters({"sequence_id": sequence_id})
    assert caught.value.code == StatusCode.UNSUPPORTED
    assert caught.value.message == "string correlation ID cannot be longer than 128 characters"


@pytest.mark.parametrize("value", ["3", 3.0, True, -1, None])
def test_classification_count_must_be_a_non_negative_integer(value):
    with pytest.raises(TritonRosError):
        classification_count(value, "OUT")


def test_error_messages_are_bounded():
    err = invalid_arg("x" * 100_000)
    assert len(err.message) < MAX_MESSAGE_CHARS + 100
    assert err.message.endswith("(97952 more characters)")


def test_overflowing_shape_is_refused_by_the_core(core):
    from triton_ros.core.datatypes import check_input_shape, tensor_from_bytes

    for shape in ([0, 2**62, 2**62], [2**40, 2**40], [1] * 33):
        with pytest.raises(TritonRosError) as err:
            tensor_from_bytes(b"", "INT32", tuple(shape), input_name="X", model_name="m")
        assert err.value.code is StatusCode.INVALID_ARG
    assert check_input_shape([0, 4, 4], "FP32", input_name="X", model_name="m") == (0, 4, 4)


def test_every_numpy_dtype_gets_its_protocol_name_or_a_typed_refusal():
    from triton_ros.core.datatypes import _NP_OF, from_numpy_dtype

    for name, dtype in _NP_OF.items():  # the reverse lookup, both ways
        assert from_numpy_dtype(dtype) == name
        assert from_numpy_dtype(dtype.type) == name  # a scalar type as well as a dtype
    assert from_numpy_dtype(np.dtype("S7")) == from_numpy_dtype(np.dtype("U3")) == "BYTES"
    for bad in (np.dtype(">i4"), np.dtype(np.complex64), np.dtype([("a", "i4")])):
        with pytest.raises(TritonRosError) as err:  # big-endian, complex, structured
            from_numpy_dtype(bad)
        assert err.value.code is StatusCode.INVALID_ARG


def test_random_malformed_grpc_requests_never_get_internal(core):
    """500 seeded random ModelInferRequests (datatypes, shapes, raw sizes, parameters) through
    the real gRPC codec into the real core: every refusal is a client error, never INTERNAL or an
    untyped exception, and the model still answers a normal request afterwards."""
    from tritonclient.grpc import service_pb2 as pb

    from triton_ros.frontend.grpc.grpc_codec import decode_infer_request

    rng = np.random.default_rng(1234)
    datatypes = ["INT32", "FP32", "BYTES", "UINT8", "BOOL", "FP16", "BF16", "INT64", "", "X"]
    dims = [0, 1, 2, 16, 17, 2**31, 2**62, 2**63 - 1, -1, -(2**63)]
    codes = {}
    for _i in range(500):
        msg = pb.ModelInferRequest(model_name=str(rng.choice(["simple", "simple", "nope", ""])))
        for name in rng.choice(["INPUT0", "INPUT1", "X"], size=int(rng.integers(0, 4))):
            shape = [int(rng.choice(dims)) for _ in range(int(rng.integers(0, 4)))]
            msg.inputs.add(name=str(name), datatype=str(rng.choice(datatypes)), shape=shape)
            if rng.random() < 0.9:
                msg.raw_input_contents.append(bytes(int(rng.choice([0, 3, 4, 64, 65, 128]))))
        if rng.random() < 0.3:
            msg.parameters[
                str(rng.choice(["priority", "timeout", "sequence_id", "tag"]))
            ].string_param = "x"
        if rng.random() < 0.2:
            msg.outputs.add(name=str(rng.choice(["OUTPUT0", "NOPE"])))
        try:
            request = decode_infer_request(msg, core.shared_memory)
            core.infer_sync(request, timeout=30)
            code = "OK"
        except TritonRosError as exc:
            code = exc.code.name
            assert exc.code is not StatusCode.INTERNAL, (msg, exc.message)
        codes[code] = codes.get(code, 0) + 1
    assert codes.get("INVALID_ARG", 0) > 300, codes
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    response = core.infer_sync(InferRequest("simple", {"INPUT0": x, "INPUT1": x}), timeout=30)
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], 2 * x)


def test_random_malformed_http_requests_never_get_internal(core):
    """The same for the HTTP/REST codec: 500 seeded random JSON inference headers."""
    import json

    from triton_ros.frontend.http.http_codec import decode_infer_request

    rng = np.random.default_rng(4321)
    values = [0, 1, -1, 2**62, 2**64, 1.5, "16", True, None, [], {}, [16], [1, 16], "x" * 50]
    codes = {}
    for _i in range(500):
        inputs = []
        for name in rng.choice(["INPUT0", "INPUT1", "X"], size=int(rng.integers(0, 4))):
            item = {
                "name": str(name),
                "datatype": str(rng.choice(["INT32", "FP32", "BYTES", "?"])),
                "shape": [
                    values[int(rng.integers(len(values)))] for _ in range(int(rng.integers(0, 4)))
                ],
            }
            if rng.random() < 0.7:
                item["data"] = values[int(rng.integers(len(values)))]
            if rng.random() < 0.3:
                item["parameters"] = {
                    str(rng.choice(["binary_data_size", "shared_memory_region", "x"])): values[
                        int(rng.integers(len(values)))
                    ]
                }
            inputs.append(item)
        header = {"inputs": inputs}
        if rng.random() < 0.3:
            header["parameters"] = {
                str(
                    rng.choice(["priority", "timeout", "sequence_start", "triton_x", "tag"])
                ): values[int(rng.integers(len(values)))]
            }
        if rng.random() < 0.3:
            header["outputs"] = [
                {
                    "name": "OUTPUT0",
                    "parameters": {"classification": values[int(rng.integers(len(values)))]},
                }
            ]
        body = json.dumps(header).encode()
        try:
            request, _ = decode_infer_request("simple", -1, body, None, core.shared_memory)
            core.infer_sync(request, timeout=30)
            code = "OK"
        except TritonRosError as exc:
            code = exc.code.name
            assert exc.code is not StatusCode.INTERNAL, (header, exc.message)
        codes[code] = codes.get(code, 0) + 1
    assert codes.get("INVALID_ARG", 0) > 300, codes


# ------------------------------------------------------------------------------------------
# An instance thread that dies (issue 34): never a silent hang
# ------------------------------------------------------------------------------------------


def _queued_identity(repo, count: int) -> None:
    """An identity model whose requests always queue (a batching delay: no direct execution)."""
    from model_factory import identity_graph, write_model

    write_model(
        repo,
        "m",
        identity_graph("FP32", ["N", 4]),
        f"""
name: "m"
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: 100 }}
""",
    )


def _identity_request() -> InferRequest:
    return InferRequest("m", {"INPUT0": np.arange(4, dtype=np.float32).reshape(1, 4)})


def _inject_next_batch(monkeypatch, fault):
    """Every call of a scheduler's next_batch on model 'm' goes through ``fault(real, n)`` (n:
    the calls so far): installed before the model loads, so even an instance thread's first
    call does."""
    from triton_ros.core.dynamic_batch_scheduler import DynamicBatchScheduler

    real = DynamicBatchScheduler.next_batch
    calls = []

    def next_batch(self, *instance):
        if self.model_name != "m":
            return real(self, *instance)
        calls.append(1)
        return fault(lambda: real(self, *instance), len(calls))

    monkeypatch.setattr(DynamicBatchScheduler, "next_batch", next_batch)


def test_a_dying_instance_thread_fails_what_waits_and_the_model_is_unavailable(
    explicit_core, caplog, monkeypatch
):
    """The only instance thread dies (here a MemoryError injected where it takes its next
    batch) while requests wait: they fail with UNAVAILABLE naming the cause, the model is no
    longer ready (its repository entry says why), later requests fail at once, and the cause
    is logged once with its traceback."""
    import threading

    release = threading.Event()

    def dies_on_second_batch(real, n):
        if n == 1:
            return real()
        release.wait(30)
        raise MemoryError("injected")

    _inject_next_batch(monkeypatch, dies_on_second_batch)
    _queued_identity(explicit_core.repo_path, count=1)
    explicit_core.load_model("m")
    model = explicit_core.get_model("m")
    first = explicit_core.infer_sync(_identity_request(), timeout=30)
    np.testing.assert_array_equal(first.outputs["OUTPUT0"], [[0, 1, 2, 3]])
    waiting = [explicit_core.infer(_identity_request()) for _ in range(3)]
    assert model.pending_request_count() == 3
    release.set()
    for future in waiting:
        error = future.exception(timeout=30)
        assert isinstance(error, TritonRosError) and error.code is StatusCode.UNAVAILABLE
        assert "MemoryError: injected" in error.message
    assert not explicit_core.model_ready("m")
    entry = next(e for e in explicit_core.repository_index() if e.name == "m")
    assert entry.state == "UNAVAILABLE" and "MemoryError: injected" in entry.reason
    with pytest.raises(TritonRosError) as err:  # at once, as for any unready model
        explicit_core.infer_sync(_identity_request(), timeout=5)
    assert err.value.code is StatusCode.NOT_FOUND
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "the thread of instance" in tracebacks[0].message
    assert model.stats.snapshot().failures_by_reason.get("REJECTED") == 3


def test_the_other_instances_serve_when_one_thread_dies(explicit_core, monkeypatch):
    """With two instances, one thread dying leaves the other to serve every request; the
    model stays ready."""

    def dies_once(real, n):
        if n == 1:
            raise RuntimeError("injected")
        return real()

    _inject_next_batch(monkeypatch, dies_once)
    _queued_identity(explicit_core.repo_path, count=2)
    explicit_core.load_model("m")
    model = explicit_core.get_model("m")
    for _ in range(20):
        response = explicit_core.infer_sync(_identity_request(), timeout=30)
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], [[0, 1, 2, 3]])
    assert explicit_core.model_ready("m")
    assert sum(i.failure is not None for i in model.instances) == 1


@pytest.mark.parametrize("name", ["no_such_model", "", "../simple"])
def test_an_unknown_model_is_not_found_by_its_type(core, name):
    """tritonserver's NOT_FOUND (gRPC NOT_FOUND, HTTP 404) for every lookup of a name it does not
    serve, carried by the error's type and code (the frontends map the code, never the text);
    statistics are INVALID_ARG, as tritonserver answers them."""
    from triton_ros.core.errors import UnknownModelError

    for lookup in (core.get_model, core.model_metadata, core.model_config):
        with pytest.raises(UnknownModelError) as err:
            lookup(name)
        assert err.value.code == StatusCode.NOT_FOUND, err.value
    request = InferRequest(model_name=name, inputs={})
    with pytest.raises(UnknownModelError) as err:
        core.infer(request).result(timeout=10)
    assert err.value.code == StatusCode.NOT_FOUND
    with pytest.raises(TritonRosError) as err:
        core.model_statistics(name or "x")
    assert err.value.code == StatusCode.INVALID_ARG
    assert "is not available" in err.value.message
