"""Ensembles (Triton's ensemble_scheduler/): ``platform: "ensemble"`` with ``ensemble_scheduling``.

An :class:`EnsembleModel` has no instances of its own. Each request gets an
:class:`_EnsembleContext` that holds the ensemble tensors by name; a step starts as soon as every
tensor its ``input_map`` reads is available, by sending a request to the composing model through
the repository manager (``model_version: -1`` is the latest ready version at that moment). So
each composing model keeps its own dynamic batcher, instances and statistics, and the steps of
many ensemble requests batch together there. Nothing blocks: a step's completion (a future
callback on the composing model's thread) stores its outputs and starts whatever became ready.

The first failing step fails the ensemble request with that step's status code and message,
prefixed with ``in ensemble '<name>', `` as in Triton; steps still running are left to finish
and ignored. Statistics are recorded for the ensemble as Triton does: success/fail and request
time per ensemble request, queue time until the first step starts, compute times summed over
the steps, one "execution" per request. Each composing model records its own as usual.
Every step gets the ensemble request's sequence (correlation ID, START, END), so a stateful
composing model keeps its sequences; a decoupled composing model is refused at load
(UNSUPPORTED).

At load, :func:`validate_ensemble` checks the steps against the composing models' configurations
(ValidateEnsembleConfig); the graph on its own is checked with the configuration
(model_config._validate_ensemble_graph).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .datatypes import protocol_to_config
from .errors import TritonRosError, as_triton_error, internal, invalid_arg, unavailable, unsupported
from .infer_request import InferRequest, InferResponse, RequestedOutput
from .model import ModelBase
from .model_config import WILDCARD_DIM, ModelConfig, TensorConfig

_log = logging.getLogger("triton_ros.ensemble")


@dataclass(frozen=True)
class _Step:
    index: int
    model_name: str
    model_version: int
    inputs: tuple[tuple[str, str], ...]  # (composing model input, ensemble tensor)
    outputs: tuple[tuple[str, str], ...]  # (composing model output, ensemble tensor)


class EnsembleModel(ModelBase):
    """A loaded ensemble version."""

    def __init__(self, config: ModelConfig, *, version: int, model_path: Path, manager) -> None:
        super().__init__(config, version=version, model_path=model_path)
        self.manager = manager
        self.steps = tuple(
            _Step(
                i,
                s.model_name,
                s.model_version,
                tuple(sorted(s.input_map.items())),
                tuple(sorted(s.output_map.items())),
            )
            for i, s in enumerate(config.ensemble_steps)
        )
        self._stopping = False
        self._contexts: set[_EnsembleContext] = set()
        self._idle = threading.Condition()

    # ---------------------------------------------------------------- lifecycle
    def load(self) -> None:
        validate_ensemble(self.config, self._composing_config)
        self._complete_labels()

    def _composing_model(self, step: _Step) -> ModelBase:
        try:
            return self.manager.get_model(step.model_name, step.model_version)
        except TritonRosError as exc:
            raise invalid_arg(
                f"ensemble '{self.name}' depends on '{step.model_name}' which has "
                f"no loaded version: {exc.message}"
            ) from None

    def _composing_config(self, step: _Step) -> ModelConfig:
        return self._composing_model(step).config

    def missing_steps(self) -> list[str]:
        """The composing models this ensemble cannot reach now (a step's model or the version
        it names has no ready version, e.g. it was unloaded after the ensemble loaded), each as
        ``'name'`` or ``'name' version N``; in a nested ensemble, its own missing steps too. The
        ensemble itself stays READY, as its requests fail at that step (NOT_FOUND), so that
        whoever reports its health (the ROS node's diagnostics) can say why it cannot serve."""
        missing: list[str] = []
        for step in self.steps:
            what = f"'{step.model_name}'" + (
                f" version {step.model_version}" if step.model_version >= 0 else ""
            )
            try:
                model = self.manager.get_model(step.model_name, step.model_version)
            except TritonRosError:
                missing.append(what)
                continue
            inner = getattr(model, "missing_steps", None)
            if inner is not None and model is not self:
                missing.extend(f"{m} (a step of {what})" for m in inner())
        return list(dict.fromkeys(missing))

    def _complete_labels(self) -> None:
        """An output without a label_filename of its own takes the labels of the step output
        that produces it, as Triton completes an ensemble's labels from its composing models at
        load (those were read, confined to their model's folder, when they loaded)."""
        outputs = {t.name for t in self.config.outputs}
        for step in self.steps:
            for model_output, tensor in step.outputs:
                if tensor in outputs and tensor not in self.labels:
                    labels = self._composing_model(step).labels.get(model_output)
                    if labels:
                        self.labels[tensor] = list(labels)

    def unload(self, *, drain: bool = True, timeout: float | None = None) -> None:
        self._stopping = True
        if drain:
            with self._idle:
                self._idle.wait_for(lambda: self.pending_request_count() == 0, timeout=timeout)
        with self._idle:
            left = list(self._contexts)
        for context in left:
            context.fail(
                unavailable(f"ensemble '{self.name}' was unloaded before the request completed")
            )

    # ---------------------------------------------------------------- requests
    @property
    def stopping(self) -> bool:
        return self._stopping

    def _schedule(self, request: InferRequest) -> None:
        context = _EnsembleContext(self, request)
        with self._idle:
            self._contexts.add(context)
        context.start()

    def _finished(self, context: "_EnsembleContext") -> None:
        with self._idle:
            self._contexts.discard(context)
        self._done()
        with self._idle:
            self._idle.notify_all()


class _EnsembleContext:
    """The state of one ensemble request (Triton's EnsembleContext)."""

    def __init__(self, model: EnsembleModel, request: InferRequest) -> None:
        self.model = model
        self.request = request
        self.tensors: dict[str, np.ndarray] = dict(request.inputs)
        # Optional ensemble inputs the client left out count as available-but-absent.
        self.ready: set[str] = {t.name for t in model.config.inputs}
        self.waiting: list[_Step] = list(model.steps)
        self.running = 0
        self.finished = False
        self.problems: list[str] = []  # outputs a step did not produce
        self.compute = [0, 0, 0]
        # The running steps' requests, by their future. The future's done-callback must not hold
        # the request (the request holds the future: a cycle that only the garbage collector
        # freed, with this context, its tensors and the client's response in it).
        self.launched: dict[Future, InferRequest] = {}
        self.lock = threading.Lock()

    def start(self) -> None:
        # Triton's ensemble "queue" is only the hand-over to its scheduler; the steps' own
        # queueing shows in the composing models' statistics.
        self.request.queue_start_ns = self.request.compute_start_ns = time.monotonic_ns()
        self._advance()

    def _advance(self) -> None:
        with self.lock:
            if self.finished:
                return
            launch = [s for s in self.waiting if all(t in self.ready for _, t in s.inputs)]
            self.waiting = [s for s in self.waiting if s not in launch]
            self.running += len(launch)
            done = self.running == 0
        if done:
            self._complete()
            return
        for step in launch:
            self._launch(step)

    def _launch(self, step: _Step) -> None:
        request = self.request
        sub = InferRequest(
            model_name=step.model_name,
            inputs={name: self.tensors[t] for name, t in step.inputs if t in self.tensors},
            model_version=step.model_version,
            id=request.id,
            requested_outputs=tuple(RequestedOutput(name) for name, _ in step.outputs),
            priority=request.priority,
            timeout_us=request.timeout_us,
            parameters=dict(request.parameters),
            # A stateful step sees the ensemble request's sequence, as in Triton.
            sequence_id=request.sequence_id,
            sequence_start=request.sequence_start,
            sequence_end=request.sequence_end,
        )
        if request.trace is not None:  # a step of a traced request: a child trace
            sub.trace = request.trace.spawn_child()
        future = self.model.manager.infer(sub)
        with self.lock:
            self.launched[future] = sub
        future.add_done_callback(lambda f: self._step_done(step, f))

    def _step_done(self, step: _Step, future: Future) -> None:
        with self.lock:
            sub = self.launched.pop(future)
        error = future.exception()
        if error is not None:
            error = as_triton_error(error)
            self.fail(
                TritonRosError(error.code, f"in ensemble '{self.model.name}', {error.message}")
            )
            return
        response: InferResponse = future.result()
        with self.lock:
            if self.finished:
                return
            self.compute[0] += sub.compute_input_ns
            self.compute[1] += sub.compute_infer_ns
            self.compute[2] += sub.compute_output_ns
            for name, tensor in step.outputs:
                array = response.outputs.get(name)
                if array is None:
                    self.problems.append(
                        f"model '{step.model_name}' did not produce output "
                        f"'{name}' (ensemble tensor '{tensor}')"
                    )
                    continue
                self.tensors[tensor] = array
                self.ready.add(tensor)
            self.running -= 1
        self._advance()

    def _complete(self) -> None:
        """No step is running and none can start: answer with the requested outputs."""
        model, request = self.model, self.request
        outputs: dict[str, np.ndarray] = {}
        missing = []
        for name in request.output_names(model.config):
            array = self.tensors.get(name)
            if array is None:
                missing.append(name)
            else:
                outputs[name] = array
        if missing:
            detail = "; ".join(self.problems) or f"output(s) {', '.join(missing)} never written"
            self.fail(
                internal(
                    f"in ensemble '{model.name}', unexpected deadlock, at least one "
                    f"output is not set while no more ensemble steps can be made: "
                    f"{detail}"
                )
            )
            return
        with self.lock:
            if self.finished:
                return
            self.finished = True
        now = time.monotonic_ns()
        compute_input, compute_infer, compute_output = self.compute
        request.compute_input_ns, request.compute_infer_ns, request.compute_output_ns = self.compute
        model.stats.record_success(
            request_ns=now - request.arrival_ns,
            queue_ns=request.compute_start_ns - request.queue_start_ns,
            compute_input_ns=compute_input,
            compute_infer_ns=compute_infer,
            compute_output_ns=compute_output,
        )
        model.stats.record_execution(
            batch_size=request.batch_size,
            compute_input_ns=compute_input,
            compute_infer_ns=compute_infer,
            compute_output_ns=compute_output,
        )
        request.set_response(InferResponse(model.name, model.version, request.id, outputs))
        model._finished(self)

    def fail(self, error: TritonRosError) -> None:
        with self.lock:
            if self.finished:
                return
            self.finished = True
        self.model.stats.record_failure(
            request_ns=time.monotonic_ns() - self.request.arrival_ns, reason="OTHER"
        )
        self.request.set_error(error)
        self.model._finished(self)


# --------------------------------------------------------------------------------------------
# Load-time validation against the composing models (ValidateEnsembleConfig)
# --------------------------------------------------------------------------------------------


@dataclass
class _TensorNode:
    model: str
    datatype: str  # protocol name
    dims: tuple[int, ...]
    batching: bool

    @property
    def full_dims(self) -> tuple[int, ...]:
        return ((WILDCARD_DIM,) if self.batching else ()) + self.dims


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or WILDCARD_DIM in (x, y) for x, y in zip(a, b))


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _check_consistent(ensemble: str, tensor: str, known: _TensorNode, new: _TensorNode) -> None:
    prefix = f"in ensemble {ensemble}, ensemble tensor {tensor}: "
    if known.datatype != new.datatype:
        raise invalid_arg(
            prefix + f"inconsistent data type: {protocol_to_config(known.datatype)} "
            f"is inferred from model {known.model} while "
            f"{protocol_to_config(new.datatype)} is inferred from model {new.model}"
        )
    # A tensor shared by a batching and a non-batching model compares with the batch dimension.
    if not _dims_match(known.dims, new.dims) and not _dims_match(known.full_dims, new.full_dims):
        raise invalid_arg(
            prefix + f"inconsistent shape: {_dims_text(known.full_dims)} is inferred "
            f"from model {known.model} while {_dims_text(new.full_dims)} is "
            f"inferred from model {new.model}"
        )


