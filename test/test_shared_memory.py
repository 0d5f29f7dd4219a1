"""Triton's system shared memory extension over gRPC and HTTP, with real tritonclient clients,
regions made by tritonclient.utils.shared_memory, real server processes and perf_analyzer."""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import os
import queue
import subprocess
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, serialized_byte_size

from server_process import ROOT, ServerProcess, copy_models
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.shared_memory_manager import SharedMemoryManager
from triton_ros.frontend.grpc import grpc_codec
from triton_ros.frontend.http import http_codec


pytestmark = pytest.mark.integration

PERF_ANALYZER = ROOT / ".venv" / "bin" / "perf_analyzer"
PROTOCOLS = ("grpc", "http")
# Keys are unique to this test process: /dev/shm is shared with everything else on the machine.
_keys = itertools.count()
A = np.arange(16, dtype=np.int32)[None]  # INPUT0
B = np.full((1, 16), 3, dtype=np.int32)  # INPUT1
NBYTES = A.nbytes  # 64

# Triton's status for each core code, as each tritonclient reports it.
STATUS = {
    "grpc": {
        "NOT_FOUND": "StatusCode.NOT_FOUND",
        "INVALID_ARG": "StatusCode.INVALID_ARGUMENT",
        "INTERNAL": "StatusCode.INTERNAL",
        "ALREADY_EXISTS": "StatusCode.ALREADY_EXISTS",
        "UNSUPPORTED": "StatusCode.UNIMPLEMENTED",
    },
    "http": {
        "NOT_FOUND": "404",
        "INVALID_ARG": "400",
        "INTERNAL": "500",
        "ALREADY_EXISTS": "400",
        "UNSUPPORTED": "501",
    },
}


def small_repository(dest):
    return copy_models(dest, "simple", "simple_string")


@pytest.fixture(scope="module")
def shm_server(start_module_server, tmp_path_factory):
    repo = small_repository(tmp_path_factory.mktemp("shm_models"))
    return start_module_server(
        "--model-repository",
        str(repo),
        "--allow-client-shm=true",
        "--allow-metrics",
        "false",
        "--log-verbose",
        "1",
    )


class Client:
    """One protocol's tritonclient, with the few calls whose shapes differ between them."""

    def __init__(self, server: ServerProcess, protocol: str) -> None:
        self.protocol = protocol
        self.mod = grpcclient if protocol == "grpc" else httpclient
        self.client = server.client() if protocol == "grpc" else server.http_client()

    def status(self, name: str = "") -> list[dict]:
        if self.protocol == "http":
            regions = self.client.get_system_shared_memory_status(name)
        else:
            reply = self.client.get_system_shared_memory_status(name, as_json=True)
            regions = list(reply.get("regions", {}).values())
        return sorted(
            (
                {
                    "name": r["name"],
                    "key": r["key"],
                    "offset": int(r.get("offset", 0)),
                    "byte_size": int(r["byte_size"]),
                }
                for r in regions
            ),
            key=lambda r: r["name"],
        )

    def input(self, name: str, array: np.ndarray, datatype: str = "INT32"):
        tensor = self.mod.InferInput(name, list(array.shape), datatype)
        if self.protocol == "http":
            tensor.set_data_from_numpy(array, binary_data=False)  # JSON next to shm inputs
        else:
            tensor.set_data_from_numpy(array)
        return tensor

    def shm_input(
        self,
        name: str,
        region: str,
        byte_size: int,
        offset: int = 0,
        shape=(1, 16),
        datatype: str = "INT32",
    ):
        tensor = self.mod.InferInput(name, list(shape), datatype)
        tensor.set_shared_memory(region, byte_size, offset=offset)
        return tensor

    def shm_output(self, name: str, region: str, byte_size: int, offset: int = 0):
        out = self.mod.InferRequestedOutput(name)
        out.set_shared_memory(region, byte_size, offset=offset)
        return out

    def output(self, name: str):
        return self.mod.InferRequestedOutput(name)

    def expect_error(self, code: str, fragment: str, call) -> None:
        with pytest.raises(InferenceServerException) as err:
            call()
        assert err.value.status() == STATUS[self.protocol][code], err.value
        assert fragment in err.value.message(), err.value.message()

    def assert_serves(self) -> None:
        result = self.client.infer("simple", [self.input("INPUT0", A), self.input("INPUT1", B)])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


