"""``triton-ros-analyzer``'s command line as a user types it (the console script as a process):
every bad value is a usage error (exit 2) whose message names the option and the value, never a
traceback; a missing repository is named missing; the documented ``--output-dir
profile_results`` leaves a checkout clean (git's own answer)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ANALYZER = Path(sys.executable).parent / "triton-ros-analyzer"
REPO = str(ROOT / "model_repository")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ANALYZER), *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


@pytest.mark.parametrize(
    "args, words",
    [
        (
            [
                "profile",
                "-m",
                REPO,
                "--profile-models",
                "detector",
                "--max-queue-delay-microseconds",
                "abc",
            ],
            "--max-queue-delay-microseconds",
        ),
        (
            [
                "profile",
                "-m",
                REPO,
                "--profile-models",
                "detector",
                "--max-queue-delay-microseconds",
                "0,-5",
            ],
            "-5 is out of range",
        ),
        (
            ["profile", "-m", REPO, "--profile-models", "detector", "--latency-budget-ms", "-5"],
            "must be a finite number > 0",
        ),
        (
            ["profile", "-m", REPO, "--profile-models", "detector", "--latency-budget-ms", "nan"],
            "must be a finite number > 0",
        ),
        (
            [
                "profile",
                "-m",
                REPO,
                "--profile-models",
                "detector",
                "--run-config-search-min-concurrency",
                "8",
                "--run-config-search-max-concurrency",
                "4",
            ],
            "is above",
        ),
        (["ros", "-m", REPO, "--model", "color_detector", "--rates", "abc"], "--rates"),
        (["ros", "-m", REPO, "--model", "color_detector", "--rates", "0"], "0 is out of range"),
        (["ros", "-m", REPO, "--model", "color_detector", "--rates", "15,,30"], "empty item"),
        (
            ["ros", "-m", REPO, "--model", "color_detector", "--latency-budget-ms", "-1"],
            "must be a finite number > 0",
        ),
        (
            ["ros", "-m", REPO, "--model", "color_detector", "--camera-size", "640by480"],
            "--camera-size",
        ),
        (
            ["ros", "-m", REPO, "--model", "color_detector", "--binding-param", "max_in_flight"],
            "is not NAME:=VALUE",
        ),
        (
            ["ros", "-m", REPO, "--model", "color_detector", "--max-drop-fraction", "1.5"],
            "--max-drop-fraction",
        ),
        (["ros", "-m", REPO, "--model", "color_detector", "--windows", "0"], "--windows"),
        (
            [
                "ros",
                "-m",
                REPO,
                "--model",
                "color_detector",
                "--min-cameras",
                "9",
                "--max-cameras",
                "4",
            ],
            "is above",
        ),
        (
            [
                "ros",
                "-m",
                REPO,
                "--model",
                "color_detector",
                "--config",
                "/nonexistent/config.pbtxt",
            ],
            "does not exist",
        ),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_it(args, words):
    proc = run(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and words in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    "command", [["profile", "--profile-models", "detector"], ["ros", "--model", "color_detector"]]
)
def test_a_missing_repository_is_named_missing(tmp_path, command):
    missing = tmp_path / "no_such_repository"
    proc = run(command[0], "-m", str(missing), *command[1:], "-e", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"model repository '{missing}' does not exist" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_documented_output_dir_leaves_the_checkout_clean():
    """docs/analyzer.md runs ``--output-dir profile_results`` from the checkout (and it is the
    default): git ignores everything written there."""
    for path in (
        "profile_results/results/metrics-summary.csv",
        "profile_results/recommended/detector/config.pbtxt",
    ):
        proc = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", path])
        assert proc.returncode == 0, f"{path} would show in git status"
