"""Every ROS example of the docs, read by what ROS reads it with, not by PyYAML.

PyYAML accepts YAML that rcl's params-file parser (libyaml, through rcl_yaml_param_parser)
refuses: ``server_urls: [grpcs://edge1.example.com:8001]`` unquoted loads in PyYAML, and stops
the node at start with "Couldn't parse params file ... Error parsing a event near line 11". So
the examples of README.md and docs/**/*.md (collected by docs_snippets, whose docstring gives
the conventions, including the ``<!-- docs-check: ... -->`` marks of partial snippets) are
checked here as follows:

- each params file goes to rcl through rclpy: a Context initialised with ``--ros-args
  --params-file <snippet>``, which is rcl_parse_arguments, the call every node process makes at
  start (a fragment first goes under ``/**: ros__parameters:``);
- each whole params file (unmarked, or ``no-start``) then goes to a node created in that
  context with the inference node's own declarations (declare_and_read, as the node's
  constructor calls it), so that a value of the wrong type, a bad choice or an unknown name
  (a misspelt parameter) fails here as it would at the node's start; the ones started by
  test_ros_docs_yaml.py are also started there;
- each command line with ``--ros-args`` (and each inline ``-p name:=value``) goes to rcl's
  argument parser the same way; a ``--params-file`` that is a file of this repository is given
  as it is, one that is not (``my_robots.yaml``: the reader's own) is given as an empty params
  file; then the node's declarations check each value given (and each name, but for a
  ``<binding>.<name>`` of a binding that the reader's own params file would list);
- each ``ros2 launch <package> <file> name:=value`` names only arguments that the launch file
  declares (its ``DeclareLaunchArgument`` calls, read from its syntax tree: launch itself is not
  on PyPI).

The first tests check that these checks can fail: rcl refuses the unquoted URL list that PyYAML
accepts, and the declarations refuse a value of the wrong type.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from docs_snippets import ROOT, ParamsSnippet, collect, wrapped

pytestmark = pytest.mark.integration

EXAMPLES = collect()
WHOLE = [s for s in EXAMPLES.params if s.kind in ("params", "no-start")]
TO_RCL = [s for s in EXAMPLES.params if s.kind != "not-params"]
EMPTY_PARAMS = "/**:\n  ros__parameters: {}\n"


class Refused(AssertionError):
    """rcl or the node's declarations refused an example."""


def rcl_context(args: list[str]):
    """An rclpy Context initialised with ``args`` (rcl_parse_arguments); Refused on an error."""
    from rclpy.context import Context

    context = Context()
    try:
        context.init(args=args)
    except Exception as exc:  # rclpy's RCLError: what the node would die of at start
        raise Refused(f"rcl refuses {args}: {exc}") from None
    return context


def rcl_parses(text: str, tmp_path: Path, name: str = "snippet.yaml") -> None:
    path = tmp_path / name
    path.write_text(text)
    rcl_context(["--ros-args", "--params-file", str(path)]).shutdown()


def node_accepts(
    args: list[str], tmp_path: Path, monkeypatch, *, other_bindings: bool = False
) -> None:
    """Create a node with rcl's parse of ``args`` and the inference node's declarations; Refused
    when they refuse a value or a name. Absolute ``*_file`` paths that do not exist here and the
    variables named by ``*_env`` parameters are stood in for (they are the robot's own). With
    ``other_bindings``, a ``<binding>.<name>`` of a binding the example does not list (a -p
    given with the reader's own params file) is not an unknown name."""
    import rclpy
    from rclpy.parameter import Parameter

    from triton_ros.core.errors import TritonRosError
    from triton_ros.ros.parameters import declare_and_read

    context = rcl_context(args)
    try:
        reader = rclpy.create_node("inference_node", context=context)
        given = {name: p.value for name, p in reader._parameter_overrides.items()}
        reader.destroy_node()
        stand_ins = []
        for name, value in given.items():
            if (
                name.endswith("_file")
                and isinstance(value, str)
                and value.startswith("/")
                and not os.path.exists(value)
            ):
                stand_in = tmp_path / f"stand-in-{len(stand_ins)}{Path(value).suffix}"
                stand_in.write_text("stand-in\n")
                stand_ins.append(Parameter(name, value=str(stand_in)))
            if name.endswith("_env") and isinstance(value, str) and value:
                monkeypatch.setenv(value, "stand-in")
        node = rclpy.create_node("inference_node", context=context, parameter_overrides=stand_ins)
        try:
            config = declare_and_read(node, bundled_repository=ROOT / "model_repository")
            groups = {name.split(".")[0] for name in node._parameters}
        except TritonRosError as exc:
            raise Refused(f"the node refuses {args}: {exc.message}") from None
        finally:
            node.destroy_node()
        unknown = [
            name
            for name in config.unknown_parameters
            if not (other_bindings and "." in name and name.split(".")[0] not in groups)
        ]
        if unknown:
            raise Refused(f"not parameters of the node: {', '.join(unknown)}")
    finally:
        context.shutdown()


