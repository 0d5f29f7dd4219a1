"""Decoupled models (model_transaction_policy { decoupled: true }) served by a real
triton-ros-server, driven with tritonclient and perf_analyzer over 127.0.0.1, with the answers
tritonserver 2.51 gives to the same requests (compared by hand; docs/stateful.md):

- Triton's decoupled "square" and "repeat" examples' steps over ModelStreamInfer, the
  triton_final_response flag and the empty final response a client may ask for;
- non-decoupled requests on a stream answered in request order; ModelInfer and HTTP infer
  refuse a decoupled model with Triton's errors;
- cancellation: a client that closes its stream (or its generate_stream connection) stops the
  model's work (request.is_cancelled());
- decoupled BLS (exec / async_exec with decoupled=True); a model that raises, drops its request
  without the final flag, or dies: its client gets an error, never silence;
- HTTP generate and generate_stream; perf_analyzer --streaming against a decoupled model.
"""

from __future__ import annotations

import json
import queue
import shutil
import socket
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from processes import wait_until
from server_process import ROOT, perf_analyzer

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples" / "client_examples_repository"
MODELS = ROOT / "test" / "decoupled_models"


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("decoupled") / "models"
    shutil.copytree(MODELS, repo)
    for name in ("square_int32", "repeat_int32", "simple_sequence"):
        shutil.copytree(EXAMPLES / name, repo / name)
    return start_module_server("--model-repository", str(repo), timeout=120)


def _int32(module, name, values):
    array = np.asarray(values, np.int32)
    tensor = module.InferInput(name, list(array.shape), "INT32")
    tensor.set_data_from_numpy(array)
    return tensor


class Stream:
    """A ModelStreamInfer stream whose results (or errors) queue up as they come."""

    def __init__(self, server) -> None:
        self.client = server.client()
        self.items: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.items.put(error or result))

    def send(self, model, inputs, **kwargs) -> None:
        self.client.async_stream_infer(model, inputs, **kwargs)

    def take(self, count: int, timeout: float = 30) -> list:
        return [self.items.get(timeout=timeout) for _ in range(count)]

    def nothing_more(self, wait: float = 0.5) -> bool:
        try:
            self.items.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self, cancel: bool = False) -> None:
        self.client.stop_stream(cancel_requests=cancel)


