"""The KServe v2 HTTP/REST endpoint of a real triton-ros-server, through tritonclient.http,
raw HTTP requests and perf_analyzer -i http."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from server_process import MODEL_REPOSITORY, ROOT
from simple_model import simple_array, simple_inputs


pytestmark = pytest.mark.integration

PERF_ANALYZER = ROOT / ".venv" / "bin" / "perf_analyzer"


def _simple_inputs(binary: bool = True, n: int = 1):
    """simple's inputs 0, 1, 2... and 2s over ``n`` rows, and those two arrays."""
    a, b = simple_array(rows=n), simple_array(2, rows=n)
    return simple_inputs(httpclient, a, b, binary=binary), a, b


class Raw:
    """One persistent HTTP/1.1 connection for hand-made requests."""

    def __init__(self, url: str) -> None:
        host, port = url.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)

    def request(
        self, method: str, path: str, body: bytes | str | None = None, headers: dict | None = None
    ) -> tuple[int, dict, bytes]:
        self.conn.request(method, path, body=body, headers=headers or {})
        response = self.conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()

    def close(self) -> None:
        self.conn.close()


def _error(body: bytes) -> str:
    doc = json.loads(body)
    assert set(doc) == {"error"}, doc
    return doc["error"]


# ------------------------------------------------------------------------------------------
# Health, metadata, configuration, statistics
# ------------------------------------------------------------------------------------------


