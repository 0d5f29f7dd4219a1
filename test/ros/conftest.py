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
        node = NodeProcess(
            params, tmp_path, name=f"inference_node_{TOKEN}_{len(started)}", grpc_port=grpc_port
        )
        started.append((node, expected_rc))
        return node

    yield start
    for node, expected_rc in started:
        node.stop_and_check(expected_rc=expected_rc)


@pytest.fixture
def spinning_node():
    """Make a node in this process, with parameters set, spun by a thread of its own (for tests
    that build a Binding on it by hand); each is shut down at teardown."""
    import threading

    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    made = []

    def make(name: str, parameters: dict):
        context = Context()
        rclpy.init(context=context)
        node = rclpy.create_node(
            name,
            context=context,
            parameter_overrides=[Parameter(key, value=value) for key, value in parameters.items()],
        )
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        thread = threading.Thread(target=executor.spin, daemon=True)
        thread.start()
        made.append((context, node, executor, thread))
        return node

    yield make
    for context, node, executor, thread in made:
        executor.shutdown()
        thread.join(timeout=30)
        node.destroy_node()
        rclpy.shutdown(context=context)
