"""Status codes and answers as tritonserver gives them: the same requests to both servers.

NVIDIA's tritonserver 2.51 (test/tritonserver_process.py) and triton-ros-server serve the same
repository of Python-backend models (test/parity_models/), both in explicit model control with
every model loaded, and client shared memory allowed on ours (tritonserver registers it by
default). Each case below is sent to both, in the same order, over gRPC (tritonclient's
protobuf stubs, raw bytes for malformed messages) or HTTP (raw requests with http.client, and
tritonclient.http for the binary tensor extension). For each case the outcomes are compared:

- the status: the gRPC status code, or the HTTP status;
- the answer: for a success, the part of the reply a client reads (tensors, metadata, the
  repository index, ...), without what differs by nature (versions, timings); for an HTTP error,
  that the body is Triton's ``{"error": "..."}``. Error messages are shown, not compared.

Every case must come out the same, or be one of the deliberate differences listed in
docs/server.md ("Differences from tritonserver"), where the case's name, both outcomes and the
reason are given; a listed difference that no longer differs fails too, so the table stays true.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
import numpy as np
import pytest
from google.protobuf import json_format

from processes import ROOT, wait_until
from tritonserver_process import (
    assert_answers_as_tritonserver,
    start_tritonserver,
    stub_environment,
    tritonserver_binary,
)

pytestmark = pytest.mark.integration

PARITY_MODELS = Path(__file__).resolve().parent / "parity_models"
DOCS = ROOT / "docs" / "server.md"
DOCS_SECTION = "## Differences from tritonserver"


# ------------------------------------------------------------------------------------ outcomes
@dataclass(frozen=True)
class Outcome:
    """What a server answered: ``status`` (gRPC code name or HTTP status) and ``answer`` are
    compared; ``message`` (an error's text) is only shown."""

    status: str
    answer: Any = None
    message: str = ""

    def same_as(self, other: "Outcome") -> bool:
        return self.status == other.status and self.answer == other.answer

    def __str__(self) -> str:
        return (
            self.status
            + (f" {self.answer!r}" if self.answer is not None else "")
            + (f" ({self.message[:200]})" if self.message else "")
        )


class Target:
    """One server as the cases reach it."""

    def __init__(self, server) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.url)
        from tritonclient.grpc import service_pb2_grpc

        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.host, port = server.http_url.split(":")
        self.port = int(port)

    def close(self) -> None:
        self.channel.close()


# ------------------------------------------------------------------------------------ gRPC
def pb():
    from tritonclient.grpc import service_pb2

    return service_pb2


