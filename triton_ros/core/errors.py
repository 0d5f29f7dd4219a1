"""Typed errors of the inference core.

Every failure the core reports is a :class:`TritonRosError` carrying a :class:`StatusCode` that
mirrors ``TRITONSERVER_Error_Code``. Each frontend maps the code to its own protocol (gRPC status,
HTTP status, ROS log line and diagnostics counter); the core never imports a transport.
"""

from __future__ import annotations

import enum


class StatusCode(enum.Enum):
    """Triton's error codes (tritonserver.h ``TRITONSERVER_Error_Code``)."""

    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


#: The longest message an error carries; longer ones are cut (the rest is counted).
MAX_MESSAGE_CHARS = 2048


class TritonRosError(Exception):
    """An error with a Triton status code; the message is what a client sees."""

    def __init__(self, code: StatusCode, message: str) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            # Messages quote what the client sent (names, values): a huge one must not turn into
            # a reply the transport cannot carry (gRPC's 8 KiB metadata limit).
            message = (
                message[:MAX_MESSAGE_CHARS]
                + f"... ({len(message) - MAX_MESSAGE_CHARS} more characters)"
            )
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"TritonRosError({self.code.name}, {self.message!r})"

    def __str__(self) -> str:
        return self.message


class UnknownModelError(TritonRosError):
    """A request named a model, or a version, that the server does not serve now.

    The code is tritonserver's for the case: NOT_FOUND for a name it does not know (an empty one
    too: :func:`unknown_model`), for a model with no ready version and for an unknown version;
    UNAVAILABLE for a known version that is not ready. Every frontend answers with that code
    (gRPC NOT_FOUND, HTTP 404, Kafka's ``triton-status``); the type lets callers (the ROS
    bindings) tell "the model is not there" from other failures without reading the message."""


def unknown_model(name: str) -> UnknownModelError:
    """tritonserver's answer for a model name it does not serve: NOT_FOUND."""
    return UnknownModelError(
        StatusCode.NOT_FOUND, f"Request for unknown model: '{name}' is not found"
    )


class StoppingError(TritonRosError):
    """UNAVAILABLE because the server, or the model version, is stopping (unload, reload,
    shutdown): the request was refused, not failed by the model."""

    def __init__(self, message: str) -> None:
        super().__init__(StatusCode.UNAVAILABLE, message)


class QueueFullError(TritonRosError):
    """UNAVAILABLE because the model's queue already holds ``max_queue_size`` requests: refused
    before it was queued, so the same request may be sent again later (the Kafka frontend pauses
    fetching and retries it; the other frontends answer UNAVAILABLE, as tritonserver does)."""

    def __init__(self, message: str) -> None:
        super().__init__(StatusCode.UNAVAILABLE, message)


class EnqueueRefused(TritonRosError):
    """A scheduler refused the request as it was enqueued, where tritonserver's scheduler
    refuses it (its Enqueue returns the error: a sequence request without a correlation ID, or
    of no known sequence without START): not counted in the model's statistics, as there."""


def invalid_arg(message: str) -> TritonRosError:
    return TritonRosError(StatusCode.INVALID_ARG, message)


def not_found(message: str) -> TritonRosError:
    return TritonRosError(StatusCode.NOT_FOUND, message)


def unavailable(message: str) -> TritonRosError:
    return TritonRosError(StatusCode.UNAVAILABLE, message)


def internal(message: str) -> TritonRosError:
    return TritonRosError(StatusCode.INTERNAL, message)


def unsupported(message: str) -> TritonRosError:
    return TritonRosError(StatusCode.UNSUPPORTED, message)


def as_triton_error(exc: BaseException) -> TritonRosError:
    """The exception itself if typed, else an INTERNAL error naming it (never lose the cause)."""
    if isinstance(exc, TritonRosError):
        return exc
    return TritonRosError(StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
