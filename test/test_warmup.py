"""Model warmup: a version is READY only after its model_warmup samples ran on every instance; a
failing sample fails the load with a clear reason. Real server, real onnxruntime."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server_process import copy_models
from simple_model import simple_inputs


pytestmark = pytest.mark.integration


def _model_with_warmup(repo: Path, source: str, name: str, warmup: str) -> None:
    copy_models(repo, **{name: source})
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace(f'name: "{source}"', f'name: "{name}"')
    config.write_text(text + warmup)


SIMPLE_WARMUP = """
model_warmup [
  {
    name: "zeros"
    batch_size: 2
    count: 3
    inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
    inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } }
  },
  {
    name: "from file"
    batch_size: 1
    inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "in0" } }
    inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "in1" } }
  }
]
"""


def test_warmup_runs_before_ready_and_is_not_client_traffic(start_server, tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    _model_with_warmup(repo, "simple", "warm", SIMPLE_WARMUP)
    (repo / "warm" / "warmup").mkdir()
    (repo / "warm" / "warmup" / "in0").write_bytes(np.arange(16, dtype=np.int32).tobytes())
    (repo / "warm" / "warmup" / "in1").write_bytes(np.ones(16, np.int32).tobytes() + b"extra")
    server = start_server("--model-repository", str(repo))
    log = server.log()
    assert "is running warmup sample 'zeros' (3 iterations)" in log
    assert "is running warmup sample 'from file'" in log
    assert "model_warmup is not run yet" not in log
    c = server.http_client()
    assert c.is_model_ready("warm")
    stats = c.get_inference_statistics("warm")["model_stats"][0]
    # warmup executions are not inference requests: statistics start at zero
    assert stats["inference_count"] == 0 and stats["execution_count"] == 0
    assert stats["inference_stats"]["success"]["count"] == 0


def test_load_waits_for_warmup(start_server, tmp_path):
    """While a slow warmup runs the version is LOADING and not ready; READY only after it."""
    repo = tmp_path / "models"
    repo.mkdir()
    _model_with_warmup(
        repo,
        "detector",
        "slow",
        """
model_warmup {
  name: "images"
  batch_size: 4
  count: 25
  inputs { key: "images" value { data_type: TYPE_FP32 dims: [ 3, 256, 256 ] random_data: true } }
}
""",
    )
    server = start_server("--model-repository", str(repo), "--model-control-mode", "explicit")
    c = server.http_client()
    observations: list[tuple[str, bool]] = []
    load_done = threading.Event()
    errors: list[Exception] = []

    def load() -> None:
        try:
            server.http_client(network_timeout=600.0).load_model("slow")
        except Exception as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            load_done.set()

    thread = threading.Thread(target=load)
    thread.start()
    while not load_done.is_set():
        states = [e.get("state", "") for e in c.get_model_repository_index() if e["name"] == "slow"]
        observations.append((states[0] if states else "", c.is_model_ready("slow")))
        time.sleep(0.02)
    thread.join()
    assert not errors, errors
    assert ("LOADING", False) in observations, observations
    # Never READY while warming up: every READY observation comes after the LOADING ones.
    first_loading = observations.index(("LOADING", False))
    assert all(state != "READY" for state, _ in observations[:first_loading])
    assert c.is_model_ready("slow")
    assert [e["state"] for e in c.get_model_repository_index() if e["name"] == "slow"] == ["READY"]
    assert (
        server.log().count("is running warmup sample 'images' (25 iterations)") == 2
    )  # 2 instances


@pytest.mark.parametrize(
    "warmup, reason",
    [
        (
            """model_warmup { name: "missing" batch_size: 1
         inputs { key: "INPUT0"
                  value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "nope" } }
         inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "cannot read input_data_file 'nope'",
        ),
        (
            """model_warmup { name: "short" batch_size: 1
         inputs { key: "INPUT0"
                  value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "short" } }
         inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "warmup setting expects 64 bytes, but the data provided from short only has 8 bytes",
        ),
        (
            """model_warmup { name: "half" batch_size: 1
         inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "failed to run warmup sample 'half'",
        ),
        (
            """model_warmup { name: "dims" batch_size: 1
         inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 8 ] zero_data: true } }
         inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "has dims [8], the model expects [16]",
        ),
        (
            """model_warmup { name: "type" batch_size: 1
         inputs { key: "INPUT0" value { data_type: TYPE_FP32 dims: [ 16 ] zero_data: true } }
         inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "has data_type TYPE_FP32, the model expects TYPE_INT32",
        ),
        (
            """model_warmup { name: "nodata" batch_size: 1
         inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] } } }""",
            "to have input_data_type set",
        ),
        (
            """model_warmup { name: "escape" batch_size: 1
         inputs { key: "INPUT0"
                  value { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "../config.pbtxt" } }
         inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "must be a file name inside the model's 'warmup' directory",
        ),
        (
            """model_warmup { name: "big" batch_size: 9
         inputs { key: "INPUT0" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
         inputs { key: "INPUT1" value { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } }""",
            "larger than max_batch_size 8",
        ),
    ],
)
def test_failing_warmup_fails_the_load(start_server, tmp_path, warmup, reason):
    repo = tmp_path / "models"
    repo.mkdir()
    _model_with_warmup(repo, "simple", "bad", warmup)
    (repo / "bad" / "warmup").mkdir()
    (repo / "bad" / "warmup" / "short").write_bytes(b"12345678")
    copy_models(repo, "simple")
    server = start_server(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
    )
    c = server.http_client()
    with pytest.raises(InferenceServerException) as info:
        c.load_model("bad")
    assert info.value.status() == "400"
    assert reason in info.value.message(), info.value.message()
    assert not c.is_model_ready("bad")
    index = {e["name"]: e for e in c.get_model_repository_index()}
    assert index["bad"]["state"] == "UNAVAILABLE" and reason in index["bad"]["reason"]
    # the other model keeps serving
    assert c.infer("simple", simple_inputs(httpclient, 1)).as_numpy("OUTPUT0")[0, 0] == 2
