"""Conversion between KServe v2 REST messages (JSON, and Triton's binary tensor extension) and core
types, kept apart from the HTTP handler so that the handler only routes and delegates.

An inference request body is a JSON header, optionally followed by binary tensor data: the
``Inference-Header-Content-Length`` header gives the JSON part's size, and each input with
``"parameters": {"binary_data_size": N}`` takes the next N bytes. Outputs come back as JSON
``data`` unless asked for in binary (``"binary_data": true`` on a requested output, or the
request parameter ``binary_data_output`` for the outputs not named), in which case the response
JSON gives each output's ``binary_data_size`` and the bytes follow the JSON in output order.
BYTES elements travel as 4-byte little-endian length-prefixed strings in binary, as strings in
JSON. With the shared memory extension an input or requested output names a registered region
(``shared_memory_region``, ``shared_memory_offset``, ``shared_memory_byte_size`` parameters): the
input is read from it, the output written into it and listed in the response without data.
Every malformed field becomes an INVALID_ARG error naming it, with Triton's messages.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ...core.datatypes import (
    PROTOCOL_DATATYPES,
    check_input_shape,
    from_numpy_dtype,
    tensor_from_bytes,
    tensor_to_bytes,
    to_numpy_dtype,
)
from ...core.errors import TritonRosError, invalid_arg
from ...core.infer_request import InferRequest, InferResponse, RequestedOutput
from ...core.infer_stats import Duration, StatsSnapshot
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

INFER_HEADER = "inference-header-content-length"
MAX_JSON_NESTING_DEPTH = 100  # HTTP_MAX_JSON_NESTING_DEPTH


@dataclass
class OutputPlan:
    """How each output goes back: binary or JSON (AllocPayload::OutputInfo)."""

    default_binary: bool = False
    binary: dict[str, bool] = field(default_factory=dict)

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.default_binary)


# ------------------------------------------------------------------------------------------
# Small JSON helpers
# ------------------------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def error_body(message: str) -> bytes:
    return dumps({"error": message})


def parse_json_object(body: bytes | memoryview, what: str, *, allow_empty: bool = True) -> dict:
    """A request body as a JSON object ({} for an empty body where that is allowed)."""
    if len(body) == 0 and allow_empty:
        return {}
    try:
        value = json.loads(bytes(body))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # too deep: 400, as Triton
        raise invalid_arg(f"failed to parse the {what} request JSON buffer: {exc}") from None
    if not isinstance(value, dict):
        raise invalid_arg(f"the {what} request JSON must be an object, got {type(value).__name__}")
    return value


def _uint(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_arg(
            f"Unable to parse '{what}': expected an unsigned integer, got {json.dumps(value)}"
        )
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise invalid_arg(f"Unable to parse '{what}': expected a boolean, got {json.dumps(value)}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise invalid_arg(f"Unable to parse '{what}': expected a string, got {json.dumps(value)}")
    return value


# ------------------------------------------------------------------------------------------
# Inference request
# ------------------------------------------------------------------------------------------


def decode_infer_request(
    model_name: str,
    version: int,
    body: bytes | memoryview,
    header_length: int | None,
    shared_memory: SharedMemoryManager = NO_REGIONS,
) -> tuple[InferRequest, OutputPlan]:
    """Parse an inference request body. ``header_length`` is the Inference-Header-Content-Length
    (None: the whole body is JSON). Inputs in shared memory are copied out of their region now;
    outputs in shared memory are checked against theirs (``shared_memory`` is the server's
    registry; by default no region exists)."""
    view = memoryview(body)
    if header_length is None:
        header_length = len(view)
    header = parse_json_object(view[:header_length], "inference", allow_empty=False)
    return decode_infer_header(model_name, version, header, view[header_length:], shared_memory)


def decode_infer_header(
    model_name: str,
    version: int,
    header: dict,
    binary: memoryview,
    shared_memory: SharedMemoryManager = NO_REGIONS,
) -> tuple[InferRequest, OutputPlan]:
    """:func:`decode_infer_request` once the JSON part is parsed (``header``) and split from the
    binary tensor data that follows it (``binary``): for transports that read the model's name
    from the message itself (the Kafka frontend)."""
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_arg("Unable to parse 'id': expected a string")

    plan = OutputPlan()
    params = header.get("parameters", {})
    if not isinstance(params, dict):
        raise invalid_arg("failed to get request params: 'parameters' must be an object")
    params = dict(params)
    if "binary_data_output" in params:
        plan.default_binary = _bool(params.pop("binary_data_output"), "binary_data_output")
    sequence_id = params.get("sequence_id")
    if isinstance(sequence_id, int) and not isinstance(sequence_id, bool) and sequence_id < 0:
        # JSON carries the uint64 itself: a negative number is no correlation ID (tritonserver).
        raise invalid_arg("Unable to parse 'sequence_id'")
    typed = split_request_parameters(params)
    priority, timeout, parameters = typed.priority, typed.timeout_us, typed.user

    inputs_json = header.get("inputs")
    if not isinstance(inputs_json, list):
        raise invalid_arg("Unable to parse 'inputs'")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for item in inputs_json:
        if not isinstance(item, dict):
            raise invalid_arg("Unable to parse 'inputs': each input must be an object")
        name = _str(item.get("name"), "name")
        if name in inputs:
            raise invalid_arg(f"input '{name}' already exists in request")
        array, used = _decode_input(model_name, name, item, binary[offset:], shared_memory)
        offset += used
        inputs[name] = array
    if offset != len(binary):
        raise invalid_arg(f"unexpected additional input data for model '{model_name}'")

    requested = None
    if "outputs" in header:
        outputs_json = header["outputs"]
        if not isinstance(outputs_json, list):
            raise invalid_arg("Unable to parse 'outputs'")
        requested = []
        for item in outputs_json:
            if not isinstance(item, dict):
                raise invalid_arg("Unable to parse 'outputs': each output must be an object")
            name = _str(item.get("name"), "name")
            out_params = item.get("parameters", {})
            if not isinstance(out_params, dict):
                raise invalid_arg(f"Unable to parse 'parameters' of output '{name}'")
            class_count = classification_count(out_params.get("classification", 0), name)
            plan.binary[name] = _bool(out_params.get("binary_data", False), "binary_data")
            block = None
            shm = _shared_memory_params(name, out_params)
            if shm is not None:
                if "classification" in out_params:
                    raise invalid_arg(
                        "Output can't set both 'shared_memory_region' and 'classification'"
                    )
                if plan.binary[name]:
                    raise invalid_arg(
                        "Output can't set both 'shared_memory_region' and 'binary_data'"
                    )
                block = shared_memory.block(*shm)
            requested.append(RequestedOutput(name, class_count, shared_memory=block))
        requested = tuple(requested)

    request = InferRequest(
        model_name=model_name,
        inputs=inputs,
        model_version=version,
        id=request_id,
        requested_outputs=requested,
        priority=priority,
        timeout_us=timeout,
        parameters=parameters,
        sequence_id=typed.sequence_id,
        sequence_start=typed.sequence_start,
        sequence_end=typed.sequence_end,
    )
    return request, plan


def _shared_memory_params(name: str, params: dict) -> tuple[str, int, int] | None:
    """(region, offset, byte size) of an input or requested output in shared memory, or None."""
    typed: dict[str, str | int] = {}
    for key in SHM_PARAMETERS:
        if key in params:
            if key == "shared_memory_region":
                if not isinstance(params[key], str):
                    raise invalid_arg("Unable to parse 'shared_memory_region'")
                typed[key] = params[key]
            else:
                typed[key] = _uint(params[key], key)
    return shared_memory_params(name, typed)


def _decode_input(
    model: str, name: str, item: dict, binary: memoryview, shared_memory: SharedMemoryManager
) -> tuple[np.ndarray, int]:
    """One input tensor and how many bytes of the binary section it consumed."""
    datatype = _str(item.get("datatype"), "datatype")
    shape_json = item.get("shape")
    if not isinstance(shape_json, list):
        raise invalid_arg("Unable to parse 'shape'")
    shape = check_input_shape(
        shape_json, datatype if isinstance(datatype, str) else "", input_name=name, model_name=model
    )
    params = item.get("parameters", {})
    if not isinstance(params, dict):
        raise invalid_arg(f"Unable to parse 'parameters' of input '{name}'")
    has_data = "data" in item
    has_binary = "binary_data_size" in params
    has_shm = "shared_memory_region" in params
    if has_data + has_binary + has_shm != 1:
        msg = (
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But"
        )
        if not (has_data or has_binary or has_shm):
            msg += " no field is set"
        else:
            msg += " set" + "".join(
                f" '{f}'"
                for f, on in (
                    ("data", has_data),
                    ("binary_data_size", has_binary),
                    ("shared_memory_region", has_shm),
                )
                if on
            )
        raise invalid_arg(msg)
    shm = _shared_memory_params(name, params)
    if datatype not in PROTOCOL_DATATYPES:
        raise invalid_arg(f"invalid datatype '{datatype}' for input '{name}' of model '{model}'")
    dtype = to_numpy_dtype(datatype)
    count = math.prod(shape)

    if shm is not None:
        data = shared_memory.read(*shm)
        return tensor_from_bytes(
            data, datatype, shape, input_name=name, model_name=model, shape_checked=True
        ), 0
    if has_binary:
        size = _uint(params["binary_data_size"], "binary_data_size")
        if size > len(binary):
            raise invalid_arg(
                f"unexpected size for input '{name}', expecting "
                f"{size - len(binary)} additional bytes for model '{model}'"
            )
        return tensor_from_bytes(
            binary[:size], datatype, shape, input_name=name, model_name=model, shape_checked=True
        ), size

    return _decode_json_data(model, name, datatype, dtype, shape, count, item["data"]), 0


def _flatten_strings(value: Any, out: list[bytes], depth: int = 0) -> None:
    if depth >= MAX_JSON_NESTING_DEPTH:
        raise invalid_arg(
            f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_NESTING_DEPTH})"
        )
    if isinstance(value, list):
        for v in value:
            _flatten_strings(v, out, depth + 1)
    elif isinstance(value, str):
        out.append(value.encode("utf-8"))
    else:
        raise invalid_arg("Unable to parse 'data': expected a string for BYTES data")


def _decode_json_data(
    model: str,
    name: str,
    datatype: str,
    dtype: np.dtype,
    shape: tuple[int, ...],
    count: int,
    data: Any,
) -> np.ndarray:
    if datatype in ("FP16", "BF16"):
        raise invalid_arg(
            f"receiving {datatype} data via JSON is not supported. Please use the "
            f"binary data format for input {name}"
        )
    if datatype == "BYTES":
        items: list[bytes] = []
        _flatten_strings(data, items)
        if len(items) != count:
            raise invalid_arg(
                f"Unable to parse 'data': shape does not match true shape of "
                f"'data' field for input '{name}' of model '{model}': got "
                f"{len(items)} elements, expecting {count} for shape {list(shape)}"
            )
        array = np.empty(count, dtype=np.object_)
        array[:] = items
        return array.reshape(shape)
    if not isinstance(data, list):
        data = [data]
    try:
        values = np.array(data)
    except ValueError:  # ragged nesting
        values = None
    if values is None or values.dtype == np.object_ or values.dtype.kind in "US":
        raise invalid_arg(
            f"Unable to parse 'data': input '{name}' of model '{model}' must hold "
            f"{datatype} numbers (in nested arrays of equal length)"
        )
    if values.size != count:
        raise invalid_arg(
            f"Unable to parse 'data': shape does not match true shape of 'data' "
            f"field for input '{name}' of model '{model}': got {values.size} "
            f"elements, expecting {count} for shape {list(shape)}"
        )
    if values.size:
        kind = values.dtype.kind
        if dtype.kind == "b" and kind != "b":
            raise invalid_arg(f"Unable to parse 'data': input '{name}' expects booleans")
        if dtype.kind in "iu":
            if kind == "f":  # numpy's type for integers beyond int64 mixed with others
                return _exact_integers(name, datatype, dtype, values.size, data).reshape(shape)
            if kind not in "iu":
                raise invalid_arg(f"Unable to parse 'data': input '{name}' expects integers")
            info = np.iinfo(dtype)
            if values.min() < info.min or values.max() > info.max:
                raise invalid_arg(
                    f"Unable to parse 'data': a value of input '{name}' does not fit {datatype}"
                )
        if dtype.kind == "f" and kind not in "iuf":
            raise invalid_arg(f"Unable to parse 'data': input '{name}' expects numbers")
    return values.astype(dtype, copy=False).reshape(shape)


def _exact_integers(
    name: str, datatype: str, dtype: np.dtype, count: int, data: list
) -> np.ndarray:
    """JSON integers numpy read as floats (UINT64 values past INT64's range beside smaller
    ones): taken as the integers they are, or INVALID_ARG when one is not an integer."""
    flat = np.array(data, dtype=np.object_).reshape(-1)
    if any(type(v) is not int for v in flat):
        raise invalid_arg(f"Unable to parse 'data': input '{name}' expects integers")
    info = np.iinfo(dtype)
    if any(v < info.min or v > info.max for v in flat):
        raise invalid_arg(
            f"Unable to parse 'data': a value of input '{name}' does not fit {datatype}"
        )
    return np.array(list(flat), dtype=dtype)


# ------------------------------------------------------------------------------------------
# Generate extension (/generate, /generate_stream)
# ------------------------------------------------------------------------------------------


def decode_generate_request(
    model_name: str,
    version: int,
    body: bytes,
    inputs: Mapping[str, tuple[str, tuple[int, ...]]],
    max_input_size: int,
) -> InferRequest:
    """A generate request (Triton's generate extension): a JSON object whose keys are the
    model's inputs (a value or a flat list, shaped by the model's metadata shape: fixed
    dimensions first, the innermost variable one takes the rest, the others 1) or request
    parameters (string, number or boolean); ``parameters`` holds more of either; ``id`` is the
    request's id (and a parameter, as in tritonserver). ``inputs`` maps each input name to its
    data type and metadata shape (batch dimension included)."""
    request = parse_json_object(body, "generate")
    request_id = request.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_arg("Unable to parse 'id'")
    tensors: dict[str, np.ndarray] = {}
    parameters: dict[str, Any] = {}
    consumed = [0]

    def convert(source: dict) -> None:
        for key, value in source.items():
            if key == "parameters" and source is request:
                if "parameters" in inputs:
                    raise invalid_arg(
                        "Keyword 'parameters' for nested schema also given as input tensor name"
                    )
                if not isinstance(value, dict):
                    raise invalid_arg("Expected JSON object for keyword: 'parameters'")
                try:
                    convert(value)
                except TritonRosError as exc:
                    raise invalid_arg(f"Converting keyword: 'parameters': {exc.message}") from None
            elif key in inputs:
                if key in tensors:
                    raise invalid_arg(f"input '{key}' already exists in request")
                tensors[key] = _generate_tensor(
                    model_name, key, value, *inputs[key], consumed, max_input_size
                )
            elif isinstance(value, (str, bool, int, float)) and not (
                isinstance(value, int)
                and not isinstance(value, bool)
                and not -(2**63) <= value < 2**63
            ):
                parameters[key] = value
            else:
                raise invalid_arg(
                    f"parameter '{key}' has invalid type. It should be either "
                    f"'int', 'bool', or 'string'."
                )

    convert(request)
    return InferRequest(
        model_name=model_name,
        inputs=tensors,
        model_version=version,
        id=request_id,
        parameters=parameters,
    )


def _generate_tensor(
    model: str,
    name: str,
    value: Any,
    datatype: str,
    shape: tuple[int, ...],
    consumed: list[int],
    max_input_size: int,
) -> np.ndarray:
    values = value if isinstance(value, list) else [value]
    count = len(values)
    if datatype == "BYTES":
        size = sum(len(v.encode("utf-8")) + 4 if isinstance(v, str) else 0 for v in values)
    else:
        size = count * to_numpy_dtype(datatype).itemsize
    if consumed[0] + size > max_input_size:
        raise invalid_arg(
            f"request size of {consumed[0]} bytes with input '{name}' of size "
            f"{size} bytes exceeds the maximum allowed input size of "
            f"{max_input_size}. Use --http-max-input-size to increase the limit."
        )
    consumed[0] += size
    dims = list(shape)
    remaining = count
    for i in range(len(dims) - 1, -1, -1):  # fixed dimensions first, innermost first
        if dims[i] != -1:
            if dims[i] <= 0 or remaining % dims[i]:
                raise invalid_arg(
                    f"The schema can not convert input '{name}' to tensor with proper shape"
                )
            remaining //= dims[i]
    for i in range(len(dims) - 1, -1, -1):  # the innermost variable one takes the rest
        if dims[i] == -1:
            dims[i], remaining = remaining, 1
    if remaining != 1:
        raise invalid_arg(f"The schema can not convert input '{name}' to tensor with proper shape")
    return _decode_json_data(
        model, name, datatype, to_numpy_dtype(datatype), tuple(dims), count, values
    )


def encode_generate_response(response: InferResponse) -> bytes:
    """A generate response object: id (if any), model_name, model_version, the response's
    parameters, and each output by name (one element as a value, more as a flat list); keys in
    name order, as tritonserver writes them."""
    body: dict[str, Any] = {}
    if response.id:
        body["id"] = response.id
    body["model_name"] = response.model_name
    body["model_version"] = str(response.model_version)
    for key, value in response.parameters.items():
        body[key] = value if isinstance(value, (bool, int, float, str)) else str(value)
    for name, array in response.outputs.items():
        data = _json_data(name, from_numpy_dtype(array.dtype), array)
        body[name] = data[0] if len(data) == 1 else data
    return dumps(dict(sorted(body.items())))


# ------------------------------------------------------------------------------------------
# Inference response
# ------------------------------------------------------------------------------------------


def _json_data(name: str, datatype: str, array: np.ndarray) -> list:
    if datatype in ("FP16", "BF16"):
        raise invalid_arg(
            f"sending {datatype} data via JSON is not supported. Please use the "
            f"binary data format for output"
        )
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [bytes(x).decode("utf-8", errors="replace") for x in flat]
    return flat.tolist()


def encode_infer_response(
    response: InferResponse,
    plan: OutputPlan,
    shared_memory: Mapping[str, SharedMemoryBlock] | None = None,
) -> tuple[list[bytes | memoryview], int | None]:
    """The response body as chunks (JSON first, then binary outputs in order) and the JSON
    length for the Inference-Header-Content-Length header (None: JSON only). Outputs with a
    shared memory block are written into it and, as in Triton, listed without data."""
    shared_memory = shared_memory or {}
    if shared_memory:
        write_outputs(response.outputs, shared_memory)
    body: dict[str, Any] = {}
    if response.id:
        body["id"] = response.id
    body["model_name"] = response.model_name
    body["model_version"] = str(response.model_version)
    if response.parameters:
        body["parameters"] = {
            k: v if isinstance(v, (bool, int, float, str)) else str(v)
            for k, v in response.parameters.items()
        }
    outputs = []
    chunks: list[bytes | memoryview] = []
    for name, array in response.outputs.items():
        datatype = from_numpy_dtype(array.dtype)
        out: dict[str, Any] = {
            "name": name,
            "datatype": datatype,
            "shape": [int(d) for d in array.shape],
        }
        if name in shared_memory:
            pass  # already in the client's region: no data here
        elif plan.is_binary(name):
            data = tensor_to_bytes(array)
            out["parameters"] = {"binary_data_size": len(data)}
            if len(data):
                chunks.append(data)
        else:
            out["data"] = _json_data(name, datatype, array)
        outputs.append(out)
    body["outputs"] = outputs
    header = dumps(body)
    return [header, *chunks], (len(header) if chunks else None)


def response_is_heavy(
    response: InferResponse,
    plan: OutputPlan,
    shared_memory: Mapping[str, SharedMemoryBlock] | None = None,
    limit: int = 1 << 15,
) -> bool:
    """Whether encoding would take long enough to run off the event loop (large JSON data, or
    a large copy into shared memory)."""
    return any(
        (not plan.is_binary(n) or (shared_memory and n in shared_memory)) and a.size > limit
        for n, a in response.outputs.items()
    )


# ------------------------------------------------------------------------------------------
# Metadata, configuration, statistics, repository
# ------------------------------------------------------------------------------------------


def encode_server_metadata(md: ServerMetadata) -> bytes:
    return dumps({"name": md.name, "version": md.version, "extensions": list(md.extensions)})


def encode_model_metadata(md: ModelMetadata) -> bytes:
    def tensors(items):
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in items]

    return dumps(
        {
            "name": md.name,
            "versions": list(md.versions),
            "platform": md.platform,
            "inputs": tensors(md.inputs),
            "outputs": tensors(md.outputs),
        }
    )


def _duration(d: Duration) -> dict[str, int]:
    return {"count": d.count, "ns": d.ns}


def encode_statistics(snapshots: list[StatsSnapshot]) -> bytes:
    stats = []
    for s in snapshots:
        stats.append(
            {
                "name": s.name,
                "version": str(s.version),
                "last_inference": s.last_inference_ms,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": {
                    "success": _duration(s.success),
                    "fail": _duration(s.fail),
                    "queue": _duration(s.queue),
                    "compute_input": _duration(s.compute_input),
                    "compute_infer": _duration(s.compute_infer),
                    "compute_output": _duration(s.compute_output),
                    "cache_hit": _duration(s.cache_hit),
                    "cache_miss": _duration(s.cache_miss),
                },
                "response_stats": {},
                "batch_stats": [
                    {
                        "batch_size": b.batch_size,
                        "compute_input": _duration(b.compute_input),
                        "compute_infer": _duration(b.compute_infer),
                        "compute_output": _duration(b.compute_output),
                    }
                    for b in s.batch_stats
                ],
                "memory_usage": [],
            }
        )
    return dumps({"model_stats": stats})


def encode_index(entries: list[RepositoryEntry]) -> bytes:
    out = []
    for e in entries:
        item: dict[str, str] = {"name": e.name}
        if e.state:
            if e.version:
                item["version"] = e.version
            item["state"] = e.state
            if e.reason:
                item["reason"] = e.reason
        out.append(item)
    return dumps(out)


def decode_index_request(body: bytes) -> bool:
    """The ``ready`` flag of a repository index request."""
    request = parse_json_object(body, "registry index")
    ready = request.get("ready", False)
    if not isinstance(ready, bool):
        raise invalid_arg("Invalid value for 'ready': expected a boolean")
    return ready


def decode_load_request(body: bytes) -> tuple[str | None, dict[str, bytes]]:
    """The load API's ``config`` (JSON string) and base64 ``file:<path>`` parameters."""
    request = parse_json_object(body, "load model")
    params = request.get("parameters", {})
    if not isinstance(params, dict):
        raise invalid_arg("Unable to parse 'parameters' of the load request")
    config_json = None
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if not isinstance(value, str):
            raise invalid_arg(f"Unable to parse load parameter '{key}': expected a string")
        if key == "config":
            config_json = value
        elif key.startswith("file:"):
            try:
                files[key[len("file:") :]] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise invalid_arg(f"failed to decode base64 content of '{key}': {exc}") from None
        else:
            raise invalid_arg(f"unrecognized load parameter '{key}'")
    return config_json, files


