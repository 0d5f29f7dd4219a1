"""Inference requests and responses of the core (Triton's infer_request / infer_response).

A request holds numpy arrays by input name (BYTES as object arrays of ``bytes``), what the client
asked for (requested outputs, priority, timeout, the sequence it belongs to) and the bookkeeping
the scheduler adds. Its ``future`` resolves to an :class:`InferResponse` or fails with a
:class:`TritonRosError`.

Responses as they come (Triton's response callback): a caller that sets ``response_sink`` gets
every response of the request through it, ``sink(response, final)``, in order, on the thread
that produces it, before the future resolves. A decoupled model
(``model_transaction_policy { decoupled: true }``) may send any number of responses, an error
response (a :class:`TritonRosError`) or the final flag alone (``None``); its request needs a sink
(UNSUPPORTED otherwise) and its future then resolves to ``None`` after the final one. Any other
model sends exactly one response, final. A request refused before it reached a model (a bad
input, an unknown sequence, a full queue) never reaches the sink: its future fails.
Cancellation (``cancel()``): a request whose client went away is marked; a backend that can
stop early (a Python model's ``request.is_cancelled()``) is told.
:func:`normalize_request` checks a request against a model's configuration with Triton's rules
and messages, and computes its batch size and the shape key that decides which requests may
share a batch.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import numpy as np

from .datatypes import from_numpy_dtype
from .errors import TritonRosError, invalid_arg
from .model_config import WILDCARD_DIM, ModelConfig

if TYPE_CHECKING:
    from .shared_memory_manager import SharedMemoryBlock

_log = logging.getLogger("triton_ros.request")


class RequestTrace(Protocol):
    """What a request and its caller see of its trace (a ``tracer.Trace``: the tracer sits above
    the request, which it reads, so the request names only this)."""

    def capture(self, name: str, ns: int | None = None) -> None: ...

    def release(self) -> None: ...


@dataclass(frozen=True)
class RequestedOutput:
    name: str
    class_count: int = 0  # > 0: Triton's classification extension (top-k labels)
    # Where the client wants the output written (shared memory extension); the frontend writes
    # it there when it encodes the response, and the response carries no data for it.
    shared_memory: SharedMemoryBlock | None = None


@dataclass
class InferResponse:
    model_name: str
    model_version: int
    id: str
    outputs: dict[str, np.ndarray]  # in the order the client should see them
    parameters: dict[str, Any] = field(default_factory=dict)


#: sink(response, final): an InferResponse, an error response (TritonRosError) or None (the final
#: flag alone), and whether it is the request's last.
ResponseSink = Callable[[Any, bool], None]


@dataclass(eq=False)
class InferRequest:
    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: int = -1  # -1: the latest ready version
    id: str = ""
    requested_outputs: tuple[RequestedOutput, ...] | None = None  # None: every output
    priority: int = 0  # 0: the model's default level
    timeout_us: int = 0  # 0: the queue policy's default
    parameters: dict[str, Any] = field(default_factory=dict)
    # Triton's sequence extension: the correlation ID (a uint64 or a string; 0 or "": none)
    # and the START and END flags. Only a model with sequence_batching reads them.
    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    # Every response as it comes: sink(response, final) (see the module docstring).
    response_sink: ResponseSink | None = field(default=None, repr=False)

    # Set by the core ------------------------------------------------------------------------
    future: Future = field(default_factory=Future, repr=False)
    arrival_ns: int = field(default_factory=time.monotonic_ns, repr=False)
    batch_size: int = 1  # rows this request adds to a batch
    shape_key: tuple = ()  # requests batch together only with equal keys
    queue_start_ns: int = 0
    compute_start_ns: int = 0
    cache_key: bytes | None = field(default=None, repr=False)  # set on a response-cache miss
    cache_lookup_ns: int = 0
    # The compute durations charged to this request (its batch's), set before it is answered so
    # that an ensemble can add up its steps' (Triton's secondary stats aggregator).
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    # Answered with its part of a batch that runs in parts, before the batch ended.
    answered_early: bool = False
    compute_end_ns: int = 0  # its batch's (or part's) execution returned
    # Request tracing (core/tracer.py): the trace of a sampled request, which the core reports
    # to when it answers the request. A caller that adds timestamps of its own (a frontend's
    # receive and send, the ROS node's frame received and published) sets caller_releases_trace
    # before submitting and calls trace.release() when done: the trace is written once both
    # the core has answered and the caller has released it.
    trace: RequestTrace | None = field(default=None, repr=False)
    caller_releases_trace: bool = False
    # Accepted by a model's scheduler (set at enqueue): a failure after this is the model's
    # answer to the request; before it, the request was refused (Triton's enqueue errors).
    issued: bool = False
    cancelled: bool = False  # cancel(): the client went away
    # Set by the sequence batcher: the slot the request's sequence holds, the sequence's
    # implicit state (captured from the response), outputs the backend must produce beyond the
    # requested ones (the state outputs), and whether this is a not-ready filler of a slot.
    sequence_slot: Any = field(default=None, repr=False)
    sequence_states: Any = field(default=None, repr=False)
    extra_outputs: tuple[str, ...] = ()
    null_request: bool = False
    # Set by a decoupled model before execution: how its backend sends each response
    # (Triton's response factory): response_factory(response, final).
    response_factory: ResponseSink | None = field(default=None, repr=False)
    _final_sent: bool = field(default=False, repr=False)
    _on_cancel: list = field(default_factory=list, repr=False)

    @property
    def in_sequence(self) -> bool:
        """Whether the request names a sequence (a non-zero or non-empty correlation ID)."""
        return self.sequence_id != 0 and self.sequence_id != ""

    def set_response(self, response: InferResponse) -> None:
        """The request's one (final) response: through the sink, then the future."""
        if not self.future.done():
            if self.response_sink is not None and not self._final_sent:
                self._final_sent = True
                try:
                    self.response_sink(response, True)
                except Exception as exc:  # the caller's fault: its future still resolves
                    _log.error(
                        "request '%s': its response sink failed: %s: %s",
                        self.id,
                        type(exc).__name__,
                        exc,
                    )
                self.response_sink = None  # no cycle through the caller's closure
            if self.trace is not None:
                self.trace.end_request(self, response, time.monotonic_ns())
            self.future.set_result(response)

    def stream_response(
        self, response: "InferResponse | TritonRosError | None", final: bool
    ) -> None:
        """One response of a decoupled model, in order; after the final one the future resolves
        (to the last response, or None when the final flag came alone). Later calls are
        ignored."""
        if self._final_sent or self.future.done():
            return
        if final:
            self._final_sent = True
        if self.response_sink is not None:
            self.response_sink(response, final)
        if final:
            # Done with the caller's and the backend's closures (they may hold this request).
            self.response_sink = self.response_factory = None
            if self.trace is not None:
                self.trace.end_request(
                    self,
                    response if isinstance(response, InferResponse) else None,
                    time.monotonic_ns(),
                )
            self.future.set_result(response if isinstance(response, InferResponse) else None)

    @property
    def final_sent(self) -> bool:
        return self._final_sent

    def cancel(self) -> None:
        """Mark the request cancelled (its client went away) and tell whoever asked
        (:meth:`on_cancel`); idempotent."""
        if self.cancelled:
            return
        self.cancelled = True
        for fn in list(self._on_cancel):
            try:
                fn()
            except Exception:  # a backend's hook must not fail the canceller
                pass

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` when the request is cancelled (at once if it already is)."""
        if self.cancelled:
            fn()
        else:
            self._on_cancel.append(fn)

    def set_error(self, error: TritonRosError) -> None:
        if not self.future.done():
            if self.trace is not None:
                self.trace.end_request(self, None, time.monotonic_ns())
            self.future.set_exception(error)

    def shared_memory_outputs(self) -> dict[str, SharedMemoryBlock]:
        """The requested outputs to write into shared memory, by name."""
        return {
            o.name: o.shared_memory
            for o in self.requested_outputs or ()
            if o.shared_memory is not None
        }

    def output_names(self, config: ModelConfig) -> list[str]:
        """The outputs the backend must produce: the requested ones (every output when none
        is named) and the scheduler's extra ones (implicit state)."""
        if self.requested_outputs is None:
            names = [o.name for o in config.outputs]
        else:
            names = [o.name for o in self.requested_outputs]
        for name in self.extra_outputs:
            if name not in names:
                names.append(name)
        return names


def _dims_str(dims) -> str:
    return "[" + ",".join(str(int(d)) for d in dims) + "]"


def normalize_request(config: ModelConfig, request: InferRequest) -> None:
    """Validate ``request`` against ``config`` as Triton does; set batch_size and shape_key.

    Raises INVALID_ARG with Triton's messages for unknown, missing or mistyped inputs, wrong
    shapes, too large batches and unknown requested outputs.
    """
    model = config.name
    declared = config.inputs_by_name
    for name in request.inputs:
        if name not in declared:
            raise invalid_arg(f"unexpected inference input '{name}' for model '{model}'")
    required = config.required_inputs
    missing = [n for n in required if n not in request.inputs]
    if missing:
        got = "[" + ",".join(f"'{n}'" for n in request.inputs) + "]"
        miss = "[" + ",".join(f"'{n}'" for n in missing) + "]"
        if len(required) == len(config.inputs):
            raise invalid_arg(
                f"expected {len(config.inputs)} inputs but got {len(request.inputs)} inputs for "
                f"model '{model}'. Got input(s) {got}, but missing required input(s) {miss}. "
                f"Please provide all required input(s)."
            )
        raise invalid_arg(
            f"expected number of inputs between {len(required)} and {len(config.inputs)} but got "
            f"{len(request.inputs)} inputs for model '{model}'. Got input(s) {got}, but missing "
            f"required input(s) {miss}. Please provide all required input(s)."
        )

    batching = config.max_batch_size > 0
    batch_size = 0
    for name, array in request.inputs.items():
        if not isinstance(array, np.ndarray):
            raise invalid_arg(f"input '{name}' for model '{model}' is not a tensor")
        if batching:
            if array.ndim == 0:
                raise invalid_arg(
                    f"input '{name}' has no shape but model requires batch dimension for '{model}'"
                )
            if batch_size == 0:
                batch_size = int(array.shape[0])
            elif int(array.shape[0]) != batch_size:
                raise invalid_arg(
                    f"input '{name}' batch size does not match other inputs for '{model}'"
                )
    if batching:
        if batch_size > config.max_batch_size:
            raise invalid_arg(
                f"inference request batch-size must be <= {config.max_batch_size} for '{model}'"
            )
        if batch_size < 1 and request.inputs:
            raise invalid_arg(f"inference request batch-size must be >= 1 for '{model}'")

    key: list[tuple] = []
    for name, array in request.inputs.items():
        tensor = declared[name]
        got_type = from_numpy_dtype(array.dtype)
        if got_type != tensor.datatype:
            raise invalid_arg(
                f"inference input '{name}' data-type is '{got_type}', but model "
                f"'{model}' expects '{tensor.datatype}'"
            )
        shape = array.shape[1:] if batching else array.shape
        ok = len(shape) == len(tensor.dims) and all(
            c == WILDCARD_DIM or c == s for c, s in zip(tensor.dims, shape)
        )
        if not ok:
            full = ((WILDCARD_DIM,) if batching else ()) + tensor.dims
            note = ""
            if batching:
                note = (
                    " NOTE: Setting a non-zero max_batch_size in the model config requires a "
                    "batch dimension to be prepended to each input shape. If you want to "
                    "specify the full shape including the batch dim in your input dims config, "
                    "try setting max_batch_size to zero. See the model configuration docs for "
                    "more info on max_batch_size."
                )
            raise invalid_arg(
                f"unexpected shape for input '{name}' for model '{model}'. Expected "
                f"{_dims_str(full)}, got {_dims_str(array.shape)}.{note}"
            )
        if tensor.has_variable_dims:
            # Triton enforces equal shapes inside a batch for non-ragged variable-size inputs.
            key.append((name, tuple(shape)))
    if len(request.inputs) != len(config.inputs):
        key.append(("__present__", tuple(sorted(request.inputs))))

    if request.requested_outputs is not None:
        outputs = config.outputs_by_name
        for out in request.requested_outputs:
            if out.name not in outputs:
                raise invalid_arg(f"unexpected inference output '{out.name}' for model '{model}'")
            if out.class_count < 0:
                raise invalid_arg(f"classification count must be >= 0 for output '{out.name}'")

    request.batch_size = max(1, batch_size) if batching else 1
    request.shape_key = tuple(key)


def model_facing_inputs(config: ModelConfig, request: InferRequest) -> Mapping[str, np.ndarray]:
    """The request's inputs reshaped as the model sees them (config ``reshape``)."""
    out: dict[str, np.ndarray] = {}
    for name, array in request.inputs.items():
        tensor = config.input(name)
        if tensor is not None and tensor.reshape is not None:
            batch = (array.shape[0],) if config.max_batch_size > 0 else ()
            array = array.reshape(
                batch + _resolve_reshape(tensor.dims, tensor.reshape, array.shape[len(batch) :])
            )
        out[name] = array
    return out


def _resolve_reshape(dims, reshape, actual) -> tuple[int, ...]:
    # Variable-size dims take their values, in order, from the actual shape (Triton's rule).
    values = [a for d, a in zip(dims, actual) if d == WILDCARD_DIM]
    out = []
    for d in reshape:
        out.append(values.pop(0) if d == WILDCARD_DIM else d)
    return tuple(out)
