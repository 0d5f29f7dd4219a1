"""The GPU checks: tests that need an NVIDIA GPU, skipped cleanly on a machine without one.

On a machine with a GPU, from the project's root: ``python3 -m pytest test/gpu -v -s`` (the
checks print what they measured; each module alone works too). ``bench/device_checks.sh`` runs
them, one module a check, with the GPU batching benchmark, and sets ``TRITON_ROS_REQUIRE_GPU=1``:
then a missing GPU fails the checks instead of skipping them, so a device run cannot pass
without one. On a machine with a GPU, whatever a check needs beyond it (a CUDA binding, NVML,
PyTorch) must be installed: its absence fails that check with its reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def no_gpu_reason() -> str:
    """Why this machine has no usable NVIDIA GPU, or "" when ``nvidia-smi -L`` lists one (the
    driver's own tool: a ground truth independent of the code under test)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no NVIDIA GPU here (nvidia-smi is not installed)"
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no NVIDIA GPU here (nvidia-smi -L: {exc})"
    if listed.returncode != 0 or "GPU " not in listed.stdout:
        return f"no NVIDIA GPU here (nvidia-smi -L exited {listed.returncode} listing none)"
    return ""


@pytest.fixture(scope="session")
def gpu() -> None:
    """Skips the test without a GPU, or fails it where ``TRITON_ROS_REQUIRE_GPU=1``."""
    reason = no_gpu_reason()
    if reason:
        if os.environ.get("TRITON_ROS_REQUIRE_GPU") == "1":
            pytest.fail(f"TRITON_ROS_REQUIRE_GPU=1 but {reason}")
        pytest.skip(reason)
