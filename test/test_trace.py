"""Triton's request tracing through a real triton-ros-server: the trace extension on both
protocols (tritonclient's get/update_trace_settings), ``--trace-config``, and the trace file.

The file is checked for exactly what Triton's qa/common/trace_summary.py reads (not copied:
its rules are restated in :func:`check_summary_structure`): a JSON array of objects with an
integer ``id``; per id one model entry (``model_name``, ``model_version``, ``parent_id`` for a
child) and timestamp entries ``{"id", "timestamps": [{"name", "ns"}]}``; a trace without a
parent carries its frontend's tag (HTTP_RECV_START, or GRPC_WAITREAD_START) and the pairs the
tool subtracts, each end not before its start (the tool raises otherwise); a child's parent
comes first in id order. And the values are real: a Python model that sleeps N ms computes
for at least N ms, requests batched by the dynamic batcher share their batch's COMPUTE_START
after the batcher's delay, and the queue times add up to the server's own statistics.
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from prometheus_text import parse as parse_metrics
from processes import wait_until
from server_process import ROOT, ServerProcess, copy_models
from simple_model import simple_array, simple_inputs

pytestmark = pytest.mark.integration

SLEEP_MS = 30
BATCH_DELAY_US = 100_000

SLEEPER_CONFIG = f"""
name: "sleeper"
backend: "python"
max_batch_size: 8
input [ {{ name: "MS", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "MS_OUT", data_type: TYPE_FP32, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: {BATCH_DELAY_US} }}
"""
SLEEPER_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "MS").as_numpy() for r in requests]
        time.sleep(max(float(a.max()) for a in arrays) / 1000.0)   # once for the whole batch
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("MS_OUT", a)])
                for a in arrays]
"""

# What trace_summary.py subtracts (add_span), by the timestamps that make it do so: it raises
# when a pair's other timestamp is missing or ends before it starts.
SPANS = [
    (
        ("HTTP_RECV_START", "HTTP_SEND_END"),
        [
            ("HTTP_RECV_START", "HTTP_SEND_END"),
            ("HTTP_RECV_START", "HTTP_RECV_END"),
            ("HTTP_SEND_START", "HTTP_SEND_END"),
        ],
    ),
    (
        ("GRPC_WAITREAD_END", "GRPC_SEND_END"),
        [("GRPC_WAITREAD_END", "GRPC_SEND_END"), ("GRPC_SEND_START", "GRPC_SEND_END")],
    ),
    (("REQUEST_START", "REQUEST_END"), [("REQUEST_START", "REQUEST_END")]),
    (("QUEUE_START", "COMPUTE_START"), [("QUEUE_START", "COMPUTE_START")]),
    (("COMPUTE_START", "COMPUTE_END"), [("COMPUTE_START", "COMPUTE_END")]),
    (
        ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
        [
            ("COMPUTE_START", "COMPUTE_INPUT_END"),
            ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
            ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
        ],
    ),
]
# The tool counts a trace without a parent only if it carries its frontend's tag.
FRONTEND_TAGS = {
    "HTTP_RECV_START": ("HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"),
    "GRPC_WAITREAD_START": (
        "GRPC_WAITREAD_START",
        "GRPC_WAITREAD_END",
        "GRPC_SEND_START",
        "GRPC_SEND_END",
    ),
}
COMPUTE = ("COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """simple (ONNX), the add_then_double ensemble (simple -> checked_double, Python, dynamic
    batching) and sleeper (Python, sleeps, dynamic batching with a 100 ms delay)."""
    repo = tmp_path_factory.mktemp("trace") / "models"
    copy_models(repo, "simple")
    for name in ("add_then_double", "checked_double"):
        shutil.copytree(ROOT / "test" / "ensemble_models" / name, repo / name)
    (repo / "sleeper" / "1").mkdir(parents=True)
    (repo / "sleeper" / "config.pbtxt").write_text(SLEEPER_CONFIG)
    (repo / "sleeper" / "1" / "model.py").write_text(SLEEPER_MODEL)
    return repo


def _start(repo: Path, *trace_config: str, only: str | None = None) -> ServerProcess:
    args = ["--model-repository", str(repo)]
    if only:  # a faster start where a test needs one model
        args += ["--model-control-mode", "explicit", "--load-model", only]
    for spec in trace_config:
        args += ["--trace-config", spec]
    server = ServerProcess(*args)
    server.wait_live()
    return server


def _stop(server: ServerProcess) -> None:
    rc = server.stop()
    assert rc == 0, f"server exited with {rc}:\n{server.log()}"
    assert "Traceback" not in server.log(), server.log()


# ------------------------------------------------------------------------------------------
# Settings
# ------------------------------------------------------------------------------------------


def test_trace_settings_over_http_and_grpc(repo, tmp_path):
    trace_file = str(tmp_path / "trace.json")
    server = _start(repo, f"triton,file={trace_file}", "level=TIMESTAMPS", "rate=1", only="simple")
    try:
        http, grpc = server.http_client(), server.client()
        initial = {
            "trace_file": trace_file,
            "trace_level": ["TIMESTAMPS"],
            "trace_rate": "1",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_mode": "triton",
        }

        def grpc_settings(**kwargs):
            reply = grpc.get_trace_settings(as_json=True, **kwargs)["settings"]
            return {
                k: v["value"] if k == "trace_level" else v["value"][0] for k, v in reply.items()
            }

        assert http.get_trace_settings() == http.get_trace_settings("simple") == initial
        assert grpc_settings() == grpc_settings(model_name="simple") == initial
        assert "trace" in http.get_server_metadata()["extensions"]

        # a model's setting overrides the global one field by field, on both protocols
        http.update_trace_settings("simple", {"trace_rate": "12", "log_frequency": "34"})
        grpc.update_trace_settings(
            settings={"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]}
        )
        model = {
            **initial,
            "trace_level": ["OFF"],
            "trace_rate": "12",
            "log_frequency": "34",
            "trace_count": "78",
        }
        assert grpc_settings(model_name="simple") == model
        # clearing global fields falls back to the command line's; the model's to the global
        cleared = http.update_trace_settings(settings={"trace_rate": None, "trace_count": None})
        assert cleared == {**initial, "trace_level": ["OFF"]}
        reply = grpc.update_trace_settings(
            "simple", {"trace_rate": None, "trace_level": None}, as_json=True
        )["settings"]
        assert reply["trace_rate"]["value"] == ["1"] and reply["trace_level"]["value"] == ["OFF"]
        assert http.get_trace_settings("simple")["log_frequency"] == "34"
        http.update_trace_settings("simple", {"log_frequency": None})
        http.update_trace_settings(settings={"trace_level": None})
        assert http.get_trace_settings("simple") == initial

        # Triton's errors and status codes
        cases = [
            (
                {"trace_file": "/tmp/elsewhere.json"},
                "501",
                "UNIMPLEMENTED",
                "trace file location can not be updated through network protocol",
            ),
            (
                {"trace_rate": "abc"},
                "400",
                "INVALID_ARGUMENT",
                "Unable to parse 'trace_rate', got: abc",
            ),
            ({"trace_count": "10000000000"}, "400", "INVALID_ARGUMENT", "value is out of range"),
            (
                {"trace_level": ["OFF", "TIMESTAMPS"]},
                "400",
                "INVALID_ARGUMENT",
                "Expect only one trace level 'OFF' is specified",
            ),
            (
                {"trace_rate": "0"},
                "400",
                "INVALID_ARGUMENT",
                "Attempting to set invalid trace setting :sample rate must be non-zero",
            ),
        ]
        for settings, http_status, grpc_status, message in cases:
            with pytest.raises(InferenceServerException) as err:
                http.update_trace_settings(settings=settings)
            assert err.value.status() == http_status and message in err.value.message()
            with pytest.raises(InferenceServerException) as err:
                grpc.update_trace_settings(settings=settings)
            assert err.value.status() == f"StatusCode.{grpc_status}", err.value
            assert message in err.value.message()
        for client in (http, grpc):
            with pytest.raises(InferenceServerException) as err:
                client.get_trace_settings(model_name="does-not-exist")
            assert "Request for unknown model : does-not-exist" in err.value.message()
        assert http.get_trace_settings() == initial  # nothing changed
        for method, path, status in (
            ("GET", "/v2/models/simple/versions/1/trace/setting", 404),
            ("DELETE", "/v2/trace/setting", 405),
            ("POST", "/v2/trace/setting", 400),
        ):
            request = urllib.request.Request(
                f"http://{server.http_url}{path}",
                method=method,
                data=b"[1]" if method == "POST" else None,
            )
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(request, timeout=10)
            assert err.value.code == status
            assert "error" in json.loads(err.value.read())
    finally:
        _stop(server)


def test_bad_trace_config_stops_the_server_with_a_message(repo):
    server = ServerProcess("--model-repository", str(repo), "--trace-config", "rate=often")
    assert server.proc.wait(timeout=60) == 1
    server.stop()
    assert "Unable to parse 'trace_rate', got: often" in server.log()
    assert "Traceback" not in server.log()


# ------------------------------------------------------------------------------------------
# The trace file
# ------------------------------------------------------------------------------------------


def check_summary_structure(entries: list) -> dict[int, dict]:
    """What trace_summary.py relies on, asserted; the traces by id: model, parent, timestamps
    by name."""
    assert isinstance(entries, list) and entries
    traces: dict[int, dict] = defaultdict(lambda: {"timestamps": {}, "heads": 0})
    for entry in entries:
        assert isinstance(entry, dict) and isinstance(entry["id"], int) and entry["id"] > 0
        trace = traces[entry["id"]]
        if "model_name" in entry:
            assert isinstance(entry["model_name"], str)
            assert isinstance(entry["model_version"], int)
            trace.update(
                model=entry["model_name"],
                version=entry["model_version"],
                parent=entry.get("parent_id"),
                request_id=entry.get("request_id"),
            )
            trace["heads"] += 1
        if "timestamps" in entry:
            for ts in entry["timestamps"]:
                assert set(ts) == {"name", "ns"} and isinstance(ts["ns"], int), ts
                assert ts["name"] not in trace["timestamps"], f"{ts['name']} twice"
                trace["timestamps"][ts["name"]] = ts["ns"]
    for trace_id, trace in traces.items():
        t = trace["timestamps"]
        assert trace["heads"] == 1, (trace_id, trace)
        assert "REQUEST_START" in t and "REQUEST_END" in t, trace
        parent = trace["parent"]
        if parent is None:
            tags = [tag for tag in FRONTEND_TAGS if tag in t]
            assert len(tags) == 1, trace  # the tool's filter, and one frontend only
            names = FRONTEND_TAGS[tags[0]]
            if names[-1] in t:  # answered: the frontend's four timestamps
                assert all(name in t for name in names), trace
        else:
            assert parent in traces and parent < trace_id, trace  # sorted by id, parent first
        for guard, pairs in SPANS:
            if all(name in t for name in guard):
                for start, end in pairs:
                    assert start in t and end in t, (start, end, trace)
                    assert t[start] <= t[end], (start, end, trace)
        present = [name for name in COMPUTE if name in t]
        assert present in ([], list(COMPUTE)), trace
    return dict(traces)


def _send_traffic(server: ServerProcess) -> dict[str, list]:
    """HTTP and gRPC requests (unary and stream) to simple, the ensemble over both, and four
    concurrent requests to sleeper that its dynamic batcher runs as one batch."""
    http, grpc = server.http_client(), server.client()
    for i in range(3):
        a = simple_array(i)
        inputs = simple_inputs(httpclient, a)
        out = http.infer("simple", inputs, request_id=f"http-{i}")
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), a * 2)
        a = simple_array(i)
        inputs = simple_inputs(grpcclient, a)
        out = grpc.infer("simple", inputs, request_id=f"grpc-{i}")
        np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), a * 2)
    results: list = []
    done = threading.Event()

    def on_stream(result, error):
        results.append(error or result)
        if len(results) == 2:
            done.set()

    grpc.start_stream(callback=on_stream)
    for i in range(2):
        grpc.async_stream_infer("simple", simple_inputs(grpcclient, 5), request_id=f"stream-{i}")
    assert done.wait(30)
    grpc.stop_stream()
    assert all(not isinstance(r, Exception) for r in results), results
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [
            module.InferInput("A", [1, 16], "INT32"),
            module.InferInput("B", [1, 16], "INT32"),
        ]
        for i in inputs:
            i.set_data_from_numpy(a)
        out = client.infer("add_then_double", inputs, request_id="ensemble")
        np.testing.assert_array_equal(out.as_numpy("DOUBLED_SUM"), a * 4)

    clients = [server.client() for _ in range(4)]  # made before, sent together
    together = threading.Barrier(4)

    def sleepy(i: int) -> None:
        ms = grpcclient.InferInput("MS", [1, 1], "FP32")
        ms.set_data_from_numpy(np.array([[SLEEP_MS]], np.float32))
        together.wait(30)
        out = clients[i].infer("sleeper", [ms], request_id=f"sleep-{i}")
        assert out.as_numpy("MS_OUT")[0, 0] == SLEEP_MS

    threads = [threading.Thread(target=sleepy, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return {"stats": grpc.get_inference_statistics("sleeper", as_json=True)}


def test_the_trace_file_is_what_tritons_summary_tool_reads(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    server = _start(
        repo,
        "level=TIMESTAMPS",
        "rate=1",
        f"triton,file={trace_file}",
        "count=-1",
        "triton,log-frequency=0",
    )
    try:
        traffic = _send_traffic(server)
        # written as they complete (no count, no frequency): 14 requests, the ensembles' steps
        # in their ensemble's trace
        wait_until(lambda: parse_metrics(_scrape(server))["triton_ros_trace_written"].value() == 14)
        metrics = parse_metrics(_scrape(server))
    finally:
        _stop(server)
    traces = check_summary_structure(json.loads(trace_file.read_text()))
    by_request = defaultdict(list)
    for trace_id, trace in traces.items():
        by_request[trace["request_id"]].append((trace_id, trace))

    # HTTP and gRPC requests carry their frontend's timestamps, around the core's
    for prefix, first, last in (
        ("http", "HTTP_RECV_END", "HTTP_SEND_START"),
        ("grpc", "GRPC_WAITREAD_END", "GRPC_SEND_START"),
        ("stream", "GRPC_WAITREAD_END", "GRPC_SEND_START"),
    ):
        found = [t for rid, ts in by_request.items() if rid.startswith(prefix) for _, t in ts]
        assert len(found) == (3 if prefix != "stream" else 2), prefix
        for trace in found:
            t = trace["timestamps"]
            assert trace["model"] == "simple" and trace["version"] == 1
            order = [
                first,
                "REQUEST_START",
                "QUEUE_START",
                *COMPUTE,
                "REQUEST_END",
                last,
                last.replace("START", "END"),
            ]
            assert [t[n] for n in order] == sorted(t[n] for n in order), trace

    # the ensembles: no compute of their own, one child per step, within the parent's time
    ensembles = [(i, t) for i, t in by_request["ensemble"] if t["parent"] is None]
    assert len(ensembles) == 2
    for trace_id, trace in ensembles:
        t = trace["timestamps"]
        assert trace["model"] == "add_then_double" and "COMPUTE_START" not in t
        assert "QUEUE_START" in t
        children = {c["model"]: c for _, c in traces.items() if c["parent"] == trace_id}
        assert set(children) == {"simple", "checked_double"}
        for child in children.values():
            ct = child["timestamps"]
            assert (
                t["REQUEST_START"] <= ct["REQUEST_START"] <= ct["REQUEST_END"] <= t["REQUEST_END"]
            )
            assert all(n in ct for n in COMPUTE)
        assert (
            children["simple"]["timestamps"]["REQUEST_END"]
            <= children["checked_double"]["timestamps"]["REQUEST_START"]
        )  # the second step waits

    # sleeper: computes for at least the time it sleeps; the four requests ran as one batch,
    # formed once the oldest had waited the batcher's delay; queue times are the statistics'
    sleeps = [
        t["timestamps"] for rid, ts in by_request.items() if rid.startswith("sleep") for _, t in ts
    ]
    assert len(sleeps) == 4
    # the requests of one batch share its COMPUTE_START: as many starts as the server's
    # executions (one batch of four; a loaded host may send one request after the batch left)
    starts = sorted({t["COMPUTE_START"] for t in sleeps})
    assert len(starts) == int(traffic["stats"]["model_stats"][0]["execution_count"]) <= 2, (
        "the four requests ran in the batches the statistics count"
    )
    for t in sleeps:
        assert t["COMPUTE_END"] - t["COMPUTE_START"] >= SLEEP_MS * 1_000_000
        assert t["COMPUTE_OUTPUT_START"] - t["COMPUTE_INPUT_END"] >= SLEEP_MS * 1_000_000
    first = [t for t in sleeps if t["COMPUTE_START"] == starts[0]]
    assert len(first) >= 2  # a batch, formed after the delay
    assert starts[0] - min(t["QUEUE_START"] for t in first) >= BATCH_DELAY_US * 1000
    stats = traffic["stats"]["model_stats"][0]["inference_stats"]
    assert int(stats["queue"]["ns"]) == sum(t["COMPUTE_START"] - t["QUEUE_START"] for t in sleeps)
    assert int(stats["success"]["count"]) == 4
    assert metrics["triton_ros_trace_file_errors"].value() == 0
    assert metrics["triton_ros_trace_dropped"].value() == 0


def test_log_frequency_count_and_tensors_over_the_wire(repo, tmp_path):
    trace_file = tmp_path / "trace.json"
    server = _start(
        repo, "level=TIMESTAMPS", "rate=1", f"triton,file={trace_file}", "triton,log-frequency=2"
    )
    try:
        http = server.http_client()
        for i in range(5):
            http.infer("simple", simple_inputs(httpclient, i))
        wait_until(lambda: (tmp_path / "trace.json.1").exists())
        assert not (tmp_path / "trace.json.2").exists()  # the fifth waits for a sixth
        ids = [
            sorted({e["id"] for e in json.loads((tmp_path / f"trace.json.{n}").read_text())})
            for n in (0, 1)
        ]
        assert len(ids[0]) == len(ids[1]) == 2 and ids[0][-1] < ids[1][0]

        # a model's count: two more traces of simple, then none; TENSORS as asked
        http.update_trace_settings(
            "simple", {"trace_count": "2", "trace_level": ["TIMESTAMPS", "TENSORS"]}
        )
        for _ in range(3):
            http.infer("simple", simple_inputs(httpclient, 7))
        assert http.get_trace_settings("simple")["trace_count"] == "0"
        metrics = parse_metrics(_scrape(server))
        assert metrics["triton_ros_trace_written"].value() >= 4

        # a client that gives up while its request waits in the queue: the call ends first,
        # the trace is still written whole once the core has answered the request
        ms = grpcclient.InferInput("MS", [1, 1], "FP32")
        ms.set_data_from_numpy(np.array([[1]], np.float32))
        with pytest.raises(InferenceServerException) as err:
            server.client().infer("sleeper", [ms], request_id="gave-up", client_timeout=0.03)
        assert err.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        wait_until(
            lambda: (
                server.client()
                .get_inference_statistics("sleeper", as_json=True)["model_stats"][0][
                    "inference_stats"
                ]["success"]
                .get("count")
            )
        )
    finally:
        _stop(server)
    files = sorted(p.name for p in tmp_path.iterdir())
    entries = [e for f in files for e in json.loads((tmp_path / f).read_text())]
    traces = check_summary_structure(entries)
    assert len(traces) == 5 + 2 + 1  # the count stopped the third
    gave_up = next(t for t in traces.values() if t["request_id"] == "gave-up")["timestamps"]
    assert "GRPC_SEND_END" not in gave_up and "REQUEST_END" in gave_up
    assert gave_up["COMPUTE_START"] - gave_up["QUEUE_START"] >= BATCH_DELAY_US * 1000
    tensors = [e for e in entries if "activity" in e]
    assert {
        "id": tensors[0]["id"],
        "activity": "TENSOR_QUEUE_INPUT",
        "tensor": {
            "name": "INPUT0",
            "data": ",".join(["7"] * 16),
            "shape": "1,16",
            "dtype": "INT32",
        },
    } in tensors
    assert {
        "id": tensors[0]["id"],
        "activity": "TENSOR_BACKEND_OUTPUT",
        "tensor": {
            "name": "OUTPUT0",
            "data": ",".join(["14"] * 16),
            "shape": "1,16",
            "dtype": "INT32",
        },
    } in tensors
    assert len({e["id"] for e in tensors}) == 2


def test_an_unwritable_trace_file_does_not_break_inference(repo, tmp_path):
    trace_file = tmp_path / "no-such-dir" / "trace.json"
    server = _start(
        repo,
        "level=TIMESTAMPS",
        "rate=1",
        f"triton,file={trace_file}",
        "triton,log-frequency=1",
        only="simple",
    )
    try:
        http = server.http_client()
        for i in range(5):
            a = simple_array(i)
            inputs = simple_inputs(httpclient, a)
            np.testing.assert_array_equal(http.infer("simple", inputs).as_numpy("OUTPUT0"), a * 2)
        wait_until(
            lambda: parse_metrics(_scrape(server))["triton_ros_trace_file_errors"].value() == 5
        )
        metrics = parse_metrics(_scrape(server))
        assert metrics["triton_ros_trace_dropped"].value() == 5
        assert metrics["triton_ros_trace_written"].value() == 0
    finally:
        _stop(server)
    log = server.log()
    assert log.count("cannot write trace file") == 1, log  # logged once, then counted
    assert "Traceback" not in log


def _scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        return response.read().decode()
