"""What a ROS user or CI job runs, in a colcon workspace: ``colcon build --symlink-install``,
``colcon test`` and ``colcon test-result --verbose`` of this package, with colcon from
requirements-colcon.txt (scripts/setup.d/40-colcon.sh) and the environment's ROS 2 wheels
standing in for an apt-installed ROS 2 (its prefix, after the test's own ``AMENT_PREFIX_PATH``,
is the workspace's underlay).

- The workspace's ``src/triton_ros`` is a link to this checkout. triton_ros_interfaces is not
  built again here: scripts/setup.sh built it into the environment (the underlay), and a colcon
  build of it takes minutes; docs/development.md has the by-hand run that builds both.
- build: a symlink install (what setuptools 80 broke: colcon runs ``setup.py develop
  --editable``): the package imports from the build space, which links to the checkout; the
  launch file is a file link in a real directory of the install space, where ros2launch's walk
  (ament_lookup) finds it.
- test: colcon runs pytest (setup.py's "test" extra; without it colcon ran unittest, "Ran 0
  tests", and reported success) on the selection docs/development.md gives, the unit suite
  (``--pytest-args " -m" "unit"``), and ``colcon test-result`` counts as many tests as pytest
  collects for that selection, with no failure; a test made to fail makes ``colcon test-result``
  exit non-zero.
- the dependencies: the documented workspace holds what requirements.txt and package.xml
  declare, nothing more, while this environment also holds what optional steps installed (torch
  pulled sympy in, which a test needed undeclared: it failed there and passed here). The
  colcon run hides every undeclared distribution (test/declared_only.py, a pytest plugin), so a
  test that needs one fails here too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ament_lookup import share_file_path
from server_process import ROOT

pytestmark = pytest.mark.system

PREFIX = Path(sys.prefix)
COLCON = PREFIX / "bin" / "colcon"
# docs/development.md's selection (about 540 tests), with only the declared dependencies
SELECTION = ("-p", "declared_only", "-m", "unit")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    if not COLCON.exists():
        assert not (PREFIX / ".stamps").is_dir(), "scripts/setup.d/40-colcon.sh installs colcon"
        pytest.skip("no colcon in this environment's bin/ (scripts/setup.sh installs it)")
    ws = tmp_path_factory.mktemp("ws")
    (ws / "src").mkdir()
    (ws / "src" / "triton_ros").symlink_to(ROOT, target_is_directory=True)
    return ws


def underlay() -> str:
    """AMENT_PREFIX_PATH for the workspace: the test's own (under colcon test, the outer
    workspace's install space holds the interfaces), then the environment's prefix."""
    paths = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(paths + [str(PREFIX)] if str(PREFIX) not in paths else paths)


def with_test_helpers(pythonpath: str = "") -> str:
    """PYTHONPATH with test/ first, where pytest finds the declared_only plugin."""
    return os.pathsep.join([str(ROOT / "test")] + [p for p in pythonpath.split(os.pathsep) if p])


def colcon(ws: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "AMENT_PREFIX_PATH": underlay(),
        "PATH": f"{PREFIX / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    if args[0] == "test":
        env["PYTHONPATH"] = with_test_helpers(os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [str(COLCON), *args], cwd=ws, env=env, capture_output=True, text=True, timeout=timeout
    )


def summary(test_result_output: str) -> tuple[int, int, int, int]:
    """(tests, errors, failures, skipped) of ``colcon test-result``'s summary line."""
    match = re.search(
        r"^Summary: (\d+) tests?, (\d+) errors?, (\d+) failures?, (\d+) skipped",
        test_result_output,
        re.M,
    )
    assert match, test_result_output
    return tuple(int(g) for g in match.groups())


def test_build_test_and_test_result(workspace, monkeypatch):
    ws = workspace
    paths = ["--base-paths", str(ws / "src" / "triton_ros"), "--packages-select", "triton_ros"]
    build = colcon(ws, "build", "--symlink-install", *paths)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "Finished <<< triton_ros" in build.stdout, build.stdout

    install = ws / "install" / "triton_ros"
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"{install}{os.pathsep}{underlay()}")
    launch = Path(share_file_path("triton_ros", "inference.launch.py"))
    assert launch.parent == install / "share" / "triton_ros" / "launch"
    assert launch.is_symlink() and launch.resolve() == (ROOT / "launch" / "inference.launch.py")
    assert (install / "lib" / "triton_ros" / "inference_node").is_file()
    (egg_link,) = install.glob("lib/python*/site-packages/triton-ros.egg-link")
    assert egg_link.read_text().splitlines()[0] == str(ws / "build" / "triton_ros")  # develop

    collected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            *SELECTION,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": with_test_helpers(os.environ.get("PYTHONPATH", ""))},
    )
    match = re.search(r"^(\d+)(?:/\d+)? tests? (?:collected|selected)", collected.stdout, re.M)
    assert match, collected.stdout + collected.stderr
    expected = int(match.group(1))
    assert expected >= 400
    # A module skipped as a whole when collected (test_pytorch_backend.py without torch) is one
    # skipped test to colcon test-result (pytest's JUnit XML), whatever the selection.
    skipped = sum(int(n) for n in re.findall(r"^SKIPPED \[(\d+)\]", collected.stdout, re.M))

    test = colcon(
        ws,
        "test",
        *paths,
        "--pytest-args",
        *(" " + a if a.startswith("-") else a for a in SELECTION),
    )
    assert test.returncode == 0, test.stdout + test.stderr
    assert "Ran 0 tests" not in test.stdout + test.stderr
    result = colcon(ws, "test-result", "--verbose")
    assert result.returncode == 0, result.stdout + result.stderr
    tests, errors, failures, skips = summary(result.stdout)
    assert (tests, errors, failures) == (expected + skipped, 0, 0), result.stdout
    assert skips >= skipped, result.stdout  # and those a skipif marker skips

    # A failing test reaches test-result's exit status (what CI jobs check): a plugin given
    # with --pytest-args fails the setup of the one test selected.
    plugins = ws / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "fail_every_test.py").write_text(
        "import pytest\n\n\ndef pytest_runtest_setup(item):\n"
        "    pytest.fail('made to fail by test_colcon_workflow')\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(
            [str(plugins)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    )
    failing = colcon(
        ws,
        "test",
        *paths,
        "--pytest-args",
        " -p",
        "declared_only",
        " -p",
        "fail_every_test",
        " -k",
        "test_rcl_refuses_what_pyyaml_accepts",
    )
    assert failing.returncode == 0, failing.stdout + failing.stderr  # colcon test's own status
    result = colcon(ws, "test-result")
    assert result.returncode != 0, result.stdout + result.stderr
    assert summary(result.stdout) == (1 + skipped, 1, 0, skipped), result.stdout
