"""``triton_python_backend_utils``: what Triton's Python models import as ``pb_utils``.

This is triton_ros's own implementation of the module Triton's stub provides (the pure-Python
helpers of ``triton_python_backend_utils.py`` and the classes its C++ stub binds): ``Tensor``,
``InferenceRequest`` (with ``exec``/``async_exec`` for Business Logic Scripting),
``InferenceResponse``, ``InferenceResponseSender``, ``TritonError``, ``TritonModelException``,
``ModelConfig`` (auto-complete), ``Logger``, ``MetricFamily``, ``get_input_tensor_by_name``,
``get_output_tensor_by_name``, ``get_input_config_by_name``, ``get_output_config_by_name``,
``triton_string_to_numpy``, ``triton_to_numpy_type``, ``numpy_to_triton_type``,
``serialize_byte_tensor``, ``deserialize_bytes_tensor``, ``load_model``/``unload_model``/
``is_model_ready`` and the ``TRITONSERVER_*`` flags, with Triton's signatures and behaviour, so
that existing models run unchanged.

Decoupled models (``model_transaction_policy { decoupled: true }``): a request's
``get_response_sender()`` sends any number of responses, from any thread, before or after
``execute`` returns, the last with ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``; ``execute`` returns
None. ``is_cancelled()`` tells a request whose client went away. BLS on a decoupled model:
``exec(decoupled=True)`` / ``async_exec(decoupled=True)`` give an iterator of its responses as they
come (the last is empty when the final flag came alone), with ``cancel()``.

Differences, all reported clearly when used: tensors live in CPU memory (``is_cpu()`` is always
true; a GPU DLPack capsule is refused), metrics are kept in the stub and not exported. A
decoupled request whose sender is garbage-collected before it sent the final flag ends with an
error response (tritonserver leaves its client waiting).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import enum
import json
import sys
import threading
from typing import Any

import numpy as np

from triton_ros.core.datatypes import deserialize_bytes_tensor as _deserialize
from triton_ros.core.datatypes import serialize_bytes_tensor as _serialize

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType numbering, as triton_to_numpy_type / Tensor.triton_dtype() use it.
_TRITON_DTYPES = (
    (1, np.bool_),
    (2, np.uint8),
    (3, np.uint16),
    (4, np.uint32),
    (5, np.uint64),
    (6, np.int8),
    (7, np.int16),
    (8, np.int32),
    (9, np.int64),
    (10, np.float16),
    (11, np.float32),
    (12, np.float64),
    (13, np.object_),
)

# The stub installs its runtime here (the channel to the server); None outside a stub.
_runtime: Any = None


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error for one response: ``TritonError(message, code=TritonError.INTERNAL)``."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = _ErrorCode.INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError message must not be None")
        self._message = str(message)
        try:
            self._code = _ErrorCode(int(code))
        except ValueError:
            raise TypeError(f"invalid TritonError code {code!r}") from None

    def code(self) -> _ErrorCode:
        return self._code

    def message(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self._code.name})"


class TritonModelException(Exception):
    """Raised by models (and by BLS helpers) to fail the whole batch with a message."""


# --------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------


class _CapsuleHolder:
    """Lets numpy import a bare DLPack capsule (numpy only takes objects with ``__dlpack__``)."""

    def __init__(self, capsule) -> None:
        self._capsule = capsule

    def __dlpack__(self, *args, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU: anything else fails inside numpy with a clear error


class Tensor:
    """A named tensor: ``Tensor(name, numpy_array)``."""

    def __init__(self, name: str, numpy_array) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Tensor name must be a string, got {type(name).__name__}")
        if not isinstance(numpy_array, np.ndarray):
            raise TypeError(
                f"Tensor '{name}' expects a numpy array, got {type(numpy_array).__name__}"
            )
        array = numpy_array
        if array.dtype.kind == "U":  # text: Triton BYTES hold UTF-8
            flat = [s.encode("utf-8") for s in array.reshape(-1).tolist()]
            array = _object_array(flat, array.shape)
        elif array.dtype.kind == "S":  # np.bytes_ would lose trailing zero bytes
            array = _object_array(array.reshape(-1).tolist(), array.shape)
        elif numpy_to_triton_type(array.dtype) is None:
            raise TritonModelException(
                f"Tensor '{name}': numpy dtype {array.dtype} has no Triton data type"
            )
        if array.dtype != np.object_ and not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self):
        if self._array.dtype == np.object_:
            raise TritonModelException(
                f"Tensor '{self._name}': BYTES tensors cannot be exported through DLPack"
            )
        return self._array.__dlpack__()

    def __dlpack__(self, stream=None):
        return self.to_dlpack()

    def __dlpack_device__(self):
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack_object) -> "Tensor":
        """A tensor from a DLPack capsule or an object with ``__dlpack__`` (CPU memory only)."""
        source = (
            dlpack_object if hasattr(dlpack_object, "__dlpack__") else _CapsuleHolder(dlpack_object)
        )
        if hasattr(dlpack_object, "__dlpack_device__"):
            device = dlpack_object.__dlpack_device__()
            if int(device[0]) not in (1, 3):  # kDLCPU, kDLCUDAHost
                raise TritonModelException(
                    f"Tensor '{name}': DLPack tensors on device {tuple(device)} are not supported "
                    f"by triton_ros's Python backend; move the tensor to the CPU first"
                )
        try:
            array = np.from_dlpack(source)
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise TritonModelException(
                f"Tensor '{name}': cannot import DLPack tensor ({exc}); "
                f"only CPU tensors are supported"
            ) from None
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


def _object_array(items: list, shape) -> np.ndarray:
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out.reshape(shape)


# --------------------------------------------------------------------------------------------
# Requests and responses
# --------------------------------------------------------------------------------------------


def _parameters_json(parameters) -> str:
    if parameters is None:
        return "{}"
    if isinstance(parameters, str):
        json.loads(parameters)  # must be valid JSON
        return parameters
    if not isinstance(parameters, dict):
        raise TritonModelException("parameters must be a dict")
    for key, value in parameters.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, str, float)):
            raise TritonModelException(
                "Expect parameters keys to have type str and values to "
                "have type bool, int, float or str"
            )
    return json.dumps(parameters)


class InferenceResponse:
    """``InferenceResponse(output_tensors=[...], error=None, parameters=None)``."""

    def __init__(
        self, output_tensors=None, error: TritonError | None = None, parameters=None
    ) -> None:
        tensors = list(output_tensors) if output_tensors is not None else []
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceResponse output_tensors must be pb_utils.Tensor "
                    f"objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"InferenceResponse error must be a pb_utils.TritonError, got "
                f"{type(error).__name__}"
            )
        self._tensors = tensors
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class InferenceResponseSender:
    """Sends a request's responses: for a decoupled model any number, each as it is sent, the
    last with the final flag; for another model (Triton 24.06+) its one response, collected
    when ``execute`` returns."""

    def __init__(self, token: int = 0, decoupled: bool = False, requested=None) -> None:
        self._token = token
        self._decoupled = decoupled
        self._requested = None if requested is None else set(requested)
        self._response: InferenceResponse | None = None
        self._sent = 0
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError("send() expects a pb_utils.InferenceResponse")
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model "
                        "cannot send more than one response."
                    )
                if response is None and final and not self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model "
                        "cannot send complete final before sending a "
                        "response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            if final:
                self._closed = True
            self._sent += 1
            if not self._decoupled:
                if response is not None:
                    self._response = response
                return
            # Sent under the lock: a request's responses leave in the order they were sent.
            _runtime.send_response(self._token, response, final, self._requested)

    def close(self) -> None:
        """No more responses (the backend closed the request: its execute failed)."""
        with self._lock:
            self._closed = True
        if self._decoupled and _runtime is not None:
            _runtime.close_sender(self._token)

    def is_closed(self) -> bool:
        return self._closed

    def is_cancelled(self) -> bool:
        return _runtime is not None and _runtime.is_cancelled(self._token)


class InferenceTrace:
    def get_context(self):
        return None


class PreferredMemory:
    def __init__(self, preferred_memory_type=0, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class MemoryType(enum.IntEnum):
    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class InferenceRequest:
    """A request given to ``execute``, or built by a model for BLS and run with ``exec()``.
    Requests given to ``execute`` carry the token by which the server knows them."""

    _token = 0
    _decoupled = False

    def __init__(
        self,
        request_id: str = "",
        correlation_id=0,
        inputs=None,
        requested_output_names=None,
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory=None,
        trace=None,
        parameters=None,
    ) -> None:
        if inputs is None or requested_output_names is None or model_name is None:
            raise TypeError(
                "InferenceRequest requires inputs, requested_output_names and model_name"
            )
        if not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        for tensor in inputs:
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"InferenceRequest inputs must be pb_utils.Tensor objects, got "
                    f"{type(tensor).__name__}"
                )
        if isinstance(model_name, bytes):
            model_name = model_name.decode("utf-8")
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested = [
            n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in requested_output_names
        ]
        self._model_name = str(model_name)
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _parameters_json(parameters)
        self._trace = trace if trace is not None else InferenceTrace()
        self._sender: InferenceResponseSender | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return self._parameters

    def trace(self) -> InferenceTrace:
        return self._trace

    def requested_output_names(self) -> list[str]:
        return list(self._requested)

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            self._sender = InferenceResponseSender(self._token, self._decoupled, self._requested)
        return self._sender

    def is_cancelled(self) -> bool:
        """Whether the request's client went away (the model may stop early)."""
        return _runtime is not None and _runtime.is_cancelled(self._token)

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException(
                "request rescheduling is only for iterative sequences, "
                "which triton_ros does not support"
            )
        self._release_flags = int(flags)

    def exec(self, decoupled: bool = False):
        """Run this request on another model of the server (BLS) and wait for its response;
        with ``decoupled``, an iterator of the responses as they come. Failures come back as
        a response with an error, as in Triton."""
        if _runtime is None:
            raise TritonModelException(
                "InferenceRequest.exec() is only available inside a model "
                "served by the Python backend"
            )
        if decoupled:
            return _runtime.bls_stream(self)
        return _runtime.bls(self)

    def async_exec(self, decoupled: bool = False):
        """An awaitable of :meth:`exec` (BLS requests run concurrently)."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.exec, decoupled)


class ResponseIterator:
    """The responses of a decoupled BLS request, as they come; the last one may be empty (the
    final flag came without a response). ``cancel()`` asks the model to stop."""

    def __init__(self, pull, cancel) -> None:
        self._pull = pull
        self._cancel = cancel
        self._done = False

    def __iter__(self):
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        response, final = self._pull()
        if final:
            self._done = True
        return response

    def cancel(self) -> None:
        if not self._done:
            self._cancel()


# --------------------------------------------------------------------------------------------
# Model control from a model (Triton 23.07+)
# --------------------------------------------------------------------------------------------


def load_model(model_name: str, config: str = "", files: dict | None = None) -> None:
    """Load or reload a model (explicit model control mode), like the repository load API:
    ``files`` maps "file:<version>/<name>" to the file's bytes and needs ``config``."""
    encoded = {
        key: base64.b64encode(bytes(value)).decode("ascii") for key, value in (files or {}).items()
    }
    _control("load", model_name=model_name, config=config, files=encoded)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    _control("unload", model_name=model_name, unload_dependents=unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(_control("ready", model_name=model_name, model_version=str(model_version)))


def _control(action: str, **kwargs):
    if _runtime is None:
        raise TritonModelException(
            "model control is only available inside a model served by the Python backend"
        )
    return _runtime.control(action, **kwargs)


def get_model_dir() -> str:
    if _runtime is None:
        raise TritonModelException(
            "get_model_dir() is only available inside a model served by the Python backend"
        )
    return _runtime.model_dir


# --------------------------------------------------------------------------------------------
# Logging and metrics
# --------------------------------------------------------------------------------------------


class Logger:
    """Writes to the server's log (the stub's stderr is the server's)."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: "Logger.LogLevel" = LogLevel.INFO) -> None:
        letter = "IWEV"[int(level)]
        stamp = datetime.datetime.now().strftime("%m%d %H:%M:%S.%f")
        source = _runtime.instance_name if _runtime is not None else "python"
        sys.stderr.write(f"{letter}{stamp} {source}] {message}\n")
        sys.stderr.flush()

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, Logger.LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, Logger.LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, Logger.LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, Logger.LogLevel.VERBOSE)


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


COUNTER = MetricKind.COUNTER
GAUGE = MetricKind.GAUGE
HISTOGRAM = MetricKind.HISTOGRAM


class Metric:
    """A custom metric; triton_ros keeps its value in the model's process (not exported)."""

    def __init__(self, kind: MetricKind, buckets=None) -> None:
        self._kind = kind
        self._value = 0.0
        self._lock = threading.Lock()

    def increment(self, value: float) -> None:
        if self._kind == MetricKind.COUNTER and value < 0:
            raise TritonModelException(
                "Failed to increment metric value: counters can only increase"
            )
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self._kind == MetricKind.COUNTER:
            raise TritonModelException("Failed to set metric value: counters cannot be set")
        with self._lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        with self._lock:
            self._value += value

    def value(self) -> float:
        with self._lock:
            return self._value


class MetricFamily:
    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = MetricKind(kind)

    def Metric(self, labels: dict | None = None, buckets=None) -> Metric:  # noqa: N802 (Triton's name)
        return Metric(self.kind, buckets)


# --------------------------------------------------------------------------------------------
# Helpers (Triton's pure-Python part of the module)
# --------------------------------------------------------------------------------------------


def serialize_byte_tensor(input_tensor: np.ndarray):
    """Length-prefixed serialization of a BYTES tensor (C order); None for other dtypes."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        return _serialize(input_tensor)
    return None


def deserialize_bytes_tensor(encoded_tensor) -> np.ndarray:
    """The 1-D object array of bytes held by a length-prefixed serialization."""
    return _deserialize(encoded_tensor)


def _named(items, name: str):
    return next((item for item in items if item.name() == name), None)


def _config_entry(model_config: dict, key: str, name: str) -> dict | None:
    return next((item for item in model_config.get(key, []) if item["name"] == name), None)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return _named(inference_request.inputs(), name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return _named(inference_response.output_tensors(), name)


def get_input_config_by_name(model_config: dict, name: str) -> dict | None:
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config: dict, name: str) -> dict | None:
    return _config_entry(model_config, "output", name)


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_to_numpy_type(data_type: int):
    for code, dtype in _TRITON_DTYPES:
        if code == data_type:
            return dtype
    return None


def numpy_to_triton_type(data_type) -> int | None:
    try:
        dtype = np.dtype(data_type)
    except TypeError:
        return None
    if dtype.type == np.bytes_:
        return 13
    for code, candidate in _TRITON_DTYPES:
        if dtype == np.dtype(candidate):
            return code
    return None


def triton_string_to_numpy(triton_type_string: str):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


# --------------------------------------------------------------------------------------------
# Auto-complete
# --------------------------------------------------------------------------------------------


class ModelConfig:
    """The configuration ``auto_complete_config`` receives and returns (Triton's API)."""

    def __init__(self, model_config: str) -> None:
        self._model_config = json.loads(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)

    def as_dict(self) -> dict:
        return self._model_config

    def _where(self) -> str:
        return f"for model '{self._model_config.get('name', '')}'"

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function {self._where()} specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function {self._where()} tries to set "
                    f"scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict) -> None:  # noqa: A002 (Triton's parameter name)
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def _add_tensor(self, kind: str, tensor: dict, allowed: tuple[str, ...]) -> None:
        name = tensor.get("name", "")
        for key in tensor:
            if key not in allowed:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function "
                    f"{self._where()} contains property other than "
                    f"{', '.join(repr(a) for a in allowed)}."
                )
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                what = f"{kind} '{name}'" if key != "name" else kind
                raise ValueError(
                    f"{what} in auto-complete-config function {self._where()} is "
                    f"missing '{key}' property."
                )
        for current in self._model_config[kind]:
            if current["name"] != name:
                continue
            if current.get("data_type", "TYPE_INVALID") not in (
                "TYPE_INVALID",
                tensor["data_type"],
            ):
                raise ValueError(
                    f"unable to load model '{self._model_config.get('name', '')}', "
                    f"configuration expects datatype {current['data_type']} for "
                    f"{kind} '{name}', model provides {tensor['data_type']}"
                )
            if current.get("dims") and list(current["dims"]) != list(tensor["dims"]):
                raise ValueError(
                    f"model '{self._model_config.get('name', '')}', tensor "
                    f"'{name}': the model expects dims {list(tensor['dims'])} but "
                    f"the model configuration specifies dims "
                    f"{list(current['dims'])}"
                )
            if (
                "optional" in tensor
                and "optional" in current
                and current["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    f"model '{self._model_config.get('name', '')}', tensor "
                    f"'{name}': the model expects optional {tensor['optional']} but "
                    f"the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = list(tensor["dims"])
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        self._model_config[kind].append(dict(tensor))

    def set_model_transaction_policy(self, transaction_policy_dict: dict) -> None:
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function "
                    f"{self._where()} contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            if (
                "decoupled" in policy
                and policy["decoupled"] != transaction_policy_dict["decoupled"]
            ):
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config "
                    f"{self._where()}, which is already set to "
                    f"'{policy['decoupled']}'."
                )
            policy["decoupled"] = transaction_policy_dict["decoupled"]
