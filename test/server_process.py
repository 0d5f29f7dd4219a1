"""Real triton-ros-server processes for the tests, and where the repository is.

A plain module (not conftest) so that test modules in any folder can import it.
"""

from __future__ import annotations

import os
import random as _random
import shutil
import socket
import sys
from pathlib import Path

from processes import ROOT, TIMEOUT, ManagedProcess, log_dir, suite_domain, xdist_worker

MODEL_REPOSITORY = ROOT / "model_repository"


def copy_models(dest: Path, *names: str, **renamed: str) -> Path:
    """A private copy of the bundled model repository at ``dest``, for a test that changes it or
    adds models beside them: every model, or only ``names``, and ``renamed`` (new name=bundled
    model) copies of a model under another folder's name (its config.pbtxt as it is). ``dest``
    may already hold other models; returns it."""
    dest = Path(dest)
    if not names and not renamed:
        shutil.copytree(MODEL_REPOSITORY, dest, dirs_exist_ok=True)
    for name in names:
        shutil.copytree(MODEL_REPOSITORY / name, dest / name)
    for new, name in renamed.items():
        shutil.copytree(MODEL_REPOSITORY / name, dest / new)
    return dest


_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A port free now on 127.0.0.1 for a server to listen on, below the kernel's ephemeral
    range: a port the kernel hands out (bind to 0) may meanwhile become the source port of some
    client's connection (the suites run side by side and connect all the time), and the server,
    binding it seconds later after loading its models, then failed with "address in use".
    Test processes running side by side (the suites scripts/test.sh runs, and their xdist
    workers: each has its own number, ``processes.suite_domain()``) draw from separate sixteenths
    of the range, so one cannot take a port another has chosen and not yet bound."""
    low = min(_ephemeral_low(), 32768)
    first, end = low // 2, low
    slot = suite_domain()
    if slot is None and os.environ.get("PYTEST_XDIST_WORKER"):
        slot = xdist_worker()
    if slot is not None:
        width = (end - first) // 16
        first += (slot % 16) * width
        end = first + width
    while True:
        port = _random.randrange(first, end)
        if port in _GIVEN:  # never the same port twice in one test process
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _GIVEN.add(port)
            return port


class ServerProcess(ManagedProcess):
    """``triton-ros-server`` in a subprocess; ``stop()`` sends SIGINT and returns the exit code."""

    what = "server"

    def __init__(
        self,
        *args: str,
        env: dict | None = None,
        grpc_port: int | None = None,
        http_port: int | None = None,
    ) -> None:
        self.port = grpc_port or free_port()  # given: a restart on the same ports
        self.url = f"127.0.0.1:{self.port}"
        # HTTP and metrics are on by default: give them free ports too, so that tests (and other
        # agents' servers) never collide on 8000/8002.
        self.http_port = http_port or free_port()
        self.metrics_port = free_port()
        self.http_url = f"127.0.0.1:{self.http_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        ports = []
        if "--http-port" not in args:
            ports += ["--http-port", str(self.http_port)]
        if "--metrics-port" not in args:
            ports += ["--metrics-port", str(self.metrics_port)]
        cmd = [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--grpc-port",
            str(self.port),
            *ports,
            *args,
        ]
        super().__init__(cmd, log_dir() / f"server-{self.port}.log", env=env)
        # Endpoints start in tritonserver's order (gRPC, HTTP, metrics): the banners to wait for.
        flags = dict(zip(args[::1], args[1::1]))
        self._banners = [
            banner
            for flag, banner in (
                ("--allow-http", "Started HTTPService at"),
                ("--allow-metrics", "Started Metrics Service at"),
            )
            if flags.get(flag, "true").lower() not in ("false", "0", "no", "off")
        ]
        self._live_client = None

    def client(self):
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.url)

    def http_client(self, **kwargs):
        import tritonclient.http as httpclient

        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def ready(self) -> bool:
        """The gRPC endpoint answers (models loaded: the CLI starts it after loading) and every
        enabled endpoint has logged its start."""
        if self._live_client is None:
            self._live_client = self.client()
        if not self._live_client.is_server_live():
            return False
        log = self.log()
        return all(b in log for b in self._banners)

    def wait_live(self, timeout: float = TIMEOUT) -> None:
        """Wait until the server is ready (``ready()``)."""
        self.wait_ready(timeout)


def perf_analyzer() -> Path:
    """The environment's perf_analyzer (scripts/setup.d/20-perf-analyzer.sh installs it on
    x86_64): required where scripts/setup.sh set the environment up; elsewhere (``colcon test``
    on an apt-installed ROS 2, aarch64) the test that needs it is skipped."""
    import platform

    import pytest

    path = Path(sys.executable).parent / "perf_analyzer"
    if not path.exists():
        if (Path(sys.prefix) / ".stamps").is_dir() and platform.machine() == "x86_64":
            raise AssertionError("scripts/setup.sh installs perf_analyzer into .venv/bin")
        pytest.skip("no perf_analyzer in this environment (scripts/setup.sh installs it)")
    return path
