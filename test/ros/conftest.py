"""Fixtures of the ROS tests: a ROS domain of their own, node processes and a probe node.

The domain and the naming token come from ros_env (a plain module, importable from the tests).
"""
from __future__ import annotations

import secrets

import pytest

from ros_env import TOKEN


@pytest.fixture
def probe():
    """A ROS node in the test process (publishers, subscribers, service clients)."""
    from ros_probe import Probe

    p = Probe(f"probe_{TOKEN}_{secrets.token_hex(2)}")
    yield p
    p.close()


@pytest.fixture
def start_node(tmp_path):
    """Start inference_node processes; each must exit 0 without an abort at teardown."""
    from ros_probe import NodeProcess

    started: list[tuple[NodeProcess, int]] = []

    def start(params: dict, *, expected_rc: int = 0, grpc_port: int | None = None) -> NodeProcess:
        node = NodeProcess(params, tmp_path, name=f"inference_node_{TOKEN}_{len(started)}",
                           grpc_port=grpc_port)
        started.append((node, expected_rc))
        return node

    yield start
    for node, expected_rc in started:
        node.stop_and_check(expected_rc=expected_rc)
