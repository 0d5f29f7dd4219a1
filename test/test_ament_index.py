"""scripts/setup.sh installs triton_ros into the virtual environment as colcon installs an
ament_python package, so that ``ros2 run triton_ros ...`` and ``ros2 launch triton_ros ...`` find
it with ``AMENT_PREFIX_PATH`` holding the environment: the index marker, ``share/triton_ros``
(package.xml, launch/, config/, model_repository/) and ``lib/triton_ros/<executables>``, resolved
here through ament_index_python as the ros2 CLI resolves them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ament_index_python.packages import (get_package_prefix, get_package_share_directory,
                                         get_packages_with_prefixes)

from server_process import ROOT

PREFIX = Path(sys.prefix)                      # the virtual environment running the tests
EXECUTABLES = ("inference_node", "synthetic_cameras", "triton-ros-server")


@pytest.fixture(autouse=True)
def ament_prefix_path(monkeypatch):
    """What a user exports (or `source install/setup.bash` would): the venv as an ament prefix."""
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(PREFIX))


def test_the_package_is_in_the_ament_index_of_the_environment():
    assert get_packages_with_prefixes()["triton_ros"] == str(PREFIX)
    assert get_package_prefix("triton_ros") == str(PREFIX)
    marker = PREFIX / "share" / "ament_index" / "resource_index" / "packages" / "triton_ros"
    assert marker.is_file()


def test_share_holds_what_the_launch_file_reads():
    share = Path(get_package_share_directory("triton_ros"))
    assert share == PREFIX / "share" / "triton_ros"
    assert "<name>triton_ros</name>" in (share / "package.xml").read_text()
    launch = (share / "launch" / "inference.launch.py").read_text()
    compile(launch, "inference.launch.py", "exec")
    # The launch file's defaults: the params file and the Fast DDS profile of the package's share.
    for rel in ("config/inference.yaml", "config/fastdds.xml"):
        assert (share / rel).is_file(), rel
        assert (share / rel).read_bytes() == (ROOT / rel).read_bytes()
    assert (share / "model_repository" / "color_detector" / "config.pbtxt").is_file()


@pytest.mark.parametrize("executable", EXECUTABLES)
def test_lib_holds_the_executables_ros2_run_starts(executable):
    # ros2 run looks for an executable file named so under <prefix>/lib/<package>.
    path = Path(get_package_prefix("triton_ros")) / "lib" / "triton_ros" / executable
    assert path.is_file() and os.access(path, os.X_OK), path
    if executable == "inference_node":
        # A ROS node (it has no --help and would start serving): its interpreter is this
        # environment's and its module imports. The cross-process tests run the node itself.
        assert path.resolve() == (PREFIX / "bin" / executable).resolve()
        cmd = [str(PREFIX / "bin" / "python"), "-c", "import triton_ros.ros.inference_node"]
    else:
        cmd = [str(path), "--help"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "AMENT_PREFIX_PATH": str(PREFIX)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert executable in result.stdout or executable == "inference_node", result.stdout


def test_the_packages_files_resolve_through_the_index_outside_the_checkout(tmp_path):
    """Run from elsewhere, package_file finds config through share/triton_ros as installed."""
    code = ("from ament_index_python.packages import get_package_share_directory as s; "
            "import pathlib; print(pathlib.Path(s('triton_ros'), 'config', 'inference.yaml')"
            ".resolve())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "AMENT_PREFIX_PATH": str(PREFIX)})
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == (ROOT / "config" / "inference.yaml").resolve()
