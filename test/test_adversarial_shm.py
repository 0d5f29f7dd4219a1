"""Hostile system shared memory clients (raw gRPC stubs) against a real triton-ros-server.

Each case registers or uses a region in a hostile way, asserts tritonserver's status, and then
checks that a normal shared memory inference right after it succeeds with the right answer.
"""

from __future__ import annotations

import itertools
import os

import grpc
import numpy as np
import pytest
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from server_process import copy_models


pytestmark = pytest.mark.integration

OK = grpc.StatusCode.OK
INVALID = grpc.StatusCode.INVALID_ARGUMENT
INTERNAL = grpc.StatusCode.INTERNAL
NOT_FOUND = grpc.StatusCode.NOT_FOUND
EXISTS = grpc.StatusCode.ALREADY_EXISTS
_keys = itertools.count()
A = np.arange(16, dtype=np.int32)[None]


def _key(tag: str) -> str:
    return f"/triton_ros_test_adv_{os.getpid()}_{tag}_{next(_keys)}"


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = copy_models(tmp_path_factory.mktemp("adv_shm_models"), "simple")
    return start_module_server(
        "--model-repository",
        str(repo),
        "--allow-client-shm=true",
        "--allow-metrics",
        "false",
        quiet=True,
    )


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


@pytest.fixture
def region():
    """A 256-byte object holding A at offset 0 and A again at 64; removed at teardown."""
    handles = []

    def make(size: int = 256):
        key = _key("r")
        handle = shm.create_shared_memory_region(key.strip("/"), key, size)
        shm.set_shared_memory_region(handle, [A, A])
        handles.append(handle)
        return key

    yield make
    for handle in handles:
        shm.destroy_shared_memory_region(handle)


def call(fn, request) -> tuple[grpc.StatusCode, str]:
    try:
        fn(request, timeout=30)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return OK, ""


def register(stub, name: str, key: str, offset: int = 0, byte_size: int = 256):
    return call(
        stub.SystemSharedMemoryRegister,
        pb.SystemSharedMemoryRegisterRequest(
            name=name, key=key, offset=offset, byte_size=byte_size
        ),
    )


def shm_request(region_name: str, offset: int = 0, byte_size: int = 64, **param_types):
    """simple with INPUT0 from shared memory and INPUT1 as raw contents."""
    msg = pb.ModelInferRequest(model_name="simple")
    t = msg.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    t.parameters["shared_memory_region"].string_param = region_name
    for key, value in (("shared_memory_offset", offset), ("shared_memory_byte_size", byte_size)):
        kind = param_types.get(key, "int64_param")
        setattr(t.parameters[key], kind, value if kind != "string_param" else str(value))
    msg.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    msg.raw_input_contents.append(np.ones((1, 16), np.int32).tobytes())
    return msg


def assert_healthy(server, stub, region) -> None:
    """Register a fresh region, infer from it, unregister it: all must work."""
    key = region()
    name = f"healthy_{next(_keys)}"
    assert register(stub, name, key) == (OK, "")
    reply = stub.ModelInfer(shm_request(name, offset=64), timeout=30)
    out = np.frombuffer(reply.raw_output_contents[0], np.int32).reshape(1, 16)
    np.testing.assert_array_equal(out, A + 1)
    stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name=name), timeout=10)
    assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
    assert server.proc.poll() is None


@pytest.mark.parametrize(
    "key, code",
    [
        ("/../../etc/passwd", INTERNAL),
        ("/dev/zero", INTERNAL),
        ("", INVALID),
        ("/", INVALID),
        ("/a\0b", INTERNAL),
        ("/" + "k" * 300, INTERNAL),
        ("/triton_python_backend_shm_region_1", INVALID),
        ("/triton_ros_py_x", INVALID),
        ("/no_such_object_here_at_all", INTERNAL),
    ],
)
def test_hostile_keys_are_refused(server, stub, region, key, code):
    got, details = register(stub, f"bad_{next(_keys)}", key)
    assert got == code, (key, details)
    assert "Traceback" not in details
    assert_healthy(server, stub, region)


def test_fifo_in_dev_shm_does_not_block_the_server(server, stub, region):
    path = f"/dev/shm/triton_ros_test_fifo_{os.getpid()}"
    os.mkfifo(path)
    try:
        got, details = register(stub, "fifo", "/" + os.path.basename(path), byte_size=4)
    finally:
        os.unlink(path)
    assert got == INTERNAL and "Invalid shared memory region" in details
    assert_healthy(server, stub, region)


