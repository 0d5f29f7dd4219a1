"""Triton's sequence batch scheduler (sequence_batch_scheduler.cc, sequence_state.cc).

A model with ``sequence_batching`` serves stateful sequences: every request names its sequence
(a correlation ID, uint64 or string) and the first and last carry START and END. Each sequence
holds a *slot* of one model instance from its START to its END, so that all its requests run
on the same instance, one after another, in arrival order. An instance has ``max_batch_size``
slots (direct) or ``max_candidate_sequences`` (oldest; at least one either way); the free
slots are handed out lowest slot number first, across instances. A new sequence that finds no
free slot waits in the *backlog*, with the requests it sends meanwhile, until an END frees one.

- **direct**: each slot is a fixed row of the instance's batch. A batch holds, for slots 0 up
  to the highest with a request waiting, the oldest request of each slot, or a *null request*
  (zeros, READY false) where a slot has none or its request cannot join the batch (another
  shape), so that every sequence stays in its row. ``max_queue_delay_microseconds`` with
  ``minimum_slot_utilization`` lets a batch wait for more ready slots.
- **oldest**: the next request of each sequence (one at a time: the following one is issued
  when it has executed) goes into a dynamic batcher of the instance (core
  dynamic_batch_scheduler.py, with the strategy's ``preferred_batch_size``,
  ``max_queue_delay_microseconds`` and ``preserve_ordering``), so requests of different
  sequences batch by age.

The control inputs (``control_input``) are added to each request as the model configures them:
START, END and READY with their false/true values (INT32, FP32 or BOOL), CORRID with the
correlation ID in its data type (shape [1], or [1, 1] with batching). Implicit state
(``state``): the sequence's state tensors are added as inputs and the model's state outputs
are kept for its next request (from zeros, an ``initial_state`` of zeros or of a file in
``<model>/initial_state``, or zeros with 1 for every variable dimension when none is given);
a state output the client did not ask for is removed from its response.

Errors, with Triton's codes and messages: a request without a correlation ID, with a batch
size above 1, whose ID's type does not match CORRID's, or of a sequence the scheduler does not
know (never started, already ended, released after idling) without START is refused as it is
enqueued (INVALID_ARG, not counted in the statistics, as in tritonserver). A sequence that sends
nothing for ``max_sequence_idle_microseconds`` loses its slot (its next request is unknown, as
above). A backlogged request with a ``timeout`` that expires fails with UNAVAILABLE ("timeout
of the corresponding sequence has been expired"). Beyond Triton, the backlog is bounded
(:data:`MAX_BACKLOG_REQUESTS`): past it a request that would wait there is refused with
UNAVAILABLE, so a flood of new sequences cannot take the server's memory.

Statistics as tritonserver counts them: a null request is no inference but its row counts in the
executed batch size; queue time runs from the sequence batcher's enqueue, backlog included.

Locking: one lock guards slots, backlog and sequence maps; each instance waits on its own
condition of it. The oldest strategy's dynamic batchers have their own locks, taken after it.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from .datatypes import to_numpy_dtype
from .dynamic_batch_scheduler import MAX_WAIT_S, STOPPING_MESSAGE, DynamicBatchScheduler
from .errors import (
    EnqueueRefused,
    StatusCode,
    StoppingError,
    TritonRosError,
    internal,
    invalid_arg,
    unavailable,
)
from .infer_request import InferRequest
from .model_config import (
    CONTROL_CORRID,
    CONTROL_END,
    CONTROL_READY,
    CONTROL_START,
    INITIAL_STATE_FOLDER,
    WILDCARD_DIM,
    DynamicBatchingConfig,
    ModelConfig,
    SequenceStateConfig,
)

_log = logging.getLogger("triton_ros.sequence")

#: Requests the backlog holds at most (new sequences waiting for a slot and what they sent
#: meanwhile); past it a new sequence is refused with UNAVAILABLE. Triton's backlog is unbounded.
MAX_BACKLOG_REQUESTS = 65536
#: How often the reaper looks again at an idle sequence that is still in the backlog (Triton's
#: backlog_idle_wait_microseconds).
_BACKLOG_IDLE_WAIT_US = 50_000
#: Conflicting STARTs logged at most this often (one line per period, with the count).
_WARN_PERIOD_S = 10.0


class _ForceEnd:
    """Queued in a slot by the reaper: the slot's idle sequence is over (Triton's null
    request)."""

    def __repr__(self) -> str:
        return "FORCE_END"


FORCE_END = _ForceEnd()


def _now_us() -> int:
    return time.monotonic_ns() // 1000


#: A string correlation ID longer than this is cut in messages (so that the rest still fits).
_LABEL_CHARS = 200


def sequence_label(sequence_id: int | str) -> str:
    """A correlation ID as Triton's messages write it (a very long string cut short)."""
    if not isinstance(sequence_id, str):
        return str(sequence_id)
    if len(sequence_id) <= _LABEL_CHARS:
        return sequence_id
    return f"{sequence_id[:_LABEL_CHARS]}... ({len(sequence_id)} characters)"


