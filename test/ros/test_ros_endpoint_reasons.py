"""Why an endpoint is down, in the node's log (issue 34, item 12), across processes.

Each binding has a good endpoint first (a triton-ros-server A on 127.0.0.1 serving ``detector``)
and one that cannot serve it, for one reason each: the model is not loaded there (server B),
``grpcs://`` to A's plaintext port, ``grpc://`` to a TLS port (a TLS proxy in front of A), a CA
that did not sign the TLS port's certificate, nothing listening, ``http://`` to A's gRPC port and
``grpc://`` to A's HTTP port. While the good endpoint serves, the node's log must say each bad
endpoint's reason in words (it said only ``(down)``), throttled per endpoint, and gRPC's own
``ssl_transport_security.cc ... Handshake failed`` lines (about 4 a second before) must not reach
it (GRPC_VERBOSITY, triton_ros/ros/__init__.py).
"""

from __future__ import annotations

import re
import time

import pytest

from remote_helpers import GrpcProxy, have_openssl, make_certs
from ros_env import TOKEN
from ros_models import make_repository
from ros_probe import NodeProcess, Probe
from server_process import ServerProcess, free_port
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.synthetic_cameras import parse_camera

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(not have_openssl(), reason="needs openssl for certificates"),
]

NS = f"/why{TOKEN}"
WATCH_S = 12.0  # how long the node runs with the bad endpoints down


def server(repo, *models: str) -> ServerProcess:
    args = [
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--allow-metrics",
        "false",
    ]
    for model in models:
        args += ["--load-model", model]
    s = ServerProcess(*args)
    s.wait_live()
    return s


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reasons")
    repo = make_repository(tmp / "models")
    certs = make_certs(tmp / "certs")
    a = server(repo, "detector")
    b = server(repo, "simple")
    tls = GrpcProxy(a.url, certs=certs)
    nobody = free_port()
    good = f"grpc://{a.url}"
    bad = {
        "not_ready": (f"grpc://{b.url}", {}),
        "tls_to_plain": (f"grpcs://{a.url}", {}),
        "plain_to_tls": (f"grpc://127.0.0.1:{tls.port}", {}),
        "wrong_ca": (f"grpcs://127.0.0.1:{tls.port}", {"tls_ca_file": str(certs["other_ca.pem"])}),
        "refused": (f"grpc://127.0.0.1:{nobody}", {}),
        "http_to_grpc": (f"http://{a.url}", {}),
        "grpc_to_http": (f"grpc://{a.http_url}", {}),
    }
    params = {"startup_models": [], "bindings": list(bad)}
    for name, (url, extra) in bad.items():
        params[name] = {
            "model": "detector",
            "server_urls": [good, url],
            "max_age_ms": 0,
            "topics": [parse_camera(f"{name}/cam:64x48:rgb8").topic(NS)],
            **extra,
        }
    probe = Probe(f"probe_{TOKEN}_why")
    node = NodeProcess(params, tmp, name=f"why_node_{TOKEN}")
    try:
        node.wait_ready(probe)
        yield node, probe, bad
    finally:
        probe.close()
        try:
            node.stop_and_check()
        finally:
            tls.close()
            a.stop()
            b.stop()


EXPECTED = {
    "not_ready": "model 'detector' is not ready there",
    "tls_to_plain": "the server does not speak TLS (a plaintext port: use grpc://)",
    "plain_to_tls": "speaks TLS (gRPC says 'Socket closed' for this) but the URL is grpc://: "
    "use grpcs://",
    "wrong_ca": "is not trusted",
    "refused": "connection refused: nothing listens on",
    "http_to_grpc": "speaks HTTP/2 only (a gRPC port?), not HTTP/1.1: use grpc://",
    "grpc_to_http": "speaks HTTP/1.1 (an HTTP port?), not gRPC: use http://",
}


def test_each_down_endpoint_s_reason_is_logged_while_another_serves(env):
    node, probe, bad = env
    specs = [parse_camera(f"{name}/cam:64x48:rgb8") for name in bad]
    recs = {
        s.robot: probe.subscribe(DETECTIONS_TYPE, f"{NS}/{s.robot}/cam/detections") for s in specs
    }
    rig = probe.cameras(specs, prefix=NS, rate=5.0)
    started = time.monotonic()
    try:
        for name, rec in recs.items():  # the good endpoint serves each one
            rec.wait_for(3, what=f"detections of {name}")
        time.sleep(max(0.0, WATCH_S - (time.monotonic() - started)))
    finally:
        rig.stop()
    log = node.log()
    for name, (url, _) in bad.items():
        lines = [
            ln
            for ln in log.splitlines()
            if f"binding '{name}'" in ln and url in ln and ("down" in ln or "not ready" in ln)
        ]
        assert lines, f"{name}: no line about {url}:\n{log}"
        assert any(EXPECTED[name] in ln for ln in lines), (name, lines)
        # the start-up line and at most a few more (throttled per endpoint)
        assert len(lines) <= 4, (name, lines)
    assert "ssl_transport_security" not in log and "Handshake failed" not in log, [
        ln for ln in log.splitlines() if "Handshake" in ln
    ][:5]
    start_up = [
        ln for ln in log.splitlines() if re.search(r"binding '\w+': model 'detector' on ", ln)
    ]
    assert len(start_up) == len(bad)
    for line in start_up:
        assert "(up)" in line and "(down: " in line, line