def test_symlink_in_dev_shm_is_not_followed(server, stub, region):
    path = f"/dev/shm/triton_ros_test_link_{os.getpid()}"
    os.symlink("/etc/passwd", path)
    try:
        got, details = register(stub, "link", "/" + os.path.basename(path), byte_size=4)
    finally:
        os.unlink(path)
    assert got == INTERNAL
    assert_healthy(server, stub, region)


@pytest.mark.parametrize(
    "offset, byte_size, code",
    [
        # a block the object cannot hold (an empty one too) is tritonserver's INTERNAL
        (2**64 - 1, 4, INTERNAL),
        (0, 2**64 - 1, INTERNAL),
        (2**63, 1, INTERNAL),
        (200, 100, INTERNAL),  # past the object's end
        (0, 257, INTERNAL),
        (0, 0, INTERNAL),
        (256, 1, INTERNAL),
    ],
)
def test_hostile_offsets_and_sizes_are_refused(server, stub, region, offset, byte_size, code):
    got, details = register(stub, f"sz_{next(_keys)}", region(), offset, byte_size)
    assert got == code, (offset, byte_size, details)
    assert_healthy(server, stub, region)


def test_duplicate_name_is_already_exists(server, stub, region):
    key = region()
    assert register(stub, "dup", key) == (OK, "")
    try:
        got, _ = register(stub, "dup", region())
        assert got == EXISTS
    finally:
        stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="dup"))
    assert_healthy(server, stub, region)


@pytest.fixture
def registered(stub, region):
    name = f"reg_{next(_keys)}"
    assert register(stub, name, region()) == (OK, "")
    yield name
    stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name=name))


@pytest.mark.parametrize(
    "offset, byte_size, types, code, fragment",
    [
        (0, 64, {"shared_memory_byte_size": "string_param"}, INVALID, "invalid value type"),
        (0, 64, {"shared_memory_offset": "bool_param"}, INVALID, "invalid value type"),
        (0, -1, {}, INVALID, "byte_size"),
        (-64, 64, {}, INVALID, "offset"),
        (256, 64, {}, INVALID, "Invalid offset"),
        (200, 64, {}, INVALID, "Invalid offset + byte size"),
        (0, 32, {}, INVALID, "byte size mismatch"),
        (0, 2**62, {}, INVALID, "byte size"),
    ],
)
def test_hostile_shared_memory_inputs(
    server, stub, region, registered, offset, byte_size, types, code, fragment
):
    got, details = call(stub.ModelInfer, shm_request(registered, offset, byte_size, **types))
    assert got == code, details
    assert fragment.lower() in details.lower(), details
    assert_healthy(server, stub, region)


def test_unknown_region_is_not_found(server, stub, region):
    got, details = call(stub.ModelInfer, shm_request("never_registered"))
    assert got == NOT_FOUND and "never_registered" in details
    assert_healthy(server, stub, region)


def test_overflowing_shape_with_shared_memory_input(server, stub, region, registered):
    msg = shm_request(registered)
    del msg.inputs[0].shape[:]
    msg.inputs[0].shape.extend([0, 2**62, 2**62])
    got, details = call(stub.ModelInfer, msg)
    assert got == INVALID and "overflows" in details
    assert_healthy(server, stub, region)


def test_output_block_too_small_is_internal_and_region_untouched(server, stub, region, registered):
    msg = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        msg.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        msg.raw_input_contents.append(A.tobytes())
    out = msg.outputs.add(name="OUTPUT0")
    out.parameters["shared_memory_region"].string_param = registered
    out.parameters["shared_memory_byte_size"].int64_param = 8
    got, details = call(stub.ModelInfer, msg)
    assert got == INTERNAL and "should be at least 64 bytes" in details
    assert_healthy(server, stub, region)


def test_region_truncated_after_registration_is_an_error_not_a_crash(server, stub, region):
    key = _key("trunc")
    handle = shm.create_shared_memory_region(key.strip("/"), key, 256)
    try:
        assert register(stub, "trunc", key) == (OK, "")
        os.truncate(f"/dev/shm/{key.strip('/')}", 16)
        got, details = call(stub.ModelInfer, shm_request("trunc"))
        assert got == INVALID and "truncated" in details
    finally:
        stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(name="trunc"))
        shm.destroy_shared_memory_region(handle)
    assert_healthy(server, stub, region)


def test_status_of_a_huge_unknown_name_is_not_found(server, stub, region):
    got, details = call(
        stub.SystemSharedMemoryStatus, pb.SystemSharedMemoryStatusRequest(name="n" * 50_000)
    )
    assert got == NOT_FOUND and len(details) < 4096
    assert_healthy(server, stub, region)