class Regions:
    """Client-side regions made with tritonclient's shared memory utilities; close() unlinks
    them all."""

    def __init__(self) -> None:
        self.handles: list = []
        self.keys: list[str] = []

    def create(self, name: str, byte_size: int):
        key = f"/triton_ros_test_{os.getpid()}_{next(_keys)}"
        handle = shm.create_shared_memory_region(name, key, byte_size, create_only=True)
        self.handles.append(handle)
        self.keys.append(key)
        return handle, key

    def close(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions(shm_server):
    made = Regions()
    yield made
    shm_server.client().unregister_system_shared_memory()
    made.close()


@pytest.fixture(params=PROTOCOLS)
def client(request, shm_server):
    return Client(shm_server, request.param)


def int32_io(client: Client, regions: Regions):
    """Both simple inputs in one region (offsets 0 and 64), both outputs in another."""
    ip, ip_key = regions.create("ip", 2 * NBYTES)
    op, op_key = regions.create("op", 2 * NBYTES)
    shm.set_shared_memory_region(ip, [A])
    shm.set_shared_memory_region(ip, [B], offset=NBYTES)
    client.client.register_system_shared_memory("ip", ip_key, 2 * NBYTES)
    client.client.register_system_shared_memory("op", op_key, 2 * NBYTES)
    inputs = [
        client.shm_input("INPUT0", "ip", NBYTES),
        client.shm_input("INPUT1", "ip", NBYTES, offset=NBYTES),
    ]
    outputs = [
        client.shm_output("OUTPUT0", "op", NBYTES),
        client.shm_output("OUTPUT1", "op", NBYTES, offset=NBYTES),
    ]
    return op, inputs, outputs


# ------------------------------------------------------------------------------------------
# Register, status, unregister
# ------------------------------------------------------------------------------------------


def test_register_status_unregister(client, regions):
    _, key_a = regions.create("a", 64)
    _, key_b = regions.create("b", 128)
    c = client.client
    c.register_system_shared_memory("a", key_a, 64)
    c.register_system_shared_memory("b", key_b, 32, offset=72)  # an offset off any page boundary
    a = {"name": "a", "key": key_a, "offset": 0, "byte_size": 64}
    b = {"name": "b", "key": key_b, "offset": 72, "byte_size": 32}
    assert client.status() == [a, b]
    assert client.status("b") == [b]
    client.expect_error(
        "ALREADY_EXISTS",
        "shared memory region 'a' already in manager",
        lambda: c.register_system_shared_memory("a", key_b, 16),
    )
    client.expect_error(
        "NOT_FOUND",
        "Unable to find system shared memory region: 'nope'",
        lambda: client.status("nope"),
    )
    c.unregister_system_shared_memory("a")
    assert client.status() == [b]
    c.unregister_system_shared_memory("a")  # unknown name: nothing to do, as in Triton
    c.unregister_system_shared_memory()
    assert client.status() == []


def test_one_registry_for_both_protocols(shm_server, regions):
    grpc_side, http_side = Client(shm_server, "grpc"), Client(shm_server, "http")
    _, key = regions.create("shared", 64)
    grpc_side.client.register_system_shared_memory("shared", key, 64)
    assert http_side.status() == [{"name": "shared", "key": key, "offset": 0, "byte_size": 64}]
    http_side.client.unregister_system_shared_memory("shared")
    assert grpc_side.status() == []


# ------------------------------------------------------------------------------------------
# Inference with tensors in shared memory
# ------------------------------------------------------------------------------------------


def test_int32_inputs_and_outputs_in_shared_memory(client, regions):
    op, inputs, outputs = int32_io(client, regions)
    result = client.client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16]), A + B)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(op, np.int32, [1, 16], offset=NBYTES), A - B
    )
    for name in ("OUTPUT0", "OUTPUT1"):
        out = result.get_output(name)
        if client.protocol == "grpc":
            assert (out.datatype, list(out.shape)) == ("INT32", [1, 16])
        else:  # listed without data or binary_data_size, as in Triton
            assert out == {"name": name, "datatype": "INT32", "shape": [1, 16]}
    if client.protocol == "grpc":
        # Triton's gRPC frontend keeps one (empty) raw_output_contents entry per output.
        assert list(result.get_response().raw_output_contents) == [b"", b""]

    # The same objects again with new input values: data is read at each request.
    shm.set_shared_memory_region(regions.handles[0], [2 * A])
    client.client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16]), 2 * A + B)


