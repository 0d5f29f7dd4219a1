"""One loaded version of a model (Triton's ``Model``/``TritonModel`` and its instance threads).

A :class:`Model` owns the version's configuration, backend state, statistics, its scheduler and
one thread per model instance. Each thread asks the scheduler for a batch whenever it is free,
executes it on its own backend instance, records statistics and answers every request of the
batch exactly once: with its own response, or with an error. A failure of one batch never stops
the thread, and stopping the model answers every request still waiting.

Direct execution (beyond Triton, same semantics): where the scheduler would hand a request alone
and at once to an idle instance (no batching delay, nothing queued), and the model's executions
are short (ONNX Runtime on the CPU, a mean under :data:`DIRECT_EXECUTION_NS`) and the request
small, the thread that submits it executes it on that instance, holding the instance's execution
lock as the instance's own thread does for every batch. Its future is answered before ``enqueue``
returns. For a model like Triton's ``simple`` the two thread hand-offs (to the instance thread
and back to the frontend's event loop) cost more than the execution itself.
"""

from __future__ import annotations

import abc
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .backend_model import (
    STREAMED,
    BackendModel,
    BackendModelInstance,
    BatchedTensorInstance,
    ExecuteResult,
    backend_class,
)
from .cache_manager import LocalCache, request_cache_key
from .dynamic_batch_scheduler import DynamicBatchScheduler, SentBatch, tighten_timer_slack
from .errors import (
    EnqueueRefused,
    StoppingError,
    TritonRosError,
    as_triton_error,
    internal,
    invalid_arg,
    unavailable,
    unsupported,
)
from .infer_request import InferRequest, InferResponse, normalize_request
from .infer_stats import ModelStats
from .model_config import ModelConfig, check_label_filename
from .model_warmup import run_warmup
from .sequence_batch_scheduler import SequenceBatchScheduler

_log = logging.getLogger("triton_ros.model")


#: Direct execution (Model._execute_directly): a model whose executions take less than this on
#: average may run a request on the thread that submits it, when an instance is idle and nothing
#: is queued: such a request spends no longer on the caller than the two thread hand-offs it saves
#: (to the instance thread and back to the caller's event loop) would have cost. The mean is of
#: wall times, which a slow spell of the host stretches as much as the hand-offs.
DIRECT_EXECUTION_NS = 250_000
#: ... and only a request of at most this many input bytes (its execution is then about as
#: short as the mean says).
DIRECT_INPUT_BYTES = 64 << 10
# Weight of one execution in the running mean of execution times.
_EXEC_MEAN_WEIGHT = 0.125
# Set on a thread while it executes a request directly: a request submitted from within that
# execution (an ensemble's next step, answered by its callbacks) is queued, so direct executions
# never nest and the stack stays flat however many steps an ensemble chains.
_on_caller = threading.local()

#: A label file is one short line per class; anything this large is not one.
MAX_LABEL_FILE_BYTES = 64 * 1024 * 1024


def load_labels(model_path: Path, config: ModelConfig) -> dict[str, list[str]]:
    """Labels of outputs with ``label_filename`` (one label per line, as Triton reads them)."""
    labels: dict[str, list[str]] = {}
    root = model_path.resolve()
    for out in config.outputs:
        if out.label_filename:
            check_label_filename(config.name, out.name, out.label_filename)
            # Resolved, so that a symbolic link cannot lead outside the model's folder either.
            path = (model_path / out.label_filename).resolve()
            if root not in path.parents:
                raise invalid_arg(
                    f"model '{config.name}': label_filename "
                    f"'{out.label_filename}' of output '{out.name}' is outside "
                    f"the model's folder"
                )
            try:
                if not path.is_file():
                    raise invalid_arg(
                        f"model '{config.name}': label file "
                        f"'{out.label_filename}' of output '{out.name}' is not a "
                        f"regular file"
                    )
                if path.stat().st_size > MAX_LABEL_FILE_BYTES:
                    raise invalid_arg(
                        f"model '{config.name}': label file "
                        f"'{out.label_filename}' is larger than "
                        f"{MAX_LABEL_FILE_BYTES} bytes"
                    )
                labels[out.name] = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise internal(
                    f"model '{config.name}': cannot read label file "
                    f"'{out.label_filename}': "
                    f"{exc.strerror if isinstance(exc, OSError) else 'not UTF-8 text'}"
                ) from None
    return labels


