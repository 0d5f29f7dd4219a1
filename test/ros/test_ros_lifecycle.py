"""Start-up and shutdown of the inference node: clean exits, clear refusals of bad settings."""

from __future__ import annotations

import http.client
import signal
import socket
import time

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import TIMEOUT, image_message, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE


pytestmark = pytest.mark.system

ROOT_REPO = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "model_repository")


def test_sigterm_while_frames_flow_exits_0_without_abort(start_node, probe):
    """Frames in flight and an idle HTTP keep-alive client (a dashboard) at the signal: the node
    exits 0 within seconds (the idle client used to hold the exit for the 30 s exit timeout)."""
    ns = f"/life{TOKEN}"
    node = start_node(
        {
            "model_repository": ROOT_REPO,
            "startup_models": ["detector"],
            "bindings": ["cam"],
            "cam": {"model": "detector", "topics": [f"{ns}/cam/image_raw"]},
        }
    )
    node.wait_ready(probe)
    rec = probe.subscribe(DETECTIONS_TYPE, f"{ns}/cam/detections")
    pub = probe.image_publisher(f"{ns}/cam/image_raw")
    pixels = np.zeros((240, 320, 3), np.uint8)

    def answered():
        pub.publish(image_message(pixels, "rgb8", "cam", probe.node.get_clock().now().to_msg()))
        return rec.count() > 0

    wait_until(answered, what="detections", interval=0.1)
    idle = http.client.HTTPConnection("127.0.0.1", node.port("HTTP/REST endpoint"), timeout=TIMEOUT)
    idle.request("GET", "/v2/health/ready")
    response = idle.getresponse()
    assert response.status == 200 and not response.will_close  # kept alive, then idle
    response.read()
    for _ in range(5):  # frames in flight while the signal arrives
        pub.publish(image_message(pixels, "rgb8", "cam", probe.node.get_clock().now().to_msg()))
    signalled = time.monotonic()
    node.stop_and_check(signal.SIGTERM)
    took = time.monotonic() - signalled
    assert took < 15, f"the node took {took:.1f} s to exit"
    log = node.log_path.read_text()
    assert "SIGTERM received, shutting down" in log and "stopped" in log
    assert "successfully unloaded 'detector'" in log


def test_a_binding_without_model_is_refused_at_start(start_node):
    node = start_node(
        {"model_repository": ROOT_REPO, "bindings": ["cam"], "cam": {"topics": ["/cam/image_raw"]}},
        expected_rc=1,
    )
    assert node.proc.wait(timeout=TIMEOUT) == 1
    assert "cannot start: parameter 'cam.model' is required" in node.log()


def test_a_taken_grpc_port_is_refused_at_start(start_node):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        node = start_node(
            {"model_repository": ROOT_REPO, "startup_models": ["simple"]},
            expected_rc=1,
            grpc_port=port,
        )
        assert node.proc.wait(timeout=TIMEOUT) == 1
    assert (
        f"cannot start: failed to start grpc endpoint at 127.0.0.1:{port}: "
        f"Failed to bind to address 127.0.0.1"
    ) in node.log()


def test_a_misspelt_parameter_is_reported(start_node, probe):
    node = start_node(
        {
            "model_repository": ROOT_REPO,
            "startup_models": ["simple"],
            "bindings": ["cam"],
            "cam": {"model": "detector", "topics": ["/cam/image_raw"], "scor_threshold": 0.5},
        }
    )
    node.wait_ready(probe)
    assert "parameter 'cam.scor_threshold' is not a parameter of this node" in node.log()
