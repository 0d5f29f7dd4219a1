"""Hostile clients of issue 34 against real triton-ros-server processes on 127.0.0.1, each
followed by a normal request, with the server's log checked for tracebacks: aborted request
bodies and answers (counted, no traceback), trickled bodies at the connection limit (eviction,
minimum body rate), half-sent connections holding the metrics port, 2000 concurrent gRPC calls, a
model configuration whose delay overflowed the batcher's waits, and the memory kept after large
requests.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from model_factory import identity_config, identity_graph, write_model
from prometheus_text import scrape
from processes import wait_until
from server_process import MODEL_REPOSITORY, ServerProcess, copy_models
from test_adversarial_http import INFER, assert_normal, connect, read_response, request

pytestmark = pytest.mark.integration

MAX_CONNECTIONS = 30
METRICS_CONNECTIONS = 64  # the default --metrics-max-connections


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = copy_models(tmp_path_factory.mktemp("hostile") / "models")
    write_model(
        repo, "identity_fp32", identity_graph("FP32", [-1]), identity_config("identity_fp32")
    )
    s = start_module_server(
        "--model-repository", str(repo), "--http-max-connections", str(MAX_CONNECTIONS)
    )
    yield s
    assert s.stop() == 0, s.log()
    assert_quiet(s)


def assert_quiet(server: ServerProcess) -> None:
    log = server.log()
    assert "Traceback" not in log, log
    assert "ConnectionResetError" not in log, log


def closed_counts(server: ServerProcess, endpoint: str = "http") -> dict[str, float]:
    family = scrape(server.metrics_url)["triton_ros_connections_closed"]
    return family.by("reason", endpoint=endpoint)


def hang_up(s: socket.socket, reset: bool) -> None:
    """Close a client's socket with FIN, or with RST (``reset``)."""
    if reset:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def assert_aborted(server: ServerProcess, expected: float) -> None:
    """The aborted count reaches ``expected`` (the server sees the closes from its loop)."""
    wait_until(
        lambda: closed_counts(server)["aborted"] >= expected,
        10,
        f"{expected} aborted connections counted",
        interval=0.1,
    )
    assert closed_counts(server)["aborted"] == expected


# ------------------------------------------------------------------------------------------
# 1. aborted bodies
# ------------------------------------------------------------------------------------------


def test_aborted_bodies_are_counted_without_a_traceback(server):
    """Head and part of a body, then FIN (5 times) or RST (5 times): each closes quietly, is
    counted as aborted, and the next request is served."""
    before = closed_counts(server)["aborted"]
    for i in range(10):
        s = connect(server.http_port)
        s.sendall(request("POST", INFER, length=100_000) + b'{"inputs": [' + b" " * 5000)
        time.sleep(0.2)  # the server is inside the body when it goes
        hang_up(s, reset=bool(i % 2))
    assert_normal(server)
    assert_aborted(server, before + 10)
    assert_quiet(server)