def as_dict(message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def grpc_call(
    method: str, request: Callable[[], Any], answer: Callable[[Any], Any] = as_dict
) -> Callable[[Target], Outcome]:
    """Send ``request()`` to ``method`` through tritonclient's generated stub."""

    def send(target: Target) -> Outcome:
        try:
            reply = getattr(target.stub, method)(request(), timeout=30)
        except grpc.RpcError as exc:
            return Outcome(exc.code().name, message=exc.details() or "")
        return Outcome("OK", answer(reply))

    return send


def grpc_raw(method: str, body: bytes) -> Callable[[Target], Outcome]:
    """Send ``body`` as the serialized request message of ``method`` (malformed messages)."""

    def send(target: Target) -> Outcome:
        call = target.channel.unary_unary(
            f"/inference.GRPCInferenceService/{method}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            call(body, timeout=30)
        except grpc.RpcError as exc:
            return Outcome(exc.code().name, message=exc.details() or "")
        return Outcome("OK")

    return send


def tensors(outputs, raw: list[bytes]) -> list:
    """``(name, datatype, shape, values)`` of each output, sorted by name."""
    from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

    found = []
    for i, out in enumerate(outputs):
        shape = [int(d) for d in out.shape]
        if i < len(raw):
            if out.datatype == "BYTES":
                values = [v.decode() for v in deserialize_bytes_tensor(raw[i]).tolist()]
            else:
                values = np.frombuffer(raw[i], triton_to_np_dtype(out.datatype)).tolist()
        else:
            values = None
        found.append((out.name, out.datatype, shape, values))
    return sorted(found)


def infer_answer(reply) -> dict:
    return {
        "model_name": reply.model_name,
        "model_version": reply.model_version,
        "id": reply.id,
        "outputs": tensors(reply.outputs, list(reply.raw_output_contents)),
    }


def metadata_answer(reply) -> dict:
    d = as_dict(reply)
    return {k: d.get(k) for k in ("name", "versions", "platform", "inputs", "outputs")}


def config_answer(reply) -> dict:
    """What a client of ModelConfig relies on: name, backend, batching, the tensors."""
    config = as_dict(reply).get("config", {})
    return {
        "name": config.get("name"),
        "backend": config.get("backend"),
        "max_batch_size": config.get("max_batch_size", 0),
        "input": [(t["name"], t["data_type"], t.get("dims")) for t in config.get("input", [])],
        "output": [(t["name"], t["data_type"], t.get("dims")) for t in config.get("output", [])],
    }


def index_answer(reply) -> list:
    return sorted((m.name, m.version, m.state) for m in reply.models)


def stats_answer(reply) -> list:
    return sorted((s.name, s.version) for s in reply.model_stats)


def shm_status_answer(reply) -> list:
    return sorted((r.name, r.key, r.offset, r.byte_size) for r in reply.regions.values())


def settings_answer(reply) -> list:
    """The names of the settings reported (their values are each server's defaults)."""
    return sorted(reply.settings)


def server_metadata_answer(reply) -> list:
    return sorted(reply.extensions)


def tensor(name: str, datatype: str, shape: list[int], **kwargs):
    return (
        pb()
        .ModelInferRequest()
        .InferInputTensor(name=name, datatype=datatype, shape=shape, **kwargs)
    )


F32_A = np.array([1, 2, 3, 4], np.float32)
F32_B = np.array([0.5, 1, 1.5, 2], np.float32)


def add_sub_request(
    model: str = "add_sub", version: str = "", inputs=None, raw=None, outputs=(), **kwargs
):
    """A ModelInferRequest for add_sub (its two inputs as raw contents unless given)."""
    request = pb().ModelInferRequest(model_name=model, model_version=version, **kwargs)
    if inputs is None:
        inputs = [tensor("INPUT0", "FP32", [4]), tensor("INPUT1", "FP32", [4])]
        raw = [F32_A.tobytes(), F32_B.tobytes()] if raw is None else raw
    request.inputs.extend(inputs)
    request.raw_input_contents.extend(raw or [])
    for name in outputs:
        request.outputs.add(name=name)
    return request


def doubler_request(data: np.ndarray, **kwargs):
    request = pb().ModelInferRequest(model_name="doubler", **kwargs)
    request.inputs.extend([tensor("INPUT", "INT32", list(data.shape))])
    request.raw_input_contents.append(data.astype(np.int32).tobytes())
    return request


def with_param(request, key: str, **value):
    request.parameters[key].CopyFrom(pb().InferParameter(**value))
    return request


def settled(index: Callable[[Target], Outcome]) -> Callable[[Target], Outcome]:
    """The repository index once no model is loading or unloading (tritonserver's unload call
    returns before the model's stub has stopped: UNLOADING for a moment)."""

    def send(target: Target) -> Outcome:
        def done():
            outcome = index(target)
            busy = outcome.status == "OK" and any(
                state in ("LOADING", "UNLOADING") for _, _, state in outcome.answer
            )
            return None if busy else outcome

        return wait_until(done, 30, "the repository index to settle")

    return send


def stream_unknown_model(target: Target) -> Outcome:
    """ModelStreamInfer with an unknown model: each answer's error message or its model."""

    def requests():
        yield add_sub_request(model="nope")
        yield add_sub_request()

    try:
        replies = list(target.stub.ModelStreamInfer(requests(), timeout=30))
    except grpc.RpcError as exc:
        return Outcome(exc.code().name, message=exc.details() or "")
    answers = ["error" if r.error_message else r.infer_response.model_name for r in replies]
    errors = "; ".join(r.error_message for r in replies if r.error_message)
    return Outcome("OK", answers, message=errors)


# ------------------------------------------------------------------------------------ shared memory
SHM_KEY = f"/triton_ros_parity_{os.getpid()}"
SHM_SIZE = 64


def shm_register(name: str, key: str = SHM_KEY, offset: int = 0, byte_size: int = SHM_SIZE):
    return grpc_call(
        "SystemSharedMemoryRegister",
        lambda: pb().SystemSharedMemoryRegisterRequest(
            name=name, key=key, offset=offset, byte_size=byte_size
        ),
    )


def registered_then_unregistered(register, unregister) -> Callable[[Target], Outcome]:
    """``register``'s outcome; ``unregister`` follows, so the servers' states stay alike."""

    def send(target: Target) -> Outcome:
        try:
            return register(target)
        finally:
            unregister(target)

    return send


def shm_input_request(region: str, offset: int = 0, byte_size: int = 16):
    """add_sub with INPUT0 read from ``region`` (the region holds F32_A at 0, F32_B at 16)."""
    first = tensor("INPUT0", "FP32", [4])
    first.parameters["shared_memory_region"].string_param = region
    first.parameters["shared_memory_offset"].int64_param = offset
    first.parameters["shared_memory_byte_size"].int64_param = byte_size
    return add_sub_request(inputs=[first, tensor("INPUT1", "FP32", [4])], raw=[F32_B.tobytes()])


# ------------------------------------------------------------------------------------ HTTP
def http_json_answer(status: int, headers, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return f"not JSON: {headers.get('Content-Type')}"


def http_error_form(body: bytes) -> str:
    """Triton's error bodies are ``{"error": "<message>"}`` (what tritonclient.http reads)."""
    try:
        doc = json.loads(body)
    except ValueError:
        return "not JSON"
    return (
        "json-error"
        if isinstance(doc, dict) and isinstance(doc.get("error"), str)
        else ("JSON without 'error'")
    )


def http_call(
    method: str,
    path: str,
    body: bytes | str | dict | list | None = None,
    headers: dict | None = None,
    answer: Callable[[Any], Any] | None = lambda doc: None,
) -> Callable[[Target], Outcome]:
    """One raw HTTP request; a success's ``answer(parsed JSON body)`` is compared."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()

    def send(target: Target) -> Outcome:
        conn = http.client.HTTPConnection(target.host, target.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            reply = conn.getresponse()
            data = reply.read()
        finally:
            conn.close()
        if reply.status != 200:
            message = data.decode(errors="replace")
            return Outcome(str(reply.status), http_error_form(data), message=message)
        return Outcome(
            "200", answer(http_json_answer(reply.status, reply.headers, data)) if answer else None
        )

    return send


def json_infer_answer(doc: dict) -> dict:
    outputs = sorted(
        (o["name"], o["datatype"], o["shape"], o.get("data")) for o in doc.get("outputs", [])
    )
    return {
        "model_name": doc.get("model_name"),
        "model_version": doc.get("model_version"),
        "id": doc.get("id"),
        "outputs": outputs,
    }


def http_metadata_answer(doc: dict) -> dict:
    return {k: doc.get(k) for k in ("name", "versions", "platform", "inputs", "outputs")}


def http_config_answer(doc: dict) -> dict:
    return {
        "name": doc.get("name"),
        "backend": doc.get("backend"),
        "max_batch_size": doc.get("max_batch_size", 0),
        "input": [(t["name"], t["data_type"], t.get("dims")) for t in doc.get("input", [])],
        "output": [(t["name"], t["data_type"], t.get("dims")) for t in doc.get("output", [])],
    }


ADD_SUB_JSON = {
    "inputs": [
        {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": F32_A.tolist()},
        {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": F32_B.tolist()},
    ]
}


def add_sub_json(**changes) -> dict:
    """ADD_SUB_JSON with INPUT0's fields changed (``None`` removes one)."""
    doc = json.loads(json.dumps(ADD_SUB_JSON))
    for key, value in changes.items():
        if value is None:
            doc["inputs"][0].pop(key, None)
        else:
            doc["inputs"][0][key] = value
    return doc


def binary_body(doc: dict, binary: bytes) -> tuple[bytes, dict]:
    header = json.dumps(doc).encode()
    return header + binary, {
        "Inference-Header-Content-Length": str(len(header)),
        "Content-Type": "application/octet-stream",
    }


def http_binary(header_length: str | None = None, binary_size: int = 16):
    """add_sub with INPUT0 in Triton's binary tensor extension (``binary_data_size``)."""
    doc = add_sub_json(data=None, parameters={"binary_data_size": binary_size})
    body, headers = binary_body(doc, F32_A.tobytes())
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = header_length
    return http_call("POST", "/v2/models/add_sub/infer", body, headers, answer=json_infer_answer)


def tritonclient_http_infer(model: str = "add_sub"):
    """add_sub through tritonclient.http with binary tensors both ways."""

    def send(target: Target) -> Outcome:
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        client = httpclient.InferenceServerClient(f"{target.host}:{target.port}")
        inputs = [
            httpclient.InferInput("INPUT0", [4], "FP32"),
            httpclient.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(F32_A)
        inputs[1].set_data_from_numpy(F32_B)
        try:
            result = client.infer(model, inputs)
        except InferenceServerException as exc:
            return Outcome(str(exc.status()), message=exc.message())
        finally:
            client.close()
        return Outcome(
            "200", {name: result.as_numpy(name).tolist() for name in ("OUTPUT0", "OUTPUT1")}
        )

    return send


def tritonclient_grpc(call: Callable[[Any], Any]):
    """A call through tritonclient.grpc; its exception's status is the outcome."""

    def send(target: Target) -> Outcome:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        client = grpcclient.InferenceServerClient(target.server.url)
        try:
            result = call(client)
        except InferenceServerException as exc:
            return Outcome(str(exc.status()).replace("StatusCode.", ""), message=exc.message())
        finally:
            client.close()
        return Outcome("OK", result)

    return send


def grpc_client_infer(model: str):
    def call(client):
        import tritonclient.grpc as grpcclient

        inputs = [
            grpcclient.InferInput("INPUT0", [4], "FP32"),
            grpcclient.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(F32_A)
        inputs[1].set_data_from_numpy(F32_B)
        result = client.infer(model, inputs)
        return {name: result.as_numpy(name).tolist() for name in ("OUTPUT0", "OUTPUT1")}

    return call


# ------------------------------------------------------------------------------------ the cases
@dataclass(frozen=True)
class Case:
    """``send`` goes to tritonserver and to ``ours``: the server with client shared memory
    allowed, or "ours-default", the one with the default flags."""

    id: str
    send: Callable[[Target], Outcome]
    ours: str = "ours"


def cases() -> list[Case]:
    """Every request, in the order both servers get them (the shared memory and repository
    cases change state: each server goes through the same sequence)."""
    P = pb()
    c = []

    def add(case_id: str, send, ours: str = "ours") -> None:
        c.append(Case(case_id, send, ours))

    # --- health and server metadata
    add("grpc-server-live", grpc_call("ServerLive", P.ServerLiveRequest))
    add("grpc-server-ready", grpc_call("ServerReady", P.ServerReadyRequest))
    add(
        "grpc-server-metadata",
        grpc_call("ServerMetadata", P.ServerMetadataRequest, server_metadata_answer),
    )
    add("http-health-live", http_call("GET", "/v2/health/live"))
    add("http-health-ready", http_call("GET", "/v2/health/ready"))
    add("http-server-metadata", http_call("GET", "/v2", answer=lambda d: sorted(d["extensions"])))
    # --- model readiness, metadata and configuration
    add("grpc-model-ready", grpc_call("ModelReady", lambda: P.ModelReadyRequest(name="add_sub")))
    add(
        "grpc-model-ready-unknown-model",
        grpc_call("ModelReady", lambda: P.ModelReadyRequest(name="nope")),
    )
    add(
        "grpc-model-ready-unknown-version",
        grpc_call("ModelReady", lambda: P.ModelReadyRequest(name="add_sub", version="7")),
    )
    add(
        "grpc-model-metadata",
        grpc_call("ModelMetadata", lambda: P.ModelMetadataRequest(name="doubler"), metadata_answer),
    )
    add(
        "grpc-model-metadata-unknown-model",
        grpc_call("ModelMetadata", lambda: P.ModelMetadataRequest(name="nope")),
    )
    add(
        "grpc-model-metadata-empty-name",
        grpc_call("ModelMetadata", lambda: P.ModelMetadataRequest(name="")),
    )
    add(
        "grpc-model-metadata-unknown-version",
        grpc_call("ModelMetadata", lambda: P.ModelMetadataRequest(name="add_sub", version="7")),
    )
    add(
        "grpc-model-metadata-bad-version",
        grpc_call("ModelMetadata", lambda: P.ModelMetadataRequest(name="add_sub", version="x")),
    )
    add(
        "grpc-model-config",
        grpc_call("ModelConfig", lambda: P.ModelConfigRequest(name="doubler"), config_answer),
    )
    add(
        "grpc-model-config-unknown-model",
        grpc_call("ModelConfig", lambda: P.ModelConfigRequest(name="nope")),
    )
    add(
        "grpc-model-config-empty-name",
        grpc_call("ModelConfig", lambda: P.ModelConfigRequest(name="")),
    )
    add(
        "grpc-model-config-unknown-version",
        grpc_call("ModelConfig", lambda: P.ModelConfigRequest(name="add_sub", version="7")),
    )
    add(
        "grpc-tritonclient-metadata-unknown-model",
        tritonclient_grpc(lambda client: client.get_model_metadata("nope")),
    )
    add("http-model-ready", http_call("GET", "/v2/models/add_sub/ready"))
    add("http-model-ready-unknown-model", http_call("GET", "/v2/models/nope/ready"))
    add("http-model-metadata", http_call("GET", "/v2/models/doubler", answer=http_metadata_answer))
    add("http-model-metadata-unknown-model", http_call("GET", "/v2/models/nope"))
    add("http-model-metadata-unknown-version", http_call("GET", "/v2/models/add_sub/versions/7"))
    add(
        "http-model-config",
        http_call("GET", "/v2/models/doubler/config", answer=http_config_answer),
    )
    add("http-model-config-unknown-model", http_call("GET", "/v2/models/nope/config"))
    add(
        "http-model-config-unknown-version",
        http_call("GET", "/v2/models/add_sub/versions/7/config"),
    )
    # --- inference over gRPC
    add("grpc-infer", grpc_call("ModelInfer", lambda: add_sub_request(id="a1"), infer_answer))
    add(
        "grpc-infer-tensor-contents",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[
                    tensor(
                        "INPUT0",
                        "FP32",
                        [4],
                        contents=P.InferTensorContents(fp32_contents=F32_A.tolist()),
                    ),
                    tensor(
                        "INPUT1",
                        "FP32",
                        [4],
                        contents=P.InferTensorContents(fp32_contents=F32_B.tolist()),
                    ),
                ],
                raw=[],
            ),
            infer_answer,
        ),
    )
    add(
        "grpc-infer-requested-output",
        grpc_call("ModelInfer", lambda: add_sub_request(outputs=["OUTPUT1"]), infer_answer),
    )
    add(
        "grpc-infer-batched",
        grpc_call("ModelInfer", lambda: doubler_request(np.arange(6).reshape(2, 3)), infer_answer),
    )
    add("grpc-infer-bytes", grpc_call("ModelInfer", lambda: strings_request(), infer_answer))
    add("grpc-tritonclient-infer", tritonclient_grpc(grpc_client_infer("add_sub")))
    add("grpc-tritonclient-infer-unknown-model", tritonclient_grpc(grpc_client_infer("nope")))
    add("grpc-infer-unknown-model", grpc_call("ModelInfer", lambda: add_sub_request(model="nope")))
    add("grpc-infer-empty-name", grpc_call("ModelInfer", lambda: add_sub_request(model="")))
    add("grpc-infer-unknown-version", grpc_call("ModelInfer", lambda: add_sub_request(version="7")))
    add("grpc-infer-bad-version", grpc_call("ModelInfer", lambda: add_sub_request(version="one")))
    add(
        "grpc-infer-missing-input",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(inputs=[tensor("INPUT0", "FP32", [4])], raw=[F32_A.tobytes()]),
        ),
    )
    add(
        "grpc-infer-unknown-input",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[
                    tensor("INPUT0", "FP32", [4]),
                    tensor("INPUT1", "FP32", [4]),
                    tensor("INPUT9", "FP32", [4]),
                ],
                raw=[F32_A.tobytes()] * 3,
            ),
        ),
    )
    add(
        "grpc-infer-duplicate-input",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[
                    tensor("INPUT0", "FP32", [4]),
                    tensor("INPUT0", "FP32", [4]),
                    tensor("INPUT1", "FP32", [4]),
                ],
                raw=[F32_A.tobytes()] * 3,
            ),
        ),
    )
    add(
        "grpc-infer-wrong-shape",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[tensor("INPUT0", "FP32", [5]), tensor("INPUT1", "FP32", [4])],
                raw=[np.zeros(5, np.float32).tobytes(), F32_B.tobytes()],
            ),
        ),
    )
    add(
        "grpc-infer-wrong-rank",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[tensor("INPUT0", "FP32", [1, 4]), tensor("INPUT1", "FP32", [1, 4])]
            ),
        ),
    )
    add(
        "grpc-infer-wrong-datatype",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[tensor("INPUT0", "INT32", [4]), tensor("INPUT1", "FP32", [4])]
            ),
        ),
    )
    add(
        "grpc-infer-unknown-datatype",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[tensor("INPUT0", "FOO", [4]), tensor("INPUT1", "FP32", [4])]
            ),
        ),
    )
    add(
        "grpc-infer-raw-size",
        grpc_call(
            "ModelInfer", lambda: add_sub_request(raw=[F32_A.tobytes()[:12], F32_B.tobytes()])
        ),
    )
    add(
        "grpc-infer-raw-count",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(raw=[F32_A.tobytes(), F32_B.tobytes(), F32_B.tobytes()]),
        ),
    )
    add(
        "grpc-infer-raw-and-contents",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[
                    tensor(
                        "INPUT0",
                        "FP32",
                        [4],
                        contents=P.InferTensorContents(fp32_contents=F32_A.tolist()),
                    ),
                    tensor("INPUT1", "FP32", [4]),
                ]
            ),
        ),
    )
    add(
        "grpc-infer-negative-dim",
        grpc_call(
            "ModelInfer",
            lambda: add_sub_request(
                inputs=[tensor("INPUT0", "FP32", [-4]), tensor("INPUT1", "FP32", [4])]
            ),
        ),
    )
    add(
        "grpc-infer-batch-too-large",
        grpc_call("ModelInfer", lambda: doubler_request(np.ones((9, 3), np.int32))),
    )
    add(
        "grpc-infer-unknown-output",
        grpc_call("ModelInfer", lambda: add_sub_request(outputs=["OUTPUT9"])),
    )
    add(
        "grpc-infer-priority-wrong-type",
        grpc_call(
            "ModelInfer", lambda: with_param(add_sub_request(), "priority", string_param="high")
        ),
    )
    add(
        "grpc-infer-timeout-wrong-type",
        grpc_call(
            "ModelInfer", lambda: with_param(add_sub_request(), "timeout", string_param="soon")
        ),
    )
    add(
        "grpc-infer-model-error",
        grpc_call("ModelInfer", lambda: doubler_request(np.array([[1, -2, 3]]))),
    )
    add("grpc-infer-model-raises", grpc_call("ModelInfer", lambda: fails_request()))
    add("grpc-infer-shm-unknown-region", grpc_call("ModelInfer", lambda: shm_input_request("nope")))
    add("grpc-infer-malformed-protobuf", grpc_raw("ModelInfer", b"\x0a\xff\xff\xff\xff"))
    add("grpc-metadata-malformed-protobuf", grpc_raw("ModelMetadata", b"\x0a\x05ab"))
    add("grpc-stream-infer-unknown-model", stream_unknown_model)
    # --- inference over HTTP
    add(
        "http-infer-json",
        http_call(
            "POST",
            "/v2/models/add_sub/infer",
            {**ADD_SUB_JSON, "id": "h1"},
            answer=json_infer_answer,
        ),
    )
    add("http-infer-binary-input", http_binary())
    add("http-tritonclient-infer", tritonclient_http_infer())
    add("http-tritonclient-infer-unknown-model", tritonclient_http_infer("nope"))
    add(
        "http-infer-bytes",
        http_call(
            "POST",
            "/v2/models/strings/infer",
            {
                "inputs": [
                    {"name": "TEXT", "shape": [1, 2], "datatype": "BYTES", "data": ["ab", "cd"]}
                ]
            },
            answer=json_infer_answer,
        ),
    )
    add(
        "http-infer-gzip",
        http_call(
            "POST",
            "/v2/models/add_sub/infer",
            gzip.compress(json.dumps(ADD_SUB_JSON).encode()),
            {"Content-Encoding": "gzip"},
            answer=json_infer_answer,
        ),
    )
    add("http-infer-unknown-model", http_call("POST", "/v2/models/nope/infer", ADD_SUB_JSON))
    add("http-infer-empty-name", http_call("POST", "/v2/models//infer", ADD_SUB_JSON))
    add(
        "http-infer-unknown-version",
        http_call("POST", "/v2/models/add_sub/versions/7/infer", ADD_SUB_JSON),
    )
    add("http-infer-malformed-json", http_call("POST", "/v2/models/add_sub/infer", '{"inputs": [}'))
    add("http-infer-json-not-object", http_call("POST", "/v2/models/add_sub/infer", "[1, 2]"))
    add("http-infer-no-inputs", http_call("POST", "/v2/models/add_sub/infer", {"id": "x"}))
    add(
        "http-infer-missing-input",
        http_call("POST", "/v2/models/add_sub/infer", {"inputs": ADD_SUB_JSON["inputs"][:1]}),
    )
    add(
        "http-infer-wrong-shape",
        http_call("POST", "/v2/models/add_sub/infer", add_sub_json(shape=[2, 2])),
    )
    add(
        "http-infer-wrong-datatype",
        http_call("POST", "/v2/models/add_sub/infer", add_sub_json(datatype="INT32")),
    )
    add(
        "http-infer-data-count",
        http_call("POST", "/v2/models/add_sub/infer", add_sub_json(data=[1, 2, 3])),
    )
    add(
        "http-infer-data-not-numbers",
        http_call("POST", "/v2/models/add_sub/infer", add_sub_json(data=["a", "b", "c", "d"])),
    )
    add(
        "http-infer-unknown-output",
        http_call(
            "POST", "/v2/models/add_sub/infer", {**ADD_SUB_JSON, "outputs": [{"name": "OUTPUT9"}]}
        ),
    )
    add(
        "http-infer-priority-wrong-type",
        http_call(
            "POST", "/v2/models/add_sub/infer", {**ADD_SUB_JSON, "parameters": {"priority": "high"}}
        ),
    )
    add(
        "http-infer-batch-too-large",
        http_call(
            "POST",
            "/v2/models/doubler/infer",
            {"inputs": [{"name": "INPUT", "shape": [9, 3], "datatype": "INT32", "data": [1] * 27}]},
        ),
    )
    add(
        "http-infer-model-error",
        http_call(
            "POST",
            "/v2/models/doubler/infer",
            {
                "inputs": [
                    {"name": "INPUT", "shape": [1, 3], "datatype": "INT32", "data": [1, -2, 3]}
                ]
            },
        ),
    )
    add("http-infer-binary-size-mismatch", http_binary(binary_size=12))
    add("http-infer-header-length-past-body", http_binary(header_length="100000"))
    add("http-infer-header-length-not-number", http_binary(header_length="abc"))
    add(
        "http-infer-bad-gzip",
        http_call("POST", "/v2/models/add_sub/infer", b"not gzip", {"Content-Encoding": "gzip"}),
    )
    # --- statistics
    add("grpc-statistics-all", grpc_call("ModelStatistics", P.ModelStatisticsRequest, stats_answer))
    add(
        "grpc-statistics-model",
        grpc_call(
            "ModelStatistics", lambda: P.ModelStatisticsRequest(name="add_sub"), stats_answer
        ),
    )
    add(
        "grpc-statistics-unknown-model",
        grpc_call("ModelStatistics", lambda: P.ModelStatisticsRequest(name="nope")),
    )
    add(
        "grpc-statistics-unknown-version",
        grpc_call("ModelStatistics", lambda: P.ModelStatisticsRequest(name="add_sub", version="7")),
    )
    add(
        "http-statistics-all",
        http_call(
            "GET",
            "/v2/models/stats",
            answer=lambda d: sorted((s["name"], s["version"]) for s in d["model_stats"]),
        ),
    )
    add("http-statistics-unknown-model", http_call("GET", "/v2/models/nope/stats"))
    # --- model repository
    add(
        "grpc-repository-index",
        grpc_call("RepositoryIndex", P.RepositoryIndexRequest, index_answer),
    )
    add(
        "grpc-repository-index-ready",
        grpc_call("RepositoryIndex", lambda: P.RepositoryIndexRequest(ready=True), index_answer),
    )
    add(
        "http-repository-index",
        http_call(
            "POST",
            "/v2/repository/index",
            answer=lambda d: sorted(
                (m["name"], m.get("version", ""), m.get("state", "")) for m in d
            ),
        ),
    )
    add("http-repository-index-malformed-json", http_call("POST", "/v2/repository/index", "{ready"))
    add(
        "grpc-load-unknown-model",
        grpc_call("RepositoryModelLoad", lambda: P.RepositoryModelLoadRequest(model_name="nope")),
    )
    add(
        "grpc-unload-unknown-model",
        grpc_call(
            "RepositoryModelUnload", lambda: P.RepositoryModelUnloadRequest(model_name="nope")
        ),
    )
    add(
        "grpc-load-model",
        grpc_call(
            "RepositoryModelLoad", lambda: P.RepositoryModelLoadRequest(model_name="add_sub")
        ),
    )
    add(
        "grpc-load-config-not-json",
        grpc_call("RepositoryModelLoad", lambda: load_with_config("add_sub", "{not json")),
    )
    add("http-load-unknown-model", http_call("POST", "/v2/repository/models/nope/load"))
    add("http-unload-unknown-model", http_call("POST", "/v2/repository/models/nope/unload"))
    add(
        "http-load-malformed-json",
        http_call("POST", "/v2/repository/models/add_sub/load", "{params"),
    )
    add("http-load-model", http_call("POST", "/v2/repository/models/add_sub/load"))
    add("grpc-infer-after-load", grpc_call("ModelInfer", lambda: add_sub_request(), infer_answer))
    # --- a model unloaded, then loaded again
    add(
        "grpc-unload-model",
        grpc_call(
            "RepositoryModelUnload", lambda: P.RepositoryModelUnloadRequest(model_name="strings")
        ),
    )
    add(
        "grpc-repository-index-after-unload",
        settled(grpc_call("RepositoryIndex", P.RepositoryIndexRequest, index_answer)),
    )
    add(
        "grpc-model-ready-unloaded-model",
        grpc_call("ModelReady", lambda: P.ModelReadyRequest(name="strings")),
    )
    add(
        "grpc-model-metadata-unloaded-model",
        grpc_call("ModelMetadata", lambda: P.ModelMetadataRequest(name="strings")),
    )
    add("grpc-infer-unloaded-model", grpc_call("ModelInfer", strings_request))
    add(
        "grpc-statistics-unloaded-model",
        grpc_call("ModelStatistics", lambda: P.ModelStatisticsRequest(name="strings")),
    )
    add(
        "http-infer-unloaded-model",
        http_call(
            "POST",
            "/v2/models/strings/infer",
            {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["ab"]}]},
        ),
    )
    add("http-model-ready-unloaded-model", http_call("GET", "/v2/models/strings/ready"))
    add("http-load-unloaded-model", http_call("POST", "/v2/repository/models/strings/load"))
    add("grpc-infer-reloaded-model", grpc_call("ModelInfer", strings_request, infer_answer))
    # --- system shared memory (ours with --allow-client-shm true)
    add(
        "grpc-shm-status-empty",
        grpc_call("SystemSharedMemoryStatus", P.SystemSharedMemoryStatusRequest, shm_status_answer),
    )
    add("grpc-shm-register-missing-key", shm_register("gone", key="/triton_ros_parity_none"))
    add("grpc-shm-register", shm_register("parity"))
    add("grpc-shm-register-duplicate", shm_register("parity"))
    add("grpc-shm-register-past-object", shm_register("big", byte_size=SHM_SIZE * 1024))
    add("grpc-shm-register-huge-offset", shm_register("huge", offset=2**64 - 1, byte_size=4))
    add("grpc-shm-register-zero-size", shm_register("zero", byte_size=0))
    add(
        "grpc-shm-status",
        grpc_call("SystemSharedMemoryStatus", P.SystemSharedMemoryStatusRequest, shm_status_answer),
    )
    add(
        "grpc-shm-status-region",
        grpc_call(
            "SystemSharedMemoryStatus",
            lambda: P.SystemSharedMemoryStatusRequest(name="parity"),
            shm_status_answer,
        ),
    )
    add(
        "grpc-shm-status-unknown-region",
        grpc_call(
            "SystemSharedMemoryStatus", lambda: P.SystemSharedMemoryStatusRequest(name="nope")
        ),
    )
    add(
        "grpc-infer-shm-input",
        grpc_call("ModelInfer", lambda: shm_input_request("parity"), infer_answer),
    )
    add(
        "grpc-infer-shm-past-region",
        grpc_call("ModelInfer", lambda: shm_input_request("parity", offset=56)),
    )
    add(
        "grpc-infer-shm-wrong-size",
        grpc_call("ModelInfer", lambda: shm_input_request("parity", byte_size=12)),
    )
    add(
        "http-shm-status",
        http_call(
            "GET",
            "/v2/systemsharedmemory/status",
            answer=lambda d: sorted((r["name"], r["key"], r["offset"], r["byte_size"]) for r in d),
        ),
    )
    add(
        "http-shm-register-missing-key",
        http_call(
            "POST",
            "/v2/systemsharedmemory/region/gone/register",
            {"key": "/triton_ros_parity_none", "offset": 0, "byte_size": 16},
        ),
    )
    add(
        "http-shm-register-malformed-json",
        http_call("POST", "/v2/systemsharedmemory/region/x/register", "{key"),
    )
    add(
        "http-shm-register-no-key",
        http_call(
            "POST", "/v2/systemsharedmemory/region/x/register", {"offset": 0, "byte_size": 16}
        ),
    )
    add(
        "http-shm-status-unknown-region",
        http_call("GET", "/v2/systemsharedmemory/region/nope/status"),
    )
    add(
        "grpc-shm-unregister",
        grpc_call(
            "SystemSharedMemoryUnregister",
            lambda: P.SystemSharedMemoryUnregisterRequest(name="parity"),
        ),
    )
    add(
        "grpc-shm-unregister-unknown-region",
        grpc_call(
            "SystemSharedMemoryUnregister",
            lambda: P.SystemSharedMemoryUnregisterRequest(name="nope"),
        ),
    )
    add("http-shm-unregister-all", http_call("POST", "/v2/systemsharedmemory/unregister"))
    # --- shared memory with triton-ros-server's default flags (client shared memory off)
    add(
        "grpc-shm-register-default-flags",
        registered_then_unregistered(
            shm_register("default"),
            grpc_call(
                "SystemSharedMemoryUnregister",
                lambda: P.SystemSharedMemoryUnregisterRequest(name="default"),
            ),
        ),
        ours="ours-default",
    )
    add(
        "http-shm-register-default-flags",
        registered_then_unregistered(
            http_call(
                "POST",
                "/v2/systemsharedmemory/region/default/register",
                {"key": SHM_KEY, "offset": 0, "byte_size": 16},
            ),
            http_call("POST", "/v2/systemsharedmemory/region/default/unregister"),
        ),
        ours="ours-default",
    )
    add(
        "grpc-shm-unregister-default-flags",
        grpc_call("SystemSharedMemoryUnregister", P.SystemSharedMemoryUnregisterRequest),
        ours="ours-default",
    )
    add(
        "grpc-shm-status-default-flags",
        grpc_call("SystemSharedMemoryStatus", P.SystemSharedMemoryStatusRequest, shm_status_answer),
        ours="ours-default",
    )
    add(
        "grpc-cuda-shm-register-default-flags",
        grpc_call(
            "CudaSharedMemoryRegister",
            lambda: P.CudaSharedMemoryRegisterRequest(
                name="cuda", raw_handle=b"\x00" * 64, device_id=0, byte_size=16
            ),
        ),
        ours="ours-default",
    )
    add(
        "grpc-cuda-shm-unregister-default-flags",
        grpc_call("CudaSharedMemoryUnregister", P.CudaSharedMemoryUnregisterRequest),
        ours="ours-default",
    )
    # --- CUDA shared memory (neither server has a GPU here)
    add(
        "grpc-cuda-shm-register",
        grpc_call(
            "CudaSharedMemoryRegister",
            lambda: P.CudaSharedMemoryRegisterRequest(
                name="cuda", raw_handle=b"\x00" * 64, device_id=0, byte_size=16
            ),
        ),
    )
    add(
        "grpc-cuda-shm-status",
        grpc_call("CudaSharedMemoryStatus", P.CudaSharedMemoryStatusRequest, as_dict),
    )
    add(
        "grpc-cuda-shm-status-unknown-region",
        grpc_call("CudaSharedMemoryStatus", lambda: P.CudaSharedMemoryStatusRequest(name="nope")),
    )
    add(
        "grpc-cuda-shm-unregister-unknown-region",
        grpc_call(
            "CudaSharedMemoryUnregister", lambda: P.CudaSharedMemoryUnregisterRequest(name="nope")
        ),
    )
    add(
        "http-cuda-shm-register",
        http_call(
            "POST",
            "/v2/cudasharedmemory/region/cuda/register",
            {
                "raw_handle": {"b64": base64.b64encode(bytes(64)).decode()},
                "device_id": 0,
                "byte_size": 16,
            },
        ),
    )
    add(
        "http-cuda-shm-register-short-handle",
        http_call(
            "POST",
            "/v2/cudasharedmemory/region/cuda/register",
            {"raw_handle": {"b64": "AAAAAAAAAAAAAAAA"}, "device_id": 0, "byte_size": 16},
        ),
    )
    add(
        "http-cuda-shm-register-no-handle",
        http_call(
            "POST", "/v2/cudasharedmemory/region/cuda/register", {"device_id": 0, "byte_size": 16}
        ),
    )
    add("http-cuda-shm-status", http_call("GET", "/v2/cudasharedmemory/status", answer=lambda d: d))
    # --- trace and log settings
    add("grpc-trace-setting", grpc_call("TraceSetting", P.TraceSettingRequest, settings_answer))
    add("grpc-log-settings", grpc_call("LogSettings", P.LogSettingsRequest, settings_answer))
    add(
        "grpc-trace-setting-unknown-model",
        grpc_call("TraceSetting", lambda: P.TraceSettingRequest(model_name="nope")),
    )
    add("http-trace-setting-unknown-model", http_call("GET", "/v2/models/nope/trace/setting"))
    add("http-trace-setting", http_call("GET", "/v2/trace/setting", answer=sorted))
    add("http-logging", http_call("GET", "/v2/logging", answer=sorted))
    add("http-logging-malformed-json", http_call("POST", "/v2/logging", "{log_info"))
    add("http-trace-setting-malformed-json", http_call("POST", "/v2/trace/setting", "{x"))
    # --- routes and methods
    add("http-unknown-route", http_call("GET", "/v2/nope"))
    add("http-wrong-method", http_call("DELETE", "/v2/models/add_sub"))
    add("http-infer-get", http_call("GET", "/v2/models/add_sub/infer"))
    return c


