"""core/tracer.py on its own: --trace-config parsing, Triton's setting semantics (model over
global over command line, clearing, validation), sampling, the files and their failures, and
the core's report of a request's timestamps (in process, on the bundled ONNX model)."""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pytest

from processes import wait_until

from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.tracer import (
    LEVEL_OFF,
    TENSORS,
    TIMESTAMPS,
    TraceConfig,
    TraceManager,
    parse_setting_changes,
    parse_trace_config,
)

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------------------------------
# --trace-config
# ------------------------------------------------------------------------------------------


def test_trace_config_in_tritonserver_syntax():
    config = parse_trace_config(
        [
            "triton,file=/tmp/t.json",
            "triton,log-frequency=50",
            "rate=100",
            "level=TIMESTAMPS",
            "count=100",
            "mode=triton",
        ]
    )
    assert config == TraceConfig(
        level=TIMESTAMPS, rate=100, count=100, log_frequency=50, file="/tmp/t.json"
    )
    # the brief's form, without the mode prefix, and both spellings of the frequency
    config = parse_trace_config(
        ["level=TIMESTAMPS", "rate=1", "file=/tmp/t.json", "count=-1", "log_frequency=0"]
    )
    assert config == TraceConfig(
        level=TIMESTAMPS, rate=1, count=-1, log_frequency=0, file="/tmp/t.json"
    )
    assert parse_trace_config([]) == TraceConfig(LEVEL_OFF, 1000, -1, 0, "")


def test_trace_levels_add_up_and_an_explicit_off_wins():
    assert parse_trace_config(["level=timestamps", "level=TENSORS"]).level == TIMESTAMPS | TENSORS
    assert parse_trace_config(["level=TIMESTAMPS", "level=off"]).level == LEVEL_OFF
    assert parse_trace_config(["level=max"]).level == TIMESTAMPS


def test_deprecated_trace_flags_and_their_override(caplog):
    warnings = []
    config = parse_trace_config(
        ["rate=5"],
        file="/tmp/a",
        levels=["TIMESTAMPS"],
        rate=7,
        count=3,
        log_frequency=2,
        warn=warnings.append,
    )
    assert config == TraceConfig(TIMESTAMPS, 5, 3, 2, "/tmp/a")
    assert warnings == [
        "Overriding deprecated '--trace-rate' in favor of provided rate in --trace-config!"
    ]


@pytest.mark.parametrize(
    "specs, code, message",
    [
        (["level=loud"], StatusCode.INVALID_ARG, "invalid value for trace level option: loud"),
        (["rate=abc"], StatusCode.INVALID_ARG, "Unable to parse 'trace_rate', got: abc"),
        (["rate=-1"], StatusCode.INVALID_ARG, "value is out of range [ 0, 4294967295 ]"),
        (["count=-2"], StatusCode.INVALID_ARG, "Expecting value >= -1, got: -2"),
        (["triton,log-frequency=x"], StatusCode.INVALID_ARG, "Unable to parse 'log_frequency'"),
        (["rate"], StatusCode.INVALID_ARG, "--trace-config option format is"),
        (["rate="], StatusCode.INVALID_ARG, "--trace-config option format is"),
        ([",rate=1"], StatusCode.INVALID_ARG, "No trace mode specified"),
        (["jaeger,file=x"], StatusCode.INVALID_ARG, "invalid value for trace mode option: jaeger"),
        (["mode=opentelemetry"], StatusCode.UNSUPPORTED, "'opentelemetry' is not supported"),
        (["opentelemetry,url=localhost:4318"], StatusCode.UNSUPPORTED, "not supported"),
        (["triton,rate=5"], StatusCode.INVALID_ARG, "unknown trace setting 'rate'"),
        (["colour=blue"], StatusCode.INVALID_ARG, "unknown trace setting 'colour'"),
    ],
)
def test_bad_trace_config_is_refused(specs, code, message):
    with pytest.raises(TritonRosError) as err:
        parse_trace_config(specs)
    assert err.value.code == code
    assert message in err.value.message


