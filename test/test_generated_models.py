"""The bundled ONNX models are exactly what scripts/generate_models.py builds with its fixed
seeds."""

import subprocess
import sys

import pytest

from server_process import ROOT


pytestmark = pytest.mark.integration


def test_committed_models_match_the_generator():
    result = subprocess.run(
        [sys.executable, "scripts/generate_models.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
