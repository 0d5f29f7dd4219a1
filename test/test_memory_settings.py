"""The serving process limits glibc's malloc arenas, unless its environment chose a limit."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

CODE = ("from triton_ros.core.memory import limit_malloc_arenas as f; "
        "print(f(), f())")


def run(env_extra: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_arenas_are_limited_once():
    assert run({}) == "True False"


def test_an_environment_setting_wins():
    assert run({"MALLOC_ARENA_MAX": "4"}) == "False False"
