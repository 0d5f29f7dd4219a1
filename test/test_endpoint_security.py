"""TLS, restricted protocols, message size limits and descriptor exhaustion on a real
triton-ros-server, with certificates the test generates (``cryptography``): right and wrong
certificates, each case followed by a normal request that must succeed."""

from __future__ import annotations

import datetime
import ipaddress
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tritonclient.utils import InferenceServerException

from processes import wait_until
from server_process import MODEL_REPOSITORY, ROOT, free_port
from simple_model import simple_array, simple_inputs


pytestmark = pytest.mark.integration


# ------------------------------------------------------------------------------------------
# certificates
# ------------------------------------------------------------------------------------------


def wait_live(client, server, timeout: float = 60.0) -> None:
    """Until ``client`` finds the server live; a server that exits or never answers fails the
    wait with its log."""

    def live() -> bool:
        assert server.proc.poll() is None, server.log()
        try:
            return client.is_server_live()
        except InferenceServerException:
            return False

    try:
        wait_until(live, timeout, "the server live", interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.log()}") from None


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool, san: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, key=None, cert=None) -> str:
    if key is not None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    else:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    """A CA, a server and a client certificate it signs, and a rogue CA with its own client."""
    d = tmp_path_factory.mktemp("pki")
    ca_key, rogue_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca = _cert("test-ca", ca_key, "test-ca", ca_key, ca=True)
    rogue = _cert("rogue-ca", rogue_key, "rogue-ca", rogue_key, ca=True)
    server_key, client_key, rogue_client_key = (
        ec.generate_private_key(ec.SECP256R1()) for _ in range(3)
    )
    return {
        "ca": _write(d / "ca.pem", cert=ca),
        "rogue_ca": _write(d / "rogue_ca.pem", cert=rogue),
        "server_cert": _write(
            d / "server.pem",
            cert=_cert("server", server_key, "test-ca", ca_key, ca=False, san=True),
        ),
        "server_key": _write(d / "server.key", key=server_key),
        "client_cert": _write(
            d / "client.pem", cert=_cert("client", client_key, "test-ca", ca_key, ca=False)
        ),
        "client_key": _write(d / "client.key", key=client_key),
        "rogue_client_cert": _write(
            d / "rogue_client.pem",
            cert=_cert("intruder", rogue_client_key, "rogue-ca", rogue_key, ca=False),
        ),
        "rogue_client_key": _write(d / "rogue_client.key", key=rogue_client_key),
    }


def _inputs():
    a = simple_array()
    return simple_inputs(grpcclient, a), a


def _infer_ok(client, headers=None) -> None:
    inputs, a = _inputs()
    result = client.infer("simple", inputs, headers=headers, client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def _refused(client, what: str = "") -> InferenceServerException:
    inputs, _ = _inputs()
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", inputs, client_timeout=10)
    assert info.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED"), (
        what,
        info.value,
    )
    return info.value


# ------------------------------------------------------------------------------------------
# TLS
# ------------------------------------------------------------------------------------------


def test_grpc_tls_right_and_wrong_certificates(start_server, pki):
    server = start_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--allow-http",
        "false",
        "--allow-metrics",
        "false",
        "--grpc-use-ssl",
        "true",
        "--grpc-server-cert",
        pki["server_cert"],
        "--grpc-server-key",
        pki["server_key"],
        wait=False,
    )
    good = grpcclient.InferenceServerClient(server.url, ssl=True, root_certificates=pki["ca"])
    wait_live(good, server)
    _infer_ok(good)
    # a plaintext client, and a TLS client that trusts another CA, are refused
    _refused(grpcclient.InferenceServerClient(server.url), "plaintext")
    _infer_ok(good)
    _refused(
        grpcclient.InferenceServerClient(server.url, ssl=True, root_certificates=pki["rogue_ca"]),
        "rogue CA",
    )
    _infer_ok(good)


def test_grpc_mutual_tls_needs_a_client_certificate_of_the_root(start_server, pki):
    server = start_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--allow-http",
        "false",
        "--allow-metrics",
        "false",
        "--grpc-use-ssl-mutual",
        "true",
        "--grpc-server-cert",
        pki["server_cert"],
        "--grpc-server-key",
        pki["server_key"],
        "--grpc-root-cert",
        pki["ca"],
        wait=False,
    )
    good = grpcclient.InferenceServerClient(
        server.url,
        ssl=True,
        root_certificates=pki["ca"],
        private_key=pki["client_key"],
        certificate_chain=pki["client_cert"],
    )
    wait_live(good, server)
    _infer_ok(good)
    _refused(
        grpcclient.InferenceServerClient(server.url, ssl=True, root_certificates=pki["ca"]),
        "no client certificate",
    )
    _infer_ok(good)
    _refused(
        grpcclient.InferenceServerClient(
            server.url,
            ssl=True,
            root_certificates=pki["ca"],
            private_key=pki["rogue_client_key"],
            certificate_chain=pki["rogue_client_cert"],
        ),
        "client certificate of another CA",
    )
    _infer_ok(good)
    _refused(grpcclient.InferenceServerClient(server.url), "plaintext")
    _infer_ok(good)