class SequenceStates:
    """The implicit state of one sequence (Triton's SequenceStates): the input state tensors
    its next request gets, replaced by the state outputs of each executed request."""

    __slots__ = ("_configs", "_inputs", "_listed")

    def __init__(
        self,
        configs: tuple[SequenceStateConfig, ...],
        initial: dict[str, np.ndarray],
        listed: frozenset[str],
    ) -> None:
        self._configs = configs
        self._inputs = dict(initial)
        self._listed = listed  # the model's configured outputs

    def attach(self, request: InferRequest) -> None:
        """Give ``request`` the state inputs and ask its backend for the state outputs."""
        for state in self._configs:
            request.inputs[state.input_name] = self._inputs[state.input_name]
        request.extra_outputs = tuple(s.output_name for s in self._configs)
        request.sequence_states = self

    def shapes(self) -> tuple:
        return tuple(self._inputs[s.input_name].shape for s in self._configs)

    def capture(self, request: InferRequest, response) -> None:
        """Keep the state outputs of ``request``'s response for the next request; remove those
        the client did not ask for from the response. A state output the model did not produce
        leaves the state as it was."""
        # The client sees what it asked for: the named outputs, or the configured ones.
        wanted = (
            self._listed
            if request.requested_outputs is None
            else {o.name for o in request.requested_outputs}
        )
        for state in self._configs:
            array = response.outputs.get(state.output_name)
            if array is None:
                continue
            # A copy: the response's arrays may view a batch buffer the backend reuses.
            self._inputs[state.input_name] = np.array(array, copy=True)
            if state.output_name not in wanted:
                del response.outputs[state.output_name]


class _Slot:
    """One sequence slot of one instance: the requests of the sequence it holds, waiting."""

    __slots__ = ("instance", "index", "queue", "sequence", "states", "in_flight", "dead")

    def __init__(self, instance: int, index: int) -> None:
        self.instance = instance
        self.index = index
        self.queue: collections.deque = collections.deque()
        self.sequence: int | str | None = None
        self.states: SequenceStates | None = None
        self.in_flight = False  # oldest: a request of the slot is in the dynamic batcher
        self.dead = False  # its instance stopped


class _Backlog:
    """The requests of one sequence waiting for a slot (Triton's BacklogQueue)."""

    __slots__ = ("queue", "expires_us")

    def __init__(self) -> None:
        self.queue: collections.deque = collections.deque()
        self.expires_us = 0  # 0: no request of it has a timeout


