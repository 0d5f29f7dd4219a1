"""Triton Python models (test/python_models, written as Triton's documentation writes them) served
by a real ``triton-ros-server`` and checked with tritonclient over 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from processes import wait_until
from server_process import ROOT


pytestmark = pytest.mark.integration

PYTHON_MODELS = ROOT / "test" / "python_models"


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("python") / "models"
    shutil.copytree(PYTHON_MODELS, repo)
    server = start_module_server("--model-repository", str(repo), timeout=120)
    yield server
    assert server.stop() == 0, server.log()  # stopped here to check what it left behind
    assert not [
        f for f in os.listdir("/dev/shm") if f.startswith(f"triton_ros_py_{server.proc.pid}_")
    ], "shared memory segments left behind"


def _input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    return [_input("INPUT0", a, "FP32"), _input("INPUT1", b, "FP32")]


def test_add_sub_runs_unchanged(server):
    client = server.client()
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = np.array([0.5, 0.5, 0.5, 0.5], np.float32)
    result = client.infer("add_sub", _add_sub_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    params = result.get_response().parameters
    assert params["instance"].string_param == "add_sub_0_0"  # initialize() got Triton's keys
    assert params["kind"].string_param == "CPU"
    # Only the requested output comes back.
    only = client.infer(
        "add_sub", _add_sub_inputs(a, b), outputs=[grpcclient.InferRequestedOutput("OUTPUT1")]
    )
    assert only.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)


def test_auto_complete_config_fills_the_configuration(server):
    client = server.client()
    config = client.get_model_config("add_sub_auto").config
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [i.name for i in config.input] == ["INPUT0", "INPUT1"]
    assert [o.name for o in config.output] == ["OUTPUT0", "OUTPUT1"]
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    result = client.infer("add_sub_auto", _add_sub_inputs(a, np.ones_like(a)))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)


def test_error_response_fails_only_its_request(server):
    client = server.client()
    good = np.array([[1, 2, 3]], np.int32)
    bad = np.array([[1, -2, 3]], np.int32)
    results: dict[str, object] = {}

    def call(name, data):
        try:
            results[name] = client.infer("validate", [_input("INPUT", data, "INT32")])
        except InferenceServerException as exc:
            results[name] = exc

    # preferred_batch_size 2 with a long queue delay: the two requests execute together.
    threads = [
        threading.Thread(target=call, args=(n, d)) for n, d in (("good", good), ("bad", bad))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert isinstance(results["bad"], InferenceServerException)
    assert results["bad"].status() == "StatusCode.INVALID_ARGUMENT"
    assert "negative values are not allowed" in results["bad"].message()
    ok = results["good"]
    np.testing.assert_array_equal(ok.as_numpy("OUTPUT"), good * 2)
    assert ok.as_numpy("BATCH")[0, 0] == 2, "both requests were in one execute() call"


def test_exception_in_execute_fails_the_batch_not_the_server(server):
    client = server.client()
    with pytest.raises(InferenceServerException) as info:
        client.infer("raise_error", [_input("INPUT", np.zeros(1, np.float32), "FP32")])
    assert info.value.status() == "StatusCode.INTERNAL"
    assert "this model always fails" in info.value.message()
    assert "TritonModelException" in info.value.message()
    assert client.is_model_ready("raise_error")


def test_initialize_failure_makes_only_that_model_unavailable(server):
    client = server.client()
    assert not client.is_model_ready("init_fail")
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["init_fail"].state == "UNAVAILABLE"
    assert "weights file is missing" in index["init_fail"].reason
    assert "ValueError" in index["init_fail"].reason
    assert client.is_model_ready("add_sub")


@pytest.mark.parametrize("mode,what", [(1, "exited with code 3"), (2, "SIGSEGV")])
def test_crash_is_isolated_and_the_instance_restarts(server, mode, what):
    client = server.client()
    ok = client.infer("crashy", [_input("MODE", np.array([0], np.int32), "INT32")])
    pid_before = int(ok.as_numpy("PID")[0])
    with pytest.raises(InferenceServerException) as info:
        client.infer("crashy", [_input("MODE", np.array([mode], np.int32), "INT32")])
    assert info.value.status() == "StatusCode.INTERNAL"
    assert what in info.value.message()
    # The server keeps answering other models, and the crashed model serves again (new stub).
    a = np.ones(4, np.float32)
    np.testing.assert_array_equal(
        client.infer("add_sub", _add_sub_inputs(a, a)).as_numpy("OUTPUT0"), 2 * a
    )
    again = client.infer("crashy", [_input("MODE", np.array([0], np.int32), "INT32")])
    assert int(again.as_numpy("PID")[0]) != pid_before
    assert client.is_model_ready("crashy")


def test_hang_past_the_timeout_is_killed_and_restarted(server):
    client = server.client()
    pid_before = int(
        client.infer("hang", [_input("SECONDS", np.array([0], np.float32), "FP32")]).as_numpy(
            "PID"
        )[0]
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer(
            "hang", [_input("SECONDS", np.array([3600], np.float32), "FP32")], client_timeout=120
        )
    assert info.value.status() == "StatusCode.INTERNAL"
    assert "execute_timeout_seconds" in info.value.message()
    after = client.infer("hang", [_input("SECONDS", np.array([0], np.float32), "FP32")])
    assert int(after.as_numpy("PID")[0]) != pid_before
    stats = client.get_inference_statistics("hang").model_stats[0].inference_stats
    assert stats.fail.count == 1 and stats.success.count == 2


def test_bls_exec_calls_another_model(server):
    client = server.client()
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([4, 3, 2, 1], np.float32)
    name = np.array([b"add_sub"], dtype=np.object_)
    result = client.infer(
        "bls_add_sub", [_input("MODEL_NAME", name, "BYTES"), *_add_sub_inputs(a, b)]
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    with pytest.raises(InferenceServerException) as info:
        client.infer(
            "bls_add_sub",
            [
                _input("MODEL_NAME", np.array([b"no_such_model"], np.object_), "BYTES"),
                *_add_sub_inputs(a, b),
            ],
        )
    assert "no_such_model" in info.value.message()


def test_bytes_tensors_and_request_parameters(server):
    client = server.client()
    text = np.array(
        [[b"camera", b"lidar", b""], [b"imu", b"gps\x00bin", b"odom"]], dtype=np.object_
    )
    result = client.infer("strings", [_input("TEXT", text, "BYTES")], parameters={"suffix": "!"})
    expected = np.array(
        [[b"CAMERA!", b"LIDAR!", b"!"], [b"IMU!", b"GPS\x00BIN!", b"ODOM!"]], dtype=np.object_
    )
    assert result.as_numpy("UPPER").tolist() == expected.tolist()


def test_two_instances_execute_in_parallel(server, tmp_path):
    client = server.client()
    directory = np.array([str(tmp_path).encode()], dtype=np.object_)
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(client.infer, "parallel", [_input("DIR", directory, "BYTES")])
            for _ in range(2)
        ]
        pids = {int(f.result(timeout=120).as_numpy("PID")[0]) for f in futures}
    assert len(pids) == 2, "the two requests ran in two different stub processes at once"


def test_concurrent_clients_get_their_own_results(server):
    def worker(seed: int) -> None:
        client = grpcclient.InferenceServerClient(server.url)
        rng = np.random.default_rng(seed)
        for _ in range(15):
            a = rng.random((2, 4), dtype=np.float32)
            b = rng.random((2, 4), dtype=np.float32)
            result = client.infer("add_sub_auto", _add_sub_inputs(a, b))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            single = rng.random(4, dtype=np.float32)
            result = client.infer("add_sub", _add_sub_inputs(single, single))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), single * 2)

    with ThreadPoolExecutor(6) as pool:
        for future in [pool.submit(worker, seed) for seed in range(6)]:
            future.result(timeout=120)
    stats = server.client().get_inference_statistics("add_sub_auto").model_stats[0]
    assert stats.inference_stats.success.count >= 90


def test_unknown_input_is_refused_before_the_model(server):
    client = server.client()
    with pytest.raises(InferenceServerException) as info:
        client.infer(
            "add_sub",
            [
                _input("INPUT0", np.ones(4, np.float32), "FP32"),
                _input("BOGUS", np.ones(4, np.float32), "FP32"),
            ],
        )
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_instance_that_cannot_restart_makes_the_model_unavailable(server):
    client = server.client()
    mode = lambda m: [_input("MODE", np.array([m], np.int32), "INT32")]  # noqa: E731
    assert client.infer("fragile", mode(0)).as_numpy("OUT")[0] == 0
    with pytest.raises(InferenceServerException) as info:
        client.infer("fragile", mode(1))
    assert info.value.status() == "StatusCode.INTERNAL"
    # The failed request is answered first; the restart that fails follows it (bounded wait).
    wait_until(lambda: not client.is_model_ready("fragile"), 30, "'fragile' no longer ready")
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["fragile"].state == "UNAVAILABLE"
    assert "the device this model drives is gone" in index["fragile"].reason
    with pytest.raises(InferenceServerException) as info:
        client.infer("fragile", mode(0))
    assert info.value.status() == "StatusCode.NOT_FOUND"  # Triton: no available versions
    assert "has no available versions" in info.value.message()
    a = np.ones(4, np.float32)
    np.testing.assert_array_equal(
        client.infer("add_sub", _add_sub_inputs(a, a)).as_numpy("OUTPUT1"), 0 * a
    )


def test_unload_finalizes_and_reaps_the_stubs_and_reload_serves(start_server, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(PYTHON_MODELS, repo)
    server = start_server(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "crashy",
        "--load-model",
        "add_sub",
    )
    client = server.client()
    mode = [_input("MODE", np.array([0], np.int32), "INT32")]
    pid = int(client.infer("crashy", mode).as_numpy("PID")[0])
    os.kill(pid, 0)  # the stub runs
    client.unload_model("crashy")
    client.unload_model("add_sub")
    assert not client.is_model_ready("crashy")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # finalized, exited and reaped (a zombie would still answer)
    assert "Cleaning up..." in server.log()  # add_sub's finalize() ran
    client.load_model("crashy")
    assert int(client.infer("crashy", mode).as_numpy("PID")[0]) != pid


def test_async_execute_with_async_exec_response_sender_and_dlpack(server):
    client = server.client()
    a = np.array([5, 6, 7, 8], np.float32)
    b = np.array([1, 2, 3, 4], np.float32)
    result = client.infer("async_bls", _add_sub_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), (a + b) * (a - b))


def test_a_model_loads_another_model(start_server, tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(PYTHON_MODELS, repo)
    server = start_server(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "controller",
    )
    client = server.client()
    assert not client.is_model_ready("add_sub")
    name = np.array([b"add_sub"], dtype=np.object_)
    assert client.infer("controller", [_input("NAME", name, "BYTES")]).as_numpy("READY")[0]
    assert client.is_model_ready("add_sub")
    a = np.ones(4, np.float32)
    np.testing.assert_array_equal(
        client.infer("add_sub", _add_sub_inputs(a, a)).as_numpy("OUTPUT0"), 2 * a
    )