def classify(
    array: np.ndarray, class_count: int, labels: list[str] | None, batched: bool
) -> np.ndarray:
    """Triton's classification extension: top-k "value:index[:label]" strings per batch item."""
    rows = array.reshape(array.shape[0], -1) if batched else array.reshape(1, -1)
    k = min(class_count, rows.shape[1])
    out = np.empty((rows.shape[0], k), dtype=np.object_)
    for i, row in enumerate(rows):
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for j, idx in enumerate(order):
            text = f"{float(row[idx]):f}:{int(idx)}"
            if labels is not None and idx < len(labels):
                text += f":{labels[idx]}"
            out[i, j] = text.encode("utf-8")
    return out if batched else out.reshape(k)


class ModelStopping(StoppingError):
    """The version is being unloaded or replaced; a newer lookup may find its successor."""

    def __init__(self, name: str, version: int) -> None:
        super().__init__(f"model '{name}' version {version} is unloading")


class ModelBase(abc.ABC):
    """A loaded model version as the rest of the core sees it (Triton's ``Model``).

    Subclasses decide how a validated request is scheduled: :class:`Model` queues it for its
    backend instances, ``ensemble_scheduler.EnsembleModel`` runs it through composing models.
    The repository manager, the server and every frontend use only this interface.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        version: int,
        model_path: Path,
        response_cache: LocalCache | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.model_path = model_path
        self.version_path = model_path / str(version)
        self.stats = ModelStats(config.name, version)
        # Set by the repository manager: called with a reason when the version can no longer
        # serve (every instance failed), so that it is reported UNAVAILABLE.
        self.on_unavailable: Callable[[str], None] | None = None
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        # Triton caches only when both the server (--cache-config) and the model enable it.
        self.response_cache = response_cache if config.response_cache else None
        self.load_duration_ns = 0
        # Labels by output name (label_filename), as Triton's LabelProvider: an ensemble
        # completes those of outputs without a label file from its steps at load.
        self.labels: dict[str, list[str]] = load_labels(model_path, config)

    @abc.abstractmethod
    def load(self) -> None:
        """Prepare everything needed to serve; raise a TritonRosError on failure."""

    @abc.abstractmethod
    def unload(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stop accepting requests, finish (drain) or fail the pending ones, release resources."""

    @abc.abstractmethod
    def _schedule(self, request: InferRequest) -> None:
        """Start a validated request; its future answers it. Raise only if it was not accepted."""

    @property
    @abc.abstractmethod
    def stopping(self) -> bool:
        """True once unload began: new requests are refused with ModelStopping."""

    def enqueue(self, request: InferRequest) -> None:
        """Validate and queue a request; its future answers it. Raises on a bad request."""
        if self.stopping:
            raise ModelStopping(self.name, self.version)
        if self.config.decoupled and request.response_sink is None:
            # tritonserver's non-streaming endpoints refuse a decoupled model the same way.
            raise unsupported(
                f"model '{self.name}' uses the decoupled transaction policy: "
                f"its responses need a caller that takes them as they come (a "
                f"gRPC stream, HTTP generate_stream, decoupled BLS)"
            )
        try:
            normalize_request(self.config, request)
        except TritonRosError:
            self.record_rejection(request, reason="OTHER")
            raise
        if self.response_cache is not None and self._answer_from_cache(request):
            return
        with self._in_flight_lock:
            self._in_flight += 1
        request.issued = True
        try:
            self._schedule(request)
        except TritonRosError as exc:
            request.issued = False
            self._done()
            if self.stopping:
                # Unload began after the check above: let the caller look for a successor.
                raise ModelStopping(self.name, self.version) from None
            if not isinstance(exc, EnqueueRefused):
                self.record_rejection(request, reason="REJECTED")
            raise

    @property
    def response_cache_enabled(self) -> bool:
        return self.response_cache is not None

    def _answer_from_cache(self, request: InferRequest) -> bool:
        """Look the request up (Triton's CacheLookUp at enqueue); answer it on a hit. On a miss
        the key stays on the request so that its computed response is inserted later."""
        start = time.monotonic_ns()
        request.queue_start_ns = start
        key = request_cache_key(self.name, self.version, request)
        entry = self.response_cache.lookup(key)
        request.cache_lookup_ns = time.monotonic_ns() - start
        if entry is None:
            request.cache_key = key
            return False
        response = InferResponse(
            self.name, self.version, request.id, dict(entry.outputs), dict(entry.parameters)
        )
        self.stats.record_cache_hit(
            request_ns=time.monotonic_ns() - request.arrival_ns,
            queue_ns=0,
            cache_hit_ns=request.cache_lookup_ns,
        )
        request.set_response(response)
        return True

    def _insert_into_cache(self, request: InferRequest, response: InferResponse) -> None:
        start = time.monotonic_ns()
        try:
            self.response_cache.insert(request.cache_key, response.outputs, response.parameters)
        except Exception as exc:  # the response is still good: deliver it uncached
            _log.warning("model '%s': cannot cache a response: %s", self.name, exc)
        self.stats.record_cache_miss(
            cache_miss_ns=request.cache_lookup_ns + time.monotonic_ns() - start
        )

    def pending_request_count(self) -> int:
        """Requests accepted and not yet answered (nv_inference_pending_request_count; a
        backend model counts only those still waiting for an instance)."""
        return self.in_flight_count()

    def in_flight_count(self) -> int:
        """Requests queued or executing."""
        with self._in_flight_lock:
            return self._in_flight

    def record_rejection(self, request: InferRequest, reason: str = "OTHER") -> None:
        self.stats.record_failure(
            request_ns=time.monotonic_ns() - request.arrival_ns, reason=reason
        )

    def _done(self, n: int = 1) -> None:
        with self._in_flight_lock:
            self._in_flight -= n