class _Controls:
    """The control tensors of a model, built once: START/END/READY arrays for true and false,
    and the CORRID tensor's shape and type."""

    def __init__(self, config: ModelConfig) -> None:
        sb = config.sequence_batching
        self.shape = (1, 1) if config.max_batch_size > 0 else (1,)
        self.flags: list[tuple[str, str, np.ndarray, np.ndarray]] = []
        for kind in (CONTROL_START, CONTROL_END, CONTROL_READY):
            control = sb.control(kind)
            if control is None:
                continue
            dtype = to_numpy_dtype(control.datatype)
            false = np.full(self.shape, control.false_value, dtype)
            true = np.full(self.shape, control.true_value, dtype)
            false.flags.writeable = true.flags.writeable = False
            self.flags.append((kind, control.tensor, false, true))
        corrid = sb.control(CONTROL_CORRID)
        self.corrid_tensor = corrid.tensor if corrid is not None else None
        self.corrid_type = corrid.datatype if corrid is not None else ""
        self.names = tuple(name for _, name, _, _ in self.flags) + (
            (self.corrid_tensor,) if self.corrid_tensor else ()
        )

    def apply(self, request: InferRequest, *, ready: bool) -> None:
        for kind, name, false, true in self.flags:
            if not ready:
                value = false
            elif kind == CONTROL_START:
                value = true if request.sequence_start else false
            elif kind == CONTROL_END:
                value = true if request.sequence_end else false
            else:
                value = true
            request.inputs[name] = value
        if self.corrid_tensor:
            request.inputs[self.corrid_tensor] = self.corrid_array(
                request.sequence_id if ready else 0
            )

    def corrid_array(self, sequence_id: int | str) -> np.ndarray:
        kind = self.corrid_type
        if kind == "BYTES":
            text = sequence_id if isinstance(sequence_id, str) else ""
            array = np.empty(self.shape, dtype=np.object_)
            array.fill(text.encode("utf-8"))
            return array
        value = np.full(
            self.shape, int(sequence_id) if isinstance(sequence_id, int) else 0, np.uint64
        )
        if kind == "UINT64":
            return value
        if kind == "INT64":
            return value.view(np.int64)
        low = (value & np.uint64(0xFFFFFFFF)).astype(np.uint32)  # Triton copies the low bytes
        return low if kind == "UINT32" else low.view(np.int32)

    def request_type_error(self, request: InferRequest, model: str) -> TritonRosError | None:
        """A correlation ID whose type the CORRID control cannot hold (ValidateCorrelationId)."""
        if not self.corrid_tensor:
            return None
        is_string = isinstance(request.sequence_id, str)
        if is_string == (self.corrid_type == "BYTES"):
            return None
        got = "BYTES" if is_string else "UINT64"
        return EnqueueRefused(
            StatusCode.INVALID_ARG,
            f"sequence batching control '{self.corrid_tensor}' data-type is "
            f"'{got}', but model '{model}' expects '{self.corrid_type}'",
        )


def initial_states(config: ModelConfig, model_path: Path) -> dict[str, np.ndarray]:
    """Each state's first input (Triton's GenerateInitialStateData and SequenceStates): its
    ``initial_state`` (zeros or the row-major contents of its data file), else zeros with 1 for
    every variable dimension; with the batch dimension (1) when the model batches."""
    batch = (1,) if config.max_batch_size > 0 else ()
    out: dict[str, np.ndarray] = {}
    for state in config.sequence_batching.states:
        dtype = to_numpy_dtype(state.datatype)
        initial = state.initial_state
        dims = (
            initial.dims
            if initial is not None
            else tuple(1 if d == WILDCARD_DIM else d for d in state.dims)
        )
        shape = batch + tuple(dims)
        count = int(np.prod(shape, dtype=np.int64))
        if initial is None or initial.zero_data:
            array = (
                np.full(shape, b"", dtype=np.object_)
                if state.datatype == "BYTES"
                else np.zeros(shape, dtype)
            )
        else:
            array = _state_from_file(config.name, model_path, state, dtype, shape, count)
        array.flags.writeable = False
        out[state.input_name] = array
    return out


