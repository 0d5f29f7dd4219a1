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


@pytest.fixture
def core():
    server = InferenceServer(ServerOptions((str(MODEL_REPOSITORY),), model_control_mode="explicit",
                                           startup_models=("simple",)))
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
        assert err.value.message == (f"failed to load 'ghost{i}', failed to poll from model "
                                     f"repository")
    assert core.is_ready()
    assert not any(e.name.startswith("ghost") for e in core.repository_index())
    assert not any(name.startswith("ghost") for name in core.repository._records)
    core.unload_model("ghost1")
    assert core.is_ready()


def _request(**parameters) -> InferRequest:
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    return InferRequest("simple", {"INPUT0": x, "INPUT1": x}, parameters=parameters)


def test_cache_key_covers_request_parameters_and_their_types():
    keys = {request_cache_key("simple", 1, _request(**p)) for p in (
        {}, {"tag": "alice"}, {"tag": "bob"}, {"n": 1}, {"n": 1.0}, {"n": True}, {"n": "1"},
        {"tag": "alice", "n": 1})}
    assert len(keys) == 8
    assert (request_cache_key("simple", 1, _request(a=1, b=2))
            == request_cache_key("simple", 1, _request(b=2, a=1)))


@pytest.mark.parametrize("params", [
    {"priority": "1"}, {"priority": True}, {"priority": -1}, {"priority": 2**64},
    {"timeout": 1.5}, {"timeout": -5}, {"sequence_id": 1.5}, {"sequence_id": None},
    {"sequence_start": 1}, {"sequence_end": "true"}, {"triton_x": 1}, {"tag": None},
    {"tag": [1, 2]}, {"tag": {"a": 1}}, {"big": 2**70},
])
def test_every_parameter_type_is_checked(params):
    with pytest.raises(TritonRosError) as err:
        split_request_parameters(params)
    assert err.value.code is StatusCode.INVALID_ARG


def test_valid_parameters_split_into_priority_timeout_and_the_models():
    got = split_request_parameters({"priority": 2, "timeout": 100, "sequence_id": "r1",
                                    "sequence_start": True, "sequence_end": False, "tag": "bob",
                                    "gain": 0.5, "flag": True})
    assert (got.priority, got.timeout_us) == (2, 100)
    assert got.user == {"tag": "bob", "gain": 0.5, "flag": True}


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