def test_bytes_inputs_and_outputs_in_shared_memory(client, regions):
    numbers0, numbers1 = np.arange(16), np.full(16, 7)

    def strings(values):
        return np.array([str(v).encode() for v in values], dtype=np.object_).reshape(1, 16)

    c = client.client
    inputs, handles = [], {}
    for name, values in (("INPUT0", numbers0), ("INPUT1", numbers1)):
        data = serialize_byte_tensor(strings(values))
        size = serialized_byte_size(data)
        handle, key = regions.create(name.lower(), size)
        shm.set_shared_memory_region(handle, [data])
        c.register_system_shared_memory(name.lower(), key, size)
        inputs.append(client.shm_input(name, name.lower(), size, datatype="BYTES"))
    outputs = []
    for name, expected in (("OUTPUT0", numbers0 + numbers1), ("OUTPUT1", numbers0 - numbers1)):
        size = serialized_byte_size(serialize_byte_tensor(strings(expected)))  # no spare byte
        handles[name], key = regions.create(name.lower(), size)
        c.register_system_shared_memory(name.lower(), key, size)
        outputs.append(client.shm_output(name, name.lower(), size))
    result = c.infer("simple_string", inputs, outputs=outputs)
    for name, expected in (("OUTPUT0", numbers0 + numbers1), ("OUTPUT1", numbers0 - numbers1)):
        assert result.get_output(name) is not None
        got = shm.get_contents_as_numpy(handles[name], np.object_, [1, 16])
        np.testing.assert_array_equal(got, strings(expected))


def test_some_tensors_in_shared_memory_and_some_not(client, regions):
    ip, ip_key = regions.create("ip", NBYTES)
    op, op_key = regions.create("op", NBYTES)
    shm.set_shared_memory_region(ip, [A])
    client.client.register_system_shared_memory("ip", ip_key, NBYTES)
    client.client.register_system_shared_memory("op", op_key, NBYTES)
    for order in ((0, 1), (1, 0)):  # the shm input first, then last
        tensors = [client.shm_input("INPUT0", "ip", NBYTES), client.input("INPUT1", B)]
        result = client.client.infer(
            "simple",
            [tensors[i] for i in order],
            outputs=[client.shm_output("OUTPUT0", "op", NBYTES), client.output("OUTPUT1")],
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16]), A + B)
        shm.set_shared_memory_region(op, [np.zeros((1, 16), np.int32)])


def test_stream_infer_writes_outputs_into_shared_memory(shm_server, regions):
    client = Client(shm_server, "grpc")
    op, inputs, outputs = int32_io(client, regions)
    small = [client.shm_output("OUTPUT0", "op", NBYTES // 2)]
    results: queue.Queue = queue.Queue()
    c = client.client
    c.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        c.async_stream_infer("simple", inputs, outputs=small, request_id="small")
        c.async_stream_infer("simple", inputs, outputs=outputs, request_id="good")
        got = [results.get(timeout=60) for _ in range(2)]
    finally:
        c.stop_stream()
    errors = [error for _, error in got if error is not None]
    assert len(errors) == 1 and "should be at least 64 bytes to hold the results" in str(errors[0])
    good = [result for result, error in got if error is None]
    assert good[0].get_response().id == "good"
    np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16]), A + B)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(op, np.int32, [1, 16], offset=NBYTES), A - B
    )