def test_health_and_metadata(bundled_server):
    c = bundled_server.http_client()
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("simple") and c.is_model_ready("simple", "1")
    assert not c.is_model_ready("simple", "7") and not c.is_model_ready("unknown")
    md = c.get_server_metadata()
    assert md["name"] == "triton" and "binary_tensor_data" in md["extensions"]
    mm = c.get_model_metadata("simple")
    assert mm["name"] == "simple" and mm["versions"] == ["1"]
    assert mm["platform"] == "onnxruntime_onnx"
    assert mm["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert c.get_model_metadata("simple", "1") == mm
    config = c.get_model_config("detector")
    # the same configuration the gRPC endpoint gives, ints as numbers
    grpc_config = bundled_server.client().get_model_config("detector", as_json=True)["config"]
    assert config["max_batch_size"] == 16 == int(grpc_config["max_batch_size"])
    assert config["name"] == "detector" and config["input"][0]["dims"] == [3, 256, 256]
    with pytest.raises(InferenceServerException) as info:
        c.get_model_metadata("unknown")
    assert info.value.status() == "404" and "unknown model" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        c.get_model_config("simple", "9")
    assert info.value.status() == "404"


def test_infer_json_binary_classification_compression(bundled_server):
    c = bundled_server.http_client()
    for binary_in in (False, True):
        for binary_out in (False, True):
            inputs, a, b = _simple_inputs(binary_in, n=2)
            outputs = [
                httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out),
                httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary_out),
            ]
            result = c.infer("simple", inputs, outputs=outputs, request_id="r-1")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            response = result.get_response()
            assert response["id"] == "r-1" and response["model_name"] == "simple"
            assert response["model_version"] == "1"
    # no outputs named: every output (tritonclient asks for binary_data_output)
    inputs, a, b = _simple_inputs(True)
    result = c.infer("simple", inputs, model_version="1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    # ... and JSON by default when the request does not ask for binary
    raw = Raw(bundled_server.http_url)
    status, headers, reply = raw.request(
        "POST",
        "/v2/models/simple/infer",
        json.dumps(
            {
                "id": "j",
                "inputs": [
                    {"name": n, "datatype": "INT32", "shape": [16], "data": [[1] * 16]}
                    for n in ("INPUT0", "INPUT1")
                ],
            }
        ).replace('"shape": [16]', '"shape": [1, 16]'),
    )
    raw.close()
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(reply)
    assert doc["id"] == "j" and [o["name"] for o in doc["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert doc["outputs"][0] == {
        "name": "OUTPUT0",
        "datatype": "INT32",
        "shape": [1, 16],
        "data": [2] * 16,
    }
    # FP32 images, classification extension, gzip request and deflate response
    images = np.random.default_rng(0).random((2, 3, 256, 256), dtype=np.float32)
    x = httpclient.InferInput("images", list(images.shape), "FP32")
    x.set_data_from_numpy(images)
    plain = c.infer("detector", [x])
    compressed = c.infer(
        "detector",
        [x],
        request_compression_algorithm="gzip",
        response_compression_algorithm="deflate",
    )
    np.testing.assert_array_equal(plain.as_numpy("boxes"), compressed.as_numpy("boxes"))
    g = bundled_server.client()
    gx = grpcclient.InferInput("images", list(images.shape), "FP32")
    gx.set_data_from_numpy(images)
    np.testing.assert_allclose(
        g.infer("detector", [gx]).as_numpy("scores"), plain.as_numpy("scores"), rtol=1e-5, atol=1e-6
    )
    top = c.infer(
        "detector", [x], outputs=[httpclient.InferRequestedOutput("scores", class_count=2)]
    )
    classes = top.as_numpy("scores")
    assert classes.shape == (2, 2) and classes.dtype == np.object_
    assert all(len(item.split(b":")) >= 2 for item in classes.reshape(-1))


def test_statistics_routes(bundled_server):
    c = bundled_server.http_client()
    inputs, _, _ = _simple_inputs(True)
    before = c.get_inference_statistics("simple")["model_stats"][0]
    c.infer("simple", inputs)
    after = c.get_inference_statistics("simple", "1")["model_stats"][0]
    assert after["name"] == "simple" and after["version"] == "1"
    assert (
        after["inference_stats"]["success"]["count"]
        == before["inference_stats"]["success"]["count"] + 1
    )
    for key in (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    ):
        assert set(after["inference_stats"][key]) == {"count", "ns"}
    assert after["batch_stats"][0]["batch_size"] == 1
    every = c.get_inference_statistics()["model_stats"]
    # every model of the bundled repository, each once
    bundled = {p.parent.name for p in MODEL_REPOSITORY.glob("*/config.pbtxt")}
    assert "simple" in bundled and "color_detector" in bundled
    assert sorted(s["name"] for s in every) == sorted(bundled)
    # the gRPC endpoint reports the same numbers
    grpc_stats = bundled_server.client().get_inference_statistics("simple", as_json=True)
    assert int(grpc_stats["model_stats"][0]["inference_count"]) >= after["inference_count"]


# ------------------------------------------------------------------------------------------
# Bad input: Triton's status codes, and the server keeps serving
# ------------------------------------------------------------------------------------------


def _binary_body(header: dict, *tensors: np.ndarray) -> tuple[bytes, int]:
    head = json.dumps(header).encode()
    return head + b"".join(t.tobytes() for t in tensors), len(head)


def test_bad_requests_get_triton_status_codes_and_server_keeps_serving(bundled_server):
    raw = Raw(bundled_server.http_url)
    a = np.zeros((1, 16), np.int32)
    good = {
        "inputs": [
            {
                "name": n,
                "datatype": "INT32",
                "shape": [1, 16],
                "parameters": {"binary_data_size": 64},
            }
            for n in ("INPUT0", "INPUT1")
        ]
    }
    body, hlen = _binary_body(good, a, a)
    ok_headers = {"Inference-Header-Content-Length": str(hlen)}

    cases = [
        # (method, path, body, headers, status, message fragment)
        ("POST", "/v2/models/simple/infer", b"{not json", {}, 400, "parse"),
        ("POST", "/v2/models/simple/infer", b"[1, 2]", {}, 400, "object"),
        ("POST", "/v2/models/simple/infer", b"", {}, 400, "parse"),
        (
            "POST",
            "/v2/models/simple/infer",
            body,
            {"Inference-Header-Content-Length": "abc"},
            400,
            "Inference-Header-Content-Length",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            body,
            {"Inference-Header-Content-Length": str(len(body) + 5)},
            400,
            "inference header size",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            body,
            {"Inference-Header-Content-Length": str(hlen - 3)},
            400,
            "parse",
        ),
        ("POST", "/v2/models/simple/infer", body[:-10], ok_headers, 400, "additional bytes"),
        ("POST", "/v2/models/simple/infer", body + b"xx", ok_headers, 400, "additional input data"),
        ("POST", "/v2/models/simple/infer", body, {}, 400, "parse"),  # binary without the header
        ("POST", "/v2/models/unknown/infer", body, ok_headers, 404, "unknown model"),
        ("POST", "/v2/models/simple/versions/3/infer", body, ok_headers, 404, "version 3"),
        (
            "POST",
            "/v2/models/simple/infer",
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "datatype": "INT32",
                            "shape": [1, 8],
                            "data": list(range(8)),
                        },
                        {
                            "name": "INPUT1",
                            "datatype": "INT32",
                            "shape": [1, 8],
                            "data": list(range(8)),
                        },
                    ]
                }
            ),
            {},
            400,
            "unexpected shape",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "datatype": "INT32",
                            "shape": [1, 16],
                            "data": list(range(15)),
                        }
                    ]
                }
            ),
            {},
            400,
            "shape does not match",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}]}),
            {},
            400,
            "Input must set only one",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "datatype": "FP32",
                            "shape": [1, 16],
                            "data": [0.5] * 16,
                        },
                        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
                    ]
                }
            ),
            {},
            400,
            "data-type",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            json.dumps({"inputs": [], "outputs": [{"name": "NOPE"}]}),
            {},
            400,
            "",
        ),
        (
            "POST",
            "/v2/models/simple/infer",
            body,
            {**ok_headers, "Content-Encoding": "br"},
            501,
            "Unsupported compression",
        ),
        ("GET", "/v2/models/simple/infer", None, {}, 405, "Method Not Allowed"),
        ("POST", "/v2/models/simple", b"", {}, 405, "Method Not Allowed"),
        ("GET", "/v2/repository/index", None, {}, 405, "Method Not Allowed"),
        ("GET", "/v2/nothing/here", None, {}, 404, "Not Found"),
        ("POST", "/v2/repository/index", b'{"ready": "yes"}', {}, 400, "ready"),
        ("POST", "/v2/repository/models/simple/load", b"{}", {}, 503, "not allowed"),
    ]
    for method, path, payload, headers, status, fragment in cases:
        got, _, reply = raw.request(method, path, payload, headers)
        assert got == status, (method, path, headers, reply)
        assert fragment in _error(reply), (path, reply)
        # the same connection keeps working after every error
        got, _, reply = raw.request("POST", "/v2/models/simple/infer", body, ok_headers)
        assert got == 200, reply
    raw.close()

    # A malformed request line closes that connection only; the server keeps serving.
    with socket.create_connection(tuple(bundled_server.http_url.split(":"))) as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        assert b" 400 " in s.recv(4096).split(b"\r\n", 1)[0]
    assert bundled_server.http_client().is_server_live()
    assert bundled_server.client().is_server_live()