def _final(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def test_the_square_example_steps(server):
    """python_backend's square_client.py: IN = 4, 2, 0, 1 on one stream, each request gets IN
    responses of OUT = IN, and none for 0 (its final flag comes alone and is not sent)."""
    stream = Stream(server)
    try:
        for i, value in enumerate([4, 2, 0, 1]):
            stream.send(
                "square_int32",
                [_int32(grpcclient, "IN", [value])],
                request_id=str(i),
                outputs=[grpcclient.InferRequestedOutput("OUT")],
            )
        got: dict[str, list] = {}
        for result in stream.take(7):
            assert not isinstance(result, InferenceServerException), result
            got.setdefault(result.get_response().id, []).append(result)
        assert stream.nothing_more()
    finally:
        stream.close()
    assert {k: len(v) for k, v in got.items()} == {"0": 4, "1": 2, "3": 1}
    for key, value in (("0", 4), ("1", 2), ("3", 1)):
        assert all(r.as_numpy("OUT").tolist() == [value] for r in got[key])
        assert not any(_final(r) for r in got[key])  # the final flag came alone


def test_the_empty_final_response_on_request(server):
    """With triton_enable_empty_final_response, a final flag sent alone still comes as an empty
    response: the request's id and model, no outputs, triton_final_response true; tritonserver
    leaves its model_version as the request gave it (empty here)."""
    stream = Stream(server)
    try:
        for i, value in enumerate([2, 0]):
            stream.send(
                "square_int32",
                [_int32(grpcclient, "IN", [value])],
                request_id=f"e{i}",
                enable_empty_final_response=True,
            )
        results = stream.take(4)
    finally:
        stream.close()
    by_id: dict[str, list] = {}
    for result in results:
        by_id.setdefault(result.get_response().id, []).append(result.get_response())
    assert [r.parameters["triton_final_response"].bool_param for r in by_id["e0"]] == [
        False,
        False,
        True,
    ]
    empty = by_id["e0"][-1]
    assert (empty.model_name, empty.model_version, list(empty.outputs)) == ("square_int32", "", [])
    assert len(by_id["e1"]) == 1 and not by_id["e1"][0].outputs


def test_the_repeat_example_steps(server):
    """simple_grpc_custom_repeat.py's steps (shorter delays): one request, one response per
    element of IN, in order, each OUT the element and IDX its index."""
    stream = Stream(server)
    count = 10
    try:
        stream.send(
            "repeat_int32",
            [
                _int32(grpcclient, "IN", np.arange(100, 100 + count)),
                _uint32("DELAY", [20] * count),
                _uint32("WAIT", [50]),
            ],
            outputs=[
                grpcclient.InferRequestedOutput("OUT"),
                grpcclient.InferRequestedOutput("IDX"),
            ],
        )
        results = stream.take(count)
        assert stream.nothing_more()
    finally:
        stream.close()
    assert [r.as_numpy("OUT").tolist() for r in results] == [[v] for v in range(100, 110)]
    assert [r.as_numpy("IDX").tolist() for r in results] == [[i] for i in range(count)]


def _uint32(name, values):
    array = np.asarray(values, np.uint32)
    tensor = grpcclient.InferInput(name, list(array.shape), "UINT32")
    tensor.set_data_from_numpy(array)
    return tensor


def test_non_decoupled_requests_on_a_stream_answer_in_request_order(server):
    """tritonserver sends a non-decoupled request's response in the order the requests came,
    each with triton_final_response true: a slow first request holds back a fast second one."""
    stream = Stream(server)
    try:
        stream.send("sleepy", [_int32(grpcclient, "IN", [600])], request_id="slow")
        stream.send("sleepy", [_int32(grpcclient, "IN", [0])], request_id="fast")
        results = stream.take(2)
    finally:
        stream.close()
    assert [r.get_response().id for r in results] == ["slow", "fast"]
    assert all(_final(r) for r in results)


def test_model_infer_and_http_infer_refuse_a_decoupled_model(server):
    with pytest.raises(InferenceServerException) as caught:
        server.client().infer("square_int32", [_int32(grpcclient, "IN", [1])])
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
    assert caught.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )
    with pytest.raises(InferenceServerException) as caught:
        server.http_client().infer("square_int32", [_int32(httpclient, "IN", [1])])
    assert caught.value.status() == "501"
    assert caught.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy"
    )


def test_closing_the_stream_cancels_the_model_work(server, tmp_path):
    marker = tmp_path / "watch"
    stream = Stream(server)
    try:
        stream.send(
            "decoupled_watch", [_int32(grpcclient, "IN", [0])], parameters={"marker": str(marker)}
        )
        first = stream.take(3)
        assert [r.as_numpy("OUT").tolist() for r in first] == [[0], [1], [2]]
    finally:
        stream.close(cancel=True)
    outcome = wait_until(
        lambda: marker.exists() and marker.read_text(),
        timeout=30,
        what="the model to see its request cancelled",
    )
    kind, count = outcome.split()
    assert kind == "cancelled" and int(count) < 1500
    assert server.client().is_server_live()


def test_decoupled_bls(server):
    """exec(decoupled=True) and async_exec(decoupled=True) iterate square_int32's responses;
    the final flag sent alone is one last empty response. exec() without decoupled on it gives
    the Python backend's error."""
    client = server.client()
    for mode in ("sync", "async"):
        result = client.infer(
            "decoupled_bls", [_int32(grpcclient, "IN", [3])], parameters={"mode": mode}
        )
        assert (
            result.as_numpy("COUNT").tolist(),
            result.as_numpy("SUM").tolist(),
            result.as_numpy("EMPTY").tolist(),
        ) == ([3], [9], [1]), mode
    result = client.infer("decoupled_bls", [_int32(grpcclient, "IN", [0])])
    assert (result.as_numpy("COUNT").tolist(), result.as_numpy("EMPTY").tolist()) == ([0], [1])
    with pytest.raises(
        InferenceServerException,
        match="Model square_int32 is using the decoupled. The current BLS request "
        "call doesn't support models using the decoupled transaction "
        "policy",
    ):
        client.infer(
            "decoupled_bls", [_int32(grpcclient, "IN", [1])], parameters={"mode": "coupled"}
        )


