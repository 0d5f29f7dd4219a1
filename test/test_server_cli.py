"""The triton-ros-server command: start-up table, graceful stop, flags, and perf_analyzer
against it."""

from __future__ import annotations

import http.client
import queue
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from processes import wait_until
from server_process import MODEL_REPOSITORY, ROOT, perf_analyzer
from model_factory import slow_config, slow_graph, write_model


pytestmark = pytest.mark.integration


def test_start_up_table_lists_models_and_states(bundled_server):
    log = bundled_server.log()
    assert re.search(r"\| Model +\| Version \| Status +\|", log)
    assert re.search(r"\| detector +\| 1 +\| READY +\|", log)
    assert re.search(r"\| simple +\| 1 +\| READY +\|", log)
    assert f"Started GRPCInferenceService at {bundled_server.url}" in log


def _signal_once_completed(server, client, count: int, sig: int = signal.SIGINT) -> float:
    """Send ``sig`` once ``count`` requests of the model 'slow' have completed (the others are
    queued or executing by then); return when it was sent (time.monotonic)."""
    wait_until(
        lambda: (
            client.get_inference_statistics("slow").model_stats[0].inference_stats.success.count
            >= count
        ),
        120,
        f"{count} requests completed",
        interval=0.01,
    )
    sent = time.monotonic()
    server.proc.send_signal(sig)
    return sent


def _assert_exits_0_within(server, signalled: float, seconds: float = 20) -> None:
    assert server.proc.wait(timeout=120) == 0
    took = time.monotonic() - signalled
    assert took < seconds, f"the server took {took:.1f} s to exit:\n{server.log()}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_finishes_in_flight_requests_then_exits_0(start_server, tmp_path, sig):
    repo = tmp_path / "repo"
    write_model(repo, "slow", slow_graph(), slow_config("slow", max_batch_size=1))
    server = start_server("--model-repository", str(repo))
    client = server.client()
    results: queue.Queue = queue.Queue()
    n = 6
    for i in range(n):
        x = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        x.set_data_from_numpy(np.full((1, 1), i, np.float32))
        client.async_infer("slow", [x], lambda result, error: results.put((result, error)))
    _signal_once_completed(server, client, 1, sig)
    answers = [results.get(timeout=120) for _ in range(n)]
    assert [e for _, e in answers if e is not None] == []
    assert sorted(float(r.as_numpy("OUTPUT0")[0, 0]) for r, _ in answers) == list(range(n))
    assert server.proc.wait(timeout=120) == 0
    assert "Server stopped" in server.log()


def test_idle_connections_do_not_hold_the_stop_back(start_server, tmp_path):
    """SIGINT closes idle keep-alive connections (HTTP, metrics, gRPC) at once, while HTTP
    requests in flight still finish: the exit takes their time, not --exit-timeout-secs. (aiohttp
    waited out the whole grace period on each idle HTTP connection: one idle dashboard or client
    held every stop for 30 s.)"""
    repo = tmp_path / "repo"
    write_model(repo, "slow", slow_graph(), slow_config("slow", max_batch_size=1))
    server = start_server("--model-repository", str(repo), "--exit-timeout-secs", "60")
    idle_http = server.http_client()
    assert idle_http.is_server_live()  # its keep-alive connection stays open, idle
    idle_grpc = server.client()
    assert idle_grpc.is_server_live()
    scrape = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=60)
    scrape.request("GET", "/metrics")
    response = scrape.getresponse()
    assert response.status == 200 and response.read() and not response.will_close
    busy = server.http_client(concurrency=4)
    n = 4
    pending = []
    for i in range(n):
        x = httpclient.InferInput("INPUT0", [1, 1], "FP32")
        x.set_data_from_numpy(np.full((1, 1), i, np.float32))
        pending.append(busy.async_infer("slow", [x]))
    signalled = _signal_once_completed(server, idle_grpc, 1)
    values = sorted(float(p.get_result().as_numpy("OUTPUT0")[0, 0]) for p in pending)
    assert values == list(range(n))
    _assert_exits_0_within(server, signalled)
    assert "Server stopped" in server.log()


def test_open_streams_end_at_stop_and_every_request_is_answered(start_server, tmp_path):
    """SIGINT with two ModelStreamInfer streams open, one idle and one with requests queued: the
    streams read no more, what they took is answered, each then ends with UNAVAILABLE (so what a
    client wrote after the stop gets an error, never silence), and the server exits within
    seconds (an open stream held the exit for the whole --exit-timeout-secs)."""
    repo = tmp_path / "repo"
    write_model(repo, "slow", slow_graph(), slow_config("slow", max_batch_size=1))
    server = start_server("--model-repository", str(repo), "--exit-timeout-secs", "60")

    def stream() -> tuple[grpcclient.InferenceServerClient, queue.Queue]:
        client, answers = server.client(), queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        return client, answers

    def x(value: float) -> list:
        tensor = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.full((1, 1), value, np.float32))
        return [tensor]

    idle, idle_answers = stream()
    idle.async_stream_infer("slow", x(-1))
    result, error = idle_answers.get(timeout=120)
    assert error is None and float(result.as_numpy("OUTPUT0")[0, 0]) == -1
    busy, busy_answers = stream()
    n = 6
    for i in range(n):
        busy.async_stream_infer("slow", x(i), request_id=str(i))
    signalled = _signal_once_completed(server, server.client(), 2)
    _assert_exits_0_within(server, signalled)
    try:
        result, error = idle_answers.get(timeout=30)
        assert result is None and error.status() == "StatusCode.UNAVAILABLE", error
        assert "Server is stopping" in error.message(), error.message()
        answered = []
        while True:
            result, error = busy_answers.get(timeout=30)
            if error is not None:
                assert "Server is stopping" in error.message(), error.message()
                if error.status() == "StatusCode.UNAVAILABLE":
                    break  # the stream's end
                continue  # one it took but had not queued yet
            answered.append(float(result.as_numpy("OUTPUT0")[0, 0]))
        assert answered == list(range(len(answered))) and answered, answered
    finally:
        idle.stop_stream()
        busy.stop_stream()


def test_invalid_flag_value_is_refused():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            str(MODEL_REPOSITORY),
            "--strict-model-config=maybe",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 2
    assert "expected true or false" in result.stderr


def test_missing_repository_is_an_error(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            str(tmp_path / "nope"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert "does not exist" in result.stderr


def test_perf_analyzer_runs_unchanged_against_the_server(bundled_server):
    analyzer = perf_analyzer()
    result = subprocess.run(
        [
            str(analyzer),
            "-m",
            "detector",
            "-i",
            "grpc",
            "-u",
            bundled_server.url,
            "--concurrency-range",
            "4",
            "--measurement-interval",
            "1500",
            "--input-data",
            "zero",
            "-s",
            "100000",
            "--max-trials",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"Concurrency: 4, throughput: ([\d.]+) infer/sec", result.stdout)
    assert match and float(match.group(1)) > 0, result.stdout
    # perf_analyzer read the server-side statistics (ModelStatistics) for its breakdown
    assert "Server:" in result.stdout and "compute infer" in result.stdout