# ------------------------------------------------------------------------------------------
# Bad input: Triton's status, and the server keeps serving
# ------------------------------------------------------------------------------------------

BAD_INFERENCE = {
    "unknown region": (
        lambda c: (
            [c.shm_input("INPUT0", "nope", NBYTES), c.shm_input("INPUT1", "ip", NBYTES)],
            None,
        ),
        "NOT_FOUND",
        "Unable to find shared memory region: 'nope'",
    ),
    "offset past the region": (
        lambda c: (
            [
                c.shm_input("INPUT0", "ip", NBYTES, offset=2 * NBYTES),
                c.shm_input("INPUT1", "ip", NBYTES),
            ],
            None,
        ),
        "INVALID_ARG",
        "Invalid offset for shared memory region: 'ip'",
    ),
    "block past the region": (
        lambda c: (
            [
                c.shm_input("INPUT0", "ip", NBYTES, offset=NBYTES + 4),
                c.shm_input("INPUT1", "ip", NBYTES),
            ],
            None,
        ),
        "INVALID_ARG",
        "Invalid offset + byte size for shared memory region: 'ip'",
    ),
    "input byte size mismatch": (
        lambda c: (
            [c.shm_input("INPUT0", "ip", NBYTES - 4), c.shm_input("INPUT1", "ip", NBYTES)],
            None,
        ),
        "INVALID_ARG",
        "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
    ),
    "output region too small": (
        lambda c: (
            [c.shm_input("INPUT0", "ip", NBYTES), c.shm_input("INPUT1", "ip", NBYTES)],
            [c.shm_output("OUTPUT0", "op", NBYTES - 1)],
        ),
        "INTERNAL",
        "shared memory size specified with the request for "
        "output 'OUTPUT0' (63 bytes) should be at least 64 "
        "bytes to hold the results",
    ),
    "unknown output region": (
        lambda c: (
            [c.shm_input("INPUT0", "ip", NBYTES), c.shm_input("INPUT1", "ip", NBYTES)],
            [c.shm_output("OUTPUT0", "nope", NBYTES)],
        ),
        "NOT_FOUND",
        "Unable to find shared memory region: 'nope'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INFERENCE))
def test_bad_shared_memory_inference_gets_triton_status(client, regions, case):
    op, _, _ = int32_io(client, regions)
    shm.set_shared_memory_region(op, [np.full((1, 16), -1, np.int32)])
    make, code, fragment = BAD_INFERENCE[case]
    inputs, outputs = make(client)
    client.expect_error(
        code, fragment, lambda: client.client.infer("simple", inputs, outputs=outputs)
    )
    # A failed request writes nothing into the client's output region.
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(op, np.int32, [1, 16]), np.full((1, 16), -1, np.int32)
    )
    client.assert_serves()


def _json_request(inputs, outputs=None) -> bytes:
    body = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return json.dumps(body).encode()


SHM = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
SHM_INPUT = {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}
JSON_INPUT = {**SHM_INPUT, "data": [0] * 16}
MALFORMED_HTTP = {
    "offset without region": (
        [{**JSON_INPUT, "parameters": {"shared_memory_offset": 4}}],
        None,
        "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter "
        "for tensor 'INPUT0'",
    ),
    "region without byte size": (
        [{**SHM_INPUT, "parameters": {"shared_memory_region": "r"}}],
        None,
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region'",
    ),
    "region not a string": (
        [{**SHM_INPUT, "parameters": {**SHM, "shared_memory_region": 3}}],
        None,
        "Unable to parse 'shared_memory_region'",
    ),
    "region and data": (
        [{**JSON_INPUT, "parameters": SHM}],
        None,
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
        "'shared_memory_region'",
    ),
    "output in shm and binary": (
        [],
        [{"name": "OUTPUT0", "parameters": {**SHM, "binary_data": True}}],
        "Output can't set both 'shared_memory_region' and 'binary_data'",
    ),
    "output in shm and classification": (
        [],
        [{"name": "OUTPUT0", "parameters": {**SHM, "classification": 2}}],
        "Output can't set both 'shared_memory_region' and 'classification'",
    ),
    "negative byte size": (
        [],
        [{"name": "OUTPUT0", "parameters": {**SHM, "shared_memory_byte_size": -1}}],
        "Unable to parse 'shared_memory_byte_size'",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_HTTP))
def test_malformed_http_shared_memory_parameters(case):
    inputs, outputs, fragment = MALFORMED_HTTP[case]
    with pytest.raises(TritonRosError) as err:
        http_codec.decode_infer_request("simple", -1, _json_request(inputs, outputs), None)
    assert err.value.code == StatusCode.INVALID_ARG and fragment in err.value.message


def test_malformed_grpc_shared_memory_parameters():
    def request(**params) -> pb.ModelInferRequest:
        msg = pb.ModelInferRequest(model_name="simple")
        tensor = msg.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
        for key, (kind, value) in params.items():
            setattr(tensor.parameters[key], kind, value)
        return msg

    cases = [
        (
            request(
                shared_memory_region=("int64_param", 1), shared_memory_byte_size=("int64_param", 64)
            ),
            "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', expected "
            "string_param.",
        ),
        (
            request(
                shared_memory_region=("string_param", "r"),
                shared_memory_byte_size=("string_param", "64"),
            ),
            "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', "
            "expected int64_param.",
        ),
        (
            request(shared_memory_byte_size=("int64_param", 64)),
            "'shared_memory_byte_size' can not be specified without 'shared_memory_region'",
        ),
    ]
    with_contents = request(
        shared_memory_region=("string_param", "r"), shared_memory_byte_size=("int64_param", 64)
    )
    with_contents.inputs[0].contents.int_contents.extend([0] * 16)
    cases.append(
        (
            with_contents,
            "unexpected 'content' provided when using shared memory for "
            "input tensor 'INPUT0' for model 'simple'",
        )
    )
    in_shm_and_classified = pb.ModelInferRequest(model_name="simple")
    out = in_shm_and_classified.outputs.add(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = "r"
    out.parameters["shared_memory_byte_size"].int64_param = 64
    out.parameters["classification"].int64_param = 2
    cases.append(
        (in_shm_and_classified, "output can't set both 'shared_memory_region' and 'classification'")
    )
    for msg, fragment in cases:
        with pytest.raises(TritonRosError) as err:
            grpc_codec.decode_infer_request(msg)
        assert err.value.code == StatusCode.INVALID_ARG and fragment in err.value.message


def test_bad_registrations_get_triton_status(client, regions):
    c = client.client
    _, key = regions.create("r", 64)
    c.register_system_shared_memory("r", key, 64)
    client.expect_error(
        "ALREADY_EXISTS",
        "shared memory region 'r' already in manager",
        lambda: c.register_system_shared_memory("r", key, 64),
    )
    missing = f"/triton_ros_test_{os.getpid()}_missing"
    client.expect_error(
        "INTERNAL",
        f"Unable to open shared memory region: '{missing}'",
        lambda: c.register_system_shared_memory("m", missing, 64),
    )
    client.expect_error(
        "INTERNAL",
        f"Invalid shared memory region: '{key}'",
        lambda: c.register_system_shared_memory("big", key, 64, offset=8),
    )
    client.expect_error(
        "INVALID_ARG",
        "reserved prefix 'triton_ros_py_'",
        lambda: c.register_system_shared_memory("p", "/triton_ros_py_x", 64),
    )
    assert [r["name"] for r in client.status()] == ["r"]
    client.assert_serves()


def test_http_routes_methods_and_bodies(shm_server, regions):
    _, key = regions.create("r", 64)
    connection = http.client.HTTPConnection(shm_server.http_url, timeout=30)

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        connection.request(method, path, body=json.dumps(body) if body is not None else None)
        reply = connection.getresponse()
        data = reply.read()
        return reply.status, json.loads(data) if data else None

    base = "/v2/systemsharedmemory"
    assert call("POST", f"{base}/region/r/register", {"key": key, "byte_size": 64}) == (200, None)
    assert call("GET", f"{base}/region/r/status") == (
        200,
        [{"name": "r", "key": key, "offset": 0, "byte_size": 64}],
    )
    assert call("POST", f"{base}/status")[0] == 405
    assert call("GET", f"{base}/region/r/unregister")[0] == 405
    status, reply = call("POST", f"{base}/region/s/register", {"byte_size": 64})
    assert status == 400 and reply["error"] == "Shared memory register request has no 'key' field"
    status, reply = call("POST", f"{base}/region/s/register", {"key": key})
    assert status == 400 and "no 'byte_size' field" in reply["error"]
    status, reply = call("POST", f"{base}/region/s/register", {"key": key, "byte_size": "64"})
    assert status == 400 and "Unable to parse 'byte_size'" in reply["error"]
    status, reply = call("POST", f"{base}/register", {"key": key, "byte_size": 64})
    assert status == 400 and "'region name' is necessary" in reply["error"]
    assert call("POST", f"{base}/unregister") == (200, None)
    assert call("GET", f"{base}/status") == (200, [])
    assert call("GET", "/v2/cudasharedmemory/status") == (200, [])
    status, reply = call("GET", "/v2/cudasharedmemory/region/r/status")
    assert status == 404 and "Unable to find cuda shared memory region: 'r'" in reply["error"]
    connection.close()


def test_truncated_object_is_an_error_not_a_crash(client, regions):
    """A client that shrinks its object after registering must not SIGBUS the server."""
    op, inputs, outputs = int32_io(client, regions)
    for key in regions.keys:
        os.truncate(f"/dev/shm{key}", 0)
    client.expect_error(
        "INVALID_ARG",
        "was truncated to 0 bytes",
        lambda: client.client.infer("simple", inputs, outputs=outputs),
    )
    client.expect_error(
        "INVALID_ARG",
        "was truncated to 0 bytes",
        lambda: client.client.infer(
            "simple", [client.input("INPUT0", A), client.input("INPUT1", B)], outputs=outputs
        ),
    )
    client.assert_serves()


def test_unregistering_while_requests_are_in_flight(shm_server, regions):
    """Regions unregistered and registered again under load: each request either succeeds with
    the right values or fails with NOT_FOUND; nothing else, and the server keeps serving."""
    client = Client(shm_server, "grpc")
    ip, ip_key = regions.create("ip", 2 * NBYTES)
    _, op_key = regions.create("op", 2 * NBYTES)
    shm.set_shared_memory_region(ip, [A])
    shm.set_shared_memory_region(ip, [B], offset=NBYTES)
    stop = threading.Event()
    outcomes: list[str] = []

    def toggle() -> None:
        c = shm_server.client()
        while not stop.is_set():
            for name, key in (("ip", ip_key), ("op", op_key)):
                try:
                    c.register_system_shared_memory(name, key, 2 * NBYTES)
                except InferenceServerException:
                    pass  # already registered
            c.unregister_system_shared_memory("op" if len(outcomes) % 2 else "ip")

    def infer() -> None:
        c = shm_server.client()
        inputs = [
            client.shm_input("INPUT0", "ip", NBYTES),
            client.shm_input("INPUT1", "ip", NBYTES, offset=NBYTES),
        ]
        for _ in range(25):
            try:
                # OUTPUT1 comes back in the response: it shows the inputs were read whole.
                result = c.infer(
                    "simple",
                    inputs,
                    outputs=[client.shm_output("OUTPUT0", "op", NBYTES), client.output("OUTPUT1")],
                )
                np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
                outcomes.append("ok")
            except InferenceServerException as exc:
                outcomes.append(
                    exc.status()
                    if "Unable to find shared memory region" in exc.message()
                    else exc.message()
                )

    toggler = threading.Thread(target=toggle)
    toggler.start()
    workers = [threading.Thread(target=infer) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    stop.set()
    toggler.join(timeout=60)
    assert len(outcomes) == 100
    assert set(outcomes) <= {"ok", "StatusCode.NOT_FOUND"}, set(outcomes)
    client.assert_serves()


def test_output_block_outlives_unregister():
    """An in-flight request keeps its output region mapped when the region is unregistered
    (Triton's deferred unregister); new requests no longer find it."""
    manager = SharedMemoryManager(allow_client_shm=True)
    regions = Regions()
    try:
        handle, key = regions.create("out", NBYTES)
        manager.register_system("out", key, 0, NBYTES)
        block = manager.block("out", 0, NBYTES)
        manager.unregister_system()
        block.write("OUTPUT0", (A + B).tobytes())
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16]), A + B)
        with pytest.raises(TritonRosError) as err:
            manager.block("out", 0, NBYTES)
        assert err.value.code == StatusCode.NOT_FOUND
    finally:
        regions.close()


