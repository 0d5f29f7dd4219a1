"""The node's endpoint parameters mirror tritonserver's flags: TLS, restricted APIs and limits
reach the same endpoint assembly as ``triton-ros-server`` (real node process, real clients)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from ros_probe import TIMEOUT, wait_until
from simple_model import simple_array, simple_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_endpoint_security import pki  # noqa: E402,F401  (the certificate fixture)


pytestmark = pytest.mark.system

ROOT_REPO = str(Path(__file__).resolve().parents[2] / "model_repository")


def test_node_tls_restrictions_and_limits(start_node, probe, pki):  # noqa: F811
    node = start_node(
        {
            "model_repository": ROOT_REPO,
            "startup_models": ["simple"],
            "grpc": {
                "use_ssl": True,
                "server_cert": pki["server_cert"],
                "server_key": pki["server_key"],
                "restricted_protocol": ["statistics:admin=s3cret"],
            },
            "http": {
                "restricted_api": ["model-repository:admin=s3cret"],
                "max_connections": 5,
                "header_timeout_s": 30.0,
            },
        }
    )
    node.wait_ready(probe)
    client = grpcclient.InferenceServerClient(
        node_url := f"127.0.0.1:{node.grpc_port}", ssl=True, root_certificates=pki["ca"]
    )
    a = simple_array()
    inputs = simple_inputs(grpcclient, a)
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + a)
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("simple")
    assert "expecting header 'triton-grpc-protocol-admin'" in info.value.message()
    assert client.get_inference_statistics(
        "simple", headers={"triton-grpc-protocol-admin": "s3cret"}
    ).model_stats
    with pytest.raises(InferenceServerException):  # plaintext to the TLS port
        grpcclient.InferenceServerClient(node_url).infer("simple", inputs, client_timeout=10)

    http_port = node.port("HTTP/REST endpoint")
    with socket.create_connection(("127.0.0.1", http_port), timeout=TIMEOUT) as s:
        s.sendall(b"POST /v2/repository/index HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 403")
    held = [socket.create_connection(("127.0.0.1", http_port), timeout=TIMEOUT) for _ in range(5)]
    try:
        # at the limit a new client is served: the idle connection waiting longest is evicted
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", http_port), timeout=TIMEOUT) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
        assert held[0].recv(100).startswith(b"HTTP/1.1 503")
    finally:
        for s in held:
            s.close()

    def answer_once_not_refused() -> bytes | None:
        with socket.create_connection(("127.0.0.1", http_port), timeout=TIMEOUT) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            head = s.recv(100)
        if head.startswith(b"HTTP/1.1 503"):
            return None
        return head or b"(closed without an answer)"

    # The server learns of those closes from its loop, which may accept the next connection
    # first: a client is served again once they are seen.
    head = wait_until(
        answer_once_not_refused,
        timeout=10.0,
        what="the HTTP endpoint to see the held connections closed",
    )
    assert head.startswith(b"HTTP/1.1 200"), head


def test_node_refuses_bad_endpoint_parameters(start_node):
    node = start_node(
        {
            "model_repository": ROOT_REPO,
            "startup_models": ["simple"],
            "http": {"restricted_api": ["teleport:k=v"]},
        },
        expected_rc=1,
    )
    assert node.proc.wait(timeout=TIMEOUT) == 1
    assert (
        "cannot start: parameter 'http.restricted_api': unknown restricted API 'teleport'"
        in node.log()
    )
