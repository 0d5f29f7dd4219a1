"""scripts/setup.sh installs triton_ros into the virtual environment as colcon installs an
ament_python package, so that ``ros2 run triton_ros ...`` and ``ros2 launch triton_ros ...`` find
it with ``AMENT_PREFIX_PATH`` holding the environment: the index marker, ``share/triton_ros``
(package.xml, launch/, config/, model_repository/: setup.py's data_files, each a link to its file
in real directories, as ``colcon build --symlink-install`` makes them) and
``lib/triton_ros/<executables>``, resolved here through ament_index_python as the ros2 CLI
resolves them.

``ros2 launch <package> <file>`` finds the launch file by walking the share directory with
``os.walk``, which does not enter linked directories: ament_lookup.share_file_path reproduces
ros2launch's lookup exactly (its docstring cites the source), and it must find every launch file
here; a share directory whose launch/ is a link to a directory fails it, as it failed the real
command.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ament_index_python.packages import (
    get_package_prefix,
    get_package_share_directory,
    get_packages_with_prefixes,
)

from ament_lookup import share_file_path
from server_process import ROOT

PREFIX = Path(sys.prefix)  # the virtual environment running the tests

# What these tests check is scripts/setup.sh's registration of its environment; under `colcon
# test` the package is in the workspace's install space instead (test_colcon_workflow.py checks
# that one, and the lookup of ros2launch below applies to it as well).
pytestmark = pytest.mark.integration
in_setup_env = pytest.mark.skipif(
    not (PREFIX / ".stamps" / "ament_index").is_file(),
    reason="not an environment made by scripts/setup.sh (e.g. run by colcon test)",
)
EXECUTABLES = ("inference_node", "synthetic_cameras", "triton-ros-server", "triton-ros-analyzer")


def setup_py_data_files(root: Path = ROOT) -> dict[str, str]:
    """{installed path relative to the prefix: source path relative to root} of setup.py's
    data_files, read as colcon reads them (setup() called with its arguments captured)."""
    code = (
        "import runpy, setuptools; captured = {}; "
        "setuptools.setup = lambda **kw: captured.update(kw); "
        "runpy.run_path('setup.py', run_name='__main__'); "
        "print(repr(captured['data_files']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return {
        os.path.join(dest, os.path.basename(src)): src
        for dest, sources in ast.literal_eval(out.strip().splitlines()[-1])
        for src in sources
    }


@pytest.fixture(autouse=True)
def ament_prefix_path(monkeypatch):
    """What a user exports (or `source install/setup.bash` would): the venv as an ament prefix."""
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(PREFIX))


@in_setup_env
def test_the_package_is_in_the_ament_index_of_the_environment():
    assert get_packages_with_prefixes()["triton_ros"] == str(PREFIX)
    assert get_package_prefix("triton_ros") == str(PREFIX)
    marker = PREFIX / "share" / "ament_index" / "resource_index" / "packages" / "triton_ros"
    assert marker.is_file()


@in_setup_env
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


@in_setup_env
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
    result = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AMENT_PREFIX_PATH": str(PREFIX)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert executable in result.stdout or executable == "inference_node", result.stdout


@in_setup_env
def test_the_packages_files_resolve_through_the_index_outside_the_checkout(tmp_path):
    """Run from elsewhere, package_file finds config through share/triton_ros as installed."""
    code = (
        "from ament_index_python.packages import get_package_share_directory as s; "
        "import pathlib; print(pathlib.Path(s('triton_ros'), 'config', 'inference.yaml')"
        ".resolve())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AMENT_PREFIX_PATH": str(PREFIX)},
    )
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == (ROOT / "config" / "inference.yaml").resolve()


LAUNCH_FILES = sorted(p.name for p in (ROOT / "launch").glob("*.launch.py"))


@in_setup_env
@pytest.mark.parametrize("launch_file", LAUNCH_FILES)
def test_ros2_launch_finds_every_launch_file_as_ros2launch_walks_share(launch_file):
    path = Path(share_file_path("triton_ros", launch_file))
    assert path.parent == PREFIX / "share" / "triton_ros" / "launch"
    assert path.resolve() == (ROOT / "launch" / launch_file).resolve()  # the checkout's file


@in_setup_env
def test_share_holds_setup_pys_data_files_as_file_links_in_real_directories():
    """What os.walk (no followlinks) sees under the prefix is exactly setup.py's data_files, each
    a link to the checkout's file: an edit shows at once, as with colcon --symlink-install."""
    expected = setup_py_data_files()
    share = PREFIX / "share" / "triton_ros"
    walked = set()
    for root, dirs, files in os.walk(share):
        for d in dirs:
            assert not os.path.islink(os.path.join(root, d)), f"{root}/{d} is a directory link"
        walked |= {os.path.relpath(os.path.join(root, f), PREFIX) for f in files}
    assert walked == {k for k in expected if k.startswith("share/triton_ros/")}
    for installed, source in expected.items():
        path = PREFIX / installed
        assert path.is_symlink() and path.resolve() == (ROOT / source).resolve(), installed


