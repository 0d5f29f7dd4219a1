"""Fixtures of the ROS tests: a ROS domain of their own, node processes and a probe node.

Other programs may run ROS tests on this host at the same time, so every test session picks a
random ROS_DOMAIN_ID (before any rclpy context exists), keeps discovery on this host, and names its
nodes and topics with a random token.
"""
from __future__ import annotations

import os
import random
import secrets
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(1, 100))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))

TOKEN = secrets.token_hex(3)


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
