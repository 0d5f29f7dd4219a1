"""The gRPC inference path: large payloads never hold up other clients, the stream backlog is
bounded, and the bytes-level codec (tensors as views of the message, outputs appended to the
reply) agrees with protobuf. Real server processes over 127.0.0.1, real tritonclient."""

from __future__ import annotations

import queue
import struct
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from model_factory import identity_graph, write_model
from server_process import copy_models
from simple_model import simple_array, simple_inputs
from triton_ros.core.infer_request import InferResponse
from triton_ros.frontend.grpc import grpc_codec
from triton_ros.frontend.grpc.grpc_server import STREAM_BACKLOG


pytestmark = pytest.mark.integration

BYTES_CONFIG = """
name: "bytes_identity"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = copy_models(tmp_path_factory.mktemp("hot") / "models", "simple", "simple_string")
    write_model(repo, "bytes_identity", identity_graph("BYTES", ["N"]), BYTES_CONFIG)
    return start_module_server("--model-repository", str(repo))


def bytes_request(model: str, elements: int, size: int = 11) -> pb.ModelInferRequest:
    item = struct.pack("<I", size) + b"x" * size
    return pb.ModelInferRequest(
        model_name=model,
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="BYTES", shape=[elements])
        ],
        raw_input_contents=[item * elements],
    )


def live_latencies_while(stub, busy: threading.Event) -> list[float]:
    """ServerLive round trips (s) measured for as long as ``busy`` is set."""
    latencies = []
    while busy.is_set():
        start = time.monotonic()
        assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
        latencies.append(time.monotonic() - start)
        time.sleep(0.005)
    return latencies


def test_server_live_answers_while_a_32mb_bytes_request_decodes(server):
    """A 32 MB BYTES input of 2.2 M elements (parsed element by element) for a model that
    expects other inputs: the server decodes it, then refuses it with INVALID_ARGUMENT; ServerLive
    keeps answering meanwhile. Before decoding moved off the event loop, a request like this
    held every other client of the endpoint for seconds."""
    channel = grpc.insecure_channel(server.url, options=[("grpc.max_send_message_length", -1)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    # Elements of two lengths: the decoder's element-by-element path (its slowest).
    pair = struct.pack("<I", 10) + b"x" * 10 + struct.pack("<I", 11) + b"y" * 11
    elements = 2 * ((32 << 20) // len(pair))
    request = bytes_request("simple_string", 1)
    request.inputs[0].shape[:] = [1, elements]
    request.raw_input_contents[0] = pair * (elements // 2)
    busy = threading.Event()
    busy.set()
    result: dict = {}

    def big() -> None:
        try:
            stub.ModelInfer(request, timeout=300)
        except grpc.RpcError as exc:
            result["error"] = exc
        finally:
            busy.clear()

    thread = threading.Thread(target=big)
    start = time.monotonic()
    thread.start()
    latencies = live_latencies_while(stub, busy)
    thread.join()
    took = time.monotonic() - start
    assert result["error"].code() == grpc.StatusCode.INVALID_ARGUMENT, result["error"]
    # The big request took long enough to be probed many times; no probe waited for it.
    assert took > 0.3 and len(latencies) >= 10, (took, len(latencies))
    print(
        f"\nbig request {took:.2f} s; ServerLive n={len(latencies)} max "
        f"{1e3 * max(latencies):.1f} ms p50 {1e3 * float(np.median(latencies)):.1f} ms"
    )
    assert max(latencies) < 0.25 * took, (max(latencies), took)


def test_large_bytes_tensors_round_trip(server):
    """Large BYTES inputs and outputs (decoded and encoded off the event loop) come back intact."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(
            server.url,
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        )
    )
    request = bytes_request("bytes_identity", 50_000)
    response = stub.ModelInfer(request, timeout=120)
    assert list(response.outputs[0].shape) == [50_000]
    assert response.raw_output_contents[0] == request.raw_input_contents[0]


def test_large_request_for_an_unknown_model_is_refused_before_decoding(server):
    stub = service_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(server.url, options=[("grpc.max_send_message_length", -1)])
    )
    request = bytes_request("no_such_model", 2_000_000)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request, timeout=120)
    # The core's answer for an unknown model, the same as for a small request.
    with pytest.raises(grpc.RpcError) as small:
        stub.ModelInfer(bytes_request("no_such_model", 1), timeout=30)
    assert err.value.code() == small.value.code()
    assert err.value.details() == small.value.details()
    assert "no_such_model" in err.value.details()


def test_stream_backlog_is_bounded_and_every_response_arrives(server):
    """A client writes many more requests than the backlog without reading: the server stops
    reading at the bound (HTTP/2 flow control then holds the client back); once the client
    reads, every response arrives, in full and right."""
    stub = service_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(server.url, options=[("grpc.max_receive_message_length", -1)])
    )
    total = STREAM_BACKLOG * 4
    size = 256 << 10  # total 64 MiB: far more than the transport buffers
    sent = []

    def requests():
        for i in range(total):
            payload = str(i).encode().rjust(size, b".")
            msg = pb.ModelInferRequest(
                model_name="bytes_identity",
                id=str(i),
                inputs=[
                    pb.ModelInferRequest.InferInputTensor(
                        name="INPUT0", datatype="BYTES", shape=[1]
                    )
                ],
                raw_input_contents=[struct.pack("<I", size) + payload],
            )
            sent.append(i)
            yield msg

    responses = stub.ModelStreamInfer(requests(), timeout=300)
    time.sleep(2.0)  # the client reads nothing meanwhile
    assert len(sent) < total, "the server read every request although none was answered"
    seen = set()
    for r in responses:
        assert r.error_message == ""
        i = r.infer_response.id
        assert r.infer_response.raw_output_contents[0][4:].lstrip(b".") == i.encode()
        seen.add(int(i))
        if len(seen) == total:
            break
    assert sorted(seen) == list(range(total))