# ------------------------------------------------------------------------------------------
# The protocol's setting values
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, code, message",
    [
        (
            {"trace_file": "/etc/passwd"},
            StatusCode.UNSUPPORTED,
            "trace file location can not be updated through network protocol",
        ),
        (
            {"trace_level": ["OFF", "TIMESTAMPS"]},
            StatusCode.INVALID_ARG,
            "Expect only one trace level 'OFF' is specified",
        ),
        (
            {"trace_level": ["LOUD"]},
            StatusCode.INVALID_ARG,
            "Unable to parse 'trace_level', got: LOUD",
        ),
        ({"trace_rate": "1x"}, StatusCode.INVALID_ARG, "Unable to parse 'trace_rate', got: 1x"),
        (
            {"trace_rate": "10000000000"},
            StatusCode.INVALID_ARG,
            "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], "
            "got: 10000000000",
        ),
        (
            {"trace_count": "10000000000"},
            StatusCode.INVALID_ARG,
            "value is out of range [ -1, 2147483647 ]",
        ),
        (
            {"trace_count": "-5"},
            StatusCode.INVALID_ARG,
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -5",
        ),
        (
            {"log_frequency": "-1"},
            StatusCode.INVALID_ARG,
            "value is out of range [ 0, 4294967295 ]",
        ),
        (
            {"trace_rate": ["1", "2"]},
            StatusCode.INVALID_ARG,
            "expect only 1 value for 'trace_rate'",
        ),
        ({"trace_rate": 5}, StatusCode.INVALID_ARG, "expect a string for 'trace_rate', got 5"),
        ({"trace_level": "TIMESTAMPS"}, None, None),
        ({"trace_speed": "1"}, StatusCode.INVALID_ARG, "unknown trace setting 'trace_speed'"),
        ({"trace_mode": "opentelemetry"}, StatusCode.UNSUPPORTED, "trace mode can not be updated"),
        ({"trace_mode": ["triton"]}, None, None),
    ],
)
def test_setting_values_are_checked_with_tritons_errors(changes, code, message):
    if code is None:
        parse_setting_changes(changes)
        return
    with pytest.raises(TritonRosError) as err:
        parse_setting_changes(changes)
    assert err.value.code == code
    assert message in err.value.message


def _manager(tmp_path, **kwargs) -> TraceManager:
    values = dict(
        level=TIMESTAMPS, rate=1, count=-1, log_frequency=0, file=str(tmp_path / "trace.json")
    )
    values.update(kwargs)
    return TraceManager(TraceConfig(**values))


def test_model_settings_override_global_and_fall_back_when_cleared(tmp_path):
    """Triton's L0_trace sequence: a model gives rate and log frequency, the global setting
    changes and is cleared, the model's cleared fields fall back to the global values."""
    manager = _manager(tmp_path)
    initial = {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": str(tmp_path / "trace.json"),
        "trace_mode": "triton",
    }
    assert manager.get_setting() == manager.get_setting("simple") == initial
    manager.update_setting("simple", {"trace_rate": "12", "log_frequency": "34"})
    manager.update_setting("", {"trace_rate": "56", "trace_count": "78", "trace_level": ["OFF"]})
    assert manager.get_setting("simple") == {
        **initial,
        "trace_level": ["OFF"],
        "trace_rate": "12",
        "log_frequency": "34",
        "trace_count": "78",
    }
    cleared = manager.update_setting("", {"trace_rate": None, "trace_count": None})
    assert cleared == {**initial, "trace_level": ["OFF"]}
    assert manager.get_setting("simple") == {
        **initial,
        "trace_level": ["OFF"],
        "trace_rate": "12",
        "log_frequency": "34",
    }
    after = manager.update_setting("simple", {"trace_rate": None, "trace_level": None})
    assert after == {**initial, "trace_level": ["OFF"], "log_frequency": "34"}
    # clearing the model's last field removes its setting: it mirrors the global one again
    assert manager.update_setting("simple", {"log_frequency": []}) == manager.get_setting()
    assert manager.get_setting() == {**initial, "trace_level": ["OFF"]}
    manager.close()


