"""The code passes the linter and is formatted with the project's rules (ruff.toml): ``ruff check``
and ``ruff format --check`` over the whole checkout, as a developer runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs ruff, a process of its own

ROOT = Path(__file__).resolve().parents[1]
RUFF = [sys.executable, "-m", "ruff"]  # requirements.txt installs it


def test_ruff_check_finds_nothing():
    done = subprocess.run(
        [*RUFF, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_check_finds_a_defect(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    done = subprocess.run(
        [*RUFF, "check", "--no-cache", "--config", str(ROOT / "ruff.toml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "F401" in done.stdout, done.stdout + done.stderr


def test_ruff_format_changes_nothing():
    done = subprocess.run(
        [*RUFF, "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, "run `.venv/bin/ruff format .`:\n" + done.stdout + done.stderr


def test_the_format_check_finds_a_defect(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = {  'a':1 }\n")
    done = subprocess.run(
        [*RUFF, "format", "--check", "--no-cache", "--config", str(ROOT / "ruff.toml"), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "bad.py" in done.stdout, done.stdout + done.stderr
