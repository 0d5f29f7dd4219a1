"""Conversion between Triton's gRPC messages (``inference.*``, from tritonclient) and core types.

Kept apart from the servicer so that the servicer only converts and delegates. Input tensors are
read from ``raw_input_contents`` without a copy (``np.frombuffer``) or from the typed
``contents`` fields; every size and type mismatch becomes an INVALID_ARG error naming the input.
"""
from __future__ import annotations

import math

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from ..core.datatypes import (PROTOCOL_DATATYPES, deserialize_bytes_tensor, from_numpy_dtype,
                              serialize_bytes_tensor, to_numpy_dtype)
from ..core.errors import TritonRosError, invalid_arg, unsupported
from ..core.infer_request import InferRequest, InferResponse, RequestedOutput
from ..core.infer_stats import Duration, StatsSnapshot
from ..core.model_repository_manager import RepositoryEntry
from ..core.server import ModelMetadata, ServerMetadata

# datatype -> InferTensorContents field for typed (non-raw) tensor data
_CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
    "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
    "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}


def parse_version(text: str) -> int:
    """'' -> -1 (latest); '3' -> 3; anything else is an INVALID_ARG error."""
    if text == "":
        return -1
    try:
        version = int(text)
    except ValueError:
        raise invalid_arg(f"failed to get model version from specified version string '{text}' "
                          f"(must be integral)") from None
    if version < -1:
        raise invalid_arg(f"invalid model version {text}")
    return version


def param_value(p) -> object:
    which = p.WhichOneof("parameter_choice")
    return getattr(p, which) if which else None


def decode_infer_request(msg: pb.ModelInferRequest) -> InferRequest:
    model = msg.model_name
    params = {k: param_value(v) for k, v in msg.parameters.items()}
    priority = params.pop("priority", 0) or 0
    timeout = params.pop("timeout", 0) or 0
    if not isinstance(priority, int) or priority < 0:
        raise invalid_arg(f"request parameter 'priority' must be a non-negative integer, got {priority!r}")
    if not isinstance(timeout, int) or timeout < 0:
        raise invalid_arg(f"request parameter 'timeout' must be a non-negative integer, got {timeout!r}")
    for unsupported_param in ("sequence_id", "sequence_start", "sequence_end"):
        if params.get(unsupported_param):
            raise unsupported(f"sequence batching parameters are not supported (got "
                              f"'{unsupported_param}' for model '{model}')")

    raw = msg.raw_input_contents
    if raw and len(raw) != len(msg.inputs):
        raise invalid_arg(f"expected {len(msg.inputs)} raw input contents (one per input) but got "
                          f"{len(raw)} for model '{model}'")
    inputs: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(msg.inputs):
        if tensor.name in inputs:
            raise invalid_arg(f"input '{tensor.name}' already exists in request")
        if "shared_memory_region" in tensor.parameters:
            raise unsupported(f"input '{tensor.name}': shared memory is not supported by "
                              f"triton_ros; send the data in the request")
        inputs[tensor.name] = _decode_tensor(model, tensor, raw[index] if raw else None)

    requested = None
    if msg.outputs:
        outs = []
        for out in msg.outputs:
            if "shared_memory_region" in out.parameters:
                raise unsupported(f"output '{out.name}': shared memory is not supported by "
                                  f"triton_ros")
            count = param_value(out.parameters["classification"]) if "classification" in out.parameters else 0
            outs.append(RequestedOutput(out.name, int(count or 0)))
        requested = tuple(outs)

    return InferRequest(model_name=model, inputs=inputs,
                        model_version=parse_version(msg.model_version), id=msg.id,
                        requested_outputs=requested, priority=int(priority),
                        timeout_us=int(timeout), parameters=params)