# ------------------------------------------------------------------------------------------
# Disabled by default; CUDA shared memory; metadata
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cuda_shared_memory_is_unsupported(shm_server, protocol):
    """As tritonserver without a GPU: no regions, and a register is INVALID_ARG."""
    client = Client(shm_server, protocol)
    c = client.client
    status = c.get_cuda_shared_memory_status()
    assert (status == []) if protocol == "http" else (len(status.regions) == 0)
    c.unregister_cuda_shared_memory()  # nothing to unregister (the examples call it)
    client.expect_error(
        "INVALID_ARG",
        "no CUDA device",
        lambda: c.register_cuda_shared_memory("cuda0", cuda_handle(protocol), 0, 64),
    )


def cuda_handle(protocol: str) -> bytes:
    """A cudaIpcMemHandle_t's 64 bytes as each tritonclient takes them (HTTP: base64)."""
    return base64.b64encode(bytes(64)) if protocol == "http" else bytes(64)


def test_client_shared_memory_is_off_by_default(start_server, tmp_path):
    server = start_server(
        "--model-repository", str(small_repository(tmp_path)), "--allow-metrics", "false"
    )
    message = (
        "Client shared memory is disabled. Start the server with "
        "'--allow-client-shm=true' to enable."
    )
    for protocol in PROTOCOLS:
        client = Client(server, protocol)
        c = client.client
        client.expect_error(
            "UNSUPPORTED", message, lambda: c.register_system_shared_memory("r", "/anything", 64)
        )
        c.unregister_system_shared_memory()  # nothing to unregister, as in tritonserver
        client.expect_error(
            "INVALID_ARG",
            "no CUDA device",  # tritonserver's answer
            lambda: c.register_cuda_shared_memory("cuda0", cuda_handle(protocol), 0, 64),
        )
        assert client.status() == []
        client.assert_serves()
    assert "system_shared_memory" in server.client().get_server_metadata().extensions