def _state_from_file(
    model: str, model_path: Path, state: SequenceStateConfig, dtype, shape, count: int
) -> np.ndarray:
    from .datatypes import deserialize_bytes_tensor

    name = state.initial_state.data_file
    folder = (model_path / INITIAL_STATE_FOLDER).resolve()
    path = (folder / name).resolve()
    if folder not in path.parents:
        raise invalid_arg(
            f"model '{model}': initial_state data_file '{name}' is outside the "
            f"model's '{INITIAL_STATE_FOLDER}' directory"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(
            f"model '{model}': cannot read initial_state data_file '{name}' of "
            f"state '{state.input_name}': {exc.strerror}"
        ) from None
    if state.datatype == "BYTES":
        try:
            return deserialize_bytes_tensor(data, count).reshape(shape)
        except (TritonRosError, ValueError) as exc:
            raise invalid_arg(
                f"model '{model}': initial_state data_file '{name}' does not hold "
                f"{count} serialized strings: {exc}"
            ) from None
    need = count * np.dtype(dtype).itemsize
    if need > len(data):
        raise invalid_arg(
            f"initial_state setting expects {need} bytes, but the data provided "
            f"from {name}only has {len(data)} bytes."
        )
    return np.frombuffer(data[:need], dtype=dtype).reshape(shape).copy()


class SequenceBatchScheduler:
    """Slots, backlog, controls and implicit state for one model version; one batcher per
    instance. The model's instance threads call ``next_batch(instance)``."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        model_path: Path,
        on_reject: Callable[[InferRequest, TritonRosError], None],
    ) -> None:
        sb = config.sequence_batching
        self.model_name = config.name
        self._config = config
        self._sb = sb
        self._on_reject = on_reject
        self._batching = config.max_batch_size > 0
        self._oldest = sb.strategy == "oldest"
        self._slot_count = max(1, config.max_batch_size)
        if self._oldest and sb.max_candidate_sequences > 0:
            self._slot_count = sb.max_candidate_sequences
        self._idle_us = sb.max_sequence_idle_us
        self._delay_ns = sb.max_queue_delay_us * 1000
        self._min_utilization = sb.minimum_slot_utilization
        self._controls = _Controls(config)
        self._initial = initial_states(config, model_path)
        self._listed = frozenset(o.name for o in config.outputs)
        self._initial_shapes = tuple(self._initial[st.input_name].shape for st in sb.states)

        self._lock = threading.Lock()
        self._cvs: list[threading.Condition] = []
        self._slots: list[list[_Slot]] = []
        self._dynamic: list[DynamicBatchScheduler] = []
        self._ready: list[tuple[int, int]] = []  # (slot index, instance): a heap
        self._to_slot: dict[int | str, _Slot] = {}
        self._to_backlog: dict[int | str, _Backlog] = {}
        self._backlogs: collections.deque[_Backlog] = collections.deque()
        self._backlog_requests = 0
        self._last_seen_us: dict[int | str, int] = {}
        self._next_expiry_us = 0
        self._stopping = False
        self._stop_error: TritonRosError | None = None
        self._seq = itertools.count()
        self._reaper: threading.Thread | None = None
        self._reaper_cv = threading.Condition(self._lock)
        self._conflicts = 0
        self._conflicts_logged_at = 0.0
        self.idle_releases = 0  # sequences whose slot the reaper released

    # ---------------------------------------------------------------- set-up
    def set_instances(self, count: int) -> None:
        """Create one batcher, with its slots, per instance that takes batches (call once,
        before the instance threads start); starts the reaper."""
        if count == 0:
            raise internal(
                "Initialization failed for all sequence-batch scheduler threads "
                f"(model '{self.model_name}' has no instance that takes requests)"
            )
        with self._lock:
            for instance in range(count):
                self._cvs.append(threading.Condition(self._lock))
                self._slots.append([_Slot(instance, i) for i in range(self._slot_count)])
                for index in range(self._slot_count):
                    heapq.heappush(self._ready, (index, instance))
                if self._oldest:
                    self._dynamic.append(self._dynamic_batcher())
        self._reaper = threading.Thread(
            target=self._reap, daemon=True, name=f"{self.model_name}:sequence-reaper"
        )
        self._reaper.start()

    def _dynamic_batcher(self) -> DynamicBatchScheduler:
        sb = self._sb
        config = replace(
            self._config,
            dynamic_batching=DynamicBatchingConfig(
                preferred_batch_sizes=sb.preferred_batch_sizes
                or ((self._config.max_batch_size,) if self._batching else ()),
                max_queue_delay_us=sb.max_queue_delay_us,
                preserve_ordering=sb.preserve_ordering,
            ),
        )
        return DynamicBatchScheduler(config, on_reject=self._on_reject)

    # ---------------------------------------------------------------- producer side
    def enqueue(self, request: InferRequest) -> None:
        """Route a normalized request to its sequence's slot, or the backlog; raise (refused,
        nothing queued) as Triton's Enqueue does."""
        model = self.model_name
        if request.batch_size > 1:
            raise EnqueueRefused(
                StatusCode.INVALID_ARG,
                f"inference request to model '{model}' must specify batch-size "
                f"1 due to requirements of sequence batcher",
            )
        if not request.in_sequence:
            raise EnqueueRefused(
                StatusCode.INVALID_ARG,
                f"inference request to model '{model}' must specify a non-zero "
                f"or non-empty correlation ID",
            )
        error = self._controls.request_type_error(request, model)
        if error is not None:
            raise error
        key = request.sequence_id
        issue: _Slot | None = None
        with self._lock:
            if self._stopping:
                raise self._stop_error or StoppingError(STOPPING_MESSAGE)
            slot = self._to_slot.get(key)
            backlog = self._to_backlog.get(key)
            if not request.sequence_start and slot is None and backlog is None:
                raise EnqueueRefused(
                    StatusCode.INVALID_ARG,
                    f"inference request for sequence {sequence_label(key)} to "
                    f"model '{model}' must specify the START flag on the first "
                    f"request of the sequence",
                )
            if (
                slot is None
                and (backlog is not None or not self._ready)
                and self._backlog_requests >= MAX_BACKLOG_REQUESTS
            ):
                raise unavailable(
                    f"inference request for sequence {sequence_label(key)} to "
                    f"model '{model}' cannot wait for a sequence slot: the "
                    f"backlog holds {MAX_BACKLOG_REQUESTS} requests"
                )
            now_us = _now_us()
            self._last_seen_us[key] = now_us
            if request.sequence_start and (slot is not None or backlog is not None):
                self._conflict(key)
            request.queue_start_ns = time.monotonic_ns()
            if slot is None and backlog is None and self._ready:
                index, instance = heapq.heappop(self._ready)
                slot = self._slots[instance][index]
                slot.sequence = key
                self._to_slot[key] = slot
            if slot is None:
                if backlog is None:
                    backlog = _Backlog()
                    self._backlogs.append(backlog)
                    if not request.sequence_end:
                        self._to_backlog[key] = backlog
                elif request.sequence_end:
                    del self._to_backlog[key]
                backlog.queue.append(request)
                self._backlog_requests += 1
                if request.timeout_us:
                    expires = now_us + request.timeout_us
                    backlog.expires_us = min(backlog.expires_us or expires, expires)
                    if not self._next_expiry_us or expires < self._next_expiry_us:
                        self._next_expiry_us = expires
                        self._reaper_cv.notify()
                return
            if request.sequence_end:
                self._to_slot.pop(key, None)
            slot.queue.append(request)
            if self._oldest:
                if not slot.in_flight:
                    issue = slot
            else:
                self._cvs[slot.instance].notify()
            if issue is not None:
                self._issue_next(issue)

    def _conflict(self, key) -> None:
        """A START for a sequence that has not ended: the old one is cut short (Triton's
        warning, throttled)."""
        self._conflicts += 1
        now = time.monotonic()
        if now - self._conflicts_logged_at >= _WARN_PERIOD_S:
            self._conflicts_logged_at = now
            _log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did "
                "not end before this sequence start. Previous sequence will be "
                "terminated early. (%d such starts so far)",
                sequence_label(key),
                self.model_name,
                self._conflicts,
            )

    def take_direct(self, request: InferRequest) -> None:
        return None

    def set_part_rows(self, part_rows) -> bool:
        return False

    # ---------------------------------------------------------------- slots (lock held)
    def _prepare(self, request: InferRequest, slot: _Slot) -> None:
        """Controls and implicit state of a request leaving its slot for execution."""
        self._controls.apply(request, ready=True)
        request.sequence_slot = slot
        if self._sb.states:
            if request.sequence_start or slot.states is None:
                slot.states = SequenceStates(self._sb.states, self._initial, self._listed)
            slot.states.attach(request)

    def _release_slot(self, slot: _Slot) -> None:
        """The slot's sequence ended: hand the slot to the oldest backlogged sequence, or free
        it (Triton's ReleaseSequenceSlot)."""
        leftovers = [r for r in slot.queue if r is not FORCE_END]
        slot.queue.clear()
        slot.sequence = None
        slot.states = None
        for request in leftovers:  # never expected: nothing follows an END
            self._reject_later(
                request,
                TritonRosError(
                    StatusCode.CANCELLED,
                    f"sequence {sequence_label(request.sequence_id)} of model "
                    f"'{self.model_name}' ended before this request ran",
                ),
            )
        if slot.dead:
            return
        while self._backlogs:
            backlog = self._backlogs.popleft()
            if not backlog.queue:
                continue
            last = backlog.queue[-1]
            key = last.sequence_id
            if self._to_backlog.get(key) is backlog:
                del self._to_backlog[key]
            if not last.sequence_end:
                self._to_slot[key] = slot
            self._backlog_requests -= len(backlog.queue)
            slot.sequence = key
            slot.queue.extend(backlog.queue)
            if not self._oldest:
                self._cvs[slot.instance].notify()
            return
        heapq.heappush(self._ready, (slot.index, slot.instance))

    def _issue_next(self, slot: _Slot) -> None:
        """Oldest: send the slot's next request to its instance's dynamic batcher, unless one
        of the slot is there already (Triton's CompleteAndNext)."""
        while not slot.in_flight and slot.queue:
            request = slot.queue.popleft()
            if request is FORCE_END:
                self._release_slot(slot)
                continue
            self._prepare(request, slot)
            state_shapes = slot.states.shapes() if slot.states is not None else ()
            if state_shapes:
                request.shape_key = request.shape_key + (("__state__", state_shapes),)
            slot.in_flight = True
            if request.sequence_end:
                self._release_slot(slot)
            try:
                self._dynamic[slot.instance].enqueue(request, keep_queue_start=True)
            except TritonRosError as exc:  # the batcher stopped
                slot.in_flight = False
                self._reject_later(request, exc)

    def _reject_later(self, request: InferRequest, error: TritonRosError) -> None:
        # Answered on a thread of its own: the caller holds the lock, and the request's
        # callbacks may call back into the server.
        threading.Thread(
            target=self._on_reject,
            args=(request, error),
            daemon=True,
            name=f"{self.model_name}:sequence-reject",
        ).start()

    # ---------------------------------------------------------------- consumer side
    def next_batch(self, instance: int = 0):
        """Block until instance ``instance`` should execute a batch; return (token, requests,
        None), or None once stopped with nothing left for it."""
        if self._oldest:
            item = self._dynamic[instance].next_batch()
            if item is None:
                return None
            seq, batch, _ = item
            return (instance, seq, batch), batch, None
        return self._next_direct(instance)

    def _next_direct(self, instance: int):
        slots = self._slots[instance]
        cv = self._cvs[instance]
        with cv:
            while True:
                for slot in slots:
                    while slot.queue and slot.queue[0] is FORCE_END:
                        slot.queue.popleft()
                        self._release_slot(slot)
                ready = [s for s in slots if s.queue]
                if not ready:
                    if self._stopping:
                        return None
                    cv.wait(MAX_WAIT_S)
                    continue
                if self._delay_ns and self._min_utilization and not self._stopping:
                    oldest = min(s.queue[0].queue_start_ns for s in ready)
                    waited = time.monotonic_ns() - oldest
                    if (
                        waited <= self._delay_ns
                        and len(ready) / self._slot_count < self._min_utilization
                    ):
                        cv.wait(min(MAX_WAIT_S, (self._delay_ns - waited) / 1e9 + 1e-6))
                        continue
                return (instance, next(self._seq), None), self._direct_batch(ready), None

    def _direct_batch(self, ready: list[_Slot]) -> list[InferRequest]:
        first = ready[0]
        representative = first.queue[0]
        key = self._direct_key(first)
        template: InferRequest | None = None
        batch: list[InferRequest] = []
        for slot in self._slots[first.instance][: ready[-1].index + 1]:
            if not slot.queue or self._direct_key(slot) != key:
                batch.append(None)  # a null request, made once the template is known
                continue
            request = slot.queue.popleft()
            self._prepare(request, slot)
            if template is None:
                template = request
            batch.append(request)
            if request.sequence_end:
                self._release_slot(slot)
        if template is None:  # cannot happen: the first ready slot always joins
            template = representative
        return [r if r is not None else self._null(template) for r in batch]

    def _direct_key(self, slot: _Slot) -> tuple:
        """What must be equal for the head requests of two slots to share a batch: the
        request's shape key and the shapes of the state it will get."""
        request = slot.queue[0]
        if request.sequence_start or slot.states is None:
            return request.shape_key, self._initial_shapes
        return request.shape_key, slot.states.shapes()

    def _null(self, template: InferRequest) -> InferRequest:
        """A not-ready request shaped as ``template``: zeros (empty strings), READY false,
        CORRID 0; executed in its slot's row and answered to no one."""
        inputs = {}
        for name, array in template.inputs.items():
            inputs[name] = (
                np.full(array.shape, b"", dtype=np.object_)
                if array.dtype == np.object_
                else np.zeros_like(array)
            )
        null = InferRequest(
            model_name=template.model_name,
            inputs=inputs,
            model_version=template.model_version,
            requested_outputs=template.requested_outputs,
        )
        null.batch_size = template.batch_size
        null.shape_key = template.shape_key
        null.extra_outputs = template.extra_outputs
        null.null_request = True
        self._controls.apply(null, ready=False)
        return null

    def complete(self, token, deliver: Callable[[], None]) -> None:
        """Deliver a finished batch's responses; with the oldest strategy, then issue each
        sequence's next request."""
        instance, seq, batch = token
        if not self._oldest:
            deliver()
            return

        def run() -> None:
            try:
                deliver()
            finally:
                with self._lock:
                    for request in batch:
                        slot = request.sequence_slot
                        if slot is not None:
                            slot.in_flight = False
                            self._issue_next(slot)

        self._dynamic[instance].complete(seq, run)

    # ---------------------------------------------------------------- idle sequences, timeouts
    def _reap(self) -> None:
        """Release the slot of every sequence idle past max_sequence_idle_microseconds and fail
        backlogged requests whose timeout expired (Triton's ReaperThread)."""
        while True:
            expired: list[InferRequest] = []
            with self._lock:
                if self._stopping:
                    return
                now = _now_us()
                wake = now + self._idle_us
                for key, seen in list(self._last_seen_us.items()):
                    remaining = self._idle_us - (now - seen)
                    if remaining > 0:
                        wake = min(wake, now + remaining + 1)
                        continue
                    slot = self._to_slot.pop(key, None)
                    if slot is not None:
                        del self._last_seen_us[key]
                        self.idle_releases += 1
                        slot.queue.append(FORCE_END)
                        if self._oldest:
                            self._issue_next(slot)
                        else:
                            self._cvs[slot.instance].notify()
                    elif key in self._to_backlog:
                        wake = min(wake, now + _BACKLOG_IDLE_WAIT_US)
                    else:
                        del self._last_seen_us[key]
                if self._next_expiry_us and now >= self._next_expiry_us:
                    expired = self._expire_backlogs(now)
                if self._next_expiry_us:
                    wake = min(wake, self._next_expiry_us)
                if not expired:
                    self._reaper_cv.wait(min(MAX_WAIT_S, max(wake - now, 1000) / 1e6))
            for request in expired:
                self._on_reject(
                    request, unavailable("timeout of the corresponding sequence has been expired")
                )

    def _expire_backlogs(self, now: int) -> list[InferRequest]:
        expired: list[InferRequest] = []
        keep: collections.deque[_Backlog] = collections.deque()
        self._next_expiry_us = 0
        for backlog in self._backlogs:
            if backlog.expires_us and backlog.expires_us <= now:
                expired.extend(backlog.queue)
                self._backlog_requests -= len(backlog.queue)
                if backlog.queue:
                    key = backlog.queue[0].sequence_id
                    if self._to_backlog.get(key) is backlog:
                        del self._to_backlog[key]
                continue
            keep.append(backlog)
            if backlog.expires_us and (
                not self._next_expiry_us or backlog.expires_us < self._next_expiry_us
            ):
                self._next_expiry_us = backlog.expires_us
        self._backlogs = keep
        return expired

    # ---------------------------------------------------------------- lifecycle
    def stop(self, *, drain: bool, error: TritonRosError | None = None) -> None:
        """Refuse new requests. Backlogged ones fail (no slot will free up for them: the
        requests that would end the sequences holding the slots are refused now); requests in
        slots run (drain) or fail with ``error``."""
        failed: list[InferRequest] = []
        with self._lock:
            self._stopping = True
            if error is not None:
                self._stop_error = error
            for backlog in self._backlogs:
                failed.extend(backlog.queue)
            self._backlogs.clear()
            self._to_backlog.clear()
            self._backlog_requests = 0
            if not drain:
                for slots in self._slots:
                    for slot in slots:
                        failed.extend(r for r in slot.queue if r is not FORCE_END)
                        slot.queue.clear()
            for cv in self._cvs:
                cv.notify_all()
            self._reaper_cv.notify_all()
        for batcher in self._dynamic:
            batcher.stop(drain=drain, error=error)
        for request in failed:
            self._on_reject(request, error or StoppingError(STOPPING_MESSAGE))

    def instance_failed(self, instance: int, error: TritonRosError) -> None:
        """Instance ``instance`` takes no more batches: its sequences fail and its slots are
        never handed out again."""
        failed: list[InferRequest] = []
        with self._lock:
            if instance >= len(self._slots):
                return
            for slot in self._slots[instance]:
                slot.dead = True
                failed.extend(r for r in slot.queue if r is not FORCE_END)
                slot.queue.clear()
                if slot.sequence is not None and self._to_slot.get(slot.sequence) is slot:
                    del self._to_slot[slot.sequence]
            self._ready = [(i, n) for i, n in self._ready if n != instance]
            heapq.heapify(self._ready)
        if self._oldest:
            self._dynamic[instance].stop(drain=False, error=error)
        for request in failed:
            self._on_reject(request, error)

    def wake(self) -> None:
        with self._lock:
            for cv in self._cvs:
                cv.notify_all()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def queue_size(self) -> int:
        """Requests waiting: in slots, in the backlog and in the oldest strategy's batchers."""
        with self._lock:
            queued = self._backlog_requests + sum(
                sum(1 for r in s.queue if r is not FORCE_END)
                for slots in self._slots
                for s in slots
            )
        return queued + sum(b.queue_size() for b in self._dynamic)

    def active_sequences(self) -> int:
        """Sequences holding a slot (Triton's InflightInferenceCount)."""
        with self._lock:
            return len(self._to_slot)

    @property
    def batching(self) -> bool:
        return self._batching

    @property
    def preserves_ordering(self) -> bool:
        return self._oldest and self._sb.preserve_ordering

    @property
    def allows_direct(self) -> bool:
        return False
