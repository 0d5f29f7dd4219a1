"""A model of the embedded core, of any kind it serves, as a binding's model target.

:class:`LocalModelTarget` implements :class:`~triton_ros.ros.targets.spec.ModelTarget` over the
node's :class:`~triton_ros.core.server.InferenceServer`: the spec of the version that serves now
(its configuration and the core's labels, read once when the version loaded), its state from
the repository index, and ``infer`` straight into the core's scheduler.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np

from ...core.errors import StatusCode, TritonRosError, unavailable
from ...core.infer_request import InferRequest, RequestedOutput
from ...core.server import InferenceServer
from ..monitoring.diagnostics import missing_steps_text
from .spec import READY, InferFuture, ModelSpec, TargetState, spec_from_config


class LocalModelTarget:
    """A model of the embedded core (any kind it serves)."""

    location = "local"

    def __init__(self, core: InferenceServer, name: str, version: int = -1) -> None:
        self.name = name
        self.version = version
        self._core = core
        # (spec, its stateful ensemble's step versions) per loaded version object; weak, so
        # that an unloaded version is not kept alive.
        self._specs: "weakref.WeakKeyDictionary[object, tuple[ModelSpec, tuple]]" = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._requested: dict[tuple[str, ...], tuple] = {}
        self._not_ready_state: tuple[int, TargetState] | None = None

    def describe(self) -> ModelSpec:
        try:
            model = self._core.get_model(self.name, self.version)
        except TritonRosError:
            raise self._not_ready() from None
        cached = self._specs.get(model)
        if cached is None or (cached[1] and not self._same_steps(model, cached[1])):
            with self._lock:
                cached = self._specs.get(model)
                if cached is None:
                    spec = spec_from_config(
                        model.config, model.version, model.labels, self._steps(model.config)
                    )
                    # A stateful ensemble's spec is new whenever a step's loaded version is:
                    # the binding then starts its sequences again (a reloaded tracker knows
                    # none of them), as it does for the ensemble's own reload.
                    steps = (
                        self._step_versions(model)
                        if spec.stateful and model.config.ensemble_steps
                        else ()
                    )
                    cached = (spec, steps)
                elif cached[1] and not self._same_steps(model, cached[1]):
                    cached = (replace(cached[0]), self._step_versions(model))
                self._specs[model] = cached
        return cached[0]

    def _step_versions(self, model) -> tuple:
        """Weak references to the loaded version objects of an ensemble's steps (None where
        not ready)."""
        out = []
        for step in model.config.ensemble_steps:
            try:
                out.append(weakref.ref(self._core.get_model(step.model_name, step.model_version)))
            except TritonRosError:
                out.append(None)
        return tuple(out)

    def _same_steps(self, model, refs: tuple) -> bool:
        """Whether the steps' loaded versions are still those of ``refs``."""
        for step, ref in zip(model.config.ensemble_steps, refs):
            try:
                current = self._core.get_model(step.model_name, step.model_version)
            except TritonRosError:
                current = None
            if (ref() if ref is not None else None) is not current:
                return False
        return True

    def _steps(self, config) -> list:
        """An ensemble's composing models' configurations (those loaded; nested ensembles
        included), to tell whether it is stateful."""
        out, todo, seen = [], list(config.ensemble_steps), set()
        while todo:
            step = todo.pop()
            if step.model_name in seen:
                continue
            seen.add(step.model_name)
            try:
                step_config = self._core.get_model(step.model_name, step.model_version).config
            except TritonRosError:  # not ready: its requests will say so
                continue
            out.append(step_config)
            todo.extend(step_config.ensemble_steps)
        return out

    def _not_ready(self) -> TritonRosError:
        # Frames keep arriving while a model is not ready: look its state up twice a second at
        # most (the repository index scans the repository's directories).
        now = time.monotonic_ns()
        cached = self._not_ready_state
        if cached is not None and now - cached[0] < 500_000_000:
            state = cached[1]
        else:
            state = self.state()
            self._not_ready_state = (now, state)
        if state.ready:  # it became ready meanwhile: try the next frame
            return unavailable(f"model '{self.name}' was changing versions")
        if not state.state and state.reason.startswith("not in"):
            return TritonRosError(
                StatusCode.NOT_FOUND, f"model '{self.name}' is not in the model repository"
            )
        what = f"version {self.version}" if self.version != -1 else "no version"
        detail = state.state or "not loaded"
        if state.reason:
            detail += f": {state.reason}"
        return unavailable(f"model '{self.name}' has {what} ready ({detail})")

    def state(self) -> TargetState:
        entries = [
            e
            for e in self._core.repository_index()
            if e.name == self.name and (self.version == -1 or e.version in ("", str(self.version)))
        ]
        if not entries:
            return TargetState(False, "", "not in the model repository")
        for wanted in (READY, "LOADING", "UNLOADING", "UNAVAILABLE"):
            found = [e for e in entries if e.state == wanted]
            if found:
                entry = found[-1]  # the highest version in that state
                if wanted == READY:
                    missing = self._missing_steps()
                    if missing:  # READY in the index, but its requests fail
                        return TargetState(False, READY, missing_steps_text(missing), entry.version)
                return TargetState(wanted == READY, wanted, entry.reason, entry.version)
        return TargetState(False, "", "not loaded")

    def _missing_steps(self) -> list[str]:
        """An ensemble's composing models that have no ready version (core's
        ``EnsembleModel.missing_steps``); [] for any other model."""
        try:
            model = self._core.get_model(self.name, self.version)
        except TritonRosError:
            return []
        missing_steps = getattr(model, "missing_steps", None)
        return missing_steps() if missing_steps is not None else []

    def infer(
        self,
        inputs: Mapping[str, np.ndarray],
        *,
        outputs: Sequence[str] | None = None,
        priority: int = 0,
        timeout_us: int = 0,
        sequence: tuple[int | str, bool, bool] | None = None,
        on_response=None,
    ) -> InferFuture:
        requested = None
        if outputs is not None:
            key = tuple(outputs)
            requested = self._requested.get(key)
            if requested is None:
                requested = self._requested[key] = tuple(RequestedOutput(n) for n in key)
        future = InferFuture()
        request = InferRequest(
            model_name=self.name,
            inputs=dict(inputs),
            model_version=self.version,
            requested_outputs=requested,
            priority=priority,
            timeout_us=timeout_us,
            future=future,
        )
        if sequence is not None:
            request.sequence_id, request.sequence_start, request.sequence_end = sequence
        if on_response is not None:
            request.response_sink = on_response
        # Tracing (core/tracer.py): the binding adds the frame's own timestamps (received,
        # published) to a sampled request's trace and releases it (future.trace).
        request.caller_releases_trace = self._core.tracer.active
        self._core.infer(request)  # its future is ``future``
        future.trace = request.trace
        return future

    def can_hedge(self) -> bool:
        """One core: nowhere else to send a frame."""
        return False

    def close(self) -> None:
        """Nothing to release: the core is the node's and stops with it."""