def test_server_metadata_lists_system_shared_memory(shm_server):
    extensions = shm_server.http_client().get_server_metadata()["extensions"]
    assert "system_shared_memory" in extensions and "cuda_shared_memory" not in extensions


# ------------------------------------------------------------------------------------------
# perf_analyzer --shared-memory system
# ------------------------------------------------------------------------------------------


@pytest.mark.skipif(not PERF_ANALYZER.exists(), reason="perf_analyzer is set up on x86_64 only")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_perf_analyzer_shared_memory_system(shm_server, protocol):
    client = Client(shm_server, protocol)

    def stats():
        return shm_server.client().get_inference_statistics("simple").model_stats[0].inference_stats

    before = stats()
    url = shm_server.url if protocol == "grpc" else shm_server.http_url
    registered = "shared_memory] registered system shared memory region"
    log_before = shm_server.log().count(registered)
    result = subprocess.run(
        [
            str(PERF_ANALYZER),
            "-m",
            "simple",
            "-i",
            protocol,
            "-u",
            url,
            "--shared-memory",
            "system",
            "--concurrency-range",
            "2",
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
    after = stats()
    assert after.success.count > before.success.count
    assert after.fail.count == before.fail.count
    # perf_analyzer registered its own regions (2 inputs, 2 outputs) and removed them at exit.
    assert shm_server.log().count(registered) >= log_before + 4
    assert client.status() == []