def params_args(path: Path) -> list[str]:
    return ["--ros-args", "--params-file", str(path)]


# --------------------------------------------------------------------------------------------
# The checks can fail
# --------------------------------------------------------------------------------------------

FLEET_UNQUOTED = """\
/**:
  ros__parameters:
    bindings: [cameras]
    cameras:
      model: detector
      server_urls: [grpcs://edge1.example.com:8001, grpcs://edge2.example.com:8001]
"""


def test_rcl_refuses_what_pyyaml_accepts(tmp_path):
    import yaml

    assert yaml.safe_load(FLEET_UNQUOTED)["/**"]["ros__parameters"]["cameras"]["server_urls"]
    with pytest.raises(Refused, match="Couldn't parse params file"):
        rcl_parses(FLEET_UNQUOTED, tmp_path)
    with pytest.raises(Refused, match="Couldn't parse parameter override"):
        rcl_context(["--ros-args", "-p", "cameras.server_urls:=[grpc://a.example.com:8001]"])
    quoted = FLEET_UNQUOTED.replace(
        "grpcs://edge1.example.com:8001", '"grpcs://edge1.example.com:8001"'
    ).replace("grpcs://edge2.example.com:8001", '"grpcs://edge2.example.com:8001"')
    rcl_parses(quoted, tmp_path)
    rcl_context(
        ["--ros-args", "-p", 'cameras.server_urls:=["grpc://a.example.com:8001"]']
    ).shutdown()


def test_the_declarations_refuse_a_wrong_type_and_an_unknown_name(tmp_path, monkeypatch):
    good = (
        "/**:\n  ros__parameters:\n    bindings: [cams]\n    cams:\n      model: detector\n"
        "      topics: [/cam/image_raw]\n"
    )
    path = tmp_path / "good.yaml"
    path.write_text(good)
    node_accepts(params_args(path), tmp_path, monkeypatch)
    for bad, why in (
        ("      max_in_flight: two\n", "must be an integer"),
        ("      score_treshold: 0.3\n", "cams.score_treshold"),
    ):
        path.write_text(good + bad)
        with pytest.raises(Refused, match=why):
            node_accepts(params_args(path), tmp_path, monkeypatch)
    with pytest.raises(Refused, match="grpc.port"):  # on the command line too
        node_accepts(
            ["--ros-args", "-p", "grpc.port:=eight"], tmp_path, monkeypatch, other_bindings=True
        )


