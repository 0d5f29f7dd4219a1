"""config.pbtxt: parse -> auto-complete -> normalize -> validate, with errors naming model, field
and value."""

from __future__ import annotations

import json

import pytest

from model_factory import add_sub_graph, write_model
from triton_ros.core import StatusCode, TritonRosError
from triton_ros.core.model_config import VersionPolicy, load_model_config, model_config_to_json
from triton_ros.core.model_repository_manager import check_model_name
from triton_ros.core.model_repository_manager import _auto_complete_for as auto_complete_for


pytestmark = pytest.mark.unit

BASE = """
name: "m"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def load(tmp_path, text: str | None, *, strict: bool = False, name: str = "m"):
    path = write_model(tmp_path, name, add_sub_graph(), text)
    return load_model_config(name, path, strict=strict, backend_auto_complete=auto_complete_for)


def test_normalization_applies_triton_defaults(tmp_path):
    config = load(tmp_path, BASE + "dynamic_batching { }")
    assert config.dynamic_batching.preferred_batch_sizes == (8,)  # [max_batch_size]
    assert config.version_policy == VersionPolicy("latest", 1)
    (group,) = config.instance_groups
    assert (group.name, group.kind, group.count) == ("m", "KIND_CPU", 2)  # ORT CPU default: 2
    assert config.platform == "onnxruntime_onnx"
    assert config.proto.version_policy.latest.num_versions == 1


def test_queue_policies_and_priorities_become_typed(tmp_path):
    config = load(
        tmp_path,
        BASE
        + """
dynamic_batching {
  max_queue_delay_microseconds: 100
  priority_levels: 3
  default_priority_level: 2
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5 max_queue_size: 7 }
  priority_queue_policy { key: 1 value: { allow_timeout_override: true } }
}""",
    )
    db = config.dynamic_batching
    assert (db.max_queue_delay_us, db.priority_levels, db.default_priority_level) == (100, 3, 2)
    assert db.policy_for(2).timeout_action == "DELAY" and db.policy_for(2).max_queue_size == 7
    assert db.policy_for(1).allow_timeout_override and db.policy_for(1).timeout_action == "REJECT"


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            "dynamic_batching { preferred_batch_size: [ 0 ] }",
            "preferred size must be positive for m",
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
            "default priority level must be in range [1, 2] for m, got 3",
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 5 value: { } } }",
            "priority level in range [1, 2] for m, got 5",
        ),
        (
            "dynamic_batching { preserve_ordering: true priority_levels: 2 "
            "default_priority_level: 1 }",
            "Only one priority level is allowed when 'preserve_ordering' is true",
        ),
        (
            "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "has kind KIND_CPU but specifies one or more GPUs",
        ),
    ],
)
def test_invalid_fields_are_named(tmp_path, extra, message):
    with pytest.raises(TritonRosError) as err:
        load(tmp_path, BASE + extra)
    assert err.value.code is StatusCode.INVALID_ARG
    assert message in err.value.message


@pytest.mark.parametrize(
    "text, message",
    [
        (
            BASE.replace("max_batch_size: 8", "max_batch_size: -1"),
            "'max_batch_size' must be non-negative value for m, got -1",
        ),
        (
            BASE.replace(
                'dims: [ 4 ] },\n        { name: "INPUT1"',
                'dims: [ 0 ] },\n        { name: "INPUT1"',
            ),
            "model 'm': input 'INPUT0' dimension must be integer >= 1",
        ),
        (
            BASE.replace(
                '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }',
                '{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 3 ] } }',
            ),
            "model 'm': output 'OUTPUT0' has different size for dims [4] and reshape [3]",
        ),
        (
            'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
            'input [ { name: "INPUT0" dims: [ 4 ] } ]',
            "model 'm': input 'INPUT0' must specify 'data_type'",
        ),
        ('name: "m"\nmax_batch_size: 4\ninput [ { name: ', "config.pbtxt of model 'm'"),
    ],
)
def test_malformed_configs_name_model_field_and_value(tmp_path, text, message):
    with pytest.raises(TritonRosError) as err:
        load(tmp_path, text)
    assert message in err.value.message


def test_auto_complete_fills_io_and_batching(tmp_path):
    config = load(tmp_path, None)
    assert config.max_batch_size == 4 and config.dynamic_batching is not None
    assert [(t.name, t.datatype, t.dims) for t in config.inputs] == [
        ("INPUT0", "FP32", (4,)),
        ("INPUT1", "FP32", (4,)),
    ]
    assert any("autofilled max_batch_size to 4" in w for w in config.warnings)


def test_strict_mode_needs_config_pbtxt(tmp_path):
    with pytest.raises(TritonRosError) as err:
        load(tmp_path, None, strict=True)
    assert "config.pbtxt is required" in err.value.message


def test_ignored_fields_warn_instead_of_silently_changing_behaviour(tmp_path):
    config = load(
        tmp_path,
        BASE
        + """
