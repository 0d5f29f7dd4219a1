"""The serving process limits glibc's malloc arenas, and the node keeps freed frame buffers,
unless its environment chose otherwise."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest


pytestmark = pytest.mark.integration

CODE = "from triton_ros.core.memory import limit_malloc_arenas as f; print(f(), f())"


THRESHOLDS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def run(
    env_extra: dict,
    code: str = CODE,
    unset: tuple[str, ...] = ("MALLOC_ARENA_MAX",),
    args: tuple[str, ...] = (),
) -> str:
    """``code`` (with ``args``) in a fresh interpreter, without the ``unset`` variables plus
    ``env_extra``."""
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_arenas_are_limited_once():
    assert run({}) == "True False"


def test_an_environment_setting_wins():
    assert run({"MALLOC_ARENA_MAX": "4"}) == "False False"


KEEP = "from triton_ros.core.memory import keep_freed_buffers as f; print(f(), f())"


def run_keep(env_extra: dict) -> str:
    return run(env_extra, KEEP, THRESHOLDS)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_buffers_are_kept_once():
    assert run_keep({}) == "True False"


@pytest.mark.parametrize("name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_an_environment_threshold_wins(name):
    assert run_keep({name: "1048576"}) == "False False"


FRAMES = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from triton_ros.core.memory import keep_freed_buffers
    assert keep_freed_buffers()
def frame():                    # three frame-sized buffers at once, then all freed
    buffers = [np.ones(640 * 480 * 3, np.uint8) for _ in range(3)]
    del buffers
for _ in range(5):
    frame()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    frame()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_kept_buffers_are_reused_without_page_faults():
    """Frame-sized buffers freed and allocated again: glibc's defaults map fresh pages each
    time (hundreds of faults per frame); with keep_freed_buffers() the pages are reused."""

    def faults(mode: str) -> float:
        return float(run({}, FRAMES, THRESHOLDS, (mode,)))

    assert faults("default") > 100
    assert faults("keep") < 5


def test_idle_trim_trims_once_per_quiet_spell_and_never_under_load():
    """IdleTrim (core/memory.py), on a clock of its own: no trim while the activity count
    changes, one once it has stayed the same for idle_s, none more until there was activity
    again; nothing before the first activity."""
    from triton_ros.core.memory import IdleTrim

    activity = [0]
    trim = IdleTrim(lambda: activity[0], idle_s=3.0)
    trims: list[int] = []
    trim._trim = trims.append  # the C library's malloc_trim, recorded instead
    assert not any(trim.poll(t) for t in range(0, 10))  # idle from the start
    for t in range(10, 20):  # busy: the count changes at every look
        activity[0] += 1
        assert not trim.poll(t)
    assert not trim.poll(21) and not trim.poll(21.9)  # last change at 19: < 3 s
    assert trim.poll(22.0) and trims == [0]  # 3 s after the last change
    assert not any(trim.poll(t) for t in range(24, 40))  # once per quiet spell
    activity[0] += 1
    assert not trim.poll(40) and not trim.poll(42) and trim.poll(43)
    assert trims == [0, 0]