@pytest.mark.parametrize(
    "flags,message",
    [
        (("--grpc-use-ssl", "true"), "needs --grpc-server-cert"),
        (
            (
                "--grpc-use-ssl-mutual",
                "true",
                "--grpc-server-cert",
                "/nonexistent/cert.pem",
                "--grpc-server-key",
                "/nonexistent/key.pem",
            ),
            "needs --grpc-root-cert",
        ),
        (
            (
                "--grpc-use-ssl",
                "true",
                "--grpc-server-cert",
                "/nonexistent/cert.pem",
                "--grpc-server-key",
                "/nonexistent/key.pem",
            ),
            "cannot read '/nonexistent/key.pem'",
        ),
        (("--http-restricted-api", "inference"), "expects '<apis>:<restricted-key>"),
        (("--http-restricted-api", "teleport:k=v"), "unknown restricted"),
        (
            (
                "--grpc-restricted-protocol",
                "health:k=v",
                "--grpc-restricted-protocol",
                "health:a=b",
            ),
            "multiple config groups",
        ),
        (("--http-max-request-size", "0x10"), "expected a decimal integer"),
        (("--http-max-request-size", "0"), "--http-max-request-size must be a positive integer"),
        (("--grpc-port", "70000"), "--grpc-port must be within [0, 65535]"),
    ],
)
def test_bad_endpoint_flags_fail_at_start(flags, message):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "triton_ros.server_main",
            "--model-repository",
            str(MODEL_REPOSITORY),
            "--grpc-port",
            str(free_port()),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# ------------------------------------------------------------------------------------------
# restricted gRPC protocols, message size
# ------------------------------------------------------------------------------------------