def test_the_collector_finds_params_in_blocks_of_any_language(tmp_path):
    (tmp_path / "docs" / "deep").mkdir(parents=True)
    (tmp_path / "README.md").write_text(
        "# t\n\n```text\n" + FLEET_UNQUOTED + "```\n\nWith `-p use_sim_time:=true`, "
        "or `model_repository:=` alone.\n"
    )
    (tmp_path / "docs" / "deep" / "a.md").write_text(
        "<!-- docs-check: fragment (one binding's keys) -->\n```yaml\ncams:\n  model: x\n```\n\n"
        "```bash\nros2 run triton_ros inference_node --ros-args \\\n    -p a:=1 && echo ok\n"
        "ros2 launch triton_ros inference.launch.py namespace:=n\n```\n\n"
        "```yaml\nkind: Pod\n```\n"
    )
    found = collect(tmp_path)
    assert [(s.where, s.kind) for s in found.params] == [
        ("README.md:3", "params"),
        ("docs/deep/a.md:2", "fragment"),
        ("docs/deep/a.md:13", "params"),
    ]
    assert [e.args for e in found.ros_args] == [
        ("--ros-args", "-p", "use_sim_time:=true"),
        ("--ros-args", "-p", "a:=1"),
    ]
    assert found.ros_args[1].where == "docs/deep/a.md:8"
    assert [(e.launch_file, e.arguments) for e in found.launches] == [
        ("inference.launch.py", (("namespace", "n"),))
    ]
    assert len(found.errors) == 1 and "docs/deep/a.md:13" in found.errors[0]
    assert wrapped(found.params[1]).startswith("/**:\n  ros__parameters:\n    cams:\n")


# --------------------------------------------------------------------------------------------
# The docs
# --------------------------------------------------------------------------------------------


def test_the_docs_have_examples_and_every_yaml_block_is_placed():
    assert any(s.where.startswith("docs/node.md") for s in WHOLE), "docs/node.md has a params file"
    assert EXAMPLES.ros_args and EXAMPLES.launches
    assert not EXAMPLES.errors, "\n".join(EXAMPLES.errors)


@pytest.mark.parametrize("snippet", TO_RCL, ids=[s.where for s in TO_RCL])
def test_rcl_parses_every_params_block(snippet: ParamsSnippet, tmp_path):
    rcl_parses(wrapped(snippet), tmp_path)


@pytest.mark.parametrize("snippet", WHOLE, ids=[s.where for s in WHOLE])
def test_the_node_accepts_every_whole_params_file(snippet: ParamsSnippet, tmp_path, monkeypatch):
    path = tmp_path / "snippet.yaml"
    path.write_text(snippet.text)  # verbatim
    node_accepts(params_args(path), tmp_path, monkeypatch)


def _example_args(example, tmp_path: Path) -> tuple[list[str], bool]:
    """The example's rcl arguments with its params files resolved, and whether all of those are
    this repository's files (else a reader's own file, given as an empty params file; an
    example with no params file is given with the reader's own too)."""
    args = list(example.args)
    own = "--params-file" in args
    for i, word in enumerate(args[:-1]):
        if word == "--params-file":
            path = Path(args[i + 1])
            path = path if path.is_absolute() else ROOT / path
            if not path.is_file():
                own = False
                path = tmp_path / f"placeholder-{i}.yaml"
                path.write_text(EMPTY_PARAMS)
            args[i + 1] = str(path)
    return args, own


ROS_ARGS = EXAMPLES.ros_args


@pytest.mark.parametrize(
    "example", ROS_ARGS, ids=[f"{e.where} {' '.join(e.args[1:])}" for e in ROS_ARGS]
)
def test_rcl_parses_every_command_line(example, tmp_path, monkeypatch):
    args, own = _example_args(example, tmp_path)
    rcl_context(args).shutdown()
    node_accepts(args, tmp_path, monkeypatch, other_bindings=not own)


def declared_launch_arguments(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None))
            == "DeclareLaunchArgument"
        ):
            first = (
                node.args[0]
                if node.args
                else next(k.value for k in node.keywords if k.arg == "name")
            )
            names.add(ast.literal_eval(first))
    return names


LAUNCHES = [e for e in EXAMPLES.launches if e.package == "triton_ros"]


@pytest.mark.parametrize("example", LAUNCHES, ids=[e.where for e in LAUNCHES])
def test_launch_examples_name_declared_arguments(example):
    path = ROOT / "launch" / example.launch_file
    assert path.is_file(), f"{example.where}: no launch file {example.launch_file}"
    declared = declared_launch_arguments(path)
    assert declared, path
    for name, value in example.arguments:
        assert name in declared, (
            f"{example.where}: '{name}' is not an argument of "
            f"{example.launch_file} ({', '.join(sorted(declared))})"
        )
        assert value, f"{example.where}: '{name}:=' has no value"