def test_an_invalid_setting_is_refused_and_changes_nothing(tmp_path):
    manager = TraceManager(TraceConfig(rate=1))  # no file
    with pytest.raises(TritonRosError) as err:
        manager.update_setting("", {"trace_level": ["TIMESTAMPS"]})
    assert err.value.code == StatusCode.INVALID_ARG
    assert err.value.message == (
        "Attempting to set invalid trace setting :trace file name is not given"
    )
    manager = _manager(tmp_path)
    manager.update_setting("m", {"trace_level": ["OFF"], "trace_rate": "0"})
    with pytest.raises(TritonRosError) as err:  # the model would inherit TIMESTAMPS
        manager.update_setting("m", {"trace_level": None})
    assert err.value.message.endswith("sample rate must be non-zero")
    assert manager.get_setting("m")["trace_level"] == ["OFF"]
    manager.close()


def test_rate_and_count_sample_as_triton_does(tmp_path):
    manager = _manager(tmp_path, rate=3, count=2)
    picked = [manager.sample("m") is not None for _ in range(9)]
    assert picked == [False, False, True, False, False, True, False, False, False]
    assert manager.get_setting("m")["trace_count"] == "0"
    assert not manager.active  # nothing left to trace: requests cost nothing
    manager.close()


def test_tracing_off_is_inactive():
    manager = TraceManager()
    assert not manager.active and manager.sample("m") is None
    manager.update_setting("m", {"trace_rate": "1"})  # still OFF: still inactive
    assert not manager.active
    manager.close()


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------


class _Request:
    """Stands in for an InferRequest at its answer (the fields the tracer reads)."""

    def __init__(self, name="m", **times):
        self.model_name, self.model_version, self.id = name, 1, "r"
        self.inputs = {"IN": np.array([[1.5, 2.0]], np.float32)}
        self.caller_releases_trace = False
        self.arrival_ns = times.get("arrival", 100)
        self.queue_start_ns = times.get("queue", 200)
        self.compute_start_ns = times.get("start", 300)
        self.compute_end_ns = times.get("end", 900)
        self.compute_input_ns, self.compute_output_ns = 100, 200


def _trace_one(manager, name="m"):
    trace = manager.sample(name)
    assert trace is not None
    trace.end_request(_Request(name), None, 1000)
    return trace


def test_log_frequency_rolls_indexed_files(tmp_path):
    manager = _manager(tmp_path, log_frequency=2)
    ids = [_trace_one(manager).id for _ in range(5)]
    manager.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["trace.json.0", "trace.json.1", "trace.json.2"]
    per_file = [sorted({e["id"] for e in json.loads((tmp_path / f).read_text())}) for f in files]
    assert per_file == [ids[0:2], ids[2:4], ids[4:5]]  # the last one when tracing stopped
    assert manager.statistics().written == 5


def test_without_frequency_traces_append_to_one_json_array(tmp_path):
    manager = _manager(tmp_path)
    ids = [_trace_one(manager).id for _ in range(3)]
    time.sleep(0.2)
    partial = (tmp_path / "trace.json").read_text()  # written as they complete...
    assert partial.startswith("[") and not partial.endswith("]")
    manager.close()  # ... and closed at the end
    entries = json.loads((tmp_path / "trace.json").read_text())
    assert sorted({e["id"] for e in entries}) == ids
    timeline = [
        e["timestamps"][0]["name"] for e in entries if e["id"] == ids[0] and "timestamps" in e
    ]
    assert timeline == [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    ]
    ns = {
        e["timestamps"][0]["name"]: e["timestamps"][0]["ns"]
        for e in entries
        if e["id"] == ids[0] and "timestamps" in e
    }
    assert ns["COMPUTE_INPUT_END"] == 400 and ns["COMPUTE_OUTPUT_START"] == 700


