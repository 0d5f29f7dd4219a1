"""docs/parameters.md is the node's parameter declarations, rendered: regenerated here and compared,
so that a parameter added, removed, renamed, retyped, given another default or described anew
without regenerating the reference fails the suite (with the command that regenerates it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from triton_ros.ros.parameters import BINDING_PARAMS, NODE_PARAMS
from triton_ros.settings import INT, STR_LIST, Setting
from triton_ros.ros.tools import param_reference

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "parameters.md"


def test_docs_parameters_md_is_generated_from_the_declarations():
    assert REFERENCE.read_text() == param_reference.render(), (
        f"docs/parameters.md differs from the node's parameter declarations; regenerate it:\n"
        f"  {param_reference.COMMAND}"
    )


def test_every_declared_parameter_has_a_row_with_its_default_and_description():
    text = REFERENCE.read_text()
    for prefix, specs in (("", NODE_PARAMS), ("<binding>.", BINDING_PARAMS)):
        for spec in specs:
            assert spec.help.strip(), f"{spec.name} has no description"
            row = (
                f"| `{prefix}{spec.name}` | {param_reference.type_text(spec)} | "
                f"{param_reference.default_text(spec)} | "
            )
            assert row in text, row


def test_the_check_fails_on_a_difference_and_passes_on_the_file(tmp_path, monkeypatch):
    stale = tmp_path / "parameters.md"
    stale.write_text(param_reference.render())
    assert param_reference.main(["--check", str(stale)]) == 0
    # a parameter added to the declarations without regenerating
    extra = Setting(
        field="new_knob",
        name="new_knob",
        kind=INT,
        default=3,
        help="A knob added without regenerating the reference.",
    )
    monkeypatch.setattr(param_reference, "NODE_PARAMS", (*NODE_PARAMS, extra))
    assert param_reference.main(["--check", str(stale)]) == 1
    assert "new_knob" in param_reference.render()


def test_descriptions_are_escaped_for_a_markdown_table():
    text = param_reference.markdown_text("'**' spans | ~/status '<key>' _<node>_control a_b")
    assert text == "'\\*\\*' spans \\| \\~/status '&lt;key>' \\_&lt;node>\\_control a_b"
    assert (
        param_reference.default_text(
            Setting(field="x", name="x", kind=STR_LIST, default="", help="d")
        )
        == "`[]`"
    )


def test_the_command_prints_the_reference(capsys):
    assert param_reference.main([]) == 0
    assert capsys.readouterr().out == param_reference.render()
