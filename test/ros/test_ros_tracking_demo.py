"""The tracking demo (``python -m triton_ros.ros.tools.tracking_demo``) reports, for each camera,
MOTA and ID switches against the ground-truth identities, and passes the targets (MOTA >= 0.9,
at most 1 ID switch per 100 object-frames); with an impossible target it fails and says which
camera."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest

from ros_probe import ROOT

pytestmark = pytest.mark.system

CAMERAS = 4


def run_demo(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.SystemRandom().randint(150, 230))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_ros.ros.tools.tracking_demo",
            "--seconds",
            "12",
            "--rate",
            "10",
            "--cameras",
            str(CAMERAS),
            "--interval",
            "6",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tracking_demo_reports_mota_and_id_switches_per_camera_and_passes():
    result = run_demo()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    final = out.split("final:", 1)[1]
    lines = re.findall(
        r"^\[.*\] (/track\d/camera\d/image_raw): MOTA ([\d.-]+), ID switches "
        r"(\d+) \(([\d.]+) per 100 object-frames\).* over (\d+) frames",
        final,
        re.M,
    )
    assert len({topic for topic, *_ in lines}) == CAMERAS, out
    for topic, mota, _switches, per_100, frames in lines:
        assert float(mota) >= 0.9 and float(per_100) <= 1.0 and int(frames) >= 30, topic
    assert "tracking demo passed" in out


def test_the_tracking_demo_fails_and_says_which_camera_missed_a_target():
    result = run_demo("--min-mota", "1.01")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert re.search(r"FAILED: /track\d/camera\d/image_raw: MOTA", out), out
    assert "tracking demo failed" in out
