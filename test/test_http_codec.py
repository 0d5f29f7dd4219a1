"""The HTTP codec on tensors the bundled models do not have (BYTES, BOOL, FP16, nested JSON),
checked against the request bodies tritonclient.http itself builds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.infer_request import InferResponse
from triton_ros.frontend.http import http_codec as codec


pytestmark = pytest.mark.unit


def _client_body(inputs, outputs=None, **kwargs) -> tuple[bytes, int | None]:
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs, **kwargs
    )
    return body, json_size


@pytest.mark.parametrize("binary", [False, True])
def test_client_bodies_decode(binary):
    strings = np.array([[b"a", b"\xffraw"], [b"", "caf\u00e9".encode()]], dtype=np.object_)
    if not binary:
        strings = np.array([[b"a", b"xy"], [b"", "caf\u00e9".encode()]], dtype=np.object_)
    flags = np.array([[True, False, True]])
    halves = np.array([[1.5, -2.25]], dtype=np.float16)
    inputs = []
    for name, array, dtype in (
        ("S", strings, "BYTES"),
        ("B", flags, "BOOL"),
        ("H", halves, "FP16"),
    ):
        x = httpclient.InferInput(name, list(array.shape), dtype)
        x.set_data_from_numpy(array, binary_data=binary or dtype == "FP16")
        inputs.append(x)
    outputs = [
        httpclient.InferRequestedOutput("S", binary_data=True, class_count=0),
        httpclient.InferRequestedOutput("B", binary_data=False),
    ]
    body, json_size = _client_body(inputs, outputs, request_id="7", priority=2, timeout=50)
    request, plan = codec.decode_infer_request("m", 3, body, json_size)
    assert request.id == "7" and request.priority == 2 and request.timeout_us == 50
    assert request.model_version == 3
    np.testing.assert_array_equal(request.inputs["S"], strings)
    np.testing.assert_array_equal(request.inputs["B"], flags)
    np.testing.assert_array_equal(request.inputs["H"], halves)
    assert request.inputs["H"].dtype == np.float16
    assert [o.name for o in request.requested_outputs] == ["S", "B"]
    assert plan.is_binary("S") and not plan.is_binary("B")


def test_response_encoding_roundtrips_through_the_client():
    strings = np.array([b"x", b"yz\x00"], dtype=np.object_)
    response = InferResponse(
        "m",
        1,
        "id9",
        {"S": strings, "F": np.arange(4, dtype=np.float32), "B": np.array([True, False])},
    )
    plan = codec.OutputPlan(default_binary=False, binary={"S": True})
    chunks, json_length = codec.encode_infer_response(response, plan)
    body = b"".join(bytes(c) for c in chunks)
    doc = json.loads(body[:json_length])
    assert doc["id"] == "id9" and doc["model_version"] == "1"
    assert doc["outputs"][1] == {
        "name": "F",
        "datatype": "FP32",
        "shape": [4],
        "data": [0.0, 1.0, 2.0, 3.0],
    }
    assert doc["outputs"][2]["data"] == [True, False]
    result = httpclient.InferResult.from_response_body(body, header_length=json_length)
    np.testing.assert_array_equal(result.as_numpy("S"), strings)
    np.testing.assert_array_equal(result.as_numpy("F"), np.arange(4, dtype=np.float32))


@pytest.mark.parametrize(
    "header, message",
    [
        (
            {"inputs": [{"name": "X", "datatype": "FP16", "shape": [1], "data": [1.0]}]},
            "receiving FP16 data via JSON is not supported",
        ),
        (
            {"inputs": [{"name": "X", "datatype": "INT8", "shape": [1], "data": [300]}]},
            "does not fit",
        ),
        (
            {"inputs": [{"name": "X", "datatype": "INT32", "shape": [2], "data": [1.5, 2]}]},
            "expects integers",
        ),
        (
            {
                "inputs": [
                    {"name": "X", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3]]}
                ]
            },
            "nested arrays of equal length",
        ),
        (
            {"inputs": [{"name": "X", "datatype": "BYTES", "shape": [1], "data": [5]}]},
            "expected a string",
        ),
        (
            {"inputs": [{"name": "X", "datatype": "WHAT", "shape": [1], "data": [5]}]},
            "invalid datatype",
        ),
        (
            {"inputs": [{"name": "X", "datatype": "INT32", "shape": [-1], "data": [5]}]},
            "All input dimensions should be specified",
        ),
        ({"inputs": [], "parameters": {"triton_x": 1}}, "reserved for Triton"),
        ({"inputs": [], "parameters": {"priority": -1}}, "invalid value type for 'priority'"),
        ({"inputs": [], "parameters": {"binary_data_output": "yes"}}, "binary_data_output"),
        ({"inputs": [], "id": 5}, "Unable to parse 'id'"),
        ({"inputs": {}}, "Unable to parse 'inputs'"),
    ],
)
def test_malformed_requests_are_invalid_arg(header, message):
    with pytest.raises(TritonRosError) as info:
        codec.decode_infer_request("m", -1, json.dumps(header).encode(), None)
    assert info.value.code == StatusCode.INVALID_ARG
    assert message in info.value.message


def test_nested_json_data_and_index_encoding():
    header = {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2.5], [3, 4]]}]
    }
    request, _ = codec.decode_infer_request("m", -1, json.dumps(header).encode(), None)
    np.testing.assert_array_equal(request.inputs["X"], np.array([[1, 2.5], [3, 4]], np.float32))
    from triton_ros.core.model_repository_manager import RepositoryEntry

    index = json.loads(
        codec.encode_index(
            [
                RepositoryEntry("a", "", ""),
                RepositoryEntry("b", "1", "READY"),
                RepositoryEntry("c", "2", "UNAVAILABLE", "oops"),
            ]
        )
    )
    assert index == [
        {"name": "a"},
        {"name": "b", "version": "1", "state": "READY"},
        {"name": "c", "version": "2", "state": "UNAVAILABLE", "reason": "oops"},
    ]


def test_json_uint64_values_past_int64_are_exact():
    """numpy reads [0, 2**64 - 1] as float64; the codec keeps the integers exact, and still
    refuses a float among them or a value past UINT64."""
    big = [[0, 2**64 - 1, 1], [2**63, 2**64 - 2, 7]]
    header = {"inputs": [{"name": "X", "datatype": "UINT64", "shape": [2, 3], "data": big}]}
    request, _ = codec.decode_infer_request("m", -1, json.dumps(header).encode(), None)
    assert request.inputs["X"].dtype == np.uint64
    assert request.inputs["X"].tolist() == big
    for data, message in (
        ([0, 2**64 - 1, 1.5], "expects integers"),
        ([0, 2**64, 1], "UINT64 numbers"),
    ):
        header["inputs"][0].update(shape=[3], data=data)
        with pytest.raises(TritonRosError, match=message):
            codec.decode_infer_request("m", -1, json.dumps(header).encode(), None)
