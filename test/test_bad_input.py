"""Bad input gets Triton's gRPC status and a clear message; the server keeps serving everyone
else."""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from simple_model import simple_inputs

pytestmark = pytest.mark.integration


def assert_serves(client) -> None:
    a = np.arange(16, dtype=np.int32)[None]
    result = client.infer("simple", simple_inputs(grpcclient, a, a))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)


def raw_request(
    model: str, inputs: list[tuple[str, str, list[int], bytes]]
) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=model)
    for name, datatype, shape, raw in inputs:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(raw)
    return request


ONES = np.ones((1, 16), np.int32)

CASES = {
    "unknown model": (
        lambda c: c.infer("no_such_model", simple_inputs(grpcclient, ONES, ONES)),
        "NOT_FOUND",
        "Request for unknown model: 'no_such_model' is not found",
    ),
    "model name with ..": (
        lambda c: c.infer("../simple", simple_inputs(grpcclient, ONES, ONES)),
        "NOT_FOUND",
        "unknown model",
    ),
    "unknown version": (
        lambda c: c.infer("simple", simple_inputs(grpcclient, ONES, ONES), model_version="7"),
        "NOT_FOUND",
        "version 7 is not found",
    ),
    "malformed version": (
        lambda c: c.infer("simple", simple_inputs(grpcclient, ONES, ONES), model_version="x"),
        "INVALID_ARGUMENT",
        "must be integral",
    ),
    "wrong datatype": (
        lambda c: c.infer(
            "simple",
            simple_inputs(
                grpcclient, ONES.astype(np.float32), ONES.astype(np.float32), datatype="FP32"
            ),
        ),
        "INVALID_ARGUMENT",
        "data-type is 'FP32', but model 'simple' expects 'INT32'",
    ),
    "wrong shape": (
        lambda c: c.infer(
            "simple",
            simple_inputs(grpcclient, np.ones((1, 15), np.int32), np.ones((1, 15), np.int32)),
        ),
        "INVALID_ARGUMENT",
        "unexpected shape for input 'INPUT0' for model 'simple'",
    ),
    "batch too large": (
        lambda c: c.infer(
            "simple",
            simple_inputs(grpcclient, np.ones((9, 16), np.int32), np.ones((9, 16), np.int32)),
        ),
        "INVALID_ARGUMENT",
        "batch-size must be <= 8",
    ),
    "missing input": (
        lambda c: c.infer("simple", simple_inputs(grpcclient, ONES, names=("INPUT0",))),
        "INVALID_ARGUMENT",
        "missing required input(s) ['INPUT1']",
    ),
    "unknown output": (
        lambda c: c.infer(
            "simple",
            simple_inputs(grpcclient, ONES, ONES),
            outputs=[grpcclient.InferRequestedOutput("NOPE")],
        ),
        "INVALID_ARGUMENT",
        "unexpected inference output 'NOPE'",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_request_gets_triton_status(bundled_server, case):
    client = bundled_server.client()
    call, status, message = CASES[case]
    with pytest.raises(InferenceServerException) as err:
        call(client)
    assert err.value.status() == f"StatusCode.{status}", err.value.message()
    assert message in err.value.message()
    assert_serves(client)


@pytest.fixture(scope="module")
def stub(bundled_server):
    return service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(bundled_server.url))


RAW_CASES = {
    "byte count too small": (
        raw_request(
            "simple",
            [
                ("INPUT0", "INT32", [1, 16], b"\x00" * 60),
                ("INPUT1", "INT32", [1, 16], b"\x00" * 64),
            ],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    "fewer raw contents than inputs": (
        pb.ModelInferRequest(
            model_name="simple",
            inputs=[
                pb.ModelInferRequest.InferInputTensor(
                    name="INPUT0", datatype="INT32", shape=[1, 16]
                ),
                pb.ModelInferRequest.InferInputTensor(
                    name="INPUT1", datatype="INT32", shape=[1, 16]
                ),
            ],
            raw_input_contents=[b"\x00" * 64],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "raw input contents",
    ),
    "truncated BYTES element": (
        raw_request("simple", [("INPUT0", "BYTES", [1, 1], b"\x05\x00\x00\x00ab")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "malformed BYTES tensor",
    ),
    "BF16": (
        raw_request(
            "simple",
            [("INPUT0", "BF16", [1, 16], b"\x00" * 32), ("INPUT1", "BF16", [1, 16], b"\x00" * 32)],
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "BF16",
    ),
    "unknown datatype": (
        raw_request("simple", [("INPUT0", "FLOAT", [1, 16], b"\x00" * 64)]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid datatype 'FLOAT'",
    ),
    "negative dimension": (
        raw_request("simple", [("INPUT0", "INT32", [-1, 16], b"")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "All input dimensions should be specified",
    ),
}


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_malformed_wire_request_gets_triton_status(bundled_server, stub, case):
    request, status, message = RAW_CASES[case]
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == status
    assert message in err.value.details()
    assert_serves(bundled_server.client())


def test_unknown_shared_memory_region_is_not_found(bundled_server, stub):
    # INPUT0 names a region (none can exist: this server does not allow client shared memory);
    # INPUT1's data is the only raw_input_contents entry.
    shm_input = pb.ModelInferRequest.InferInputTensor(
        name="INPUT0", datatype="INT32", shape=[1, 16]
    )
    shm_input.parameters["shared_memory_region"].string_param = "region0"
    shm_input.parameters["shared_memory_byte_size"].int64_param = 64
    request = pb.ModelInferRequest(
        model_name="simple",
        inputs=[
            shm_input,
            pb.ModelInferRequest.InferInputTensor(name="INPUT1", datatype="INT32", shape=[1, 16]),
        ],
        raw_input_contents=[b"\x00" * 64],
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "Unable to find shared memory region: 'region0'" in err.value.details()
    del request.inputs[0].parameters["shared_memory_byte_size"]
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'shared_memory_byte_size' must be specified along with" in err.value.details()
    assert_serves(bundled_server.client())


def test_bad_requests_lose_no_other_request(bundled_server):
    """Good and bad requests interleaved from many threads: every good one is answered right."""
    client = bundled_server.client()
    failures: list[str] = []

    def good(i: int) -> None:
        a = np.full((1, 16), i, np.int32)
        try:
            out = client.infer("simple", simple_inputs(grpcclient, a, a)).as_numpy("OUTPUT0")
            if not np.array_equal(out, 2 * a):
                failures.append(f"wrong answer for {i}")
        except Exception as exc:
            failures.append(f"good request {i} failed: {exc}")

    def bad(i: int) -> None:
        try:
            client.infer(
                "simple",
                simple_inputs(grpcclient, np.ones((1, 15), np.int32), np.ones((1, 15), np.int32)),
            )
            failures.append(f"bad request {i} succeeded")
        except InferenceServerException:
            pass

    threads = [threading.Thread(target=good if i % 2 else bad, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert failures == []


def test_load_refuses_names_outside_the_repository(start_server, repo_copy):
    server = start_server("--model-repository", str(repo_copy), "--model-control-mode", "explicit")
    client = server.client()
    for name in ("../simple", "..", "a/b", "/etc"):
        with pytest.raises(InferenceServerException) as err:
            client.load_model(name)
        assert err.value.status() == "StatusCode.INVALID_ARGUMENT", name
        assert "path traversal" in err.value.message()
    client.load_model("simple")
    assert_serves(client)