def test_a_count_that_runs_out_writes_an_indexed_file_at_once(tmp_path):
    """As in Triton (L0_trace's global_count.log.0): once the count is used up and its traces
    are complete, they go to <file>.0 while the server still runs."""
    manager = _manager(tmp_path, count=3)
    for _ in range(3):
        _trace_one(manager)
    wait_until((tmp_path / "trace.json.0").exists, 5, "the first trace file", interval=0.02)
    assert len({e["id"] for e in json.loads((tmp_path / "trace.json.0").read_text())}) == 3
    manager.close()


def test_tensors_level_writes_tritons_tensor_entries(tmp_path):
    manager = _manager(tmp_path, level=TENSORS)
    _trace_one(manager)
    manager.close()
    entries = json.loads((tmp_path / "trace.json").read_text())
    assert {
        "id": entries[0]["id"],
        "activity": "TENSOR_QUEUE_INPUT",
        "tensor": {"name": "IN", "data": "1.5,2.0", "shape": "1,2", "dtype": "FP32"},
    } in entries
    assert not [e for e in entries if "timestamps" in e]  # TENSORS alone: no timestamps


def test_an_unwritable_trace_file_is_logged_once_and_counted(tmp_path, caplog):
    manager = _manager(tmp_path, file=str(tmp_path / "missing" / "trace.json"))
    with caplog.at_level(logging.DEBUG, logger="triton_ros.trace"):
        for _ in range(4):
            _trace_one(manager)
        manager.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "cannot write trace file" in errors[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    stats = manager.statistics()
    assert stats.file_errors == 4 and stats.dropped == 4 and stats.written == 0


# ------------------------------------------------------------------------------------------
# The core's report, in process
# ------------------------------------------------------------------------------------------


def test_the_core_traces_by_model_and_a_caller_adds_its_own_timestamps(tmp_path):
    """The hook the ROS node uses: settings apply by model in the core; a caller that keeps
    the trace adds its timestamps around the core's and releases it."""
    from server_process import MODEL_REPOSITORY
    from triton_ros.core.infer_request import InferRequest
    from triton_ros.core.server import InferenceServer, ServerOptions

    trace_file = tmp_path / "trace.json"
    config = parse_trace_config([f"triton,file={trace_file}", "rate=1"])  # level OFF globally
    core = InferenceServer(
        ServerOptions(
            (str(MODEL_REPOSITORY),),
            model_control_mode="explicit",
            startup_models=("simple",),
            trace_config=config,
        )
    )
    core.start()
    try:
        core.trace_setting("simple", {"trace_level": ["TIMESTAMPS"]})
        ones = np.ones((1, 16), np.int32)
        received = time.monotonic_ns()
        request = InferRequest(
            "simple", {"INPUT0": ones, "INPUT1": ones}, id="frame-7", caller_releases_trace=True
        )
        response = core.infer(request).result(timeout=30)
        np.testing.assert_array_equal(response.outputs["OUTPUT0"], ones * 2)
        trace = request.trace
        assert trace is not None
        trace.capture("ROS_FRAME_RECEIVED", received)
        trace.capture("ROS_PUBLISH_END")
        trace.release()
    finally:
        core.stop()
    entries = json.loads(trace_file.read_text())
    assert entries[0] == {
        "id": trace.id,
        "model_name": "simple",
        "model_version": 1,
        "request_id": "frame-7",
    }
    names = [e["timestamps"][0]["name"] for e in entries[1:]]
    assert names == [
        "ROS_FRAME_RECEIVED",
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
        "ROS_PUBLISH_END",
    ]
    assert core.tracer.statistics().written == 1


def test_a_trace_that_cannot_be_reported_never_fails_the_request(tmp_path, caplog):
    manager = _manager(tmp_path, level=TENSORS)
    trace = manager.sample("m")
    request = _Request()
    request.inputs = {"X": np.array([1j], np.complex64)}  # no Triton data type
    with caplog.at_level(logging.WARNING, logger="triton_ros.trace"):
        trace.end_request(request, None, 1000)  # does not raise
    manager.close()
    assert "cannot trace a request of model 'm'" in caplog.text
    entries = json.loads((tmp_path / "trace.json").read_text())
    assert entries == [{"id": trace.id, "model_name": "m", "model_version": 1, "request_id": "r"}]
