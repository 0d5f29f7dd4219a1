"""The house drawn from its imports: no import cycle anywhere in triton_ros, the core below the
settings below the frontends below the ROS node, and inside triton_ros.frontend and
triton_ros.ros only imports that run down, as the
contracts in .importlinter declare them (checked by import-linter over grimp's import graph:
every import counts, those inside functions and behind TYPE_CHECKING too).

The second test shows that the check can fail: on a copy of the package with one import added
that closes a cycle and runs up the layers, the same contracts break and name it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from importlinter import configuration
from importlinter.application import output, use_cases

pytestmark = pytest.mark.unit

configuration.configure()  # what lint-imports does first: the built-in adapters

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"


def lint(config: Path) -> tuple[bool, str]:
    """``lint-imports`` in this process: (whether every contract is kept, its report)."""
    with output.console.capture() as captured:
        passed = use_cases.lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)
    return passed == use_cases.SUCCESS, captured.get()


def test_no_cycle_and_imports_run_down():
    kept, text = lint(CONFIG)
    assert kept, text
    assert "Contracts: 11 kept, 0 broken." in " ".join(text.split()), text


def test_a_cycle_and_an_upward_import_are_caught(tmp_path, monkeypatch):
    # The copy gets a name of its own: the real triton_ros is already imported in this process.
    house = tmp_path / "house"
    shutil.copytree(
        ROOT / "triton_ros", house, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    latency = house / "ros" / "monitoring" / "latency.py"
    # monitoring (low) -> binding (high), and binding already imports monitoring: a circle
    latency.write_text(latency.read_text() + "\nfrom ..binding import source  # noqa\n")
    core = house / "core" / "errors.py"
    core.write_text(core.read_text() + "\nfrom ..frontend import options  # noqa\n")
    config = tmp_path / ".importlinter"
    config.write_text(CONFIG.read_text().replace("triton_ros", "house"))
    monkeypatch.syspath_prepend(str(tmp_path))

    kept, text = lint(config)
    assert not kept, text
    flat = " ".join(text.split())
    # the circle, between the children of house.ros ...
    assert "No cycles are allowed in house.ros." in flat, text
    assert ".monitoring -> .binding" in flat or ".binding -> .monitoring" in flat, text
    # ... the core importing a frontend, and monitoring importing up within house.ros
    assert "house.core is not allowed to import house.frontend" in flat, text
    assert "house.ros.monitoring is not allowed to import house.ros.binding" in flat, text
    assert "0 broken" not in flat, text