class Model(ModelBase):
    """A servable model version run by a backend: scheduler, instances and statistics.

    ``server`` (the repository manager) is handed to the backend for the calls a model may make
    back into the server (Triton's TRITONBACKEND_ModelServer: BLS requests, model control).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        version: int,
        model_path: Path,
        server: Any = None,
        response_cache: LocalCache | None = None,
    ) -> None:
        super().__init__(
            config, version=version, model_path=model_path, response_cache=response_cache
        )
        self.server = server
        # The sequence batcher for stateful models (sequence_batching), else the dynamic
        # batcher (which also serves a model without batching: one request at a time).
        self.scheduler: DynamicBatchScheduler | SequenceBatchScheduler
        if config.sequence_batching is not None:
            self.scheduler = SequenceBatchScheduler(
                config, model_path=model_path, on_reject=self._reject
            )
        else:
            self.scheduler = DynamicBatchScheduler(config, on_reject=self._reject)
        self.backend: BackendModel | None = None
        self.instances: list[BackendModelInstance] = []
        self._threads: list[threading.Thread] = []
        self._live_threads = 0
        self._unloading = False
        self._thread_fault_logged = False
        # Held while an instance executes: by its own thread, or by a caller executing directly.
        self._exec_locks: dict[BackendModelInstance, threading.Lock] = {}
        self._direct: list[tuple[BackendModelInstance, threading.Lock]] = []
        self._decoupled_lock = threading.Lock()  # a decoupled request's final, once
        # Mean wall time of recent executions (ns): below direct_execution_ns, requests may
        # execute directly.
        self.direct_execution_ns = DIRECT_EXECUTION_NS
        self._exec_ns = float(DIRECT_EXECUTION_NS)

    # ---------------------------------------------------------------- lifecycle
    def load(self) -> None:
        """Create the backend state and every instance, run the warmup samples, then start
        serving. The repository keeps the version LOADING until this returns."""
        start = time.monotonic_ns()
        cls = backend_class(self.config.backend)
        self.backend = cls(
            self.config,
            version=self.version,
            model_path=self.model_path,
            version_path=self.version_path,
        )
        self.backend.server = self.server
        try:
            for group in self.config.instance_groups:
                devices: list[int | None] = list(group.gpus) if group.kind == "KIND_GPU" else [None]
                # Only TensorRT models may name optimization profiles (validated), so only
                # TensorRTModel.create_instance ever receives them.
                extra = (
                    {"profiles": tuple(int(p) for p in group.profiles)} if group.profiles else {}
                )
                for device in devices:
                    for i in range(group.count):
                        suffix = f"_{i}" if device is None else f"_{i}_gpu{device}"
                        instance = self.backend.create_instance(
                            name=f"{group.name}{suffix}", kind=group.kind, device_id=device, **extra
                        )
                        self.instances.append(instance)
                        self._exec_locks[instance] = threading.Lock()
                        if group.passive:
                            continue
                        if not self.scheduler.preserves_ordering:
                            instance.answer_early = self._answer_early
                        if instance.may_run_on_caller and self.scheduler.allows_direct:
                            self._direct.append((instance, self._exec_locks[instance]))
                        thread = threading.Thread(
                            target=self._serve,
                            args=(instance, len(self._threads)),
                            daemon=True,
                            name=f"{self.name}:{self.version}:{instance.name}",
                        )
                        self._threads.append(thread)
            if self.config.warmup:
                run_warmup(
                    self.config,
                    version=self.version,
                    model_path=self.model_path,
                    instances=self.instances,
                )
            self._hand_out_parts()
            self.scheduler.set_instances(len(self._threads))
        except BaseException:
            self._close_backend()
            raise
        self._live_threads = len(self._threads)
        for thread in self._threads:
            thread.start()
        self.load_duration_ns = time.monotonic_ns() - start

    def _hand_out_parts(self) -> None:
        """Where every instance runs a batch in parts (ONNX Runtime on the CPU), let the
        scheduler hand out a batch part by part to whichever instance is free, instead of one
        instance running every part in turn while another may idle or start a later batch:
        requests are then served in arrival order across instances, so none waits behind a
        whole batch queued on one instance (the tail of the latency). The batch still counts as
        one execution, once its last part has run, as the batch Triton's batcher formed."""
        instances = self.instances
        if not instances or not all(
            isinstance(i, BatchedTensorInstance)
            and i.kind == "KIND_CPU"
            and type(i) is type(instances[0])
            for i in instances
        ):
            return
        instance = instances[0]
        if instance.rows_per_run(1) is None:  # whole batches whatever the rows
            return

        def part_rows(request: InferRequest) -> int | None:
            # Called on an instance thread under the scheduler's lock: whatever a request holds,
            # it must not stop that thread; a request it cannot read goes whole, and execute
            # reports what is wrong with it.
            try:
                return instance.request_rows_per_run(request.inputs, request)
            except Exception:
                return None

        self.scheduler.set_part_rows(part_rows)

    def unload(self, *, drain: bool = True, timeout: float | None = None) -> None:
        """Stop accepting requests, finish (drain) or fail the queued ones, release resources."""
        self._unloading = True
        self.scheduler.stop(drain=drain)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            # Instances still executing: fail what is left rather than hang the caller.
            self.scheduler.stop(drain=False)
            _log.warning(
                "model '%s' version %d: instances still busy after unload timeout",
                self.name,
                self.version,
            )
            return
        self._close_backend()

    def _close_backend(self) -> None:
        for instance in self.instances:
            try:
                with self._exec_locks[instance]:  # a direct execution still running ends first
                    instance.close()
            except Exception as exc:
                _log.warning("closing instance %s failed: %s", instance.name, exc)
        self.instances = []
        if self.backend is not None:
            try:
                self.backend.close()
            except Exception as exc:
                _log.warning("closing backend of model '%s' failed: %s", self.name, exc)

    # ---------------------------------------------------------------- requests
    @property
    def stopping(self) -> bool:
        return self.scheduler.stopping

    def _schedule(self, request: InferRequest) -> None:
        if (
            self._direct
            and self._exec_ns < self.direct_execution_ns
            and self._execute_directly(request)
        ):
            return
        self.scheduler.enqueue(request)

    def _execute_directly(self, request: InferRequest) -> bool:
        """Execute ``request`` now on the calling thread if the queue would hand it, alone and
        at once, to an idle instance; False (nothing done) otherwise.

        Only for a model whose executions are short (:data:`DIRECT_EXECUTION_NS`) on instances
        that allow it (``may_run_on_caller``), and a small request. The instance is held by its
        execution lock for the time, so it still runs one execution at a time; everything else
        (statistics, response, cache) is what its own thread would have done. What it saves are
        the two thread hand-offs, which cost more than such a model's execution."""
        if getattr(_on_caller, "busy", False):
            return False
        size = 0
        for array in request.inputs.values():
            if array.dtype == object:
                return False
            size += array.nbytes
        if size > DIRECT_INPUT_BYTES:
            return False
        seq = self.scheduler.take_direct(request)
        if seq is None:
            return False
        for instance, lock in self._direct:
            if instance.failure is None and lock.acquire(blocking=False):
                break
        else:  # every instance busy: queue it (its sequence number stays unused, which
            return False  # matters only to preserve_ordering, never admitted here)
        _on_caller.busy = True
        try:
            self._run_locked(instance, lock, seq, [request])
        finally:
            _on_caller.busy = False
        return True

    def pending_request_count(self) -> int:
        """Requests queued and not yet picked up by an instance: Triton's
        nv_inference_pending_request_count ("awaiting execution by a backend")."""
        return self.scheduler.queue_size()

    def _reject(
        self, request: InferRequest, error: TritonRosError, reason: str = "REJECTED"
    ) -> None:
        self._done()
        self.stats.record_failure(
            request_ns=time.monotonic_ns() - request.arrival_ns, reason=reason
        )
        request.set_error(error)

    # ---------------------------------------------------------------- instance threads
    def _serve(self, instance: BackendModelInstance, index: int) -> None:
        """The instance's thread: take a batch whenever free, execute it, answer it.

        It holds no request while it waits for the next batch: a request's tensors and its
        response (tens of MB for a large request) were otherwise kept alive by this frame
        until the next batch came. An instance failure, or a fault of the thread itself (a
        bug, memory running out), ends the loop: the batch it held fails, the instance is
        reported failed (the fault logged once, with its traceback), and the last instance to
        fail makes the version UNAVAILABLE and fails everything queued: never a silent hang."""
        batch: list[InferRequest] | None = None
        try:
            tighten_timer_slack()  # this thread sleeps out the batcher's delays
            lock = self._exec_locks[instance]
            while instance.failure is None:
                item = self.scheduler.next_batch(index)
                if item is None:
                    return
                seq, batch, sent = item
                item = None
                lock.acquire()
                self._run_locked(instance, lock, seq, batch, sent)
                batch = sent = None
        except BaseException as exc:
            instance.failure = f"its thread stopped: {type(exc).__name__}: {exc}"
            if not self._thread_fault_logged:  # the cause once, with its traceback (a fault
                self._thread_fault_logged = True  # of the server, not of a client)
                _log.error(
                    "model '%s' version %d: the thread of instance %s stopped",
                    self.name,
                    self.version,
                    instance.name,
                    exc_info=exc,
                )
            if batch:
                self._fail_unanswered(
                    batch,
                    internal(f"model '{self.name}' instance {instance.name} {instance.failure}"),
                )
        self._instance_failed(instance, index)

    def _run_locked(
        self,
        instance: BackendModelInstance,
        lock: threading.Lock,
        seq: int,
        batch: list[InferRequest],
        sent: SentBatch | None = None,
    ) -> None:
        """Execute ``batch`` on ``instance``, whose execution lock the caller holds, then answer
        it. The lock is released before the answers: a callback of a response that waits on
        this model must not wait on this instance's lock too. Any fault answers the batch's
        requests that are not answered yet, and the caller carries on."""
        try:
            try:
                deliver = self._execute(instance, seq, batch, sent)
            finally:
                lock.release()
            self.scheduler.complete(seq, deliver)
        except BaseException as exc:
            error = as_triton_error(exc)
            _log.error("model '%s' instance %s: %s", self.name, instance.name, error)
            if sent is not None:  # the sent batch's other parts are still counted
                self._record_execution(sent, batch, 0, 0, 0, 0)
            self.scheduler.complete(seq, lambda: self._fail_unanswered(batch, error))

    def _fail_unanswered(self, batch: list[InferRequest], error: TritonRosError) -> None:
        # Counted like every other failure, so statistics and metrics still add up.
        for request in batch:
            if request.null_request:
                continue
            if self.config.decoupled:
                if not request.final_sent and not request.future.done():
                    self.stats.record_failure(
                        request_ns=time.monotonic_ns() - request.arrival_ns, reason="OTHER"
                    )
                    self._decoupled_response(request, error, True)
            elif not request.future.done():
                self._reject(request, error, reason="OTHER")

    def _instance_failed(self, instance: BackendModelInstance, index: int) -> None:
        """An instance that can no longer execute stops taking batches; the others carry on.
        Without any instance left the version cannot serve: fail what waits, report it."""
        _log.error(
            "model '%s' version %d: instance %s stopped: %s",
            self.name,
            self.version,
            instance.name,
            instance.failure,
        )
        with self._in_flight_lock:
            self._live_threads -= 1
            last = self._live_threads == 0
        if self._unloading:
            return
        if not last:
            # The others serve what this one was woken for (its sequences, if any, fail).
            self.scheduler.instance_failed(
                index,
                unavailable(
                    f"model '{self.name}' instance {instance.name} stopped: {instance.failure}"
                ),
            )
            return
        reason = (
            f"every instance of model '{self.name}' version {self.version} failed; last: "
            f"{instance.failure}"
        )
        self.scheduler.stop(drain=False, error=unavailable(reason))
        if self.on_unavailable is not None:
            self.on_unavailable(reason)

    def _execute(
        self,
        instance: BackendModelInstance,
        seq: int,
        batch: list[InferRequest],
        sent: SentBatch | None = None,
    ) -> Callable[[], None]:
        """Execute ``batch`` on ``instance`` and record its statistics (those of the ``sent``
        batch it is a part of, once its last part ran); return the function that answers its
        requests (through ``scheduler.complete``, once the instance is free)."""
        start = time.monotonic_ns()
        for request in batch:
            request.compute_start_ns = start
        if self.config.decoupled:
            for request in batch:
                if not request.null_request:
                    request.response_factory = functools.partial(self._decoupled_response, request)
        try:
            result = instance.execute(batch)
        except Exception as exc:
            result = ExecuteResult(
                [as_triton_error(exc)] * len(batch), 0, time.monotonic_ns() - start
            )
        end = time.monotonic_ns()
        if self._direct:
            # A race between two instance threads loses one sample at worst.
            self._exec_ns += (end - start - self._exec_ns) * _EXEC_MEAN_WEIGHT
        responses = result.responses
        if len(responses) != len(batch):
            error = internal(
                f"model '{self.name}' instance {instance.name} returned "
                f"{len(responses)} responses for {len(batch)} requests"
            )
            responses = [error] * len(batch)

        finished: list[tuple[InferRequest, InferResponse | TritonRosError]] = []
        ok_rows = null_rows = 0
        for request, response in zip(batch, responses):
            if request.null_request:  # a not-ready slot: in the batch, answered to
                null_rows += request.batch_size  # no one (sequence batcher)
                continue
            if request.answered_early:  # answered with its part (_answer_early)
                ok_rows += request.batch_size
                continue
            request.compute_end_ns = end
            if response is STREAMED:
                ok_rows += request.batch_size
            elif isinstance(response, InferResponse):
                try:
                    response = self._finish_response(request, response)
                    ok_rows += request.batch_size
                except TritonRosError as exc:
                    response = exc
            finished.append((request, response))
        self._record_execution(
            sent,
            batch,
            ok_rows,
            result.compute_input_ns,
            result.compute_infer_ns,
            result.compute_output_ns,
            null_rows,
        )

        def deliver() -> None:
            for request, response in finished:
                if response is STREAMED:
                    # Counted as Triton's Python backend counts a decoupled request: when its
                    # execution ends; its responses go, or went, through the factory.
                    self._record_success(
                        request,
                        result.compute_input_ns,
                        result.compute_infer_ns,
                        result.compute_output_ns,
                    )
                elif isinstance(response, InferResponse):
                    if self.config.decoupled:  # a backend that answers in one response
                        self._record_success(
                            request,
                            result.compute_input_ns,
                            result.compute_infer_ns,
                            result.compute_output_ns,
                        )
                        self._decoupled_response(request, response, True)
                        continue
                    self._answer(
                        request,
                        response,
                        result.compute_input_ns,
                        result.compute_infer_ns,
                        result.compute_output_ns,
                    )
                elif self.config.decoupled and request.final_sent:
                    # Failed after it had finished: it succeeded as far as its client knows.
                    self._record_success(
                        request,
                        result.compute_input_ns,
                        result.compute_infer_ns,
                        result.compute_output_ns,
                    )
                elif self.config.decoupled:
                    self.stats.record_failure(
                        request_ns=time.monotonic_ns() - request.arrival_ns, reason="BACKEND"
                    )
                    self._decoupled_response(request, response, True)
                else:
                    request.compute_input_ns = result.compute_input_ns
                    request.compute_infer_ns = result.compute_infer_ns
                    request.compute_output_ns = result.compute_output_ns
                    self.stats.record_failure(
                        request_ns=time.monotonic_ns() - request.arrival_ns, reason="BACKEND"
                    )
                    request.set_error(response)
                    self._done()

        return deliver

    def _record_execution(
        self,
        sent: SentBatch | None,
        batch: list[InferRequest],
        ok_rows: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        null_rows: int = 0,
    ) -> None:
        """Count an execution of ``ok_rows`` answered rows: ``batch``'s own, or, for a part of
        a ``sent`` batch, the whole batch's once its last part has run. ``null_rows`` (the
        sequence batcher's not-ready slots) count in the executed batch's size, not as
        inferences, as in Triton."""
        totals: tuple[int, int, int, int] | None = (ok_rows, input_ns, infer_ns, output_ns)
        if sent is not None:
            totals = sent.part_done(sum(r.batch_size for r in batch), *totals)
        if totals is not None and totals[0]:
            self.stats.record_execution(
                batch_size=totals[0] + null_rows,
                compute_input_ns=totals[1],
                compute_infer_ns=totals[2],
                compute_output_ns=totals[3],
                inference_count=totals[0],
            )

    def _record_success(
        self, request: InferRequest, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        request.compute_input_ns = input_ns
        request.compute_infer_ns = infer_ns
        request.compute_output_ns = output_ns
        self.stats.record_success(
            request_ns=time.monotonic_ns() - request.arrival_ns,
            queue_ns=request.compute_start_ns - request.queue_start_ns,
            compute_input_ns=input_ns,
            compute_infer_ns=infer_ns,
            compute_output_ns=output_ns,
        )

    def _decoupled_response(
        self, request: InferRequest, response: InferResponse | TritonRosError | None, final: bool
    ) -> None:
        """A response of a decoupled model's request (its response factory; any thread, in
        the order the backend sends them): finished as every response is, then handed to the
        request's sink. After the final one the request is done; later ones are dropped."""
        if isinstance(response, InferResponse):
            try:
                response = self._finish_response(request, response)
            except TritonRosError as exc:
                response = exc
        with self._decoupled_lock:
            if request.final_sent or request.future.done():
                return
            try:
                request.stream_response(response, final)
            except Exception as exc:  # a sink's fault: the request still ends
                _log.error(
                    "model '%s': delivering a response of request '%s' failed: %s",
                    self.name,
                    request.id,
                    as_triton_error(exc),
                )
                if final and not request.future.done():
                    request.response_sink = request.response_factory = None
                    request.future.set_result(None)
            if final:
                self._done()

    def _answer(
        self,
        request: InferRequest,
        response: InferResponse,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
    ) -> None:
        """Answer ``request`` (its response finished): cache, statistics, the response."""
        request.compute_input_ns = input_ns
        request.compute_infer_ns = infer_ns
        request.compute_output_ns = output_ns
        if request.cache_key is not None:
            self._insert_into_cache(request, response)
        self.stats.record_success(
            request_ns=time.monotonic_ns() - request.arrival_ns,
            queue_ns=request.compute_start_ns - request.queue_start_ns,
            compute_input_ns=input_ns,
            compute_infer_ns=infer_ns,
            compute_output_ns=output_ns,
        )
        request.set_response(response)
        self._done()

    def _answer_early(
        self,
        pairs: list[tuple[InferRequest, InferResponse]],
        input_ns: int,
        infer_ns: int,
        output_ns: int,
    ) -> None:
        """Answer the requests of a finished part of a batch now, on the instance's thread,
        with the batch's times so far (the instance's ``answer_early``; never under
        preserve_ordering). A request whose response cannot be finished is left to the batch,
        which answers it as it answers every other: with the error, or, for a fault of ours,
        logged and failed by :meth:`_run_locked`."""
        end = time.monotonic_ns()
        for request, response in pairs:
            if request.null_request:
                continue
            try:
                response = self._finish_response(request, response)
            except Exception:
                continue
            request.compute_end_ns = end
            self._answer(request, response, input_ns, infer_ns, output_ns)
            request.answered_early = True  # only once answered: never skipped unanswered

    def _finish_response(self, request: InferRequest, response: InferResponse) -> InferResponse:
        response.model_name = self.name
        response.model_version = self.version
        response.id = request.id
        if request.sequence_states is not None:  # implicit state: kept for the next request
            request.sequence_states.capture(request, response)
        if request.requested_outputs is not None:
            # Replaced only once every one is classified: a response that fails here is left
            # as it was, so finishing it again (_answer_early leaves it to the batch) sees the
            # same outputs and fails the same way.
            classified: dict[str, np.ndarray] = {}
            for wanted in request.requested_outputs:
                if wanted.class_count > 0:
                    array = response.outputs.get(wanted.name)
                    if array is None:
                        raise internal(
                            f"model '{self.name}' did not produce output '{wanted.name}'"
                        )
                    classified[wanted.name] = classify(
                        array,
                        wanted.class_count,
                        self.labels.get(wanted.name),
                        self.config.max_batch_size > 0,
                    )
            response.outputs.update(classified)
        return response
