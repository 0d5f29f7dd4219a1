"""The processes the tests start, on one base, and the one way the tests wait for something.

- :func:`wait_until`: poll a condition until it holds (its value is returned) or a timeout
  passes (AssertionError naming what was awaited). Every test waits through it, so a wait
  ends as soon as its condition holds rather than after a fixed sleep.
- :class:`ManagedProcess`: a child process whose output goes to a log file; ``wait_ready()``
  polls the subclass's ``ready()`` and fails at once, with the log, when the process exits
  first; ``stop()`` sends a signal (SIGINT: a clean shutdown), kills it after a timeout and
  returns the exit code; ``stop_and_check()`` also asserts the exit code and that the log
  holds none of the subclass's fault markers (a traceback, an abort).

``server_process.ServerProcess`` (triton-ros-server), ``ros_probe.NodeProcess`` (the ROS node)
and ``kafka_broker.KafkaBroker`` (the test broker) are its subclasses. A plain module (not
conftest) so that test modules in any folder can import it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 60.0  # generous: the machine is shared and has 2 cores


def wait_until(
    condition: Callable[[], Any],
    timeout: float = TIMEOUT,
    what: str = "condition",
    interval: float = 0.05,
):
    """``condition()``'s first true value, polled every ``interval`` seconds; AssertionError
    after ``timeout`` seconds (the condition is tried once more at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def xdist_worker() -> int:
    """The number of this pytest-xdist worker (``gw3``: 3); 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def suite_domain() -> int | None:
    """This test process's own number, for its ROS domain and its share of the ports:
    TRITON_ROS_TEST_DOMAIN_ID plus the xdist worker's number (so a suite run with ``-n N`` uses
    the N consecutive numbers from it; scripts/test.sh gives each suite it runs side by side a
    block of its own). None when TRITON_ROS_TEST_DOMAIN_ID is not set."""
    base = os.environ.get("TRITON_ROS_TEST_DOMAIN_ID", "")
    return int(base) + xdist_worker() if base.isdigit() else None


def log_dir() -> Path:
    """Where processes write their logs when a test gives no folder: pytest's base temporary
    folder of this session (conftest sets PYTEST_TMPDIR), else /tmp."""
    return Path(os.environ.get("PYTEST_TMPDIR", "/tmp"))


class ManagedProcess:
    """A child process writing stdout and stderr to ``log_path``.

    Subclasses give ``ready()`` (true once the process serves) and may set ``what`` (its name in
    messages), ``stop_signal`` and ``faults`` (strings whose presence in the log is a defect)."""

    what = "process"
    stop_signal = signal.SIGINT
    faults: Sequence[str] = ("Traceback",)

    def __init__(
        self, cmd: Sequence[str], log_path: Path, *, env: dict | None = None, cwd: Path = ROOT
    ) -> None:
        self.cmd = [str(c) for c in cmd]
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            self.cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=str(cwd),
        )
        self.stopped_rc: int | None = None

    # ------------------------------------------------------------------------------ state
    def ready(self) -> bool:
        """True once the process serves (the subclass says how to tell)."""
        return True

    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = TIMEOUT) -> None:
        """Until ``ready()``; AssertionError with the log when the process exits first or the
        timeout passes."""

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.what} exited with {self.proc.returncode}:\n{self.log()}"
                )
            try:
                return bool(self.ready())
            except Exception:  # not answering yet
                return False

        try:
            wait_until(up, timeout, f"{self.what} to be ready", interval=0.1)
        except AssertionError as exc:
            if self.proc.poll() is not None:
                raise
            raise AssertionError(f"{exc}:\n{self.log()}") from None

    # ------------------------------------------------------------------------------ stop
    def stop(self, sig: int | None = None, timeout: float = TIMEOUT) -> int:
        """Send ``sig`` (default ``stop_signal``), wait up to ``timeout`` seconds, then kill;
        the exit code. A second call returns the first one's."""
        if self.stopped_rc is None:
            if self.proc.poll() is None:
                self.proc.send_signal(self.stop_signal if sig is None else sig)
                try:
                    self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self.stopped_rc = self.proc.returncode
            self._log.close()
        return self.stopped_rc

    def kill(self) -> None:
        """SIGKILL: the process vanishes without shutting down (its exit code is -9)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop_and_check(self, sig: int | None = None, expected_rc: int = 0) -> None:
        """``stop()``; AssertionError with the log unless it exits with ``expected_rc`` and its
        log holds none of ``faults``."""
        rc = self.stop(sig)
        log = self.log()
        assert rc == expected_rc, f"{self.what} exited with {rc}:\n{log}"
        for bad in self.faults:
            assert bad not in log, f"'{bad}' in the {self.what}'s log:\n{log}"
