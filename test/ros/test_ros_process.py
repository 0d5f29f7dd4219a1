"""The bounded stop of the node and tools (ros_process.ExitWatchdog), in processes of their own.

Each case runs a small program that stops the way the node does (SIGINT sets the stop; the
watchdog is armed; the process leaves with the stop's exit status), with something that would
hold it: a non-daemon thread, an atexit hook that never returns, a stop that never ends, a C
call that holds the GIL (no signal handler can run then), a second signal. Each must end within
its bound, with the exit status the watchdog gives and what still ran written to stderr.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ros_probe import ROOT

pytestmark = pytest.mark.integration

PROGRAM = textwrap.dedent("""
    import atexit, ctypes, signal, sys, threading, time
    from triton_ros.ros.ros_process import ExitWatchdog, StopSignal, dump_stacks_on_sigusr1

    kind = sys.argv[1]
    dump_stacks_on_sigusr1()
    stop = StopSignal().install()
    watchdog = ExitWatchdog("case")
    stop.on_repeat = watchdog.fire
    if kind == "thread":
        threading.Thread(target=time.sleep, args=(3600,), name="held_thread").start()
    if kind == "atexit":
        atexit.register(time.sleep, 3600)
    if kind == "gil":
        watchdog.progress(1.5)
        # libc's sleep, the GIL held all along; SIGINT blocked on this thread, so that it does
        # not cut the sleep short (EINTR) but waits, as a signal does for a C call that
        # retries on EINTR or runs without a system call
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        print("ready", flush=True)
        ctypes.PyDLL(None).sleep(3600)
    print("ready", flush=True)
    stop.wait()
    watchdog.arm(1.0 if kind == "stop" else 60.0)
    if kind in ("stop", "repeat"):
        print("stopping", flush=True)
        time.sleep(3600)
    watchdog.leave(0)
""")


def run(kind: str, *signals: int, limit: float = 5.0) -> tuple[int, float, str]:
    """Start the case, send ``signals`` (0.5 s apart) once it is ready; (exit status, seconds
    from the first signal to its end, stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, kind],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        start = time.monotonic()
        for i, sig in enumerate(signals):
            if i:
                if kind == "repeat":
                    assert proc.stdout.readline().strip() == "stopping"
                time.sleep(0.5)
            proc.send_signal(sig)
        rc = proc.wait(timeout=limit + 10)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, took, proc.stderr.read()


def test_a_non_daemon_thread_does_not_hold_the_exit_and_is_named():
    rc, took, err = run("thread", signal.SIGINT)
    assert rc == 0 and took < 3.0, (rc, took, err)
    assert "threads still running at exit, not waited for: held_thread" in err


def test_an_atexit_hook_that_never_returns_is_cut_after_the_exit_bound():
    rc, took, err = run("atexit", signal.SIGTERM)
    assert rc == 0 and took < 4.0, (rc, took, err)  # exit_s 1 s (+1 s: the C backstop)
    assert "still exiting after its bound" in err and " in leave" in err, err


def test_a_stop_that_never_ends_is_ended_with_status_1_and_its_stacks():
    rc, took, err = run("stop", signal.SIGINT)
    assert rc == 1 and took < 4.0, (rc, took, err)
    assert "still stopping after its bound" in err
    assert "most recent call first" in err and "in <module>" in err, err


def test_a_second_signal_ends_a_stop_at_once():
    rc, took, err = run("repeat", signal.SIGINT, signal.SIGTERM)
    assert rc == 1 and took < 3.0, (rc, took, err)
    assert "SIGTERM received again while stopping" in err


def test_a_call_holding_the_gil_is_ended_from_c_when_no_progress_is_made():
    """No Python runs while the C call holds the GIL, not even the SIGINT handler: the progress
    guard (faulthandler's C thread) ends the process with its stacks."""
    rc, took, err = run("gil", signal.SIGINT)
    assert rc == 1 and took < 4.0, (rc, took, err)
    assert "Timeout" in err and "most recent call first" in err, err