optimization { cuda { graphs: true } }
instance_group [ { count: 1 kind: KIND_CPU rate_limiter { resources [ { name: "R" count: 1 } ] } } ]
""",
    )
    assert any("optimization.cuda is ignored" in w for w in config.warnings)
    assert any("rate_limiter is ignored" in w for w in config.warnings)


def test_version_policy_selection():
    assert VersionPolicy("latest", 1).select([3, 1, 2]) == [3]
    assert VersionPolicy("latest", 2).select([3, 1, 2]) == [2, 3]
    assert VersionPolicy("all").select([2, 1]) == [1, 2]
    assert VersionPolicy("specific", versions=(1, 5)).select([1, 2]) == [1]


def test_config_json_uses_numbers_like_triton(tmp_path):
    config = load(tmp_path, BASE + "dynamic_batching { max_queue_delay_microseconds: 250 }")
    as_json = json.loads(model_config_to_json(config.proto))
    assert as_json["max_batch_size"] == 8
    assert as_json["input"][0]["dims"] == [4]
    assert as_json["dynamic_batching"]["max_queue_delay_microseconds"] == 250
    assert as_json["input"][0]["data_type"] == "TYPE_FP32"


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "/abs", " ", ""])
def test_model_names_cannot_leave_the_repository(name):
    with pytest.raises(TritonRosError) as err:
        check_model_name(name)
    assert err.value.code is StatusCode.INVALID_ARG


def test_tensor_lookups_by_name(tmp_path):
    """The lookups the request path makes for every request, computed once per config."""
    config = load(
        tmp_path,
        BASE.replace(
            'dims: [ 4 ] },\n        { name: "INPUT1"',
            'dims: [ 4 ] optional: true },\n        { name: "INPUT1"',
        ),
    )
    assert config.input("INPUT1").name == "INPUT1" and config.input("nope") is None
    assert config.output("OUTPUT0").name == "OUTPUT0" and config.output("INPUT0") is None
    assert list(config.inputs_by_name) == ["INPUT0", "INPUT1"]
    assert config.required_inputs == ("INPUT1",)  # INPUT0 is optional
    assert config.inputs_by_name is config.inputs_by_name  # cached, not rebuilt


def _sequence(body: str) -> str:
    return BASE + "sequence_batching { " + body + " }"


def _control(name: str, spec: str) -> str:
    return f'control_input [ {{ name: "{name}" control [ {{ {spec} }} ] }} ]'


def test_sequence_batching_becomes_typed_with_triton_defaults(tmp_path):
    config = load(
        tmp_path,
        _sequence(
            "oldest { max_candidate_sequences: 4 } "
            + "control_input [ "
            + '{ name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            + "fp32_false_true: [ 0.5, 2 ] } ] }, "
            + '{ name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            + "data_type: TYPE_STRING } ] } ] "
            + 'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ -1 ] '
            + 'initial_state: { name: "z" data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } ]'
        ),
    )
    sb = config.sequence_batching
    assert (
        sb.strategy,
        sb.max_sequence_idle_us,
        sb.max_candidate_sequences,
        sb.preferred_batch_sizes,
    ) == ("oldest", 1_000_000, 4, (8,))  # Triton's defaults
    start = sb.control("CONTROL_SEQUENCE_START")
    assert (start.tensor, start.datatype, start.false_value, start.true_value) == (
        "S",
        "FP32",
        0.5,
        2.0,
    )
    assert sb.control("CONTROL_SEQUENCE_CORRID").datatype == "BYTES"
    assert sb.states[0].initial_state.dims == (3,) and sb.states[0].initial_state.zero_data
    assert config.sequence_inputs == ("S", "C", "A")
    assert load(tmp_path, _sequence("")).sequence_batching.strategy == "direct"
    assert load(tmp_path, BASE + "model_transaction_policy { decoupled: true }").decoupled


@pytest.mark.parametrize(
    "body, message",
    [
        (
            _control("", "kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ]"),
            "sequence batching control tensor must have a name for m",
        ),
        (
            _control("S", "kind: CONTROL_SEQUENCE_START"),
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
            "'bool_false_true' for CONTROL_SEQUENCE_START for m",
        ),
        (
            _control(
                "S",
                "kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] fp32_false_true: [ 0, 1 ]",
            ),
            "specifies more than one from",
        ),
        (
            _control("S", "kind: CONTROL_SEQUENCE_READY int32_false_true: [ 1 ]"),
            "sequence batching control 'int32_false_true' must have exactly 2 entries for "
            "CONTROL_SEQUENCE_READY for m",
        ),
        (
            _control("C", "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32"),
            "unexpected data type for control CONTROL_SEQUENCE_CORRID "
            "for m. Allowed data types are "
            "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING",
        ),
        (
            _control(
                "C",
                "kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 int32_false_true: [ 0, 1 ]",
            ),
            "must not specify either 'int32_false_true'",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            'int32_false_true: [ 0, 1 ] } ] }, { name: "S" control [ { kind: CONTROL_SEQUENCE_END '
            "int32_false_true: [ 0, 1 ] } ] } ]",
            "sequence batching control tensor 'S' is specified for multiple control kinds for m",
        ),
        (
            'control_input [ { name: "S" control [ { kind: CONTROL_SEQUENCE_START '
            'int32_false_true: [ 0, 1 ] } ] }, { name: "T" control '
            "[ { kind: CONTROL_SEQUENCE_START "
            "int32_false_true: [ 0, 1 ] } ] } ]",
            "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
        ),
        (
            "oldest { preferred_batch_size: [ 16 ] }",
            "sequence batching preferred batch size must be <= max batch size for m",
        ),
        (
            "direct { minimum_slot_utilization: 1.5 }",
            "sequence batching minimum slot utilization must be in range (0.0, 1.0] for m",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] '
            'initial_state: { name: "z" data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } ]',
            "The data type used for 'initial_state' field of state "
            "'A' does not match the state data "
            "type.",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] '
            "initial_state: { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } ]",
            "Field 'name' must be set when using initial_state for state input 'A'.",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ -1 ] '
            'initial_state: { name: "z" data_type: TYPE_INT32 dims: [ -1 ] zero_data: true } } ]',
            "'initial_state' field for state input name 'A' contains variable dimensions.",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] '
            'initial_state: { name: "z" data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } ]',
            "'initial_state' dim for input name 'A' doesn't match 'state' dim description. 3 != 2",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] '
            'initial_state: { name: "z" data_type: TYPE_INT32 dims: [ 2 ] } } ]',
            "initial_state setting expects state'A' to have state_data set",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] '
            'initial_state: { name: "z" data_type: TYPE_INT32 dims: [ 2 ] data_file: "../x" } } ]',
            "must be a file name inside the model's 'initial_state' directory",
        ),
        (
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] }, '
            '{ input_name: "A" output_name: "C" data_type: TYPE_INT32 dims: [ 2 ] } ]',
            "State input name 'A' specified more than once.",
        ),
        (
            "max_sequence_idle_microseconds: 18446744073709551615",
            "sequence_batching.max_sequence_idle_microseconds must be at most",
        ),
    ],
)
def test_invalid_sequence_batching_gets_tritons_error(tmp_path, body, message):
    with pytest.raises(TritonRosError) as err:
        load(tmp_path, _sequence(body))
    assert err.value.code is StatusCode.INVALID_ARG
    assert message in err.value.message


def test_unserved_sequence_fields_are_refused_or_warned(tmp_path):
    with pytest.raises(TritonRosError) as err:
        load(tmp_path, _sequence("iterative_sequence: true"))
    assert err.value.code is StatusCode.UNSUPPORTED
    assert "iterative_sequence is not supported" in err.value.message
    config = load(
        tmp_path,
        _sequence(
            'state [ { input_name: "A" output_name: "B" data_type: TYPE_INT32 dims: [ 2 ] '
            "use_same_buffer_for_input_output: true } ]"
        ),
    )
    assert any("use_same_buffer_for_input_output" in w for w in config.warnings)
    for extra in (
        "response_cache { enable: true }",
        "response_cache { enable: true } model_transaction_policy { decoupled: true }",
    ):
        text = _sequence("") + extra if "decoupled" not in extra else BASE + extra
        with pytest.raises(TritonRosError, match="Response Cache does not currently support"):
            load(tmp_path, text)