def _decode_tensor(model: str, tensor, raw: bytes | None) -> np.ndarray:
    name, datatype = tensor.name, tensor.datatype
    if datatype not in PROTOCOL_DATATYPES:
        raise invalid_arg(f"invalid datatype '{datatype}' for input '{name}' of model '{model}'")
    dtype = to_numpy_dtype(datatype)
    shape = tuple(int(d) for d in tensor.shape)
    if any(d < 0 for d in shape):
        raise invalid_arg(f"All input dimensions should be specified for input '{name}' for model "
                          f"'{model}', got {list(shape)}")
    count = math.prod(shape)
    has_contents = tensor.HasField("contents") and tensor.contents.ByteSize() > 0
    if raw is not None:
        if has_contents:
            raise invalid_arg(f"contents field must not be specified when using "
                              f"raw_input_contents for '{name}' for model '{model}'")
        if datatype == "BYTES":
            try:
                return deserialize_bytes_tensor(raw, count).reshape(shape)
            except TritonRosError as exc:
                raise invalid_arg(f"input '{name}' for model '{model}': {exc.message}") from None
        expected = count * dtype.itemsize
        if len(raw) != expected:
            raise invalid_arg(f"input byte size mismatch for input '{name}' for model '{model}'. "
                              f"Expected {expected}, got {len(raw)}")
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise invalid_arg(f"input '{name}' for model '{model}': {datatype} data must be sent in "
                          f"raw_input_contents")
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise invalid_arg(f"unexpected number of elements {len(values)} in '{field}' for input "
                          f"'{name}' for model '{model}', expecting {count} for shape {list(shape)}")
    if datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = [bytes(v) for v in values]
        return array.reshape(shape)
    try:
        return np.array(values, dtype=dtype).reshape(shape)
    except OverflowError:
        raise invalid_arg(f"input '{name}' for model '{model}': a value does not fit {datatype}") from None


def encode_infer_response(resp: InferResponse) -> pb.ModelInferResponse:
    msg = pb.ModelInferResponse(model_name=resp.model_name, model_version=str(resp.model_version),
                                id=resp.id)
    for name, array in resp.outputs.items():
        datatype = from_numpy_dtype(array.dtype)
        out = msg.outputs.add(name=name, datatype=datatype, shape=array.shape)
        del out  # the tensor metadata is set; the data goes into raw_output_contents
        if datatype == "BYTES":
            msg.raw_output_contents.append(serialize_bytes_tensor(array))
        else:
            msg.raw_output_contents.append(np.ascontiguousarray(array).tobytes())
    for key, value in resp.parameters.items():
        _set_param(msg.parameters[key], value)
    return msg


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
        return [pb.ModelMetadataResponse.TensorMetadata(name=t.name, datatype=t.datatype,
                                                        shape=t.shape) for t in items]
    return pb.ModelMetadataResponse(name=md.name, versions=md.versions, platform=md.platform,
                                    inputs=tensors(md.inputs), outputs=tensors(md.outputs))


def _duration(d: Duration) -> pb.StatisticDuration:
    return pb.StatisticDuration(count=d.count, ns=d.ns)


def encode_statistics(snapshots: list[StatsSnapshot]) -> pb.ModelStatisticsResponse:
    out = pb.ModelStatisticsResponse()
    for s in snapshots:
        stat = out.model_stats.add(name=s.name, version=str(s.version),
                                   last_inference=s.last_inference_ms,
                                   inference_count=s.inference_count,
                                   execution_count=s.execution_count)
        stat.inference_stats.CopyFrom(pb.InferStatistics(
            success=_duration(s.success), fail=_duration(s.fail), queue=_duration(s.queue),
            compute_input=_duration(s.compute_input), compute_infer=_duration(s.compute_infer),
            compute_output=_duration(s.compute_output), cache_hit=_duration(s.cache_hit),
            cache_miss=_duration(s.cache_miss)))
        for b in s.batch_stats:
            stat.batch_stats.add(batch_size=b.batch_size, compute_input=_duration(b.compute_input),
                                 compute_infer=_duration(b.compute_infer),
                                 compute_output=_duration(b.compute_output))
    return out


def encode_index(entries: list[RepositoryEntry]) -> pb.RepositoryIndexResponse:
    return pb.RepositoryIndexResponse(models=[
        pb.RepositoryIndexResponse.ModelIndex(name=e.name, version=e.version, state=e.state,
                                              reason=e.reason)
        for e in entries])


def decode_load_parameters(msg: pb.RepositoryModelLoadRequest) -> tuple[str | None, dict[str, bytes]]:
    """The load API's ``config`` (JSON) and ``file:<path>`` parameters."""
    config_json = None
    files: dict[str, bytes] = {}
    for key, value in msg.parameters.items():
        if key == "config":
            config_json = value.string_param
        elif key.startswith("file:"):
            files[key[len("file:"):]] = value.bytes_param
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'")
    return config_json, files
