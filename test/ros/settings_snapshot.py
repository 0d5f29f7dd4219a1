"""What users can write today, recorded: every parameter the inference node declares (name,
default, descriptor) and every flag of ``triton-ros-server`` (how argparse takes it, and what it
makes of sample values). test_settings_snapshot.py holds the code against the recording, so that
a refactoring of where settings are declared cannot rename, drop, retype or re-default one.

    .venv/bin/python test/ros/settings_snapshot.py > test/ros/settings_snapshot.json

records it anew (only when a public setting is meant to change: say so in the commit).

The node's declarations are read through rclpy itself: a node with a binding that uses every
map (``inputs``, ``input_kinds``) runs the node's own ``declare_and_read``, and each
``declare_parameter`` call is recorded as made (the default as declared, before any override).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "settings_snapshot.json"
BINDING = "snap"
# A binding whose maps declare their per-input parameters too.
OVERRIDES = {
    "bindings": [BINDING],
    f"{BINDING}.model": "m",
    f"{BINDING}.topics": ["/robot"],
    f"{BINDING}.inputs.IMAGE": "image_raw",
    f"{BINDING}.input_kinds.IMAGE": "image",
    "model_repository": ["/nonexistent"],
}


def _json(value: Any) -> Any:
    """A declared value as JSON, its Python type kept (0 and 0.0, [] and "" differ)."""
    if isinstance(value, (list, tuple)):
        return {"list": [_json(v) for v in value]}
    return {type(value).__name__: value}


def node_parameters() -> dict[str, Any]:
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    from triton_ros.ros.parameters import declare_and_read

    context = Context()
    rclpy.init(context=context, args=[])
    node = rclpy.create_node(
        "settings_snapshot",
        context=context,
        parameter_overrides=[Parameter(k, value=v) for k, v in OVERRIDES.items()],
    )
    declared: dict[str, Any] = {}
    original = node.declare_parameter

    def declare(name, value=None, descriptor=None, ignore_override=False):
        key = (
            name.replace(f"{BINDING}.", "<binding>.", 1) if name.startswith(f"{BINDING}.") else name
        )
        d = descriptor
        declared[key] = {
            "default": _json(value),
            "description": d.description,
            "additional_constraints": d.additional_constraints,
            "read_only": d.read_only,
            "dynamic_typing": d.dynamic_typing,
            "type": d.type,
            "integer_range": [[r.from_value, r.to_value, r.step] for r in d.integer_range],
            "floating_point_range": [
                [r.from_value, r.to_value, r.step] for r in d.floating_point_range
            ],
        }
        return original(name, value, descriptor, ignore_override)

    node.declare_parameter = declare
    try:
        declare_and_read(node)
    finally:
        node.destroy_node()
        context.shutdown()
    return dict(sorted(declared.items()))


# Values tried on each flag that takes one; what argparse makes of each is recorded.
SAMPLES = (
    "0",
    "1",
    "8001",
    "-1",
    "0.5",
    "true",
    "false",
    "yes",
    "off",
    "x",
    "a,b",
    "health:k=v",
    "k=v",
)


def _parsed(parser: argparse.ArgumentParser, argv: list[str], dest: str) -> Any:
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        return "refused"
    return _json(getattr(args, dest))


def server_flags() -> dict[str, Any]:
    from triton_ros.server_main import build_parser

    parser = build_parser()
    base = ["--model-repository", "/m"]
    flags: dict[str, Any] = {}
    import contextlib
    import io

    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        entry = {
            "dest": action.dest,
            "action": type(action).__name__.lstrip("_"),
            "nargs": action.nargs,
            "required": action.required,
            "choices": list(action.choices) if action.choices else None,
            "default": _json(action.default),
            "aliases": sorted(action.option_strings),
        }
        flag = action.option_strings[0]
        if action.nargs != 0:
            with contextlib.redirect_stderr(io.StringIO()):
                entry["samples"] = {
                    s: _parsed(parser, [*base, flag, s], action.dest) for s in SAMPLES
                }
        flags[max(action.option_strings, key=len)] = entry
    return dict(sorted(flags.items()))


def snapshot() -> dict[str, Any]:
    return {"node_parameters": node_parameters(), "server_flags": server_flags()}


if __name__ == "__main__":
    json.dump(snapshot(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
