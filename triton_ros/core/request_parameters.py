"""Inference request parameters: Triton's reserved ones typed and checked, the rest passed on.

One set of rules for every frontend (gRPC ``ModelInferRequest.parameters``, HTTP
``"parameters"``), so that a mistyped parameter is INVALID_ARG with the same message whichever
way it came, as in tritonserver's ``SetInferenceRequestMetadata``:

- ``priority``: a non-negative integer; ``timeout``: a non-negative integer (microseconds);
- ``sequence_id`` (an unsigned 64-bit integer or a string of at most 128 bytes, else UNSUPPORTED
  as tritonserver's ``TRITONSERVER_InferenceRequestSetCorrelationIdString`` answers, whatever
  the model; a negative int64 is taken as the uint64 it encodes, as tritonserver casts gRPC's
  int64_param), ``sequence_start``,
  ``sequence_end`` (booleans): Triton's sequence extension, read by the sequence batcher of a
  model with ``sequence_batching`` and ignored by every other model, as tritonserver does;
- keys starting with ``triton_`` are reserved, except ``triton_enable_empty_final_response``
  (a boolean: on a gRPC stream, whether a decoupled model's final flag sent without a response
  still gets an empty response; read by the stream, not passed to the model);
- every other parameter must be a boolean, an integer, a float or a string, and is passed to
  the model (Python models read them; the response cache key covers them).

A requested output's ``classification`` parameter (Triton's classification extension) must be a
non-negative integer: :func:`classification_count`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import invalid_arg, unsupported

SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")
_MAX_INT64 = 2**63 - 1
_MAX_UINT64 = 2**64 - 1
#: The longest string correlation ID tritonserver takes (bytes).
MAX_STRING_SEQUENCE_ID = 128


@dataclass
class RequestParameters:
    """What a request's parameters mean to the core."""

    priority: int = 0
    timeout_us: int = 0
    user: dict[str, Any] = field(default_factory=dict)  # passed to the model
    sequence_id: int | str = 0  # 0 or "": not part of a sequence
    sequence_start: bool = False
    sequence_end: bool = False
    enable_empty_final_response: bool = False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def split_request_parameters(params: Mapping[str, Any]) -> RequestParameters:
    """Check every parameter's type; return priority, timeout and the model's parameters."""
    out = RequestParameters()
    for key, value in params.items():
        if not isinstance(key, str):
            raise invalid_arg("request parameter names must be strings")
        if key == "priority":
            if not _is_int(value) or not 0 <= value <= _MAX_UINT64:
                raise invalid_arg(
                    "invalid value type for 'priority' parameter, expected "
                    "int64_param or uint64_param."
                )
            out.priority = value
        elif key == "timeout":
            if not _is_int(value) or not 0 <= value <= _MAX_INT64:
                raise invalid_arg(
                    "invalid value type for 'timeout' parameter, expected int64_param."
                )
            out.timeout_us = value
        elif key == "sequence_id":
            out.sequence_id = sequence_id(value)
        elif key in ("sequence_start", "sequence_end"):
            if not isinstance(value, bool):
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            setattr(out, key, value)
        elif key == "triton_enable_empty_final_response":
            # Sent by perf_analyzer and streaming clients; read by the gRPC stream.
            if not isinstance(value, bool):
                raise invalid_arg(
                    "invalid value type for 'triton_enable_empty_final_response' "
                    "parameter, expected bool_param."
                )
            out.enable_empty_final_response = value
        elif key.startswith("triton_"):
            raise invalid_arg(
                "parameter keys starting with 'triton_' are reserved for Triton "
                "usage and should not be specified."
            )
        elif isinstance(value, (bool, str, float)) or (
            _is_int(value) and -_MAX_INT64 - 1 <= value <= _MAX_UINT64
        ):
            out.user[key] = value
        else:
            raise invalid_arg(
                f"parameter '{key}' has invalid type. It should be either 'int', "
                f"'bool', 'double' or 'string'."
            )
    return out


def sequence_id(value: Any) -> int | str:
    """A ``sequence_id`` parameter as the core keeps it: a uint64 or a string. A negative value
    is the uint64 whose two's complement it is (tritonserver casts gRPC's int64_param)."""
    if isinstance(value, str):
        if len(value.encode(errors="surrogatepass")) > MAX_STRING_SEQUENCE_ID:
            raise unsupported(
                f"string correlation ID cannot be longer than {MAX_STRING_SEQUENCE_ID} characters"
            )
        return value
    if not _is_int(value) or not -_MAX_INT64 - 1 <= value <= _MAX_UINT64:
        raise invalid_arg(
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
        )
    return value & _MAX_UINT64


def classification_count(value: Any, output_name: str) -> int:
    """A requested output's ``classification`` parameter: a non-negative integer."""
    if not _is_int(value) or not 0 <= value <= _MAX_INT64:
        raise invalid_arg(
            f"invalid value type for 'classification' parameter of output "
            f"'{output_name}', expected a non-negative int64_param"
        )
    return value