def test_keep_alive_expect_continue_and_chunked(bundled_server):
    host, port = bundled_server.http_url.split(":")
    a = np.ones((1, 16), np.int32)
    header = {
        "inputs": [
            {
                "name": n,
                "datatype": "INT32",
                "shape": [1, 16],
                "parameters": {"binary_data_size": 64},
            }
            for n in ("INPUT0", "INPUT1")
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    body, hlen = _binary_body(header, a, a)
    with socket.create_connection((host, int(port))) as s:
        f = s.makefile("rb")
        # Expect: 100-continue (libcurl does this for large bodies) on a persistent connection
        s.sendall(
            (
                f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: "
                f"{len(body)}\r\nInference-Header-Content-Length: {hlen}\r\n"
                f"Expect: 100-continue\r\n\r\n"
            ).encode()
        )
        assert f.readline().startswith(b"HTTP/1.1 100")
        f.readline()
        s.sendall(body)
        status = f.readline()
        headers = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        payload = f.read(int(headers["content-length"]))
        assert status.startswith(b"HTTP/1.1 200"), status
        json_len = int(headers["inference-header-content-length"])
        out = json.loads(payload[:json_len])["outputs"][0]
        assert out["parameters"]["binary_data_size"] == 64
        np.testing.assert_array_equal(np.frombuffer(payload[json_len:], np.int32), (a + a)[0])
        # then a chunked request on the same connection
        chunks = [body[:10], body[10:100], body[100:]]
        s.sendall(
            (
                f"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                f"chunked\r\nInference-Header-Content-Length: {hlen}\r\n\r\n"
            ).encode()
            + b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks)
            + b"0\r\n\r\n"
        )
        assert f.readline().startswith(b"HTTP/1.1 200")


def test_http_endpoint_in_process_classes(tmp_path):
    """The classes the ROS node starts: same shape as GrpcServer, port 0 picks a free port."""
    from triton_ros.core.server import InferenceServer, ServerOptions
    from triton_ros.frontend.http.http_server import HttpServer
    from triton_ros.frontend.metrics_server import MetricsServer

    core = InferenceServer(ServerOptions(model_repositories=(str(MODEL_REPOSITORY),)))
    core.start()
    http_server = HttpServer(core, address="127.0.0.1", port=0)
    metrics_server = MetricsServer(core, address="127.0.0.1", port=0)
    http_server.start()
    metrics_server.start()
    try:
        c = httpclient.InferenceServerClient(http_server.target)
        inputs, a, b = _simple_inputs(True)
        np.testing.assert_array_equal(c.infer("simple", inputs).as_numpy("OUTPUT1"), a - b)
        from prometheus_text import scrape

        families = scrape(f"http://{metrics_server.target}/metrics")
        assert families["nv_inference_request_success"].value(model="simple", version="1") == 1
    finally:
        http_server.stop()
        metrics_server.stop()
        core.stop()


# ------------------------------------------------------------------------------------------
# Repository API (explicit mode)
# ------------------------------------------------------------------------------------------


def test_repository_index_load_unload(start_server, repo_copy):
    repo = repo_copy
    server = start_server(
        "--model-repository",
        str(repo),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
    )
    c = server.http_client()
    index = {e["name"]: e for e in c.get_model_repository_index()}
    assert index["simple"] == {"name": "simple", "version": "1", "state": "READY"}
    assert index["detector"] == {"name": "detector"}  # never loaded: name only, as in Triton
    c.load_model("detector")
    assert c.is_model_ready("detector")
    listed = {e["name"]: e for e in c.get_model_repository_index(query_params=None)}
    assert listed["detector"]["state"] == "READY" and "state" not in listed["detector_pipeline"]
    raw = Raw(server.http_url)
    status, _, reply = raw.request("POST", "/v2/repository/index", b'{"ready": true}')
    assert status == 200 and {e["name"] for e in json.loads(reply)} == {"simple", "detector"}
    c.unload_model("detector", unload_dependents=True)
    assert not c.is_model_ready("detector")
    index = {e["name"]: e for e in c.get_model_repository_index()}
    assert index["detector"]["state"] == "UNAVAILABLE" and index["detector"]["reason"] == "unloaded"

    # load with a config override and files (Triton's "config" + base64 "file:" parameters)
    config = json.dumps(
        {
            "name": "added",
            "backend": "onnxruntime",
            "max_batch_size": 8,
            "input": [
                {"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                {"name": "INPUT1", "data_type": "TYPE_INT32", "dims": [16]},
            ],
            "output": [
                {"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [16]},
                {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [16]},
            ],
        }
    )
    onnx = (MODEL_REPOSITORY / "simple" / "1" / "model.onnx").read_bytes()
    c.load_model("added", config=config, files={"file:1/model.onnx": onnx})
    inputs, a, b = _simple_inputs(True)
    np.testing.assert_array_equal(c.infer("added", inputs).as_numpy("OUTPUT0"), a + b)

    bad = [
        (b'{"parameters": {"config": "{bad json"}}', 500, "failed to poll from model repository"),
        (b'{"parameters": {"file:1/model.onnx": "%%%"}}', 400, "base64"),
        (b'{"parameters": {"config": 5}}', 400, "expected a string"),
        (b'{"parameters": {"other": "x"}}', 400, "unrecognized load parameter"),
        (b"not json", 400, "parse"),
    ]
    for payload, status, fragment in bad:
        got, _, reply = raw.request("POST", "/v2/repository/models/added2/load", payload)
        assert got == status and fragment in _error(reply), reply
    got, _, reply = raw.request("POST", "/v2/repository/models/nothere/load", b"")
    assert got >= 400 and "nothere" in _error(reply)
    got, _, reply = raw.request(
        "POST",
        "/v2/repository/models/simple/unload",
        b'{"parameters": {"unload_dependents": "no"}}',
    )
    assert got == 400 and "unload_dependents" in _error(reply)
    got, _, reply = raw.request("POST", "/v2/repository/myrepo/index", b"")
    assert got == 501 and "repository_name" in _error(reply)
    assert c.is_model_ready("simple")
    raw.close()


# ------------------------------------------------------------------------------------------
# perf_analyzer -i http
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not PERF_ANALYZER.exists(), reason="perf_analyzer is set up on x86_64 only")
def test_perf_analyzer_http(bundled_server):
    before = bundled_server.http_client().get_inference_statistics("simple")["model_stats"][0]
    result = subprocess.run(
        [
            str(PERF_ANALYZER),
            "-m",
            "simple",
            "-i",
            "http",
            "-u",
            bundled_server.http_url,
            "--concurrency-range",
            "4",
            "--measurement-interval",
            "1000",
            "--max-trials",
            "3",
            "-s",
            "100000",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Throughput" in result.stdout
    after = bundled_server.http_client().get_inference_statistics("simple")["model_stats"][0]
    sent = (
        after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    )
    assert sent > 0
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"]


# ------------------------------------------------------------------------------------------
# The endpoint's event loop: uvloop's where installed, the standard one when forced (or absent)
# ------------------------------------------------------------------------------------------


def test_http_loop_is_uvloop_unless_the_standard_loop_is_forced(monkeypatch):
    import asyncio

    import uvloop

    from triton_ros.frontend.http.http_transport import new_http_loop

    monkeypatch.delenv("TRITON_ROS_HTTP_LOOP", raising=False)
    loop = new_http_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    monkeypatch.setenv("TRITON_ROS_HTTP_LOOP", "asyncio")
    loop = new_http_loop()
    try:
        assert not isinstance(loop, uvloop.Loop)
        assert isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()


def test_the_standard_asyncio_loop_serves_inference_and_metrics(start_server):
    """An apt-installed ROS 2 without python3-uvloop serves on asyncio's loop: same answers."""
    server = start_server(
        "--model-repository", str(MODEL_REPOSITORY), env={"TRITON_ROS_HTTP_LOOP": "asyncio"}
    )
    client = server.http_client()
    inputs, a, b = _simple_inputs(binary=True, n=2)
    result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    raw = Raw(server.http_url)
    try:
        status, _, _ = raw.request("GET", "/v2/health/live")
        assert status == 200
    finally:
        raw.close()
    metrics_host, metrics_port = server.metrics_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(metrics_host, int(metrics_port), timeout=30)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    assert response.status == 200
    assert 'nv_inference_request_success{model="simple",version="1"} 1' in text