@pytest.mark.parametrize(
    "mode, message",
    [
        ("raise", "the model failed on purpose"),
        (
            "abandon",
            "released the request without sending a response with "
            "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
        ),
        ("crash", "Stub process"),
    ],
)
def test_a_failing_decoupled_model_ends_the_request_with_an_error(server, mode, message):
    stream = Stream(server)
    try:
        stream.send(
            "decoupled_fail",
            [_int32(grpcclient, "IN", [1])],
            request_id=mode,
            parameters={"mode": mode},
        )
        first, second = stream.take(2, timeout=60)
        assert stream.nothing_more()
    finally:
        stream.close()
    assert first.as_numpy("OUT").tolist() == [1] and not _final(first)
    assert isinstance(second, InferenceServerException)
    assert message in second.message()
    # the instance carries on (a crashed stub is restarted)
    stream = Stream(server)
    try:
        stream.send("decoupled_fail", [_int32(grpcclient, "IN", [1])])
        (again,) = stream.take(1, timeout=60)
        assert again.as_numpy("OUT").tolist() == [1]
    finally:
        stream.close()


def test_a_send_after_the_final_flag_is_the_models_error(server):
    stream = Stream(server)
    try:
        stream.send(
            "decoupled_fail",
            [_int32(grpcclient, "IN", [1])],
            parameters={"mode": "twice"},
            enable_empty_final_response=True,
        )
        first, final = stream.take(2)
        assert stream.nothing_more()
    finally:
        stream.close()
    assert not _final(first) and _final(final)
    wait_until(
        lambda: "Unable to send response. Response sender has been closed." in server.log(),
        what="the model's logged error",
    )


def _post(server, path, body):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=json.dumps(body).encode()
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.headers.get("Content-Type"), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type"), exc.read().decode()


def test_http_generate_and_generate_stream(server):
    """Triton's generate extension, with tritonserver 2.51's answers to the same requests."""
    assert _post(server, "/v2/models/square_int32/generate", {"IN": 1, "id": "g1"}) == (
        200,
        "application/json",
        '{"OUT":1,"id":"g1","model_name":"square_int32","model_version":"1"}',
    )
    # generate takes exactly one response (tritonserver answers the error with status 200)
    status, _, body = _post(server, "/v2/models/square_int32/generate", {"IN": 2})
    assert status == 200 and "generate expects model to produce exactly 1 response" in body
    status, kind, body = _post(
        server, "/v2/models/square_int32/generate_stream", {"IN": 3, "id": "g3"}
    )
    assert (status, kind) == (200, "text/event-stream; charset=utf-8")
    assert body == 3 * (
        'data: {"OUT":3,"id":"g3","model_name":"square_int32","model_version":"1"}\n\n'
    )
    assert _post(server, "/v2/models/square_int32/generate_stream", {"IN": 0})[2] == ""
    status, _, body = _post(
        server,
        "/v2/models/repeat_int32/generate_stream",
        {"IN": [4, 5], "DELAY": [1, 1], "WAIT": 1},
    )
    assert body == (
        'data: {"IDX":0,"OUT":4,"model_name":"repeat_int32","model_version":"1"}'
        '\n\ndata: {"IDX":1,"OUT":5,"model_name":"repeat_int32",'
        '"model_version":"1"}\n\n'
    )
    assert _post(server, "/v2/models/square_int32/generate_stream", {"IN": [1, 2]}) == (
        400,
        "application/json",
        '{"error":"The schema can not convert input \'IN\' to tensor with proper shape"}',
    )
    status, _, body = _post(
        server, "/v2/models/square_int32/generate_stream", {"IN": 1, "extra": {"a": 1}}
    )
    assert status == 400 and "parameter 'extra' has invalid type" in body
    status, _, body = _post(server, "/v2/models/simple_sequence/generate", {"INPUT": 3})
    assert status == 400 and "must specify a non-zero or non-empty correlation ID" in body
    # the model's error (INTERNAL): 400 whatever its code, as tritonserver 2.51 answers
    # (test_tritonserver_sequence_parity.py's http-generate[-stream]-model-error)
    mismatch = {"IN": [1, 2], "DELAY": [1], "WAIT": 0}
    status, kind, body = _post(server, "/v2/models/repeat_int32/generate", mismatch)
    assert (status, kind) == (400, "application/json")
    assert "expected IN and DELAY shape to match" in json.loads(body)["error"]
    status, kind, body = _post(server, "/v2/models/repeat_int32/generate_stream", mismatch)
    assert (status, kind) == (400, "text/event-stream; charset=utf-8")
    assert body.startswith('data: {"error":"') and body.endswith("\n\n")
    assert "expected IN and DELAY shape to match" in json.loads(body[len("data: ") :])["error"]


