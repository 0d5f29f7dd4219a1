"""Shared fixtures: real servers in real processes, real clients over 127.0.0.1.

- ``start_server`` (per test) and ``start_module_server`` (per module): start triton-ros-server
  processes; each is stopped at teardown and must exit 0.
- ``bundled_server``: one server on the bundled repository for the whole session (for each
  xdist worker), shared by the tests that only read from it.
- ``repo_copy``: a private copy of the bundled repository; ``explicit_core``: a core in this
  process over an empty repository.

Every test carries exactly one of the markers unit, integration, system (suite_markers.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from server_process import MODEL_REPOSITORY, ServerProcess, copy_models
from suite_markers import pytest_collection_modifyitems  # noqa: F401 (the markers' check)


@pytest.fixture(scope="session", autouse=True)
def process_logs(tmp_path_factory) -> None:
    """Processes log into this session's temporary folder (pytest keeps the last three), unless
    PYTEST_TMPDIR names one."""
    os.environ.setdefault("PYTEST_TMPDIR", str(tmp_path_factory.getbasetemp()))


class Servers:
    """Starts servers; ``stop_all()`` stops them, each of which must exit 0 (and, started with
    ``quiet=True``, leave no traceback in its log)."""

    def __init__(self) -> None:
        self.started: list[tuple[ServerProcess, bool]] = []

    def __call__(
        self,
        *args: str,
        wait: bool = True,
        env: dict | None = None,
        quiet: bool = False,
        timeout: float | None = None,
        grpc_port: int | None = None,
        http_port: int | None = None,
    ) -> ServerProcess:
        server = ServerProcess(*args, env=env, grpc_port=grpc_port, http_port=http_port)
        self.started.append((server, quiet))
        if wait:
            if timeout is None:
                server.wait_live()
            else:
                server.wait_live(timeout)
        return server

    def stop_all(self) -> None:
        for server, quiet in self.started:
            if server.proc.poll() is not None:
                server.stop()  # it already exited: the test itself checked how
                continue
            rc = server.stop()
            assert rc == 0, f"server exited with {rc}:\n{server.log()}"
            if quiet:
                assert "Traceback" not in server.log(), server.log()


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A private copy of the bundled model repository that a test may change."""
    return copy_models(tmp_path / "models")


@pytest.fixture
def start_server():
    """Start servers with given CLI args; every one is stopped (and must exit 0) at teardown."""
    servers = Servers()
    yield servers
    servers.stop_all()


@pytest.fixture(scope="module")
def start_module_server():
    """``start_server`` for a module's fixtures: the servers live until the module's last test."""
    servers = Servers()
    yield servers
    servers.stop_all()


@pytest.fixture(scope="session")
def bundled_server():
    """One server on the bundled repository shared by every test that only reads from it (one
    per xdist worker). A test that changes a server's state starts its own."""
    servers = Servers()
    yield servers("--model-repository", str(MODEL_REPOSITORY))
    servers.stop_all()


@pytest.fixture
def explicit_core(tmp_path: Path):
    """A started core over an empty repository in ``tmp_path`` (``repo_path``), explicit model
    control: a test writes its models there and loads them."""
    from triton_ros.core.server import InferenceServer, ServerOptions

    core = InferenceServer(ServerOptions((str(tmp_path),), model_control_mode="explicit"))
    core.start()
    core.repo_path = tmp_path
    yield core
    core.stop()