def _node(model: str, tensor: TensorConfig, batching: bool) -> _TensorNode:
    dims = tensor.reshape if tensor.reshape is not None else tensor.dims
    return _TensorNode(model, tensor.datatype, tuple(dims), batching)


def validate_ensemble(config: ModelConfig, composing: Callable[[_Step], ModelConfig]) -> None:
    """Check every step's mapping, batch size, data types and shapes against the composing
    models' (completed) configurations, with Triton's messages."""
    name = config.name
    batching = config.max_batch_size > 0
    nodes: dict[str, _TensorNode] = {}
    for tensor in (*config.inputs, *config.outputs):
        nodes.setdefault(tensor.name, _node(name, tensor, batching))
    steps = [
        _Step(
            i,
            s.model_name,
            s.model_version,
            tuple(s.input_map.items()),
            tuple(s.output_map.items()),
        )
        for i, s in enumerate(config.ensemble_steps)
    ]
    for step in steps:
        step_config = composing(step)
        model = step.model_name
        if step_config.decoupled:
            raise unsupported(
                f"ensemble {name}: step model {model} uses the decoupled "
                f"transaction policy, which triton_ros does not run inside an "
                f"ensemble"
            )
        if 0 < step_config.max_batch_size < config.max_batch_size:
            raise invalid_arg(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, "
                f"but it contains model {model} which only allows maximum batch "
                f"size to be {step_config.max_batch_size}"
            )
        step_batching = step_config.max_batch_size > 0
        inputs = {t.name: t for t in step_config.inputs}
        for model_input, tensor in step.inputs:
            if model_input not in inputs:
                raise invalid_arg(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to "
                    f"non-existing input {model_input} in model {model}"
                )
        mapped = {model_input for model_input, _ in step.inputs}
        for tensor_config in step_config.inputs:
            if tensor_config.name not in mapped and not tensor_config.optional:
                raise invalid_arg(
                    f"in ensemble {name}, input {tensor_config.name} in model "
                    f"{model} is not mapped to any ensemble tensors"
                )
        for model_input, tensor in step.inputs:
            new = _node(model, inputs[model_input], step_batching)
            if tensor in nodes:
                _check_consistent(name, tensor, nodes[tensor], new)
            else:
                nodes[tensor] = new
        outputs = {t.name: t for t in step_config.outputs}
        for model_output, tensor in step.outputs:
            if model_output not in outputs:
                raise invalid_arg(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from "
                    f"non-existing output {model_output} in model {model}"
                )
            new = _node(model, outputs[model_output], step_batching)
            if tensor in nodes:
                _check_consistent(name, tensor, nodes[tensor], new)
            else:
                nodes[tensor] = new
