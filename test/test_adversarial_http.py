"""Hostile clients against a real triton-ros-server's HTTP/REST and metrics endpoints, over raw
sockets on 127.0.0.1: malformed framing, oversize and slow requests, floods of idle connections,
restricted APIs. Each case asserts the status the server answers (Triton's where Triton has
one) and that a normal inference right after it succeeds.

TLS, restricted gRPC protocols and the descriptor-exhaustion case are in
``test_endpoint_security.py``.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from server_process import MODEL_REPOSITORY, ServerProcess
from simple_model import simple_array, simple_inputs


pytestmark = pytest.mark.integration

HEADER_TIMEOUT = 1.5
IDLE_TIMEOUT = 3.0
MAX_REQUEST = 40_000_000
MAX_CONNECTIONS = 40
METRICS_CONNECTIONS = 8
ADMIN = ("admin-key", "s3cret")


@pytest.fixture(scope="module")
def server(start_module_server):
    # quiet: hostile input is answered, not a fault (no traceback in the log)
    return start_module_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--http-header-timeout-secs",
        str(HEADER_TIMEOUT),
        "--http-idle-timeout-secs",
        str(IDLE_TIMEOUT),
        "--http-max-request-size",
        str(MAX_REQUEST),
        "--http-max-connections",
        str(MAX_CONNECTIONS),
        "--metrics-max-connections",
        str(METRICS_CONNECTIONS),
        "--http-restricted-api",
        f"model-repository,shared-memory:{ADMIN[0]}={ADMIN[1]}",
        quiet=True,
    )


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def connect(port: int, timeout: float = 20.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP response (status, lower-case headers, body); status 0 if the server closed the
    connection without answering."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return 0, {}, data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if lines[0].startswith("HTTP/1.1 100"):
        s_rest = rest
        # an interim answer: the real one follows
        sock_data = s_rest
        while b"\r\n\r\n" not in sock_data:
            chunk = s.recv(65536)
            if not chunk:
                return 0, {}, sock_data
            sock_data += chunk
        head, _, rest = sock_data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def raw(port: int, data: bytes, timeout: float = 20.0) -> tuple[int, dict[str, str], bytes]:
    with connect(port, timeout) as s:
        s.sendall(data)
        return read_response(s)


def request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    length: int | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: t"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if length is None and body:
        length = len(body)
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def simple_body(pad: int = 0) -> bytes:
    data = list(range(16))
    header = {
        "inputs": [
            {"name": n, "datatype": "INT32", "shape": [1, 16], "data": data}
            for n in ("INPUT0", "INPUT1")
        ]
    }
    text = json.dumps(header)
    return (text[:-1] + " " * pad + "}").encode()


def assert_normal(server: ServerProcess) -> None:
    """A normal inference, right after a hostile client, answers correctly."""
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=30)
    try:
        a = simple_array()
        result = client.infer("simple", simple_inputs(httpclient, a))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
        assert client.is_server_live()
    finally:
        client.close()


def status_of(server: ServerProcess) -> dict[str, str]:
    out = {}
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


INFER = "/v2/models/simple/infer"
DEEP = b'{"inputs":' + b"[" * 30000 + b"]" * 30000 + b"}"

# (id, raw request bytes, expected status)
FRAMING_CASES = [
    (
        "negative-chunk-size",
        (
            f"POST {INFER} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
            f"\r\n-5\r\nabcde\r\n0\r\n\r\n"
        ).encode(),
        400,
    ),
    (
        "chunk-size-overflow",
        (
            f"POST {INFER} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
            f"\r\nffffffffffffffffffffffff\r\nab\r\n0\r\n\r\n"
        ).encode(),
        400,
    ),
    (
        "chunk-size-not-hex",
        (
            f"POST {INFER} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
            f"\r\nzz\r\nab\r\n0\r\n\r\n"
        ).encode(),
        400,
    ),
    ("content-length-hex", request("POST", INFER, b"{}", {"Content-Length": "0x2"}), 400),
    ("content-length-underscore", request("POST", INFER, b"{}", {"Content-Length": "0_2"}), 400),
    ("content-length-plus", request("POST", INFER, b"{}", {"Content-Length": "+2"}), 400),
    ("content-length-negative", request("POST", INFER, b"{}", {"Content-Length": "-1"}), 400),
    (
        "content-length-twice",
        request("POST", INFER, b"{}", {"Content-Length": "2\r\nContent-Length: 3"}),
        400,
    ),
    (
        "content-length-and-chunked",
        (
            f"POST {INFER} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
            f"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ).encode(),
        400,
    ),
    ("garbage-request-line", b"HELLO THERE\r\n\r\n", 400),
    ("bad-http-version", b"GET /v2/health/live HTTP/9.9\r\nHost: t\r\n\r\n", 400),
    ("header-without-colon", b"GET /v2/health/live HTTP/1.1\r\nHost t\r\n\r\n", 400),
    (
        "header-line-too-long",
        request("GET", "/v2/health/live", headers={"X-Big": "a" * 20000}),
        400,
    ),
    (
        "too-many-headers",
        request("GET", "/v2/health/live", headers={f"X-H{i}": "v" for i in range(300)}),
        400,
    ),
    ("path-too-long", request("GET", "/v2/models/" + "m" * 20000), 400),
    ("nul-in-path", b"GET /v2/models/a\x00b HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("unknown-method", b"BREW /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("delete-method", request("DELETE", "/v2/health/live"), 405),
    ("unknown-route", request("GET", "/v3/whatever"), 404),
    ("traversal-model-name", request("GET", "/v2/models/..%2F..%2Fetc%2Fpasswd/config"), 404),
    ("post-to-health", request("POST", "/v2/health/live", b"{}"), 405),
    ("get-to-infer", request("GET", INFER), 405),
    ("deep-json-infer", request("POST", INFER, DEEP), 400),
    ("deep-json-logging", request("POST", "/v2/logging", DEEP), 400),
    ("invalid-utf8-json", request("POST", INFER, b'{"inputs": "\xff\xfe"}'), 400),
    ("json-array-body", request("POST", INFER, b"[1, 2, 3]"), 400),
    ("json-trailing-garbage", request("POST", INFER, simple_body() + b"}}}"), 400),
    (
        "infer-header-length-underscore",
        request("POST", INFER, simple_body(), {"Inference-Header-Content-Length": "0_2"}),
        400,
    ),
    (
        "infer-header-length-hex",
        request("POST", INFER, simple_body(), {"Inference-Header-Content-Length": "0x2"}),
        400,
    ),
    (
        "infer-header-length-past-body",
        request("POST", INFER, simple_body(), {"Inference-Header-Content-Length": "999999"}),
        400,
    ),
    (
        "binary-size-past-body",
        request(
            "POST",
            INFER,
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": n,
                            "datatype": "INT32",
                            "shape": [1, 16],
                            "parameters": {"binary_data_size": 10**9},
                        }
                        for n in ("INPUT0", "INPUT1")
                    ]
                }
            ).encode(),
            {
                "Inference-Header-Content-Length": str(
                    len(
                        json.dumps(
                            {
                                "inputs": [
                                    {
                                        "name": n,
                                        "datatype": "INT32",
                                        "shape": [1, 16],
                                        "parameters": {"binary_data_size": 10**9},
                                    }
                                    for n in ("INPUT0", "INPUT1")
                                ]
                            }
                        )
                    )
                )
            },
        ),
        400,
    ),
    (
        "corrupt-gzip",
        request("POST", INFER, b"\x1f\x8b\x08\x00garbage", {"Content-Encoding": "gzip"}),
        400,
    ),
    (
        "unsupported-encoding",
        request("POST", INFER, simple_body(), {"Content-Encoding": "br"}),
        501,
    ),
    ("declared-over-limit", request("POST", INFER, b"", length=MAX_REQUEST + 1), 413),
    ("repository-without-key", request("POST", "/v2/repository/index", b"{}"), 403),
    (
        "repository-wrong-key",
        request("POST", "/v2/repository/index", b"{}", {ADMIN[0]: "guess"}),
        403,
    ),
    (
        "shm-register-without-key",
        request(
            "POST",
            "/v2/systemsharedmemory/region/r/register",
            b'{"key": "/x", "offset": 0, "byte_size": 4}',
        ),
        403,
    ),
]


@pytest.mark.parametrize(
    "data,expected", [c[1:] for c in FRAMING_CASES], ids=[c[0] for c in FRAMING_CASES]
)
def test_malformed_request_gets_its_status(server, data, expected):
    status, _, body = raw(server.http_port, data)
    assert status == expected, body
    assert_normal(server)


def test_restricted_api_with_the_header_is_served(server):
    status, _, body = raw(
        server.http_port, request("POST", "/v2/repository/index", b"{}", {ADMIN[0]: ADMIN[1]})
    )
    assert status == 200, body
    assert {"simple", "detector"} <= {m["name"] for m in json.loads(body)}
    status, _, body = raw(server.http_port, request("POST", "/v2/repository/index", b"{}"))
    assert status == 403
    assert json.loads(body) == {"error": f"This API is restricted, expecting header '{ADMIN[0]}'"}
    assert_normal(server)


def test_large_post_to_health_is_refused_before_its_body(server):
    """A 100 MB POST to /v2/health/live gets 405 from its head alone (nothing is read)."""
    with connect(server.http_port) as s:
        started = time.monotonic()
        s.sendall(request("POST", "/v2/health/live", length=100 * 1024 * 1024))
        status, headers, _ = read_response(s)
        assert status == 405
        assert time.monotonic() - started < 5.0
        assert headers.get("connection", "").lower() == "close"
    assert_normal(server)


def test_chunked_body_over_the_limit_gets_413(server):
    with connect(server.http_port) as s:
        s.sendall(
            f"POST {INFER} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        chunk = b"%x\r\n" % (1 << 20) + b"a" * (1 << 20) + b"\r\n"
        try:
            for _ in range(MAX_REQUEST // (1 << 20) + 2):
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed while we were still sending
        status, _, _ = read_response(s)
        assert status == 413
    assert_normal(server)


def test_gzip_bomb_gets_413(server):
    bomb = gzip.compress(b"\0" * (MAX_REQUEST * 3))
    assert len(bomb) < 200_000
    status, _, body = raw(
        server.http_port, request("POST", INFER, bomb, {"Content-Encoding": "gzip"})
    )
    assert status == 413, body
    assert_normal(server)


def test_expect_100_continue(server):
    with connect(server.http_port) as s:
        body = simple_body()
        s.sendall(request("POST", INFER, headers={"Expect": "100-continue"}, length=len(body)))
        first = s.recv(25)
        assert first.startswith(b"HTTP/1.1 100 Continue")
        s.recv(65536) if len(first) < 25 else None
        s.sendall(body)
        status, _, out = read_response(s)
        assert status == 200, out
    assert_normal(server)


def test_half_sent_headers_are_closed_with_408(server):
    """300 connections that send half a header are all answered 408 and closed within the
    header timeout, and a normal request succeeds meanwhile and after."""
    socks = []
    for _ in range(300):
        try:
            s = connect(server.http_port)
        except OSError:
            break
        s.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        socks.append(s)
    try:
        deadline = time.monotonic() + HEADER_TIMEOUT + 30
        closed = 0
        for s in socks:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            status, _, _ = read_response(s)
            assert status in (408, 503)  # 503: over --http-max-connections, closed at once
            closed += 1
        assert closed == len(socks)
    finally:
        for s in socks:
            s.close()
    assert_normal(server)


def test_idle_connection_is_closed_after_the_idle_timeout(server):
    with connect(server.http_port) as s:
        s.sendall(request("GET", "/v2/health/live"))
        status, _, _ = read_response(s)
        assert status == 200
        s.settimeout(IDLE_TIMEOUT + 30)
        started = time.monotonic()
        assert s.recv(100) == b""  # closed by the server
        assert time.monotonic() - started < IDLE_TIMEOUT + 20
    assert_normal(server)


def test_stalled_body_gets_408(server):
    with connect(server.http_port) as s:
        s.sendall(request("POST", INFER, length=1000) + b'{"inputs"')
        s.settimeout(IDLE_TIMEOUT + 30)
        status, _, _ = read_response(s)
        assert status == 408
    assert_normal(server)


def test_connections_over_the_limit_get_503_and_the_server_recovers(server):
    """50 idle connections at a limit of 40: each of the last 10 evicts the longest idle one
    (503); the 40 left get 408 at the header timeout."""
    time.sleep(1.0)  # earlier clients' connections are closed on the server's side too
    socks = [connect(server.http_port) for _ in range(MAX_CONNECTIONS + 10)]
    try:
        statuses = []
        for s in socks:
            s.settimeout(HEADER_TIMEOUT + 30)
            statuses.append(read_response(s)[0])
        # the ones over the limit at once; the others, idle, when their header timeout ends
        assert statuses.count(503) == 10, statuses
        assert statuses.count(408) == MAX_CONNECTIONS, statuses
    finally:
        for s in socks:
            s.close()
    time.sleep(0.5)
    assert_normal(server)


def test_million_one_byte_chunks_use_bounded_memory(server):
    """A valid request sent as one million 1-byte chunks is answered 200, and the server's peak
    memory grows by far less than 20 times the data."""
    body = simple_body(pad=1_000_000 - len(simple_body()))
    assert len(body) == 1_000_000
    payload = (
        b"".join(b"1\r\n" + body[i : i + 1] + b"\r\n" for i in range(len(body))) + b"0\r\n\r\n"
    )

    def rss_kb() -> int:
        return int(status_of(server)["VmRSS"].split()[0])

    before = rss_kb()
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with connect(server.http_port, timeout=120) as s:
            s.sendall(
                f"POST {INFER} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            )
            s.sendall(payload)
            status, _, out = read_response(s)
    finally:
        done.set()
        sampler.join()
    assert status == 200, out
    # the old server held each chunk as an object: about 20 times the data
    assert (peak[0] - before) * 1024 < 10 * len(body), (before, peak[0])
    assert_normal(server)


def test_health_answers_within_50ms_while_32mb_decodes(server):
    """A 32 MB BYTES request (many tiny elements: slow to decode) is decoded off the event
    loop: /v2/health/live keeps answering meanwhile."""
    n = 32 * 1024 * 1024 // 5
    elements = b"".join(struct.pack("<I", 1) + b"x" for _ in range(1024)) * (n // 1024)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [n // 1024 * 1024],
                    "parameters": {"binary_data_size": len(elements)},
                }
            ]
        }
    ).encode()
    big = request(
        "POST",
        "/v2/models/no_such_model/infer",
        header + elements,
        {"Inference-Header-Content-Length": str(len(header))},
    )
    result: dict = {}

    def send_big():
        result["answer"] = raw(server.http_port, big, timeout=120)

    latencies = []
    with connect(server.http_port) as probe:
        thread = threading.Thread(target=send_big)
        thread.start()
        while thread.is_alive():
            started = time.perf_counter()
            probe.sendall(request("GET", "/v2/health/live"))
            status, _, _ = read_response(probe)
            latencies.append(time.perf_counter() - started)
            assert status == 200
            time.sleep(0.02)
        thread.join()
    assert result["answer"][0] == 404  # the unknown model's answer, as tritonserver's
    assert len(latencies) >= 5, latencies
    latencies.sort()
    assert latencies[len(latencies) // 2] < 0.05, latencies
    assert latencies[int(len(latencies) * 0.9)] < 0.25, latencies
    assert_normal(server)


# ------------------------------------------------------------------------------------------
# metrics endpoint
# ------------------------------------------------------------------------------------------


def scrape_ok(server: ServerProcess) -> None:
    with urllib.request.urlopen(server.metrics_url, timeout=30) as r:
        assert r.status == 200
        assert b"nv_inference_request_success{" in r.read()


@pytest.mark.parametrize(
    "data,expected",
    [
        (request("POST", "/metrics", b"{}"), 405),
        (request("GET", "/metrics/../v2"), 404),
        (b"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0x10\r\n\r\n", 400),
        (request("POST", "/metrics", length=100 * 1024 * 1024), 405),
    ],
    ids=["post", "other-path", "hex-length", "huge-post"],
)
def test_metrics_malformed(server, data, expected):
    status, _, _ = raw(server.metrics_port, data)
    assert status == expected
    scrape_ok(server)
    assert_normal(server)


def test_metrics_idle_clients_cost_no_threads(server):
    time.sleep(1.0)  # earlier scrapes' connections are closed on the server's side too
    threads_before = int(status_of(server)["Threads"])
    socks = [connect(server.metrics_port) for _ in range(100)]
    try:
        time.sleep(1.0)
        threads_during = int(status_of(server)["Threads"])
        assert threads_during <= threads_before + 4, (threads_before, threads_during)
        # each connection over the limit evicts the longest idle one (503); the last ones get
        # 408 at the header timeout
        statuses = []
        for s in socks:
            s.settimeout(HEADER_TIMEOUT + 30)
            statuses.append(read_response(s)[0])
        assert statuses.count(503) == 100 - METRICS_CONNECTIONS, statuses
        assert statuses.count(408) == METRICS_CONNECTIONS, statuses
    finally:
        for s in socks:
            s.close()
    time.sleep(0.5)
    scrape_ok(server)
    assert_normal(server)


def test_metrics_half_header_is_closed(server):
    with connect(server.metrics_port) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost")
        s.settimeout(HEADER_TIMEOUT + 30)
        status, _, _ = read_response(s)
        assert status == 408
    scrape_ok(server)
    assert_normal(server)
