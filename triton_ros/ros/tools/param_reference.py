"""The parameter reference of ``inference_node`` (docs/parameters.md), written from the node's own
declarations.

``python -m triton_ros.ros.tools.param_reference > docs/parameters.md`` regenerates it;
``--check docs/parameters.md`` exits 1, with a diff, when the file and the declarations differ
(test/ros/test_param_reference.py does the same in the suite). The declarations are the one
source: names, kinds, defaults, choices and descriptions come from :data:`NODE_PARAMS` and
:data:`BINDING_PARAMS` of ``ros/parameters.py``, the settings each part declares on its config
class (``triton_ros/settings.py``) and the node declares in its ParameterDescriptors (``ros2
param describe``). To change what the reference says, change a setting's help where it is
declared and regenerate.

Written by hand: no library renders a Markdown table from these specs, and rclpy is not needed
(nothing is declared on a node; the specs are read as they are).
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable

from ...settings import (
    BOOL,
    FLOAT,
    FLOAT_LIST,
    INT,
    KEY_VALUES,
    STR,
    STR_LIST,
    Setting,
    check,
    parameters_of,
    settings_of,
    shared_fields,
)
from ..codec.registry import INPUT_KINDS, PARTS
from ..parameters import BINDING_PARAMS, BINDING_PARTS, NODE_PARAMS

COMMAND = "python -m triton_ros.ros.tools.param_reference > docs/parameters.md"

BINDING_NAMES = {s.name for s in BINDING_PARAMS}
ROS_TYPES = {
    BOOL: "bool",
    INT: "integer",
    FLOAT: "double",
    STR: "string",
    STR_LIST: "string array",
    FLOAT_LIST: "double array",
    KEY_VALUES: "string array",
}

# Node parameters with a dotted prefix are grouped under it; the others come first.
GROUPS = {
    "": "Server and node",
    "grpc": "gRPC endpoint (`grpc.*`)",
    "http": "HTTP/REST endpoint (`http.*`)",
    "metrics": "Metrics endpoint (`metrics.*`)",
}

INTRO = f"""\
# Parameters of `inference_node`

<!-- Generated from the settings the node declares (each on the config class of the part that
reads it: triton_ros/settings.py says how) by
    {COMMAND}
Edit a setting's help where it is declared and regenerate; test/ros/test_param_reference.py
fails when this file and the declarations differ. -->

Every parameter below is declared by the node with this description (`ros2 param describe
/inference_node <name>` shows it), has the default shown and is read once at start (read-only).
Types are checked by the node, not by ROS: `0` is accepted for a double, a single string for a
string array and `[]` for any empty array; a value of the wrong type, a choice not listed or a
misspelt name stops the node with an error that names the parameter (a misspelt name is
reported in the log). ROS's own `use_sim_time` is accepted too: with `true`, frame ages and
latencies are on ROS time from `/clock` (a bag replayed with `--clock`, a simulator).

[config/inference.yaml](../config/inference.yaml) lists every parameter with its default and is
also a working params file. How bindings, flow control and outputs work: [node.md](node.md);
the fleet parameters (`server_urls`, TLS, headers): [fleet.md](fleet.md).
"""

BINDINGS_INTRO = """\
## Binding parameters (`<binding>.*`)

ROS parameters cannot be lists of dictionaries, so each binding is named in `bindings` and its
settings are parameters under its name: `cameras.model`, `cameras.topic_patterns`, ... for a
binding called `cameras` (a name starts with a letter and holds letters, digits and `_`).

