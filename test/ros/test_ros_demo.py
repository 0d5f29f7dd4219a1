"""The main job (``python -m triton_ros.ros.tools.demo``, what ``./scripts/run.sh`` runs) scores
every camera against the ground truth (and every RGB-D camera's 3D positions against the 3D
ground truth) and passes, running past ``--seconds`` until every camera has
``--min-frames`` scored; bound to a detector that does not see (the random ``detector``), it fails
and says why."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys

import pytest
import yaml

from ros_probe import ROOT


pytestmark = pytest.mark.system

SECONDS = 5  # robot2 joins at 1.7 s: the demo may run on for it
MIN_FRAMES = 30  # the demo's default --min-frames


def run_demo(*args: str) -> subprocess.CompletedProcess:
    # A domain of its own: the demo's topics (/robot1/...) must meet no other test's.
    env = {**os.environ, "ROS_DOMAIN_ID": str(random.SystemRandom().randint(150, 230))}
    return subprocess.run(
        [sys.executable, "-m", "triton_ros.ros.tools.demo", "--seconds", str(SECONDS), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def camera_lines(out: str) -> dict[str, str]:
    return {
        m.group(1): m.group(0)
        for m in re.finditer(
            r"^  (/robot\d/camera_\w+/detections) .*"
            r"frames scored.*$",
            out,
            re.M,
        )
    }


def test_the_demo_scores_every_camera_and_passes():
    result = run_demo()
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    lines = camera_lines(out)
    assert set(lines) == {
        "/robot1/camera_front/detections",
        "/robot1/camera_rear/detections",
        "/robot2/camera_front/detections",
        "/robot2/camera_rear/detections",
        # CompressedImage cameras (JPEG, PNG), batched with the raw ones
        "/robot4/camera_front/detections",
        "/robot4/camera_rear/detections",
    }, out
    for _topic, line in lines.items():
        recall = float(re.search(r"recall ([\d.]+)", line).group(1))
        iou = float(re.search(r"mean IoU ([\d.]+)", line).group(1))
        frames = int(re.search(r"(\d+) frames scored", line).group(1))
        assert recall >= 0.95 and iou >= 0.8 and frames >= MIN_FRAMES, line
    rgbd = {
        m.group(1): m.group(0)
        for m in re.finditer(r"^  (/robot\d/rgbd_\w+/detections3d) .*frames scored.*$", out, re.M)
    }
    assert set(rgbd) == {"/robot3/rgbd_front/detections3d", "/robot3/rgbd_rear/detections3d"}, out
    for _topic, line in rgbd.items():
        recall = float(re.search(r"recall ([\d.]+)", line).group(1))
        worst = float(re.search(r"max ([\d.]+) % of the distance", line).group(1))
        frames = int(re.search(r"(\d+) frames scored", line).group(1))
        assert recall >= 0.95 and worst <= 2.0 and frames >= MIN_FRAMES, line
    lidar = {
        m.group(1): m.group(0)
        for m in re.finditer(r"^  (/robot\d/lidar/detections3d) .*clouds scored.*$", out, re.M)
    }
    assert set(lidar) == {"/robot5/lidar/detections3d", "/robot6/lidar/detections3d"}, out
    for _topic, line in lidar.items():
        recall = float(re.search(r"recall ([\d.]+)", line).group(1))
        centre = float(re.search(r"centre error mean ([\d.]+) m", line).group(1))
        frames = int(re.search(r"(\d+) clouds scored", line).group(1))
        assert recall >= 0.95 and centre <= 0.2 and frames >= MIN_FRAMES, line
    assert "demo OK" in out


class RclSafeDumper(yaml.SafeDumper):
    """PyYAML's safe dumper, quoting the strings rcl's YAML reads as booleans (y, n, ...: the
    field names ["x", "y", "z"] of config/inference.yaml's cloud_point_fields), which PyYAML
    itself reads as strings and so writes plain."""


def _represent_str(dumper, value: str):
    style = "'" if value.lower() in ("y", "n", "yes", "no", "on", "off") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


RclSafeDumper.add_representer(str, _represent_str)


def test_the_demo_fails_when_the_detector_does_not_see(tmp_path):
    params = yaml.safe_load((ROOT / "config" / "inference.yaml").read_text())
    binding = params["/**"]["ros__parameters"]["cameras"]
    binding.update(model="detector", score_threshold=0.015)  # random weights
    path = tmp_path / "blind.yaml"
    path.write_text(yaml.dump(params, Dumper=RclSafeDumper))
    result = run_demo("--params-file", str(path))
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "RECALL BELOW 0.95" in out and "demo FAILED" in out, out
