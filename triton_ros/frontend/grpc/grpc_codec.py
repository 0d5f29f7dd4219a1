"""Conversion between Triton's gRPC messages (``inference.*``, from tritonclient) and core types.

Kept apart from the servicer so that the servicer only converts and delegates. Input tensors are
read from ``raw_input_contents`` without a copy (``np.frombuffer``), from the typed ``contents``
fields or, with the shared memory extension (``shared_memory_region`` / ``_offset`` /
``_byte_size`` parameters), copied out of a registered region; outputs asked for in shared memory
are written there and keep an empty ``raw_output_contents`` entry. Every size and type mismatch
becomes an INVALID_ARG error naming the input.

The inference messages' tensor bytes bypass protobuf, in both directions, because protobuf's
Python API cannot hand them over without copying (upb copies a bytes field into its arena when it
parses, and again into a new ``bytes`` object at each access; a field set from Python is copied
in, and out again when serialized). :func:`parse_infer_request` walks only the top level of the
wire format (tag, varint, length: the encoding documented at protobuf.dev/programming-guides/
encoding) to take each ``raw_input_contents`` entry as a ``memoryview`` of the received message,
and gives the rest to protobuf; :func:`serialize_infer_response` serializes the response without
its tensors with protobuf and appends each ``raw_output_contents`` entry as one length-delimited
field, which protobuf defines as the same message (repeated fields concatenate). Each input
tensor is then never copied before batching, and each output is copied once, into the reply.
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from ...core.datatypes import (
    PROTOCOL_DATATYPES,
    check_input_shape,
    from_numpy_dtype,
    tensor_from_bytes,
    tensor_to_bytes,
    to_numpy_dtype,
)
from ...core.errors import invalid_arg
from ...core.infer_request import InferRequest, InferResponse, RequestedOutput
from ...core.infer_stats import Duration, StatsSnapshot
from ...core.strict_parse import parse_model_version
from ...core.request_parameters import classification_count, split_request_parameters
from ...core.model_repository_manager import RepositoryEntry
from ...core.server import ModelMetadata, ServerMetadata
from ...core.shared_memory_manager import (
    NO_REGIONS,
    SHM_PARAMETERS,
    CudaRegionStatus,
    SharedMemoryBlock,
    SharedMemoryManager,
    SystemRegionStatus,
    shared_memory_params,
    write_outputs,
)

# datatype -> InferTensorContents field for typed (non-raw) tensor data
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def parse_version(text: str) -> int:
    """'' -> -1 (latest); '3' -> 3; anything else is an INVALID_ARG error (the core's rule)."""
    return parse_model_version(text)


def param_value(p) -> object:
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


class MalformedMessage(ValueError):
    """Bytes that are not a valid protobuf message of the expected type."""


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise MalformedMessage("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_RAW_INPUT_FIELD = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
_RAW_OUTPUT_TAG = _encode_varint(
    (pb.ModelInferResponse.DESCRIPTOR.fields_by_name["raw_output_contents"].number << 3) | 2
)
_STREAM_RESPONSE_TAG = _encode_varint(
    (pb.ModelStreamInferResponse.DESCRIPTOR.fields_by_name["infer_response"].number << 3) | 2
)


def parse_infer_request(data: bytes) -> tuple[pb.ModelInferRequest, list[memoryview]]:
    """A serialized ModelInferRequest -> (the message without its raw_input_contents, those
    contents as views of ``data``, in order). Raises MalformedMessage for invalid bytes."""
    end = len(data)
    view = memoryview(data)
    raws: list[memoryview] = []
    keep: list[tuple[int, int]] = []  # spans of every other field, merged when adjacent
    pos = 0
    try:
        while pos < end:
            start = pos
            key, pos = _varint(data, pos, end)
            wire_type = key & 7
            if wire_type == 0:
                _, pos = _varint(data, pos, end)
            elif wire_type == 1:
                pos += 8
            elif wire_type == 5:
                pos += 4
            elif wire_type == 2:
                length, pos = _varint(data, pos, end)
                if pos + length > end:
                    raise MalformedMessage("length-delimited field runs past the end")
                if key >> 3 == _RAW_INPUT_FIELD:
                    raws.append(view[pos : pos + length])
                    pos += length
                    continue
                pos += length
            else:
                raise MalformedMessage(f"unexpected wire type {wire_type}")
            if pos > end:
                raise MalformedMessage("field runs past the end")
            if keep and keep[-1][1] == start:
                keep[-1] = (keep[-1][0], pos)
            else:
                keep.append((start, pos))
        if not raws:
            return pb.ModelInferRequest.FromString(data), raws
        rest = keep[0] if len(keep) == 1 else None
        body = data[rest[0] : rest[1]] if rest is not None else b"".join(view[a:b] for a, b in keep)
        return pb.ModelInferRequest.FromString(body), raws
    except MalformedMessage:
        raise
    except Exception as exc:  # protobuf's DecodeError
        raise MalformedMessage(str(exc)) from None


def large_payload(
    msg: pb.ModelInferRequest, raws: list[memoryview], *, bytes_limit: int = 64 << 10
) -> bool:
    """Whether decoding this request takes long enough to belong off the event loop: BYTES
    inputs are parsed element by element in Python; other types are wrapped without a copy."""
    if not raws:
        return msg.ByteSize() > bytes_limit
    raw_iter = iter(raws)
    for tensor in msg.inputs:
        if "shared_memory_region" in tensor.parameters:
            if tensor.datatype == "BYTES":
                return True
            continue
        raw = next(raw_iter, None)
        if raw is not None and tensor.datatype == "BYTES" and len(raw) > bytes_limit:
            return True
    return False


def large_response(resp: InferResponse, *, elements_limit: int = 16 << 10) -> bool:
    """Whether serializing this response is slow (BYTES outputs are written element by
    element in Python)."""
    return any(a.dtype == np.object_ and a.size > elements_limit for a in resp.outputs.values())


def decode_infer_request(
    msg: pb.ModelInferRequest,
    shared_memory: SharedMemoryManager = NO_REGIONS,
    raw_contents: list | None = None,
) -> InferRequest:
    """A ModelInferRequest as a core request. Inputs in shared memory are copied out of their
    region now; outputs in shared memory are checked against theirs (``shared_memory`` is the
    server's registry; by default no region exists). ``raw_contents`` replaces the message's
    raw_input_contents (the views :func:`parse_infer_request` returns)."""
    model = msg.model_name
    params = split_request_parameters({k: param_value(v) for k, v in msg.parameters.items()})

    shm_inputs = [_shared_memory_params(t) for t in msg.inputs]
    raw = msg.raw_input_contents if raw_contents is None else raw_contents
    # Inputs in shared memory have no raw contents: the others take them in order.
    raw_count = sum(1 for p in shm_inputs if p is None)
    if raw and len(raw) != raw_count:
        raise invalid_arg(
            f"expected {raw_count} raw input contents (one per input not in shared "
            f"memory) but got {len(raw)} for model '{model}'"
        )
    raw_iter = iter(raw)
    inputs: dict[str, np.ndarray] = {}
    for tensor, shm in zip(msg.inputs, shm_inputs):
        if tensor.name in inputs:
            raise invalid_arg(f"input '{tensor.name}' already exists in request")
        if shm is not None:
            if tensor.HasField("contents"):
                raise invalid_arg(
                    f"unexpected 'content' provided when using shared memory for "
                    f"input tensor '{tensor.name}' for model '{model}'"
                )
            data = shared_memory.read(*shm)
            inputs[tensor.name] = _decode_tensor(model, tensor, data)
        else:
            inputs[tensor.name] = _decode_tensor(model, tensor, next(raw_iter) if raw else None)

    requested = None
    if msg.outputs:
        outs = []
        for out in msg.outputs:
            if not out.parameters:
                outs.append(RequestedOutput(out.name))
                continue
            shm = _shared_memory_params(out)
            count = (
                classification_count(param_value(out.parameters["classification"]), out.name)
                if "classification" in out.parameters
                else 0
            )
            block = None
            if shm is not None:
                if "classification" in out.parameters:
                    raise invalid_arg(
                        "output can't set both 'shared_memory_region' and 'classification'"
                    )
                block = shared_memory.block(*shm)
            outs.append(RequestedOutput(out.name, count, shared_memory=block))
        requested = tuple(outs)

    return InferRequest(
        model_name=model,
        inputs=inputs,
        model_version=parse_version(msg.model_version),
        id=msg.id,
        requested_outputs=requested,
        priority=params.priority,
        timeout_us=params.timeout_us,
        parameters=params.user,
        sequence_id=params.sequence_id,
        sequence_start=params.sequence_start,
        sequence_end=params.sequence_end,
    )


def _shared_memory_params(tensor) -> tuple[str, int, int] | None:
    """(region, offset, byte size) of an input or requested output in shared memory, or None;
    Triton's messages for mistyped parameters."""
    if not tensor.parameters:  # the usual case, checked without three map lookups
        return None
    typed = {}
    for key, choice in zip(SHM_PARAMETERS, ("string_param", "int64_param", "int64_param")):
        if key in tensor.parameters:
            p = tensor.parameters[key]
            if p.WhichOneof("parameter_choice") != choice:
                raise invalid_arg(
                    f"invalid value type for '{key}' parameter for tensor "
                    f"'{tensor.name}', expected {choice}."
                )
            typed[key] = getattr(p, choice)
    return shared_memory_params(tensor.name, typed)


def _decode_tensor(model: str, tensor, raw: bytes | None) -> np.ndarray:
    name, datatype = tensor.name, tensor.datatype
    if datatype not in PROTOCOL_DATATYPES:
        raise invalid_arg(f"invalid datatype '{datatype}' for input '{name}' of model '{model}'")
    dtype = to_numpy_dtype(datatype)
    shape = check_input_shape(tensor.shape, datatype, input_name=name, model_name=model)
    count = math.prod(shape)
    has_contents = tensor.HasField("contents") and tensor.contents.ByteSize() > 0
    if raw is not None:
        if has_contents:
            raise invalid_arg(
                f"contents field must not be specified when using "
                f"raw_input_contents for '{name}' for model '{model}'"
            )
        return tensor_from_bytes(
            raw, datatype, shape, input_name=name, model_name=model, shape_checked=True
        )

    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise invalid_arg(
            f"input '{name}' for model '{model}': {datatype} data must be sent in "
            f"raw_input_contents"
        )
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise invalid_arg(
            f"unexpected number of elements {len(values)} in '{field}' for input "
            f"'{name}' for model '{model}', expecting {count} for shape {list(shape)}"
        )
    if datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = [bytes(v) for v in values]
        return array.reshape(shape)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError:
        raise invalid_arg(
            f"input '{name}' for model '{model}': a value does not fit {datatype}"
        ) from None


def encode_infer_response(
    resp: InferResponse, shared_memory: Mapping[str, SharedMemoryBlock] | None = None
) -> pb.ModelInferResponse:
    """The response message; outputs with a shared memory block are written into it and, as in
    Triton, keep their tensor entry with an empty raw_output_contents."""
    if shared_memory:
        write_outputs(resp.outputs, shared_memory)
    msg = pb.ModelInferResponse(
        model_name=resp.model_name, model_version=str(resp.model_version), id=resp.id
    )
    for name, array in resp.outputs.items():
        msg.outputs.add(name=name, datatype=from_numpy_dtype(array.dtype), shape=array.shape)
        if shared_memory and name in shared_memory:
            msg.raw_output_contents.append(b"")
        else:
            msg.raw_output_contents.append(bytes(tensor_to_bytes(array)))
    for key, value in resp.parameters.items():
        _set_param(msg.parameters[key], value)
    return msg


def serialize_infer_response(
    resp: InferResponse,
    shared_memory: Mapping[str, SharedMemoryBlock] | None = None,
    final: bool | None = None,
) -> bytes:
    """The serialized ModelInferResponse: protobuf for everything but the tensors, each tensor
    appended as a raw_output_contents field straight from its array (one copy, into the
    reply). ``final`` (on a stream) adds Triton's ``triton_final_response`` parameter."""
    if shared_memory:
        write_outputs(resp.outputs, shared_memory)
    msg = pb.ModelInferResponse(
        model_name=resp.model_name, model_version=str(resp.model_version), id=resp.id
    )
    parts: list = [b""]
    for name, array in resp.outputs.items():
        msg.outputs.add(name=name, datatype=from_numpy_dtype(array.dtype), shape=array.shape)
        data = b"" if shared_memory and name in shared_memory else tensor_to_bytes(array)
        parts += (_RAW_OUTPUT_TAG, _encode_varint(len(data)), data)
    for key, value in resp.parameters.items():
        _set_param(msg.parameters[key], value)
    if final is not None:
        msg.parameters[FINAL_RESPONSE].bool_param = final
    parts[0] = msg.SerializeToString()
    return b"".join(parts)


#: The parameter of every response on a stream saying whether it is its request's last.
FINAL_RESPONSE = "triton_final_response"


def stream_error(
    message: str,
    request_id: str,
    model_name: str = "",
    model_version: str = "",
    final: bool | None = None,
) -> bytes:
    """A ModelStreamInferResponse carrying an error: a request refused before it reached its
    model names only its id (Triton's issue errors); one its model failed also names the
    model (as the request did) and carries ``triton_final_response``."""
    response = pb.ModelInferResponse(
        id=request_id, model_name=model_name, model_version=model_version
    )
    if final is not None:
        response.parameters[FINAL_RESPONSE].bool_param = final
    return pb.ModelStreamInferResponse(
        error_message=message, infer_response=response
    ).SerializeToString()


def empty_final_response(request_id: str, model_name: str, model_version: str) -> bytes:
    """The empty final response of a decoupled request whose final flag came without a
    response, for a client that asked for it (``triton_enable_empty_final_response``)."""
    response = pb.ModelInferResponse(
        id=request_id, model_name=model_name, model_version=model_version
    )
    response.parameters[FINAL_RESPONSE].bool_param = True
    return pb.ModelStreamInferResponse(infer_response=response).SerializeToString()


def serialize_stream_response(infer_response: bytes) -> bytes:
    """A ModelStreamInferResponse holding one serialized ModelInferResponse."""
    return b"".join((_STREAM_RESPONSE_TAG, _encode_varint(len(infer_response)), infer_response))


def _set_param(p, value) -> None:
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = str(value)


def encode_server_metadata(md: ServerMetadata) -> pb.ServerMetadataResponse:
    return pb.ServerMetadataResponse(name=md.name, version=md.version, extensions=md.extensions)


def encode_model_metadata(md: ModelMetadata) -> pb.ModelMetadataResponse:
    def tensors(items):
        return [
            pb.ModelMetadataResponse.TensorMetadata(name=t.name, datatype=t.datatype, shape=t.shape)
            for t in items
        ]

    return pb.ModelMetadataResponse(
        name=md.name,
        versions=md.versions,
        platform=md.platform,
        inputs=tensors(md.inputs),
        outputs=tensors(md.outputs),
    )


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def encode_statistics(snapshots: list[StatsSnapshot]) -> pb.ModelStatisticsResponse:
    out = pb.ModelStatisticsResponse()
    for s in snapshots:
        stat = out.model_stats.add(
            name=s.name,
            version=str(s.version),
            last_inference=s.last_inference_ms,
            inference_count=s.inference_count,
            execution_count=s.execution_count,
        )
        stat.inference_stats.CopyFrom(
            pb.InferStatistics(
                success=_duration(s.success),
                fail=_duration(s.fail),
                queue=_duration(s.queue),
                compute_input=_duration(s.compute_input),
                compute_infer=_duration(s.compute_infer),
                compute_output=_duration(s.compute_output),
                cache_hit=_duration(s.cache_hit),
                cache_miss=_duration(s.cache_miss),
            )
        )
        for b in s.batch_stats:
            stat.batch_stats.add(
                batch_size=b.batch_size,
                compute_input=_duration(b.compute_input),
                compute_infer=_duration(b.compute_infer),
                compute_output=_duration(b.compute_output),
            )
    return out


def encode_index(entries: list[RepositoryEntry]) -> pb.RepositoryIndexResponse:
    return pb.RepositoryIndexResponse(
        models=[
            pb.RepositoryIndexResponse.ModelIndex(
                name=e.name, version=e.version, state=e.state, reason=e.reason
            )
            for e in entries
        ]
    )


def decode_load_parameters(
    msg: pb.RepositoryModelLoadRequest,
) -> tuple[str | None, dict[str, bytes]]:
    """The load API's ``config`` (JSON) and ``file:<path>`` parameters."""
    config_json = None
    files: dict[str, bytes] = {}
    for key, value in msg.parameters.items():
        if key == "config":
            config_json = value.string_param
        elif key.startswith("file:"):
            files[key[len("file:") :]] = value.bytes_param
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'")
    return config_json, files


def encode_system_shm_status(
    regions: list[SystemRegionStatus],
) -> pb.SystemSharedMemoryStatusResponse:
    out = pb.SystemSharedMemoryStatusResponse()
    for r in regions:
        out.regions[r.name].CopyFrom(
            pb.SystemSharedMemoryStatusResponse.RegionStatus(
                name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size
            )
        )
    return out


def encode_cuda_shm_status(regions: list[CudaRegionStatus]) -> pb.CudaSharedMemoryStatusResponse:
    out = pb.CudaSharedMemoryStatusResponse()
    for r in regions:
        out.regions[r.name].CopyFrom(
            pb.CudaSharedMemoryStatusResponse.RegionStatus(
                name=r.name, device_id=r.device_id, byte_size=r.byte_size
            )
        )
    return out


def encode_log_settings(values: dict) -> pb.LogSettingsResponse:
    """Triton's LogSettings answer: strings, booleans and the verbose level as uint32."""
    out = pb.LogSettingsResponse()
    for key, value in values.items():
        entry = out.settings[key]
        if isinstance(value, bool):
            entry.bool_param = value
        elif isinstance(value, int):
            entry.uint32_param = value
        else:
            entry.string_param = str(value)
    return out


def encode_trace_settings(values: dict) -> pb.TraceSettingResponse:
    """Triton's TraceSetting answer: every setting as a list of strings."""
    out = pb.TraceSettingResponse()
    for key, value in values.items():
        out.settings[key].value.extend(value if isinstance(value, list) else [str(value)])
    return out