Every binding has every parameter below. They are listed by the part that declares them: the
binding itself, its remote target, its Kafka mirror, the matching of synchronized inputs, and
each input kind and output format (`input_kind`, `input_kinds`, `format`); *read by* names the
kinds and formats that read a parameter.
"""
TITLES = {
    "binding": "The binding",
    "remote target": "Remote target (`server_urls`)",
    "Kafka mirror": "Kafka mirror (`kafka_mirror_topic`)",
    "synchronized inputs": "Synchronized inputs (`inputs`)",
}


def markdown_text(text: str) -> str:
    """Plain description text made safe in a Markdown table cell: characters that would start
    emphasis, strikethrough, a link, HTML or code, or end the cell, are escaped (so '**',
    '~/status', '<key>' and '|' show as written)."""
    text = text.replace("\\", "\\\\")
    for char in "*`[]|~":
        text = text.replace(char, "\\" + char)
    text = text.replace("<", "&lt;")
    # An underscore inside a word never starts emphasis (GFM); one at a word's edge might.
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)


def _value(value: Any) -> str:
    """A default as it is written in a params file (YAML flow style)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value) if value == "" or not re.fullmatch(r"[\w./-]+", value) else value
    return repr(value)


def default_text(spec: Setting) -> str:
    """The default as the node reads it (a list parameter declared as "" is the empty list)."""
    value = check(spec, spec.default, spec.name)
    if isinstance(value, tuple):
        value = ["=".join(v) if isinstance(v, tuple) else v for v in value]
    return f"`{_value(value)}`"


def type_text(spec: Setting) -> str:
    kind = ROS_TYPES[spec.kind]
    if spec.choices:
        kind += ": " + ", ".join(f"`{c}`" for c in spec.choices)
    return kind


def table(specs: Iterable[Setting], prefix: str = "") -> list[str]:
    lines = ["| parameter | type | default | description |", "|---|---|---|---|"]
    for spec in specs:
        lines.append(
            f"| `{prefix}{spec.name}` | {type_text(spec)} | {default_text(spec)} | "
            f"{markdown_text(spec.help)} |"
        )
    return lines


def readers(name: str) -> str:
    """The input kinds and output formats that read binding parameter ``name``."""
    found = [
        part.name
        for part in PARTS
        if part.settings is not None
        and (
            name in {s.name for s in settings_of(part.settings)}
            or name in shared_fields(part.settings)
        )
    ]
    return ", ".join(f"`{n}`" for n in found)


def binding_table(specs: Iterable[Setting]) -> list[str]:
    lines = ["| parameter | type | default | read by | description |", "|---|---|---|---|---|"]
    for spec in specs:
        lines.append(
            f"| `<binding>.{spec.name}` | {type_text(spec)} | {default_text(spec)} | "
            f"{readers(spec.name)} | {markdown_text(spec.help)} |"
        )
    return lines


def binding_sections() -> list[str]:
    """The binding's parameters, by the part that declares each (the first that does)."""
    out: list[str] = []
    listed: set[str] = set()
    for part, cls in BINDING_PARTS:
        specs = [s for s in parameters_of(cls) if s.name in BINDING_NAMES and s.name not in listed]
        if not specs:
            continue
        listed.update(s.name for s in specs)
        title = TITLES.get(part) or (
            f"Input kind `{part}`" if part in INPUT_KINDS else f"Output format `{part}`"
        )
        out += [f"### {title}", "", *binding_table(specs), ""]
    return out


def render() -> str:
    """docs/parameters.md, from the declarations."""
    out = [INTRO, "## Node parameters", ""]
    groups: dict[str, list[Setting]] = {}
    for spec in NODE_PARAMS:
        group = spec.name.split(".")[0] if "." in spec.name else ""
        groups.setdefault(group, []).append(spec)
    for group, specs in groups.items():
        out += [f"### {GROUPS.get(group, f'`{group}.*`')}", "", *table(specs), ""]
    out += [BINDINGS_INTRO, *binding_sections()]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m triton_ros.ros.tools.param_reference",
        description="Print the parameter reference (docs/parameters.md) generated from the "
        "inference node's parameter declarations.",
    )
    parser.add_argument(
        "--check",
        metavar="FILE",
        type=Path,
        help="compare FILE with the declarations instead of printing; exit 1 "
        "with a diff when they differ",
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check is None:
        sys.stdout.write(text)
        return 0
    current = args.check.read_text() if args.check.is_file() else ""
    if current == text:
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            str(args.check),
            "from the declarations",
        )
    )
    print(
        f"\n{args.check} differs from the node's parameter declarations; regenerate it:\n"
        f"  {COMMAND}",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