def test_a_generate_stream_client_that_goes_away_cancels_the_request(server, tmp_path):
    marker = tmp_path / "watch"
    body = json.dumps({"IN": 0, "parameters": {"marker": str(marker)}}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
        sock.sendall(
            b"POST /v2/models/decoupled_watch/generate_stream HTTP/1.1\r\n"
            b"Host: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while received.count(b"data: ") < 3:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    kind = wait_until(
        lambda: marker.exists() and marker.read_text().split()[0],
        timeout=30,
        what="the model to see its request cancelled",
    )
    assert kind == "cancelled"


def test_perf_analyzer_streaming_against_a_decoupled_model(server, tmp_path):
    data = tmp_path / "square.json"
    data.write_text(json.dumps({"data": [{"IN": [3]}]}))
    result = subprocess.run(
        [
            str(perf_analyzer()),
            "-m",
            "square_int32",
            "-i",
            "grpc",
            "--streaming",
            "-u",
            server.url,
            "--input-data",
            str(data),
            "--concurrency-range",
            "2",
            "--measurement-interval",
            "1500",
            "--max-trials",
            "3",
            "-s",
            "1000000",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Detected decoupled model" in result.stdout
    throughput = float(result.stdout.split("Response Throughput: ")[1].split()[0])
    requests = float(result.stdout.split("Throughput: ")[1].split()[0])
    assert throughput > 0 and abs(throughput / requests - 3) < 0.2, result.stdout


def test_a_decoupled_stateful_model_streams_each_sequence_request(server):
    """Decoupled and sequence_batching together: each request of the sequence streams its
    responses with its own controls; a request of no known sequence is refused on the stream."""
    stream = Stream(server)
    try:
        stream.send(
            "sequence_square",
            [_int32(grpcclient, "IN", [2])],
            request_id="a",
            sequence_id=5,
            sequence_start=True,
        )
        stream.send(
            "sequence_square",
            [_int32(grpcclient, "IN", [1])],
            request_id="b",
            sequence_id=5,
            sequence_end=True,
        )
        stream.send(
            "sequence_square", [_int32(grpcclient, "IN", [1])], request_id="c", sequence_id=6
        )
        results = stream.take(4)
        assert stream.nothing_more()
    finally:
        stream.close()
    errors = [r for r in results if isinstance(r, InferenceServerException)]
    assert len(errors) == 1 and "must specify the START flag" in errors[0].message()
    outputs = [
        (r.get_response().id, r.as_numpy("OUT").tolist())
        for r in results
        if not isinstance(r, InferenceServerException)
    ]
    assert outputs == [("a", [2, 1, 5]), ("a", [2, 1, 5]), ("b", [1, 0, 5])]
