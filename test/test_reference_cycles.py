"""A finished request leaves no reference cycle behind: its future, its response and the
response's tensors are freed by reference counting as soon as the last user lets go, not at the
garbage collector's next pass.

The tensors of a response are views of the batch's output buffer, which ONNX Runtime gives from
its arena: a response kept alive by a cycle keeps the buffer of its whole batch from being reused
until the collector runs, and the arena grows for the next batches meanwhile. Real server
classes in this process (so that its collector can be inspected), real clients over 127.0.0.1."""

from __future__ import annotations

import gc
import queue
from concurrent.futures import Future

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server_process import MODEL_REPOSITORY
from simple_model import simple_array, simple_inputs
from triton_ros.core.infer_request import InferRequest, InferResponse
from triton_ros.core.server import InferenceServer, ServerOptions
from triton_ros.frontend.grpc.grpc_server import GrpcServer
from triton_ros.frontend.http.http_server import HttpServer


pytestmark = pytest.mark.integration

OURS = (InferRequest, InferResponse, Future)


@pytest.fixture(scope="module")
def servers():
    core = InferenceServer(ServerOptions(model_repositories=(str(MODEL_REPOSITORY),)))
    core.start()
    grpc_server = GrpcServer(core, address="127.0.0.1", port=0)
    http_server = HttpServer(core, address="127.0.0.1", port=0)
    grpc_server.start()
    http_server.start()
    yield core, grpc_server, http_server
    grpc_server.stop()
    http_server.stop()
    core.stop()


def _garbage_after(run) -> list[object]:
    """The objects of ours that only the collector would have freed, of ``run()``'s making."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run()
        gc.collect()
        return [o for o in gc.garbage if isinstance(o, OURS)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _simple(module, i: int):
    a, b = simple_array(i), simple_array(1)
    return simple_inputs(module, a, b), a + b


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_infer_leaves_no_cycle(servers, protocol):
    _, grpc_server, http_server = servers
    module, endpoint = (
        (grpcclient, grpc_server) if protocol == "grpc" else (httpclient, http_server)
    )
    client = module.InferenceServerClient(endpoint.target)

    def run():
        for i in range(20):
            inputs, expected = _simple(module, i)
            np.testing.assert_array_equal(
                client.infer("simple", inputs).as_numpy("OUTPUT0"), expected
            )

    try:
        assert _garbage_after(run) == []
    finally:
        client.close()


def test_grpc_stream_infer_leaves_no_cycle(servers):
    _, grpc_server, _ = servers
    client = grpcclient.InferenceServerClient(grpc_server.target)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))

    def run():
        expected = []
        for i in range(20):
            inputs, want = _simple(grpcclient, i)
            expected.append(want)
            client.async_stream_infer("simple", inputs, request_id=str(i))
        got = {}
        for _ in range(20):
            result, error = results.get(timeout=30)
            assert error is None
            got[int(result.get_response().id)] = result.as_numpy("OUTPUT0")
        for i, want in enumerate(expected):
            np.testing.assert_array_equal(got[i], want)

    try:
        assert _garbage_after(run) == []
    finally:
        client.stop_stream()
        client.close()


def test_ensemble_steps_leave_no_cycle(servers):
    core, _, _ = servers
    config = core.get_model("detector_pipeline").config
    tensor = config.inputs[0]
    dims = [d if d > 0 else 64 for d in tensor.dims]
    image = np.zeros(([1] if config.max_batch_size > 0 else []) + dims, dtype=np.uint8)

    def run():
        for _ in range(5):
            response = core.infer_sync(
                InferRequest(model_name="detector_pipeline", inputs={tensor.name: image}),
                timeout=60,
            )
            assert response.outputs

    assert _garbage_after(run) == []


def test_decoupled_and_sequence_requests_leave_no_cycle():
    """A decoupled model's stream (responses through the request's sink and response factory)
    and a stateful model's sequence (slots, state) free their requests by reference counting."""
    from server_process import ROOT

    repository = ROOT / "examples" / "client_examples_repository"
    core = InferenceServer(
        ServerOptions(
            model_repositories=(str(repository),),
            model_control_mode="explicit",
            startup_models=("square_int32", "simple_sequence"),
        )
    )
    core.start()
    server = GrpcServer(core, address="127.0.0.1", port=0)
    server.start()
    client = grpcclient.InferenceServerClient(server.target)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))

    def run():
        for i in range(10):
            value = np.array([2], np.int32)
            square = grpcclient.InferInput("IN", [1], "INT32")
            square.set_data_from_numpy(value)
            client.async_stream_infer("square_int32", [square], request_id=f"s{i}")
            sequence = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            sequence.set_data_from_numpy(np.full([1, 1], i, np.int32))
            client.async_stream_infer(
                "simple_sequence",
                [sequence],
                sequence_id=77,
                sequence_start=i == 0,
                sequence_end=i == 9,
            )
        for _ in range(30):
            result, error = results.get(timeout=30)
            assert error is None, error

    try:
        assert _garbage_after(run) == []
    finally:
        client.stop_stream()
        client.close()
        server.stop()
        core.stop()