def test_grpc_restricted_protocols_and_message_size(start_server):
    server = start_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--grpc-restricted-protocol",
        "model-repository,statistics:admin=s3cret",
        "--grpc-restricted-protocol",
        "inference:infer-key=k1",
        "--grpc-max-message-size",
        "1000000",
    )
    client = server.client()
    assert client.is_server_live()  # health is not restricted
    with pytest.raises(InferenceServerException) as info:
        client.get_model_repository_index()
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert (
        "This protocol is restricted, expecting header 'triton-grpc-protocol-admin'"
        in info.value.message()
    )
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("simple", headers={"triton-grpc-protocol-admin": "no"})
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert client.get_inference_statistics(
        "simple", headers={"triton-grpc-protocol-admin": "s3cret"}
    ).model_stats
    with pytest.raises(InferenceServerException) as info:
        _infer_ok(client)
    assert "triton-grpc-protocol-infer-key" in info.value.message()
    _infer_ok(client, headers={"triton-grpc-protocol-infer-key": "k1"})
    # the stream is restricted as well
    errors = []
    client.start_stream(callback=lambda result, error: errors.append(error))
    inputs, _ = _inputs()
    try:
        client.async_stream_infer("simple", inputs)
    except InferenceServerException:
        pass  # the stream may have ended already: its error went to the callback
    wait_until(lambda: errors, 20, "the restricted stream's error")
    client.stop_stream()
    assert errors and errors[0] is not None
    assert "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'" in str(
        errors[0]
    )
    # a message over --grpc-max-message-size: RESOURCE_EXHAUSTED, then normal requests go on
    big = grpcclient.InferInput("INPUT0", [1, 400_000], "INT32")
    big.set_data_from_numpy(np.zeros((1, 400_000), np.int32))
    other = grpcclient.InferInput("INPUT1", [1, 400_000], "INT32")
    other.set_data_from_numpy(np.zeros((1, 400_000), np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", [big, other], headers={"triton-grpc-protocol-infer-key": "k1"})
    assert info.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    _infer_ok(client, headers={"triton-grpc-protocol-infer-key": "k1"})


# ------------------------------------------------------------------------------------------
# descriptors
# ------------------------------------------------------------------------------------------


def test_idle_clients_never_exhaust_descriptors(tmp_path):
    """A server limited to 256 descriptors, 400 idle HTTP clients: each one over the
    connection limit evicts the longest idle one (503, closed), the process keeps descriptors
    for everything else (gRPC inference and a model load go on), a new HTTP client is served
    meanwhile, and once the idle clients close HTTP serves as before."""
    grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
    log = tmp_path / "server.log"
    cmd = (
        f"ulimit -n 256 && exec {sys.executable} -m triton_ros.server_main "
        f"--model-repository {MODEL_REPOSITORY} --model-control-mode explicit "
        f"--load-model simple --grpc-port {grpc_port} --http-port {http_port} "
        f"--metrics-port {metrics_port} --http-idle-timeout-secs 120 "
        f"--http-header-timeout-secs 120"
    )
    with open(log, "w") as out:
        proc = subprocess.Popen(
            ["bash", "-c", cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(ROOT),
            env=dict(os.environ),
        )
    socks: list[socket.socket] = []
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")

        def started() -> bool:
            assert proc.poll() is None, log.read_text()
            return "Started Metrics Service" in log.read_text()

        wait_until(started, 90, "the server started", interval=0.2)
        limit = (256 - 64) // 4
        for _ in range(400):
            socks.append(socket.create_connection(("127.0.0.1", http_port), timeout=10))
        # as many as are over the limit are answered 503 at once (the oldest: evicted); the
        # others stay open, idle
        refused, pending = 0, set(socks)
        deadline = time.monotonic() + 20
        while refused < 400 - limit and time.monotonic() < deadline:
            readable, _, _ = select.select(list(pending), [], [], 0.5)
            for s in readable:
                pending.discard(s)
                refused += s.recv(200).startswith(b"HTTP/1.1 503")
        time.sleep(1.0)
        assert refused == 400 - limit, refused
        assert not select.select(list(pending), [], [], 0)[0]  # the held ones: no answer
        # a new HTTP client is served while the idle ones hold every slot: one of them goes
        with socket.create_connection(("127.0.0.1", http_port), timeout=10) as s:
            s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            assert s.recv(200).startswith(b"HTTP/1.1 200")
        readable, _, _ = select.select(list(pending), [], [], 10)
        assert len(readable) == 1 and readable[0].recv(200).startswith(b"HTTP/1.1 503")
        # descriptors are left for the rest of the process: gRPC, a model load
        _infer_ok(client)
        client.load_model("simple_string")
        assert client.is_model_ready("simple_string")
        for s in socks:
            s.close()
        socks.clear()
        time.sleep(1.0)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        assert http.is_server_live()
        assert http.is_model_ready("simple")
        _infer_ok(client)
    finally:
        for s in socks:
            s.close()
        proc.send_signal(2)
        assert proc.wait(timeout=60) == 0, log.read_text()


def test_grpc_connections_that_never_handshake_are_closed(start_server):
    """Raw TCP clients that never send the HTTP/2 preface are closed by the gRPC server after
    --grpc-handshake-timeout-secs, so they cannot hold descriptors; calls go on meanwhile."""
    server = start_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--grpc-handshake-timeout-secs",
        "1",
        "--allow-http",
        "false",
        "--allow-metrics",
        "false",
    )
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(50)]
    try:
        client = server.client()
        _infer_ok(client)
        started = time.monotonic()
        for s in socks:
            s.settimeout(30)
            try:
                data = s.recv(1024)
                while data:  # the server's settings frame, then the close
                    data = s.recv(1024)
            except ConnectionResetError:
                pass
        assert time.monotonic() - started < 25
        _infer_ok(client)
    finally:
        for s in socks:
            s.close()


def test_grpc_connections_over_the_limit_are_closed(start_server):
    """Past --grpc-max-connections, gRPC closes a new connection as soon as it accepts it;
    the ones within the limit keep serving, and new ones work once the others close."""
    server = start_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--grpc-max-connections",
        "10",
        "--grpc-handshake-timeout-secs",
        "120",
        "--allow-http",
        "false",
        "--allow-metrics",
        "false",
    )
    client = server.client()
    _infer_ok(client)  # the client's own connection: one of the ten
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(20)]
    try:
        time.sleep(1.0)
        closed = 0
        for s in socks:
            s.settimeout(0.5)
            try:
                closed += s.recv(1024) == b""
            except socket.timeout:
                pass  # held: within the limit
            except ConnectionResetError:
                closed += 1
        assert closed >= 20 - 9, closed
        _infer_ok(client)
    finally:
        for s in socks:
            s.close()
    time.sleep(1.0)
    _infer_ok(grpcclient.InferenceServerClient(server.url))
