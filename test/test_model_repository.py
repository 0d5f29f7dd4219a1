"""Model repository and control modes (none / poll / explicit), version policies, auto-complete and
load failures, through a real server process and tritonclient."""

from __future__ import annotations

import json
import shutil
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from model_factory import add_sub_graph, save, write_model
from processes import wait_until


pytestmark = pytest.mark.integration


def add_const_graph(k: float):
    """OUTPUT0 = INPUT0 + k (FP32 [N,4]): tells versions apart."""
    return helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "k"], ["OUTPUT0"])],
        f"add{k}",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N", 4])],
        initializer=[numpy_helper.from_array(np.array([k], np.float32), "k")],
    )


def versioned_model(repo, name: str, versions=(1, 2, 3), policy: str = "") -> None:
    for v in versions:
        save(add_const_graph(float(v)), repo / name / str(v) / "model.onnx")
    (repo / name / "config.pbtxt").write_text(f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 4
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{policy}
""")


def infer_const(client, name: str, version: str = "") -> float:
    x = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    x.set_data_from_numpy(np.zeros((1, 4), np.float32))
    return float(client.infer(name, [x], model_version=version).as_numpy("OUTPUT0")[0, 0])


def index(client) -> dict[str, list[tuple[str, str, str]]]:
    out: dict[str, list] = {}
    for m in client.get_model_repository_index().models:
        out.setdefault(m.name, []).append((m.version, m.state, m.reason))
    return out


# ------------------------------------------------------------------ failures never block others


def test_a_broken_model_is_listed_with_its_reason_and_others_serve(start_server, repo_copy):
    broken = repo_copy / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: [ oops')
    server = start_server("--model-repository", str(repo_copy))
    client = server.client()
    states = index(client)
    ((version, state, reason),) = states["broken"]
    assert state == "UNAVAILABLE"
    assert "failed to parse" in reason and "broken" in reason
    assert states["detector"] == [("1", "READY", "")]
    assert client.is_model_ready("simple")
    assert not client.is_server_ready()  # strict readiness: one model is not ready
    assert "broken" in server.log() and "UNAVAILABLE" in server.log()  # start-up table


@pytest.mark.parametrize(
    "config, reason",
    [
        (
            'name: "bad"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
            "dynamic_batching { preferred_batch_size: [ 16 ] }",
            "preferred size must be <= max batch size for bad, got 16 > 8",
        ),
        (
            'name: "bad"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
            "sequence_batching { iterative_sequence: true }",
            "sequence_batching.iterative_sequence is not supported",
        ),
        (
            'name: "bad"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
            "instance_group [ { kind: KIND_GPU count: 1 } ]",
            "has kind KIND_GPU but no GPUs are available",
        ),
        (
            'name: "other_name"\nbackend: "onnxruntime"',
            "unexpected directory name 'bad' for model 'other_name'",
        ),
        ('name: "bad"\nbackend: "tensorflow"', "not supported for TensorFlow model 'bad'"),
        ('name: "bad"\nbackend: "pytorch"', "config.pbtxt must list its inputs and outputs"),
    ],
)
def test_invalid_configs_fail_with_a_clear_reason(start_server, repo_copy, config, reason):
    write_model(repo_copy, "bad", add_sub_graph(), config)
    server = start_server("--model-repository", str(repo_copy))
    client = server.client()
    ((_, state, got),) = index(client)["bad"]
    assert state == "UNAVAILABLE"
    assert reason in got
    assert client.is_model_ready("simple")


def test_exit_on_error_true_exits_when_a_model_fails(start_server, repo_copy):
    (repo_copy / "broken").mkdir()
    (repo_copy / "broken" / "config.pbtxt").write_text("not a config {")
    server = start_server("--model-repository", str(repo_copy), "--exit-on-error=true", wait=False)
    assert server.proc.wait(timeout=120) == 1
    assert "failed to load all models" in server.log()


def test_model_in_two_repositories_is_a_duplicate(start_server, repo_copy, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(repo_copy / "simple", other / "simple")
    server = start_server("--model-repository", str(repo_copy), "--model-repository", str(other))
    client = server.client()
    assert index(client)["simple"] == [
        ("", "UNAVAILABLE", "model appears in two or more repositories")
    ]
    assert client.is_model_ready("detector")


# ------------------------------------------------------------------ version policies


@pytest.mark.parametrize(
    "policy, loaded, latest",
    [
        ("", ["3"], 3.0),
        ("version_policy: { latest: { num_versions: 2 } }", ["2", "3"], 3.0),
        ("version_policy: { all: { } }", ["1", "2", "3"], 3.0),
        ("version_policy: { specific: { versions: [ 1, 2 ] } }", ["1", "2"], 2.0),
    ],
)
def test_version_policies(start_server, tmp_path, policy, loaded, latest):
    repo = tmp_path / "repo"
    versioned_model(repo, "ver", policy=policy)
    server = start_server("--model-repository", str(repo))
    client = server.client()
    assert [v for v, state, _ in index(client)["ver"] if state == "READY"] == loaded
    assert infer_const(client, "ver") == latest
    for v in loaded:
        assert infer_const(client, "ver", v) == float(v)
    for v in {"1", "2", "3"} - set(loaded):
        with pytest.raises(InferenceServerException) as err:
            infer_const(client, "ver", v)
        assert err.value.status() == "StatusCode.NOT_FOUND"
    assert sorted(client.get_model_metadata("ver").versions) == loaded


# ------------------------------------------------------------------ auto-complete


def test_onnx_model_without_config_is_auto_completed(start_server, tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "auto", add_sub_graph(), None)
    server = start_server("--model-repository", str(repo))
    client = server.client()
    config = client.get_model_config("auto").config
    assert config.name == "auto" and config.backend == "onnxruntime"
    assert config.max_batch_size == 4  # Triton's default-max-batch-size
    assert config.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in config.input] == [("INPUT0", [4]), ("INPUT1", [4])]
    assert [o.name for o in config.output] == ["OUTPUT0", "OUTPUT1"]
    a = np.ones((2, 4), np.float32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        t = grpcclient.InferInput(name, [2, 4], "FP32")
        t.set_data_from_numpy(a)
        inputs.append(t)
    np.testing.assert_array_equal(client.infer("auto", inputs).as_numpy("OUTPUT0"), 2 * a)


def test_partial_config_is_completed(start_server, tmp_path):
    repo = tmp_path / "repo"
    write_model(
        repo, "partial", add_sub_graph(), "max_batch_size: 2\ninstance_group [ { count: 1 } ]"
    )
    server = start_server("--model-repository", str(repo))
    config = server.client().get_model_config("partial").config
    assert config.max_batch_size == 2 and len(config.input) == 2
    assert config.instance_group[0].count == 1 and config.instance_group[0].kind == 2  # KIND_CPU


def test_strict_model_config_refuses_a_missing_config(start_server, tmp_path):
    repo = tmp_path / "repo"
    write_model(repo, "auto", add_sub_graph(), None)
    server = start_server("--model-repository", str(repo), "--strict-model-config=true")
    ((_, state, reason),) = index(server.client())["auto"]
    assert state == "UNAVAILABLE" and "config.pbtxt is required" in reason


# ------------------------------------------------------------------ explicit mode


def test_explicit_mode_load_unload(start_server, repo_copy):
    server = start_server(
        "--model-repository",
        str(repo_copy),
        "--model-control-mode=explicit",
        "--load-model",
        "simple",
    )
    client = server.client()
    assert client.is_model_ready("simple") and not client.is_model_ready("detector")
    assert index(client)["detector"] == [("", "", "")]  # present, never loaded
    client.load_model("detector")
    assert client.is_model_ready("detector")
    client.unload_model("simple")
    assert index(client)["simple"] == [("1", "UNAVAILABLE", "unloaded")]
    with pytest.raises(InferenceServerException):
        infer_const(client, "simple")
    client.load_model("simple")
    assert client.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as err:
        client.load_model("no_such_model")
    assert "failed to poll from model repository" in err.value.message()


def test_explicit_mode_load_star_loads_everything(start_server, repo_copy):
    server = start_server(
        "--model-repository", str(repo_copy), "--model-control-mode", "explicit", "--load-model=*"
    )
    client = server.client()
    assert client.is_model_ready("simple") and client.is_model_ready("detector")


def test_load_with_config_override_and_files(start_server, repo_copy, tmp_path):
    server = start_server("--model-repository", str(repo_copy), "--model-control-mode=explicit")
    client = server.client()
    config = {
        "name": "simple",
        "backend": "onnxruntime",
        "max_batch_size": 2,
        "input": [
            {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
            {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]},
        ],
        "output": [
            {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
            {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]},
        ],
    }
    client.load_model("simple", config=json.dumps(config))
    assert client.get_model_config("simple").config.max_batch_size == 2

    # A model that exists only in the request: config + file:1/model.onnx
    onnx_path = save(add_const_graph(5.0), tmp_path / "upload" / "model.onnx")
    upload = {
        "name": "uploaded",
        "backend": "onnxruntime",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    }
    client.load_model(
        "uploaded", config=json.dumps(upload), files={"file:1/model.onnx": onnx_path.read_bytes()}
    )
    assert infer_const(client, "uploaded") == 5.0


def test_load_of_a_broken_model_reports_the_failure(start_server, repo_copy):
    (repo_copy / "broken" / "1").mkdir(parents=True)
    (repo_copy / "broken" / "config.pbtxt").write_text('name: "broken" backend: "onnxruntime"')
    server = start_server("--model-repository", str(repo_copy), "--model-control-mode=explicit")
    client = server.client()
    with pytest.raises(InferenceServerException) as err:
        client.load_model("broken")
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "load failed for model 'broken'" in err.value.message()
    assert "model.onnx" in err.value.message()
    client.load_model("simple")
    assert client.is_model_ready("simple")


# ------------------------------------------------------------------ poll mode


def test_poll_mode_follows_the_repository(start_server, repo_copy, tmp_path):
    repo = tmp_path / "polled"
    repo.mkdir()
    shutil.copytree(repo_copy / "simple", repo / "simple")
    server = start_server(
        "--model-repository", str(repo), "--model-control-mode=poll", "--repository-poll-secs=0.5"
    )
    client = server.client()
    assert client.is_model_ready("simple")
    with pytest.raises(InferenceServerException) as err:
        client.load_model("simple")
    assert err.value.status() == "StatusCode.UNAVAILABLE"

    versioned_model(repo, "ver", versions=(1,))
    wait_until(lambda: client.is_model_ready("ver"))
    assert infer_const(client, "ver") == 1.0

    # A new version appears while requests keep flowing: none of them may fail.
    failures: list[str] = []
    stop = threading.Event()

    def traffic() -> None:
        c = server.client()
        while not stop.is_set():
            try:
                assert infer_const(c, "ver") in (1.0, 2.0)
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                failures.append(repr(exc))

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        save(add_const_graph(2.0), repo / "ver" / "2" / "model.onnx")
        wait_until(lambda: client.is_model_ready("ver", "2"))
        wait_until(lambda: infer_const(client, "ver") == 2.0)
        time.sleep(0.5)
    finally:
        stop.set()
        sender.join(timeout=60)
    assert failures == []

    shutil.rmtree(repo / "simple")
    wait_until(lambda: not client.is_model_ready("simple"))
    # not ready while UNLOADING already; then the unload ends
    wait_until(
        lambda: index(client)["simple"] == [("1", "UNAVAILABLE", "unloaded")],
        what=f"simple unloaded: {index(client)['simple']}",
    )
