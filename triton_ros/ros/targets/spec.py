"""The seam between a binding and the model it feeds: :class:`ModelTarget`.

A binding (:mod:`~triton_ros.ros.binding`) talks to "the model" only through this small
interface, the same for every model kind the core serves (ONNX Runtime, TensorRT, Python models
and ensembles) and for a model served elsewhere (a remote Triton server). Planning (which input
gets the image, how to preprocess it, which outputs to request and how to decode them) and
running (one asynchronous request per frame) need exactly this:

``target.name`` / ``target.version``
    The model name and the version asked for (-1: the latest ready version), as configured.
``target.location``
    Where the model runs, for log lines and diagnostics: ``"local"`` for the embedded core, else
    e.g. the remote server's URL.
``target.describe() -> ModelSpec``
    The version that serves now: its effective configuration (inputs and outputs with data type,
    dims without the batch dimension, format; ``max_batch_size``) and the labels of each output
    (an empty tuple where the output, or the model kind, has none: the core's, read once when the
    version loaded, an ensemble's completed from its steps). It returns *the same object* for as
    long as the same loaded version serves, and a new one once another version (or a reloaded
    one) serves: the binding re-plans when the object changes. Raises
    :class:`~triton_ros.core.errors.TritonRosError`: ``UNAVAILABLE`` when the model is known but
    not ready (loading, unloaded, failed) and ``NOT_FOUND`` when there is no such model; the
    message says why.
``target.state() -> TargetState``
    Readiness with the state's name and reason, for ``/diagnostics`` (called about once per
    diagnostics period; may be slower than ``describe``).
``target.infer(inputs, outputs=..., priority=..., timeout_us=..., sequence=..., on_response=...) ->
InferFuture``
    Queue one request (numpy arrays by input name, with the batch dimension when
    ``max_batch_size > 0``; ``outputs``: names to return, ``None`` for all). Never raises: the
    returned :class:`InferFuture` (a :class:`concurrent.futures.Future`, with the request's
    ``trace`` where it was sampled) gives a :class:`TargetResult` (``model_name``,
    ``model_version``, ``outputs`` by name, shaped as the model declares them: with the batch
    dimension when ``max_batch_size > 0``) or fails with a
    ``TritonRosError`` whose :class:`~triton_ros.core.errors.StatusCode` classifies the failure
    (``UNAVAILABLE``: the model is not serving; ``INVALID_ARG``: the request does not fit it;
    ``INTERNAL`` / ``UNKNOWN``: the model itself failed, e.g. a Python model's TritonError).
    A failure of any other type is treated as ``INTERNAL``. ``sequence``: a stateful model's
    (correlation ID, START, END), or None. ``on_response``: a decoupled model's
    ``on_response(response, final)``, called with each response as it comes (a
    ``TritonRosError`` for an error response, None for the final flag alone).
``target.can_hedge() -> bool``
    Whether a frame sent now, beside one stalled on a hung endpoint, would find another endpoint
    that moves (a remote target of two endpoints or more; the local target never hedges).
``target.close()``
    Release what the target holds (a remote client's connections); called once when the node
    stops, after the last frame finished. The local target holds nothing.

:class:`ModelSpec` and :class:`TensorSpec` are plain frozen dataclasses, free of the core's
internal types, so a remote implementation builds them from a server's model configuration and
metadata (:func:`spec_from_config` builds one from a core ``ModelConfig``, which
``core.model_config`` can also parse from a remote ``ModelConfig`` protobuf). The KServe protocol
carries a ``label_filename`` but not the file's contents, so a remote target leaves ``labels``
empty unless it knows them; the binding's ``class_names`` then name the classes.

:class:`~triton_ros.ros.targets.local.LocalModelTarget` implements the interface over the embedded
:class:`~triton_ros.core.server.InferenceServer`, :class:`~triton_ros.ros.targets.remote.model.
RemoteModel` over remote KServe v2 endpoints; the node picks one per binding
(:func:`triton_ros.ros.inference_node.model_target_for`). This module imports neither.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ...core.model_config import CONTROL_CORRID, ModelConfig

READY = "READY"


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model as a client sees it."""

    name: str
    datatype: str  # KServe name: "FP32", "UINT8", "BYTES", ...
    dims: tuple[int, ...]  # without the batch dimension when max_batch_size > 0; -1: any
    format: str = "FORMAT_NONE"  # inputs: FORMAT_NCHW, FORMAT_NHWC or FORMAT_NONE
    optional: bool = False  # inputs: may be left out of a request


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """The model version that serves a binding now: what planning needs, for every model kind.

    Compared by identity: a target returns the same object while the same version serves.
    """

    name: str
    version: int
    platform: str  # "onnxruntime_onnx", "ensemble", "python", ...
    max_batch_size: int  # 0: no batch dimension in requests
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    # Labels by output name (label_filename); outputs without labels are absent.
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Stateful (sequence_batching, or an ensemble with a stateful step): each source of a
    # binding is one sequence; ``sequence_idle_us``: the shortest max_sequence_idle of them.
    stateful: bool = False
    sequence_idle_us: int = 0
    string_sequence_ids: bool = False  # a CORRID control of TYPE_STRING: IDs go as strings
    decoupled: bool = False  # model_transaction_policy.decoupled

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((t for t in self.outputs if t.name == name), None)

    def labels_of(self, output: str) -> tuple[str, ...]:
        """The output's labels; () when it has none (or the model kind has no labels)."""
        return tuple(self.labels.get(output, ()))


