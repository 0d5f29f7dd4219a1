"""Real triton-ros-server processes for the tests, and where the repository is.

A plain module (not conftest) so that test modules in any folder can import it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = ROOT / "model_repository"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """``triton-ros-server`` in a subprocess; ``stop()`` sends SIGINT and returns the exit code."""

    def __init__(self, *args: str, env: dict | None = None, grpc_port: int | None = None,
                 http_port: int | None = None) -> None:
        self.port = grpc_port or free_port()    # given: a restart on the same ports
        self.url = f"127.0.0.1:{self.port}"
        # HTTP and metrics are on by default: give them free ports too, so that tests (and other
        # agents' servers) never collide on 8000/8002.
        self.http_port = http_port or free_port()
        self.metrics_port = free_port()
        self.http_url = f"127.0.0.1:{self.http_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.log_path = Path(os.environ.get("PYTEST_TMPDIR", "/tmp")) / f"server-{self.port}.log"
        self._log = open(self.log_path, "w")
        ports = []
        if "--http-port" not in args:
            ports += ["--http-port", str(self.http_port)]
        if "--metrics-port" not in args:
            ports += ["--metrics-port", str(self.metrics_port)]
        cmd = [sys.executable, "-m", "triton_ros.server_main", "--grpc-port", str(self.port),
               *ports, *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})}, cwd=str(ROOT))
        # Endpoints start in tritonserver's order (gRPC, HTTP, metrics): the banners to wait for.
        flags = dict(zip(args[::1], args[1::1]))
        self._banners = [banner for flag, banner in (
            ("--allow-http", "Started HTTPService at"),
            ("--allow-metrics", "Started Metrics Service at"))
            if flags.get(flag, "true").lower() not in ("false", "0", "no", "off")]

    def client(self):
        import tritonclient.grpc as grpcclient
        return grpcclient.InferenceServerClient(self.url)

    def http_client(self, **kwargs):
        import tritonclient.http as httpclient
        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def wait_live(self, timeout: float = 60.0) -> None:
        """Wait until the gRPC endpoint answers (models loaded: the CLI starts it after loading)."""
        client = self.client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if client.is_server_live():
                    log = self.log()
                    if all(b in log for b in self._banners):
                        return
            except Exception:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server did not start:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
