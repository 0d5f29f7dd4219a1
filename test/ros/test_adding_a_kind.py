"""Adding an input kind is one module and its line in the registry, nothing else.

On a copy of the package, a new kind (``points``: sensor_msgs/PointCloud2, with a setting of its
own) is written as one module of codec/ and added to the registry's tuple; nothing else is
edited. The node then declares its setting as a binding parameter, with its descriptor, takes
the new name for ``input_kind``, builds its config for every binding and hands it to the kind's
plan, and the parameter reference lists it under the kind.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # a Python process of its own, on the copy

ROOT = Path(__file__).resolve().parents[2]

KIND = '''\
"""The ``points`` input kind: a point cloud -> one model input."""
from __future__ import annotations

from dataclasses import dataclass

from ...settings import setting
from .base import InputKind


@dataclass(frozen=True)
class PointsConfig:
    max_points: int = setting(4096, "Point cloud inputs: points fed to the model at most.",
                              low=1)


class PointsInput(InputKind):
    name = "points"
    ros_type = "sensor_msgs/msg/PointCloud2"
    settings = PointsConfig

    def plan(self, settings, tensor, *, model, image=None):
        return ("planned", settings.max_points, tensor)


POINTS = PointsInput()
'''

PROBE = """
import json
from triton_ros.ros import parameters
from triton_ros.ros.codec.registry import INPUT_KINDS, PARTS
from triton_ros.ros.tools import param_reference

specs = {s.name: s for s in parameters.BINDING_PARAMS}
raw = {s.name: s.default for s in parameters.BINDING_PARAMS}
raw.update(model="m", topics=["/cloud"], input_kind="points", max_points=100)
config = parameters.binding_config("lidar", raw)
kind = INPUT_KINDS["points"]
try:
    parameters.binding_config("bad", {**raw, "max_points": 0})
    refused = ""
except Exception as exc:
    refused = str(exc)
print(json.dumps({
    "declared": [specs["max_points"].kind, specs["max_points"].default, specs["max_points"].help],
    "choices": list(specs["input_kind"].choices),
    "planned": list(kind.plan(config.settings_for(kind), "T", model="m")[:2]),
    "refused": refused,
    "documented": "Input kind `points`" in param_reference.render()
                  and "`<binding>.max_points`" in param_reference.render(),
}))
"""


def test_a_new_kind_is_its_module_and_its_registry_line(tmp_path):
    house = tmp_path / "house"
    shutil.copytree(
        ROOT / "triton_ros",
        house / "triton_ros",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    codec = house / "triton_ros" / "ros" / "codec"
    (codec / "points.py").write_text(KIND)
    registry = codec / "registry.py"
    text = registry.read_text()
    line = "for kind in (IMAGE, COMPRESSED, DEPTH, COMPRESSED_DEPTH, CAMERA_INFO, POINTCLOUD)\n"
    assert line in text
    text = text.replace(line, line.replace("POINTCLOUD)", "POINTCLOUD, POINTS)"))
    registry.write_text(
        text.replace(
            "from .image import IMAGE\n", "from .image import IMAGE\nfrom .points import POINTS\n"
        )
    )

    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(house), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["declared"] == [
        "int",
        4096,
        "Point cloud inputs: points fed to the model at most.",
    ]
    assert "points" in found["choices"]
    assert found["planned"] == ["planned", 100]
    assert "parameter 'bad.max_points' must be a positive integer" in found["refused"]
    assert found["documented"]