def test_the_lookup_fails_on_a_linked_directory_as_the_real_command_did(tmp_path, monkeypatch):
    """The layout scripts/setup.sh made before (share/triton_ros/launch -> <checkout>/launch):
    paths resolve through it, but ros2launch's walk does not enter it."""
    share = tmp_path / "share" / "triton_ros"
    share.mkdir(parents=True)
    (tmp_path / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (tmp_path / "share" / "ament_index" / "resource_index" / "packages" / "triton_ros").touch()
    (share / "launch").symlink_to(ROOT / "launch", target_is_directory=True)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path))
    assert (
        Path(get_package_share_directory("triton_ros")) / "launch" / "inference.launch.py"
    ).is_file()
    with pytest.raises(FileNotFoundError, match="was not found in the share directory"):
        share_file_path("triton_ros", "inference.launch.py")


SETUP_FUNCTIONS = "sed -n '/^stamp_of()/,/^step_done()/p' \"$REPO/scripts/setup.sh\""


def run_ament_step(root: Path, venv: Path) -> str:
    """scripts/setup.d/30-ament-index.sh as scripts/setup.sh sources it, on a copy."""
    script = (
        f'set -euo pipefail; ROOT="$1"; VENV="$2"; STAMPS="$VENV/.stamps"; REPO="$3"; '
        f'eval "$({SETUP_FUNCTIONS})"; source "$ROOT/scripts/setup.d/30-ament-index.sh"'
    )
    result = subprocess.run(
        ["bash", "-c", script, "step", str(root), str(venv), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_files_added_to_or_removed_from_the_checkout_follow_at_the_next_setup(
    tmp_path, monkeypatch
):
    root, venv = tmp_path / "repo", tmp_path / "venv"
    for entry in ("setup.py", "setup.cfg", "package.xml", "scripts/setup.d/30-ament-index.sh"):
        (root / entry).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / entry, root / entry)
    for entry in ("resource", "launch", "config", "model_repository"):
        shutil.copytree(
            ROOT / entry, root / entry, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for exe in ("python",) + EXECUTABLES:
        path = venv / "bin" / exe
        if not path.exists():
            path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(venv))

    assert "registering" in run_ament_step(root, venv)
    assert (
        Path(share_file_path("triton_ros", "inference.launch.py")).resolve()
        == (root / "launch" / "inference.launch.py").resolve()
    )
    assert run_ament_step(root, venv) == ""  # nothing changed: skipped

    (root / "launch" / "second.launch.py").write_text("# new\n")
    (root / "model_repository" / "new_model" / "1").mkdir(parents=True)
    (root / "model_repository" / "new_model" / "config.pbtxt").write_text('name: "new_model"\n')
    assert "registering" in run_ament_step(root, venv)
    assert Path(share_file_path("triton_ros", "second.launch.py")).read_text() == "# new\n"
    new_config = venv / "share" / "triton_ros" / "model_repository" / "new_model" / "config.pbtxt"
    assert new_config.is_symlink() and new_config.read_text() == 'name: "new_model"\n'

    (root / "launch" / "second.launch.py").unlink()
    assert "registering" in run_ament_step(root, venv)
    with pytest.raises(FileNotFoundError):
        share_file_path("triton_ros", "second.launch.py")