def decode_unload_request(body: bytes) -> bool:
    """The ``unload_dependents`` flag of an unload request."""
    request = parse_json_object(body, "unload model")
    params = request.get("parameters", {})
    if not isinstance(params, dict):
        raise invalid_arg("Unable to parse 'parameters' of the unload request")
    value = params.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise invalid_arg(
            f"Unable to parse 'unload_dependents': expected a boolean, got {json.dumps(value)}"
        )
    return value


# ------------------------------------------------------------------------------------------
# Shared memory
# ------------------------------------------------------------------------------------------


def encode_system_shm_status(regions: list[SystemRegionStatus]) -> bytes:
    return dumps(
        [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in regions
        ]
    )


def encode_cuda_shm_status(regions: list[CudaRegionStatus]) -> bytes:
    return dumps(
        [{"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size} for r in regions]
    )


def decode_shm_register_request(body: bytes) -> tuple[str, int, int]:
    """The ``key``, ``offset`` (default 0) and ``byte_size`` of a system shared memory register
    request."""
    request = parse_json_object(body, "register")
    if "key" not in request:
        raise invalid_arg("Shared memory register request has no 'key' field")
    key = _str(request["key"], "key")
    offset = _uint(request.get("offset", 0), "offset")
    if "byte_size" not in request:
        raise invalid_arg("Shared memory register request has no 'byte_size' field")
    return key, offset, _uint(request["byte_size"], "byte_size")


CUDA_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)


def decode_cuda_shm_register_request(body: bytes) -> tuple[bytes, int, int]:
    """The ``raw_handle`` (``{"b64": ...}``: a cudaIpcMemHandle_t), ``device_id`` and
    ``byte_size`` of a CUDA shared memory register request, checked as tritonserver does."""
    request = parse_json_object(body, "register")
    handle = request.get("raw_handle")
    if not isinstance(handle, dict) or "b64" not in handle:
        raise invalid_arg("Shared memory register request has no 'raw_handle' field with 'b64'")
    try:
        raw = base64.b64decode(_str(handle["b64"], "b64"), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != CUDA_IPC_HANDLE_BYTES:
        raise invalid_arg("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    device_id = request.get("device_id", 0)
    if isinstance(device_id, bool) or not isinstance(device_id, int):
        raise invalid_arg(
            f"Unable to parse 'device_id': expected an integer, got {json.dumps(device_id)}"
        )
    return raw, device_id, _uint(request.get("byte_size", 0), "byte_size")