@dataclass(frozen=True)
class TargetState:
    """Readiness of a target, for diagnostics."""

    ready: bool
    state: str  # READY, LOADING, UNLOADING, UNAVAILABLE; "": not loaded
    reason: str = ""  # why it is not ready ("unloaded", a load error, ...)
    version: str = ""  # the version this state is about, if any


class InferFuture(Future):
    """The future of one request to a target. ``trace``: the request's trace where the core's
    tracer sampled it (core/tracer.py): the binding adds the frame's own timestamps and
    releases it; None otherwise."""

    trace: Any = None


class TargetResult(Protocol):
    """What a target's future gives (the core's InferResponse has these attributes)."""

    model_name: str
    model_version: int
    outputs: Mapping[str, np.ndarray]


@runtime_checkable
class ModelTarget(Protocol):
    """The model a binding feeds (see the module docstring for the contract)."""

    name: str
    version: int
    location: str

    def describe(self) -> ModelSpec: ...

    def state(self) -> TargetState: ...

    def infer(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        sequence: tuple[int | str, bool, bool] | None = None,
        on_response: Any = None,
    ) -> InferFuture: ...

    def can_hedge(self) -> bool: ...

    def close(self) -> None: ...


def spec_from_config(
    config: ModelConfig,
    version: int,
    labels: Mapping[str, Sequence[str]] | None = None,
    steps: Sequence[ModelConfig] = (),
) -> ModelSpec:
    """A :class:`ModelSpec` from a core (or remotely fetched and parsed) ``ModelConfig``;
    ``steps``: an ensemble's composing models' (whether it is stateful)."""
    batchers = [c.sequence_batching for c in (config, *steps) if c.sequence_batching is not None]
    idles = [b.max_sequence_idle_us for b in batchers]
    corrids = [b.control(CONTROL_CORRID) for b in batchers]

    def tensors(items, inputs: bool) -> tuple[TensorSpec, ...]:
        return tuple(
            TensorSpec(
                name=t.name,
                datatype=t.datatype,
                dims=tuple(int(d) for d in t.dims),
                format=t.format if inputs else "FORMAT_NONE",
                optional=bool(t.optional) if inputs else False,
            )
            for t in items
        )

    return ModelSpec(
        name=config.name,
        version=int(version),
        platform=config.platform or config.backend,
        max_batch_size=int(config.max_batch_size),
        inputs=tensors(config.inputs, True),
        outputs=tensors(config.outputs, False),
        labels={k: tuple(v) for k, v in (labels or {}).items()},
        stateful=bool(idles),
        sequence_idle_us=min(idles, default=0),
        string_sequence_ids=any(c is not None and c.datatype == "BYTES" for c in corrids),
        decoupled=bool(config.decoupled),
    )


__all__ = [
    "ModelTarget",
    "ModelSpec",
    "TensorSpec",
    "TargetState",
    "TargetResult",
    "spec_from_config",
]
