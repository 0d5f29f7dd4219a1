"""Triton's dynamic logging extension over gRPC (LogSettings) and HTTP (/v2/logging)."""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException


pytestmark = pytest.mark.integration


def test_log_settings_read_and_change_over_grpc_and_http(bundled_server):
    grpc = bundled_server.client()
    http = bundled_server.http_client()
    settings = grpc.get_log_settings(as_json=True)["settings"]
    assert {k: list(v.values())[0] for k, v in settings.items()} == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    assert "logging" in grpc.get_server_metadata().extensions

    changed = grpc.update_log_settings(
        {"log_verbose_level": 1, "log_format": "ISO8601"}, as_json=True
    )["settings"]
    assert changed["log_verbose_level"] == {"uint32_param": 1}
    assert changed["log_format"] == {"string_param": "ISO8601"}
    # one server-wide setting: HTTP sees the change made over gRPC, and the other way round
    assert http.get_log_settings()["log_verbose_level"] == 1
    assert (
        http.update_log_settings({"log_verbose_level": 0, "log_format": "default"})["log_format"]
        == "default"
    )
    assert grpc.get_log_settings(as_json=True)["settings"]["log_verbose_level"] == {
        "uint32_param": 0
    }


@pytest.mark.parametrize(
    "change, status, message",
    [
        (
            {"log_file": "/tmp/x.log"},
            "UNIMPLEMENTED",
            "can not be updated through network protocol",
        ),
        (
            {"log_format": "fancy"},
            "INVALID_ARGUMENT",
            "invalid argument for log_format, got: fancy",
        ),
    ],
)
def test_bad_log_settings_are_refused(bundled_server, change, status, message):
    client = bundled_server.client()
    with pytest.raises(InferenceServerException) as err:
        client.update_log_settings(change)
    assert err.value.status() == f"StatusCode.{status}"
    assert message in err.value.message()
    assert client.is_server_live()


def test_a_setting_of_the_wrong_type_is_refused(bundled_server):
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(bundled_server.url))
    request = pb.LogSettingsRequest()
    request.settings["log_info"].string_param = "yes"
    with pytest.raises(grpc.RpcError) as err:
        stub.LogSettings(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "expect boolean for 'log_info'" in err.value.details()
    http = bundled_server.http_client()
    with pytest.raises(InferenceServerException) as bad:
        http.update_log_settings({"log_verbose_level": -1})
    assert "expect int32 for 'log_verbose_level'" in bad.value.message()