def test_stream_with_a_malformed_request_answers_it_and_goes_on(server):
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.url))
    client = server.client()
    good = pb.ModelInferRequest(
        model_name="simple",
        id="good",
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name=n, datatype="INT32", shape=[1, 16])
            for n in ("INPUT0", "INPUT1")
        ],
        raw_input_contents=[bytes(64), bytes(64)],
    )
    bad = pb.ModelInferRequest(
        model_name="simple", id="bad", inputs=good.inputs[:1], raw_input_contents=[bytes(64)]
    )
    replies = list(stub.ModelStreamInfer(iter([bad, good]), timeout=60))
    by_id = {r.infer_response.id: r for r in replies}
    assert by_id["good"].error_message == ""
    assert "missing required input" in by_id["bad"].error_message
    assert client.is_server_live()


# ------------------------------------------------------------------- the codec, without a server
def test_parse_takes_raw_contents_as_views_and_the_rest_with_protobuf():
    raws = [np.arange(12, dtype=np.float32).tobytes(), b"", b"\x01\x02"]
    msg = pb.ModelInferRequest(
        model_name="m",
        model_version="2",
        id="x" * 300,
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name=f"I{i}", datatype="UINT8", shape=[1])
            for i in range(3)
        ],
        raw_input_contents=raws,
    )
    msg.parameters["priority"].int64_param = 3
    msg.outputs.add(name="O")
    data = msg.SerializeToString()
    parsed, views = grpc_codec.parse_infer_request(data)
    assert [bytes(v) for v in views] == raws
    assert all(isinstance(v, memoryview) and v.obj is data for v in views)
    expected = pb.ModelInferRequest()
    expected.CopyFrom(msg)
    del expected.raw_input_contents[:]
    assert parsed == expected


@pytest.mark.parametrize(
    "data", [b"\x0a\x05ab", b"\x3a\xff\xff\xff\xff\x0f", b"\x0b", b"\xff", b"\x0a\x80"]
)
def test_parse_refuses_malformed_bytes(data):
    with pytest.raises(grpc_codec.MalformedMessage):
        grpc_codec.parse_infer_request(data)


def test_serialized_response_equals_protobufs():
    outputs = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3)[1:],
        "b": np.array([b"x", b"yz"], dtype=np.object_),
        "empty": np.zeros((0, 4), np.int64),
    }
    resp = InferResponse("m", 3, "id7", outputs, {"flag": True, "n": 5})
    data = grpc_codec.serialize_infer_response(resp)
    assert pb.ModelInferResponse.FromString(data) == grpc_codec.encode_infer_response(resp)
    stream = pb.ModelStreamInferResponse.FromString(grpc_codec.serialize_stream_response(data))
    assert stream.infer_response == pb.ModelInferResponse.FromString(data)


def test_tritonclient_round_trip_through_the_bytes_path(server):
    client = server.client()
    a = simple_array()
    inputs = simple_inputs(grpcclient, a)
    result = client.infer("simple", inputs, request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 0 * a)
    assert result.get_response().id == "r1"
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("simple", inputs, request_id="s1")
        r, e = answers.get(timeout=30)
        assert e is None and r.get_response().id == "s1"
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)
    finally:
        client.stop_stream()


def test_loop_handoff_runs_every_call_in_order_with_few_wakeups():
    import asyncio
    from concurrent.futures import Future

    from triton_ros.frontend.grpc.grpc_server import LoopHandoff

    async def main():
        loop = asyncio.get_running_loop()
        handoff = LoopHandoff(loop)
        seen: list[int] = []
        wakeups = 0
        original = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            nonlocal wakeups
            wakeups += 1
            return original(*args, **kwargs)

        loop.call_soon_threadsafe = counting
        futures = [Future() for _ in range(200)]
        waiters = [handoff.wait(f) for f in futures]

        def complete():
            for i, f in enumerate(futures):
                f.set_result(i)
                handoff.post(seen.append, i)

        worker = threading.Thread(target=complete)
        worker.start()
        done = await asyncio.wait_for(asyncio.gather(*waiters), 30)
        worker.join()
        await asyncio.sleep(0.05)
        # A waiter resolves with None (holding the future would make a reference cycle).
        assert done == [None] * 200
        assert [f.result() for f in futures] == list(range(200))
        assert seen == list(range(200))
        # A burst posted while the loop is busy costs one wake-up, not one per call.
        wakeups = 0
        burst: list[int] = []
        for i in range(100):
            handoff.post(burst.append, i)
        assert wakeups == 1 and burst == []
        await asyncio.sleep(0.01)
        assert burst == list(range(100))

    asyncio.run(main())


@pytest.mark.parametrize("size", [3, 100_000])
def test_bytes_that_are_no_request_get_internal_and_the_server_serves_on(server, size):
    channel = grpc.insecure_channel(server.url)
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    garbage = b"\x0a\xff" + b"\xff" * size  # a field length past the end
    with pytest.raises(grpc.RpcError) as err:
        call(garbage, timeout=30)
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert "deserializing" in err.value.details()
    assert server.client().is_server_live()
