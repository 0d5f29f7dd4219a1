"""``triton-ros-server`` as a process on the scratch repository (model_analyzer's local launch).

A fresh server serves each configuration, so that one configuration's memory never counts for
the next. It listens on a gRPC port the kernel picks (``--grpc-port 0``; the port is read from
its "Started GRPCInferenceService at HOST:PORT" banner), with HTTP and metrics off. The scratch
repository holds only the models a profile needs, so the server loads all of them
(``--model-control-mode none``) before it starts listening; whether the profiled model is READY,
and why not, comes from the server's repository index (the RepositoryIndex RPC), not its log.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .errors import ModelLoadError, ServerStartError

_BANNER = re.compile(r"Started GRPCInferenceService at (\S+):(\d+)")
STOP_TIMEOUT_S = 30.0


def stop_process(proc: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> int:
    """SIGINT (triton-ros-server, inference_node and synthetic_cameras all stop cleanly on
    it), then SIGKILL after ``timeout_s``; the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def server_command() -> list[str]:
    """The ``triton-ros-server`` console script next to this Python (or on PATH), else the
    same entry point through ``python -m``."""
    script = Path(sys.executable).parent / "triton-ros-server"
    if os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("triton-ros-server")
    if found:
        return [found]
    return [sys.executable, "-m", "triton_ros.server_main"]


class TritonServer:
    """One server process; :meth:`start` returns once ``model`` is READY (or raises)."""

    def __init__(
        self, repository: Path, model: str, log_path: Path, *, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.repository = repository
        self.model = model
        self.log_path = log_path
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.url = ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 180.0) -> None:
        cmd = [
            *server_command(),
            "--model-repository",
            str(self.repository),
            "--model-control-mode",
            "none",
            "--grpc-address",
            "127.0.0.1",
            "--grpc-port",
            "0",
            "--allow-http",
            "false",
            "--allow-metrics",
            "false",
            *self.extra_args,
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout_s
        while True:
            match = _BANNER.search(self.log())
            if match:
                self.url = f"{match.group(1)}:{match.group(2)}"
                break
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"triton-ros-server exited with {self.proc.returncode} "
                    f"before listening:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"triton-ros-server did not listen within {timeout_s:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        self._check_ready()

    def client(self):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.url)

    def _check_ready(self) -> None:
        client = self.client()
        try:
            if client.is_model_ready(self.model):
                return
            reasons = [
                m.reason or m.state
                for m in client.get_model_repository_index().models
                if m.name == self.model
            ]
        finally:
            client.close()
        raise ModelLoadError(
            self.model, "; ".join(r for r in reasons if r) or "not in the repository index"
        )

    def model_config(self):
        """The configuration the server serves (auto-completed, normalized), as
        ``inference.ModelConfig``."""
        client = self.client()
        try:
            return client.get_model_config(self.model).config
        finally:
            client.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def stop(self) -> int | None:
        """SIGINT (the server finishes in-flight requests and exits 0). Returns the exit
        status."""
        return stop_process(self.proc) if self.proc is not None else None

    def __enter__(self) -> "TritonServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
