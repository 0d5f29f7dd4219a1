"""Model repositories for the sequence batcher's tests: each model is the Python model of
test/sequence_models/echo_model.py under a configuration of its own (strategy, control types,
implicit state, idle time); :func:`write_sequence_repository` writes them. Runnable by hand to
serve the same repository with another server (tritonserver) for comparison:
``python test/sequence_repository.py DEST``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

ECHO_MODEL = Path(__file__).resolve().parent / "sequence_models" / "echo_model.py"

_IO = """
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def _control(name: str, kind: str, spec: str) -> str:
    return f'{{ name: "{name}" control [ {{ kind: {kind} {spec} }} ] }}'


def _outputs(names_types: list[tuple[str, str, str]]) -> str:
    items = ",\n  ".join(
        f'{{ name: "{n}" data_type: {t} dims: [ {d} ] }}' for n, t, d in names_types
    )
    return f"output [\n  {items}\n]\n"


#: name -> config.pbtxt (the model file is the same for all)
CONFIGS = {
    # Direct strategy, two slots on one instance; controls of every boolean type with values
    # other than 0/1, and a UINT64 correlation ID.
    "seq_direct": f"""
name: "seq_direct"
backend: "python"
max_batch_size: 2
sequence_batching {{
  max_sequence_idle_microseconds: 30000000
  direct {{ }}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "fp32_false_true: [ 0.5, 2.5 ]")},
    {_control("END", "CONTROL_SEQUENCE_END", "int32_false_true: [ 7, 9 ]")},
    {_control("READY", "CONTROL_SEQUENCE_READY", "bool_false_true: [ false, true ]")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64")}
  ]
}}
{_IO}
{
        _outputs(
            [
                ("OUTPUT", "TYPE_INT32", "1"),
                ("START_OUT", "TYPE_FP32", "1"),
                ("END_OUT", "TYPE_INT32", "1"),
                ("READY_OUT", "TYPE_BOOL", "1"),
                ("CORRID_OUT", "TYPE_UINT64", "1"),
                ("BATCH", "TYPE_INT32", "2"),
                ("IDS", "TYPE_STRING", "1"),
            ]
        )
    }
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""",
    # Oldest strategy over two instances with implicit state: ACC from zeros, BASE from
    # initial_state/base (INT64 [2]); BASE's output is listed (a client may see it), ACC's
    # is not.
    "seq_state": f"""
name: "seq_state"
backend: "python"
max_batch_size: 4
sequence_batching {{
  max_sequence_idle_microseconds: 30000000
  oldest {{
    max_candidate_sequences: 4 preferred_batch_size: [ 4 ]
    max_queue_delay_microseconds: 20000
  }}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64")}
  ]
  state [
    {{ input_name: "ACC" output_name: "ACC_NEXT" data_type: TYPE_INT32 dims: [ -1 ]
       initial_state: {{ name: "zeros" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }} }},
    {{ input_name: "BASE" output_name: "BASE_NEXT" data_type: TYPE_INT64 dims: [ 2 ]
       initial_state: {{ name: "base" data_type: TYPE_INT64 dims: [ 2 ] data_file: "base" }} }}
  ]
}}
{_IO}
{
        _outputs(
            [
                ("OUTPUT", "TYPE_INT32", "1"),
                ("BASE_NEXT", "TYPE_INT64", "2"),
                ("ACC_OUT", "TYPE_INT32", "1"),
                ("BATCH", "TYPE_INT32", "2"),
                ("IDS", "TYPE_STRING", "1"),
            ]
        )
    }
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
""",
    # One slot, no batching, a short idle time: the slot changes hands when a sequence idles.
    "seq_idle": f"""
name: "seq_idle"
backend: "python"
max_batch_size: 0
sequence_batching {{
  max_sequence_idle_microseconds: 1000000
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_INT32")}
  ]
}}
{_IO}
{_outputs([("OUTPUT", "TYPE_INT32", "1"), ("CORRID_OUT", "TYPE_INT32", "1")])}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""",
    # A STRING correlation ID on a model without batching, direct strategy, one slot, every
    # control (tritonserver 2.51's Python backend fails a STRING CORRID, see docs/stateful.md).
    "seq_string": f"""
name: "seq_string"
backend: "python"
max_batch_size: 0
sequence_batching {{
  max_sequence_idle_microseconds: 30000000
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")},
    {_control("END", "CONTROL_SEQUENCE_END", "int32_false_true: [ 0, 1 ]")},
    {_control("READY", "CONTROL_SEQUENCE_READY", "int32_false_true: [ 0, 1 ]")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_STRING")}
  ]
}}
{_IO}
{
        _outputs(
            [
                ("OUTPUT", "TYPE_INT32", "1"),
                ("START_OUT", "TYPE_INT32", "1"),
                ("END_OUT", "TYPE_INT32", "1"),
                ("READY_OUT", "TYPE_INT32", "1"),
                ("CORRID_OUT", "TYPE_STRING", "1"),
                ("IDS", "TYPE_STRING", "1"),
            ]
        )
    }
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""",
    # String correlation IDs without a CORRID control (tritonserver 2.51's Python backend fails
    # a STRING CORRID, see docs/stateful.md): direct, two slots, START/END/READY.
    "seq_string_id": f"""
name: "seq_string_id"
backend: "python"
max_batch_size: 2
sequence_batching {{
  max_sequence_idle_microseconds: 30000000
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")},
    {_control("END", "CONTROL_SEQUENCE_END", "int32_false_true: [ 0, 1 ]")},
    {_control("READY", "CONTROL_SEQUENCE_READY", "int32_false_true: [ 0, 1 ]")}
  ]
}}
{_IO}
{
        _outputs(
            [
                ("OUTPUT", "TYPE_INT32", "1"),
                ("START_OUT", "TYPE_INT32", "1"),
                ("END_OUT", "TYPE_INT32", "1"),
                ("READY_OUT", "TYPE_INT32", "1"),
                ("BATCH", "TYPE_INT32", "2"),
                ("IDS", "TYPE_STRING", "1"),
            ]
        )
    }
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""",
    # Oldest strategy with one candidate sequence: a second sequence waits in the backlog until
    # the first ends.
    "seq_oldest_one": f"""
name: "seq_oldest_one"
backend: "python"
max_batch_size: 2
sequence_batching {{
  max_sequence_idle_microseconds: 30000000
  oldest {{ max_candidate_sequences: 1 }}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 1 ]")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", "data_type: TYPE_UINT64")}
  ]
}}
{_IO}
{_outputs([("OUTPUT", "TYPE_INT32", "1"), ("CORRID_OUT", "TYPE_UINT64", "1")])}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
""",
}


def write_sequence_repository(dest: Path, names=None) -> Path:
    """Write the models (all, or ``names``) into ``dest``; ``dest``."""
    dest = Path(dest)
    for name in names or CONFIGS:
        folder = dest / name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(CONFIGS[name])
        shutil.copyfile(ECHO_MODEL, folder / "1" / "model.py")
        if name == "seq_state":
            (folder / "initial_state").mkdir(exist_ok=True)
            (folder / "initial_state" / "base").write_bytes(
                np.array([100, 200], np.int64).tobytes()
            )
    return dest


if __name__ == "__main__":
    print(write_sequence_repository(Path(sys.argv[1])))
