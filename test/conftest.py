"""Shared fixtures: real servers in real processes, real clients over 127.0.0.1."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from server_process import MODEL_REPOSITORY, ServerProcess


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """A private copy of the bundled model repository that a test may change."""
    dest = tmp_path / "models"
    shutil.copytree(MODEL_REPOSITORY, dest)
    return dest


@pytest.fixture
def start_server():
    """Start servers with given CLI args; every one is stopped (and must exit 0) at teardown."""
    started: list[ServerProcess] = []

    def start(*args: str, wait: bool = True, env: dict | None = None) -> ServerProcess:
        server = ServerProcess(*args, env=env)
        started.append(server)
        if wait:
            server.wait_live()
        return server

    yield start
    for server in started:
        if server.proc.poll() is not None:
            server.stop()       # it already exited: the test itself checked how
            continue
        rc = server.stop()
        assert rc == 0, f"server exited with {rc}:\n{server.log()}"


@pytest.fixture(scope="module")
def bundled_server():
    """One server on the bundled repository shared by a test module (read-only use)."""
    server = ServerProcess("--model-repository", str(MODEL_REPOSITORY))
    server.wait_live()
    yield server
    rc = server.stop()
    assert rc == 0, f"server exited with {rc}:\n{server.log()}"


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
