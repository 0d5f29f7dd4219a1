"""Process-level ROS set-up shared by the node and the tools: signals and a bounded stop.

rclpy's own signal handlers shut the context down from inside the signal handler, while
executor threads may still run; a MultiThreadedExecutor that is not shut down and joined before
``rclpy.shutdown()`` aborts the process at exit. So these processes install their own SIGINT and
SIGTERM handlers that only set an event; the main thread then stops everything in order.

A stop must end, whatever holds the process: ``ros2 launch`` escalates to SIGTERM after 5 s and
reports the node as failed. :class:`ExitWatchdog` bounds it by construction:

- :meth:`ExitWatchdog.arm` when the stop starts: the orderly stop (inputs closed, executors and
  pools joined, models unloaded, rclpy shut down) gets ``stop_s`` seconds;
- :meth:`ExitWatchdog.leave` when it is done: the atexit hooks run and the process ends with
  ``os._exit`` and the stop's exit status, within ``exit_s``. It does not return into the
  interpreter's finalization: everything the process owns has been closed by then (rclpy's
  shutdown has destroyed the DDS participant and removed its shared memory), so what is skipped
  is only tearing the modules down;
- past either bound, a thread of its own writes to stderr which threads still run (the
  non-daemon ones would hold a normal exit) and every thread's stack (``faulthandler``), and
  ends the process. A Python thread cannot run while a C call holds the GIL, so
  ``faulthandler.dump_traceback_later`` (a C thread) backs it up one second later (exit 1);
- a second SIGINT or SIGTERM during a stop ends it at once, the same way; SIGUSR1 writes every
  thread's stack at any time, without stopping anything.

Once the node has stopped, the process ends with ``os._exit``: the interpreter's finalization
(tearing modules down, the cyclic collector over rclpy, ONNX Runtime, gRPC and OpenCV, native
destructors joining their threads) would only add seconds on a loaded host.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import sys
import threading
import time
from typing import Callable, NoReturn

#: How long the exit may take once the orderly stop is done (atexit hooks, flushing).
EXIT_S = 1.0


class StopSignal:
    """Set by SIGINT or SIGTERM (or :meth:`set`); remembers which signal came first. A signal
    that comes while a stop is already under way calls ``on_repeat`` (the watchdog's
    :meth:`ExitWatchdog.fire`: stop now)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""
        self.on_repeat: Callable[[str], None] | None = None

    def _handler(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if self.event.is_set() and self.on_repeat is not None:
            self.on_repeat(f"{name} received again while stopping")
            return
        if not self.signal_name:
            self.signal_name = name
        self.event.set()

    def install(self) -> "StopSignal":
        signal.signal(signal.SIGINT, self._handler)
        signal.signal(signal.SIGTERM, self._handler)
        return self

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)

    def is_set(self) -> bool:
        return self.event.is_set()


class ExitWatchdog:
    """Ends the process if its stop takes too long, and ends it when the stop is done
    (module docstring). ``name`` prefixes what it writes to stderr."""

    def __init__(self, name: str, *, exit_s: float = EXIT_S) -> None:
        self._name = name
        self._exit_s = exit_s
        self._lock = threading.Lock()
        self._deadline = 0.0
        self._phase = ""
        self._rc = 1
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress_at = float("-inf")

    def progress(self, stall_s: float) -> None:
        """While running: the process made progress. If it makes none for ``stall_s`` seconds
        (a call that never returns, such as a DDS write that blocks holding the GIL, when no
        Python code, not even a signal handler, can run), every thread's stack is dumped and the
        process exits 1 (``faulthandler``'s C thread). Re-armed at most once a second."""
        now = time.monotonic()
        if now - self._progress_at >= 1.0:
            self._progress_at = now
            faulthandler.dump_traceback_later(stall_s, exit=True)

    def arm(self, stop_s: float) -> None:
        """The stop starts: it may take ``stop_s`` seconds (exit status 1 past that)."""
        self._set(stop_s, "stopping", 1)

    def leave(self, rc: int) -> NoReturn:
        """The orderly stop is done: run the atexit hooks and end the process with ``rc``,
        within ``exit_s``. Non-daemon threads still alive are named on stderr (a normal exit
        would wait for them), not waited for."""
        self._set(self._exit_s, "exiting", rc)
        left = [
            t.name
            for t in threading.enumerate()
            if not t.daemon and t is not threading.current_thread() and t.is_alive()
        ]
        if left:
            self._write(f"threads still running at exit, not waited for: {', '.join(left)}")
        try:
            atexit._run_exitfuncs()  # CPython's; what a normal exit runs
        except Exception as exc:  # a hook's failure must not keep the process
            self._write(f"an atexit hook failed: {type(exc).__name__}: {exc}")
        _flush()
        os._exit(rc)

    def fire(self, why: str) -> None:
        """End the process now (a second signal): tell what still runs, exit."""
        self._expire(why)

    def _set(self, seconds: float, phase: str, rc: int) -> None:
        with self._lock:
            self._deadline = time.monotonic() + seconds
            self._phase, self._rc = phase, rc
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="exit_watchdog", daemon=True)
                self._thread.start()
        # The C backstop: works even while a C call holds the GIL (this thread could not run).
        faulthandler.dump_traceback_later(seconds + 1.0, exit=True)
        self._wake.set()

    def _run(self) -> None:
        while True:
            with self._lock:
                left = self._deadline - time.monotonic()
                phase = self._phase
            if left <= 0:
                self._expire(f"still {phase} after its bound")
            self._wake.wait(left)
            self._wake.clear()

    def _expire(self, why: str) -> NoReturn:
        rc = self._rc if self._phase == "exiting" else 1
        try:
            alive = [t for t in threading.enumerate() if t is not threading.current_thread()]
            held = ", ".join(f"{t.name}{'' if t.daemon else ' (non-daemon)'}" for t in alive)
            self._write(
                f"{why}: exiting with {rc} without waiting for what still runs; "
                f"threads: {held or 'none'}; their stacks:"
            )
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            _flush()
        finally:
            os._exit(rc)

    def _write(self, text: str) -> None:
        try:
            sys.stderr.write(f"[{self._name}] {text}\n")
            sys.stderr.flush()
        except Exception:  # stderr closed: nothing else to tell it with
            pass


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # closed or broken: nothing left to flush
            pass


def dump_stacks_on_sigusr1() -> None:
    """SIGUSR1 writes every thread's stack to stderr (``kill -USR1 <pid>``), nothing else."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)


def init_ros(args: list[str] | None = None) -> StopSignal:
    """``rclpy.init`` without rclpy's signal handlers; SIGINT/SIGTERM set the returned signal."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(
        args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO
    )
    dump_stacks_on_sigusr1()
    return StopSignal().install()


def strip_ros_args(argv: list[str]) -> list[str]:
    """The command line without the ``--ros-args ... [--]`` part (for argparse)."""
    import rclpy.utilities

    return rclpy.utilities.remove_ros_args(argv)