def strings_request():
    from tritonclient.utils import serialize_byte_tensor

    request = pb().ModelInferRequest(model_name="strings")
    request.inputs.extend([tensor("TEXT", "BYTES", [1, 2])])
    request.raw_input_contents.append(
        serialize_byte_tensor(np.array([[b"ab", b"cd"]], np.object_)).item()
    )
    return request


def fails_request():
    request = pb().ModelInferRequest(model_name="fails")
    request.inputs.extend([tensor("INPUT", "FP32", [1])])
    request.raw_input_contents.append(np.ones(1, np.float32).tobytes())
    return request


def load_with_config(model: str, config: str):
    request = pb().RepositoryModelLoadRequest(model_name=model)
    request.parameters["config"].string_param = config
    return request


CASES = cases()


# ------------------------------------------------------------------------------------ the docs
def documented_differences(text: str | None = None) -> dict[str, tuple[str, str, str]]:
    """docs/server.md's table of deliberate differences: case id -> (tritonserver's status,
    ours, why). Rows name one or more case ids in backquotes in their first cell."""
    text = DOCS.read_text() if text is None else text
    start = text.index(DOCS_SECTION)
    end = text.find("\n## ", start + len(DOCS_SECTION))
    section = text[start : end if end >= 0 else len(text)]
    table: dict[str, tuple[str, str, str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 4:
            continue
        ids = re.findall(r"`([a-z0-9-]+)`", cells[0])
        for case_id in ids:
            table[case_id] = (cells[1].strip("`"), cells[2].strip("`"), cells[3])
    return table


# ------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def shm_object():
    """The POSIX shared memory object the register cases name: F32_A at 0, F32_B at 16."""
    from tritonclient.utils import shared_memory as shm

    handle = shm.create_shared_memory_region("parity", SHM_KEY, SHM_SIZE)
    shm.set_shared_memory_region(handle, [F32_A, F32_B])
    yield handle
    shm.destroy_shared_memory_region(handle)


def send(case: Case, target: Target) -> Outcome:
    """The case's outcome; an exception in the client is one too (and never equal to a
    server's answer)."""
    try:
        return case.send(target)
    except Exception as exc:  # a client that cannot read the answer
        return Outcome("client error", message=f"{type(exc).__name__}: {exc}")


@pytest.fixture(scope="module")
def outcomes(start_module_server, shm_object) -> dict[str, tuple[Outcome, Outcome]]:
    """case id -> (tritonserver's outcome, ours), every case sent to both in order."""
    flags = ("--model-control-mode", "explicit", "--load-model", "*")
    theirs = start_tritonserver(PARITY_MODELS, *flags)
    try:
        repository = ("--model-repository", str(PARITY_MODELS))
        # quiet: no traceback in our logs for anything these clients sent
        ours = {
            "ours": start_module_server(
                *repository, *flags, "--allow-client-shm", "true", quiet=True
            ),
            "ours-default": start_module_server(*repository, *flags, quiet=True),
        }
        targets = {"theirs": Target(theirs), **{k: Target(v) for k, v in ours.items()}}
        found = {}
        try:
            for case in CASES:
                found[case.id] = (send(case, targets["theirs"]), send(case, targets[case.ours]))
        finally:
            for target in targets.values():
                target.close()
    finally:
        theirs.stop_and_check()
    report = [
        f"{case.id}: tritonserver {found[case.id][0]} | ours {found[case.id][1]}" for case in CASES
    ]
    print("\n".join(report))
    return found


# ------------------------------------------------------------------------------------ tests
def test_case_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    assert len(ids) >= 58


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_answers_as_tritonserver(case_id, outcomes):
    """The same status and answer, or a difference that docs/server.md lists with its reason
    and with the statuses both servers give now."""
    theirs, ours = outcomes[case_id]
    assert_answers_as_tritonserver(
        case_id, theirs, ours, documented_differences(), "docs/server.md", DOCS_SECTION
    )


def test_documented_differences_are_cases():
    """Every row of the docs' table names a case of this module, and the docs count the cases
    as they are."""
    ids = {case.id for case in CASES}
    assert set(documented_differences()) <= ids, set(documented_differences()) - ids
    counted = re.search(r"the same (\d+) requests", " ".join(DOCS.read_text().split()))
    assert counted and int(counted.group(1)) == len(CASES), (
        f"docs/server.md should say 'the same {len(CASES)} requests'"
    )


def test_allow_client_shm_is_ours_as_the_docs_say():
    """tritonserver 2.51 has no --allow-client-shm (it always lets clients register system
    shared memory: grpc-shm-register answers OK above): the flag's row in docs/server.md must say
    it is ours and off by default, not claim tritonserver's."""
    usage = subprocess.run(
        [str(tritonserver_binary()), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **stub_environment()},
        timeout=60,
    )
    assert "Usage: tritonserver" in usage.stdout + usage.stderr
    assert "--allow-client-shm" not in usage.stdout + usage.stderr
    row = next(
        line for line in DOCS.read_text().splitlines() if line.startswith("| `--allow-client-shm")
    )
    assert "as in tritonserver" not in row and "tritonserver 2.51 has no such flag" in row, row
    assert "default false" in row, row


def test_documented_table_is_read():
    """The parser reads rows with several case ids and skips the header."""
    text = (
        f"{DOCS_SECTION}\n\n| case | tritonserver | triton-ros-server | why |\n"
        f"|---|---|---|---|\n| `a-b`, `c` | 500 | 400 | a reason |\n\n"
        f"## Next\n| `d` | 1 | 2 | x |"
    )
    assert documented_differences(text) == {
        "a-b": ("500", "400", "a reason"),
        "c": ("500", "400", "a reason"),
    }