def test_clients_gone_while_a_large_answer_is_written_are_counted_quietly(server):
    """A 20 MB answer whose client reads a little of it and closes (FIN, RST): no traceback
    (aiohttp's ClientConnectionResetError out of the response's writes), counted as aborted."""
    data = np.arange(5_000_000, dtype=np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [5_000_000],
                    "parameters": {"binary_data_size": len(data)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    before = closed_counts(server)["aborted"]
    for i in range(4):
        s = connect(server.http_port)
        s.sendall(
            request(
                "POST",
                "/v2/models/identity_fp32/infer",
                header + data,
                {"Inference-Header-Content-Length": str(len(header))},
            )
        )
        assert s.recv(100).startswith(b"HTTP/1.1 200")
        hang_up(s, reset=bool(i % 2))
    assert_normal(server)
    assert_aborted(server, before + 4)
    assert_quiet(server)


# ------------------------------------------------------------------------------------------
# 4. trickled bodies at the connection limit
# ------------------------------------------------------------------------------------------


class Trickler:
    """A connection that sends a request head at once, then one body byte every 2 s."""

    def __init__(self, port: int) -> None:
        self.sock = connect(port)
        self.sock.sendall(request("POST", INFER, length=1000) + b"{")
        self.status: int | None = None

    def tick(self) -> None:
        try:
            self.sock.sendall(b" ")
        except OSError:
            pass

    def answer(self, timeout: float) -> int:
        self.sock.settimeout(timeout)
        try:
            self.status = read_response(self.sock)[0]
        except OSError:
            self.status = 0
        return self.status


def test_trickled_bodies_do_not_lock_out_a_new_client(server):
    """30 clients trickling a body at --http-max-connections 30: new clients are served at
    once (the first evicts the longest-waiting trickler with 503; the next ones take the
    place a closed client left), not refused."""
    time.sleep(1.0)  # earlier tests' connections are closed on the server's side too
    before = closed_counts(server)
    tricklers = [Trickler(server.http_port) for _ in range(MAX_CONNECTIONS)]
    stop = threading.Event()

    def trickle():
        while not stop.wait(2.0):
            for t in tricklers:
                t.tick()

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        time.sleep(0.5)
        for _ in range(3):
            started = time.monotonic()
            assert_normal(server)  # its own connection, and a second one from the client
            assert time.monotonic() - started < 5.0
        # the evicted: tricklers (those waiting longest), or the connection of a client before
        # whose close the server had not seen yet
        answered = [t.answer(0.05) for t in tricklers]
        assert 503 in answered, answered
    finally:
        stop.set()
        thread.join()
        for t in tricklers:
            t.sock.close()
    after = closed_counts(server)
    assert after["evicted"] - before["evicted"] >= max(1, answered.count(503))
    assert after["refused"] == before["refused"]
    assert_quiet(server)


def test_trickled_body_is_cut_at_the_minimum_rate(start_server):
    """Below the connection limit, a body trickled at 0.5 byte a second ends with 408 once the
    first --http-header-timeout-secs are over (--http-min-body-rate 500), not after 60 s."""
    s = start_server("--model-repository", str(MODEL_REPOSITORY), "--http-header-timeout-secs", "1")
    t = Trickler(s.http_port)
    started = time.monotonic()
    t.tick()
    assert t.answer(20.0) == 408
    assert time.monotonic() - started < 6.0
    t.sock.close()
    assert closed_counts(s)["timeout"] == 1
    assert_normal(s)
    assert_quiet(s)


# ------------------------------------------------------------------------------------------
# 5. the metrics port held by half-sent and idle connections
# ------------------------------------------------------------------------------------------


def test_scrape_is_served_while_half_sent_connections_hold_the_metrics_port(server):
    socks = []
    try:
        for i in range(METRICS_CONNECTIONS + 10):
            s = connect(server.metrics_port)
            if i < METRICS_CONNECTIONS:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost")
            socks.append(s)
        time.sleep(0.5)
        for _ in range(3):
            started = time.monotonic()
            with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
                assert r.status == 200
                assert b"nv_inference_request_success{" in r.read()
            assert time.monotonic() - started < 3.0
    finally:
        for s in socks:
            s.close()
    assert closed_counts(server, "metrics")["evicted"] >= 11  # 10 over the limit, 1 scrape
    assert_normal(server)
    assert_quiet(server)


# ------------------------------------------------------------------------------------------
# 6. 2000 concurrent gRPC calls
# ------------------------------------------------------------------------------------------


def test_2000_concurrent_grpc_calls_are_all_answered(server):
    """2000 ModelInfer calls at once on two channels: each is answered, or refused with
    RESOURCE_EXHAUSTED and a message; none ends CANCELLED without details (grpcio's pending
    request limit dropped 5-8 % of them)."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    message = pb.ModelInferRequest(model_name="simple")
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    for name in ("INPUT0", "INPUT1"):
        message.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        message.raw_input_contents.append(data.tobytes())

    async def run() -> dict:
        channels = [grpc.aio.insecure_channel(server.url) for _ in range(2)]
        stubs = [service_pb2_grpc.GRPCInferenceServiceStub(c) for c in channels]
        codes: dict = {}

        async def one(i: int) -> None:
            try:
                reply = await stubs[i % 2].ModelInfer(message, timeout=60)
                out = np.frombuffer(reply.raw_output_contents[0], dtype=np.int32)
                key = "OK" if np.array_equal(out, 2 * data.ravel()) else "WRONG"
            except grpc.aio.AioRpcError as exc:
                key = (exc.code().name, bool(exc.details()))
            codes[key] = codes.get(key, 0) + 1

        await asyncio.gather(*(one(i) for i in range(2000)))
        for channel in channels:
            await channel.close()
        return codes

    codes = asyncio.run(run())
    assert set(codes) <= {"OK", ("RESOURCE_EXHAUSTED", True)}, codes
    assert codes.get("OK", 0) >= 1000, codes
    assert_normal(server)
    assert_quiet(server)


# ------------------------------------------------------------------------------------------
# 3. a configuration value that killed the model's threads
# ------------------------------------------------------------------------------------------

IDENTITY = {
    "name": "identity_fp32",
    "backend": "onnxruntime",
    "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
}


def test_overflowing_delay_is_refused_and_the_longest_one_serves(start_server, repo_copy):
    write_model(repo_copy, "identity_fp32", identity_graph("FP32", ["N", 4]), None)
    s = start_server(
        "--model-repository",
        str(repo_copy),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
    )
    client = s.http_client(network_timeout=60)
    for value in (2**63 - 1, 2**64 - 1, 10**16):
        config = dict(IDENTITY, dynamic_batching={"max_queue_delay_microseconds": str(value)})
        with pytest.raises(InferenceServerException) as err:
            client.load_model("identity_fp32", config=json.dumps(config))
        assert "dynamic_batching.max_queue_delay_microseconds must be at most" in str(err.value)
        assert err.value.status() == "400"
    with pytest.raises(InferenceServerException) as err:
        client.load_model(
            "identity_fp32",
            config=json.dumps(
                dict(
                    IDENTITY,
                    dynamic_batching={
                        "default_queue_policy": {"default_timeout_microseconds": str(2**64 - 1)}
                    },
                )
            ),
        )
    assert "default_queue_policy.default_timeout_microseconds" in str(err.value)
    assert_normal(s)

    # The longest delay allowed (292 years) loads; a request waits for company, its instance
    # threads stay alive, and unloading the model sends it at once instead of hanging.
    config = dict(IDENTITY, dynamic_batching={"max_queue_delay_microseconds": "9223372036854775"})
    client.load_model("identity_fp32", config=json.dumps(config))
    x = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    x.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    answers: list = []

    def infer() -> None:
        grpc = s.client()
        try:
            answers.append(grpc.infer("identity_fp32", [x], client_timeout=60))
        except InferenceServerException as exc:
            answers.append(exc)
        grpc.close()

    thread = threading.Thread(target=infer)
    thread.start()
    time.sleep(1.5)
    assert client.is_model_ready("identity_fp32") and not answers
    client.unload_model("identity_fp32")
    thread.join(30)
    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
    np.testing.assert_array_equal(answers[0].as_numpy("OUTPUT0"), [[0, 1, 2, 3]])
    client.close()
    assert_normal(s)
    assert_quiet(s)


# ------------------------------------------------------------------------------------------
# 7. memory after large requests
# ------------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_memory_goes_back_after_large_requests(start_server, repo_copy):
    """15 requests of 30 MB over HTTP, then 15 over gRPC: within 15 s of idle the server's RSS
    is back within 50 MB of what it was before them (it kept 150-250 MB more)."""
    write_model(
        repo_copy, "identity_fp32", identity_graph("FP32", [-1]), identity_config("identity_fp32")
    )
    s = start_server("--model-repository", str(repo_copy))
    data = np.random.default_rng(0).random(30_000_000 // 4, dtype=np.float32)
    http = s.http_client(network_timeout=120)
    grpc = s.client()
    # the baseline: a served server (one small request on each protocol: what the first
    # request initialises once is not memory kept after large ones)
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        x = module.InferInput("INPUT0", [16], "FP32")
        x.set_data_from_numpy(data[:16])
        client.infer("identity_fp32", [x])
    time.sleep(1.0)
    baseline = rss_mb(s.proc.pid)
    for client, module, kwargs in (
        (http, httpclient, {"binary_data": True}),
        (grpc, grpcclient, {}),
    ):
        for _ in range(15):
            x = module.InferInput("INPUT0", [data.size], "FP32")
            x.set_data_from_numpy(data, **kwargs)
            result = client.infer(
                "identity_fp32", [x], outputs=[module.InferRequestedOutput("OUTPUT0", **kwargs)]
            )
            assert np.array_equal(result.as_numpy("OUTPUT0"), data)
    http.close()
    grpc.close()
    loaded = rss_mb(s.proc.pid)
    try:
        wait_until(
            lambda: rss_mb(s.proc.pid) <= baseline + 50,
            15.0,
            "the RSS back within 50 MB of its baseline",
            interval=0.5,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {(baseline, loaded, rss_mb(s.proc.pid))}") from None
    assert_normal(s)
    assert_quiet(s)
