"""Every RPC of ``inference.GRPCInferenceService`` is answered, and none leaves a traceback.

The RPCs are enumerated from the service descriptor in tritonclient's own protos, so an RPC a
newer tritonclient adds is called too (and must be answered: implemented, or UNIMPLEMENTED
cleanly). Each is called several times with an empty request (what a careless or hostile
client sends) and once with a meaningful one where that exists; the server must answer each
call with a status (never INTERNAL or UNKNOWN, the codes of a fault of ours), keep its log
free of tracebacks and of a line per call, and serve a normal inference afterwards.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from server_process import MODEL_REPOSITORY

pytestmark = pytest.mark.integration

SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
CALLS = 20  # per RPC: the 20 calls gave 240 log lines
FAULT_CODES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)


def _request_class(method):
    return getattr(pb, method.input_type.name)


def _call(channel, method, request, timeout: float = 30.0):
    """Call ``method`` with ``request``; its status code and the reply (None on an error)."""
    path = f"/{SERVICE.full_name}/{method.name}"
    serialize = type(request).SerializeToString
    reply_class = getattr(pb, method.output_type.name)
    try:
        if method.client_streaming or method.server_streaming:
            rpc = channel.stream_stream(
                path, request_serializer=serialize, response_deserializer=reply_class.FromString
            )
            replies = list(rpc(iter([request]), timeout=timeout))
            return grpc.StatusCode.OK, replies
        rpc = channel.unary_unary(
            path, request_serializer=serialize, response_deserializer=reply_class.FromString
        )
        return grpc.StatusCode.OK, rpc(request, timeout=timeout)
    except grpc.RpcError as err:
        return err.code(), err.details()


def _infer_request() -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        msg.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        msg.raw_input_contents.append(np.arange(16, dtype=np.int32).tobytes())
    return msg


# A meaningful request for the RPCs that have one (others only get the empty request).
MEANINGFUL = {
    "ModelReady": lambda: pb.ModelReadyRequest(name="simple"),
    "ModelMetadata": lambda: pb.ModelMetadataRequest(name="simple"),
    "ModelInfer": _infer_request,
    "ModelStreamInfer": _infer_request,
    "ModelConfig": lambda: pb.ModelConfigRequest(name="simple"),
    "ModelStatistics": lambda: pb.ModelStatisticsRequest(name="simple"),
    "RepositoryModelLoad": lambda: pb.RepositoryModelLoadRequest(model_name="simple"),
    "TraceSetting": lambda: pb.TraceSettingRequest(model_name="simple"),
}


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    trace_file = tmp_path_factory.mktemp("every_rpc") / "trace.json"
    return start_module_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--trace-config",
        f"triton,file={trace_file}",
    )


def test_the_service_descriptor_lists_the_rpcs_we_know():
    """A guard that the enumeration below sees the service at all (and TraceSetting in it)."""
    names = {m.name for m in SERVICE.methods}
    assert {"ServerLive", "ModelInfer", "ModelStreamInfer", "TraceSetting", "LogSettings"} <= names


@pytest.mark.parametrize("method", list(SERVICE.methods), ids=lambda m: m.name)
def test_every_rpc_is_answered_without_a_traceback(server, method):
    channel = grpc.insecure_channel(server.url)
    try:
        lines_before = server.log().count("\n")
        codes = []
        for _ in range(CALLS):
            code, detail = _call(channel, method, _request_class(method)())
            codes.append(code)
            assert code not in FAULT_CODES, f"{method.name}: {code} {detail}"
        if method.name in MEANINGFUL:
            code, reply = _call(channel, method, MEANINGFUL[method.name]())
            assert code == grpc.StatusCode.OK, f"{method.name}: {code} {reply}"
        # An unimplemented RPC answers UNIMPLEMENTED, the same way every time.
        if grpc.StatusCode.UNIMPLEMENTED in codes:
            assert set(codes) == {grpc.StatusCode.UNIMPLEMENTED}, codes
        log = server.log()
        assert "Traceback" not in log, log
        assert "Unexpected error" not in log, log
        # Calls a client makes leave no line per call (at most a few throttled ones).
        assert log.count("\n") - lines_before <= 3, log.splitlines()[lines_before:]

        # ... and a normal inference is served right after.
        code, reply = _call(channel, SERVICE.methods_by_name["ModelInfer"], _infer_request())
        assert code == grpc.StatusCode.OK, reply
        out = np.frombuffer(reply.raw_output_contents[0], np.int32)
        np.testing.assert_array_equal(out, np.arange(16) * 2)
    finally:
        channel.close()


def test_trace_setting_is_implemented(server):
    """TraceSetting answers Triton's settings (not UNIMPLEMENTED), globally and per model."""
    channel = grpc.insecure_channel(server.url)
    try:
        method = SERVICE.methods_by_name["TraceSetting"]
        for request in (pb.TraceSettingRequest(), pb.TraceSettingRequest(model_name="simple")):
            code, reply = _call(channel, method, request)
            assert code == grpc.StatusCode.OK, reply
            assert {k: list(v.value) for k, v in reply.settings.items()} == {
                "trace_level": ["OFF"],
                "trace_rate": ["1000"],
                "trace_count": ["-1"],
                "log_frequency": ["0"],
                "trace_file": [str(server_trace_file(server))],
                "trace_mode": ["triton"],
            }
    finally:
        channel.close()


def server_trace_file(server) -> str:
    args = server.proc.args
    spec = args[args.index("--trace-config") + 1]
    return spec.partition("file=")[2]


def test_an_rpc_the_servicer_lacks_answers_unimplemented_cleanly(tmp_path, monkeypatch, caplog):
    """An RPC of the protos that the servicer does not implement (as a newer tritonclient's
    would be) answers UNIMPLEMENTED without a traceback: here TraceSetting and LogSettings
    taken away from a servicer."""
    from tritonclient.grpc import service_pb2_grpc

    from triton_ros.core.server import InferenceServer, ServerOptions
    from triton_ros.frontend.grpc import grpc_server

    generated = service_pb2_grpc.GRPCInferenceServiceServicer

    class Older(grpc_server.GrpcInferenceService):
        TraceSetting = generated.TraceSetting
        LogSettings = generated.LogSettings

    monkeypatch.setattr(grpc_server, "GrpcInferenceService", Older)
    core = InferenceServer(ServerOptions((str(tmp_path),), model_control_mode="explicit"))
    core.start()
    server = grpc_server.GrpcServer(core, address="127.0.0.1", port=0)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        for name in ("TraceSetting", "LogSettings"):
            method = SERVICE.methods_by_name[name]
            for _ in range(3):
                code, detail = _call(channel, method, _request_class(method)())
                assert code == grpc.StatusCode.UNIMPLEMENTED, (code, detail)
                assert detail == f"{name} is not implemented by triton-ros-server"
        code, _ = _call(channel, SERVICE.methods_by_name["ServerLive"], pb.ServerLiveRequest())
        assert code == grpc.StatusCode.OK
    finally:
        channel.close()
        server.stop()
        core.stop()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= 40], caplog.records
