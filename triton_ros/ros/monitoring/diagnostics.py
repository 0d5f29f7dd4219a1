"""The node's health, once a diagnostics period: figures in, one record per model and binding out.

Every diagnostics period the :class:`DiagnosticsReporter` turns the core's statistics and the
bindings' figures (:class:`BindingFigures`, which each binding hands over) into one health
record per model and per binding: level (OK, WARN, ERROR), a message, queue depth, input and
output rates, drops by reason, p50/p99 latencies and the mean executed batch over the period.
:mod:`~triton_ros.ros.monitoring.messages` renders them as ``diagnostic_msgs/DiagnosticArray``
and ``triton_ros_interfaces/InferenceStatus``.

Rates and percentiles cover the last period; totals count since start. Model figures include
every frontend's requests (gRPC too); the latency percentiles of a model are those of this node's
frame requests (the core keeps sums, not distributions).

A model's record is its state in the repository index; an ensemble that is READY there while
one of its steps' models has no ready version (unloaded after it) is ERROR, naming the step:
every request fails at that step (the core keeps such an ensemble READY and fails its requests
with NOT_FOUND). An unloaded model that bindings use names every one of them.

A binding's level says what went wrong in the last period, worst first: its model is not ready
or cannot serve (ERROR: an ensemble with a missing step is such a model from the first period),
frames failed (ERROR when none was published, else WARN), frames are stuck in the model (WARN after
:data:`STALLED_WARN_S`), malformed or stale frames (WARN, with the likely cause), no input topic
yet, or overload. The message carries the last error text and names every topic that had an error in
the period; the values carry the drops and failures by reason, the last error and its age, and the
last error of each topic (``last_error <topic>``), so that every broken topic is named in every
status, not only the latest one.
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from ...core.server import InferenceServer
from .counters import COUNTERS, FAIL_REASONS, UNMATCHED_REASONS, SourceCounters
from .failures import STALE_CAUSES, LastError
from .latency import LatencyWindow, percentiles_ms

OK, WARN, ERROR = 0, 1, 2
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR"}
DROP_WARN_FRACTION = 0.1  # a binding dropping more than this is WARN (overloaded)
STALLED_WARN_S = 10.0  # frames in the model this long without a result: WARN


@dataclass(frozen=True)
class SourceFigures:
    """One input topic of a binding, as the reporter reads it once a period."""

    topic: str
    output_topic: str
    counters: SourceCounters  # totals since the topic was bound
    in_flight: int
    stalled_ns: int  # frames in the model this long without one leaving (0: none)
    e2e_ns: list[int]  # header stamp -> publication, since the last period
    inference_ns: list[int]  # request -> response, since the last period
    # Synchronized bindings: (input, reason, count) of the messages that found no set
    unmatched_by_input: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True)
class BindingFigures:
    """What a binding hands the reporter once a period (``Binding.figures()``)."""

    name: str
    model: str
    location: str  # where its model runs: "local" for the embedded core's
    max_age_ms: int
    inputs: tuple[str, ...]  # its topics and topic patterns
    sources: tuple[SourceFigures, ...]
    retired: SourceCounters  # totals of topics unbound earlier
    last_error: LastError | None
    last_stale: LastError | None
    model_ready: bool  # its model target's state, for diagnostics
    model_state: str
    model_reason: str
    sync_slop_ms: float | None = None  # synchronized bindings: their slop
    # (topic, its last error) of every topic that had one (FailureLog.topic_errors)
    topic_errors: tuple[tuple[str, LastError], ...] = ()


@dataclass
class ModelHealth:
    name: str
    version: str
    state: str
    level: int
    message: str
    queue_depth: int = 0
    input_rate: float = 0.0
    output_rate: float = 0.0
    execution_rate: float = 0.0
    mean_batch_size: float = 0.0
    mean_batch_size_total: float = 0.0
    failures: int = 0
    failures_total: int = 0
    queue_ms: float = 0.0
    compute_ms: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0


@dataclass
class SourceHealth:
    topic: str
    output_topic: str
    input_rate: float
    output_rate: float
    dropped: int
    unmatched: int = 0  # synchronized bindings: messages without a set
    unmatched_by_input: str = ""  # "DEPTH no_partner 3, K too_old 1"


@dataclass(kw_only=True)
class BindingHealth(SourceCounters):
    """One binding's health over the last period: its counters (the SourceCounters it is: totals
    since start, unbound sources included), rates, latencies, state and last errors."""

    name: str
    model: str
    level: int
    message: str
    source_count: int = 0
    in_flight: int = 0
    input_rate: float = 0.0
    output_rate: float = 0.0
    drop_rate: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    inference_p50_ms: float = 0.0
    inference_p99_ms: float = 0.0
    # how late the node's executor ran its callbacks over the period (monitoring/
    # executor_lag.py): the node's own backlog, which every binding's frames wait through
    executor_lag_p50_ms: float = 0.0
    executor_lag_p99_ms: float = 0.0
    state: str = ""  # the model's state as the binding's target reports it
    last_error: str = ""
    last_error_age_s: float = -1.0  # -1: no error yet
    sources: list[SourceHealth] = field(default_factory=list)
    # (topic, its last error, age in seconds) of every topic that had one
    topic_errors: list[tuple[str, str, float]] = field(default_factory=list)


def missing_steps_text(missing: list[str]) -> str:
    """Why an ensemble that is READY cannot serve: its steps' models that are not ready."""
    plural = len(missing) > 1
    return (
        f"its step model{'s' if plural else ''} {', '.join(missing)} "
        f"{'have' if plural else 'has'} no ready version: every request fails at that step "
        f"until it is loaded again"
    )


def _bindings_text(bindings: list[str]) -> str:
    names = ", ".join(f"'{b}'" for b in bindings)
    return (
        f"binding {names} drops its frames"
        if len(bindings) == 1
        else f"bindings {names} drop their frames"
    )


class DiagnosticsReporter:
    """Computes per-period health from counters that only grow (keeps the previous values)."""

    def __init__(self, core: InferenceServer) -> None:
        self._core = core
        self._model_latency: dict[str, LatencyWindow] = collections.defaultdict(LatencyWindow)
        self._prev_models: dict[tuple[str, int], tuple] = {}
        self._prev_sources: dict[tuple[str, str], SourceCounters] = {}
        self._prev_ns = 0
        self._prev_mono_ns = 0  # the last report, on the errors' clock

    def model_latency(self, model: str) -> LatencyWindow:
        return self._model_latency[model]

    def report(
        self, bindings: list[BindingFigures], now_ns: int, executor_lag_ns: list[int] | None = None
    ) -> tuple[list[ModelHealth], list[BindingHealth]]:
        """The period's records; ``executor_lag_ns``: the executor's lateness samples of the
        period, shown on every binding (their frames share the executor)."""
        period_s = (now_ns - self._prev_ns) / 1e9 if self._prev_ns else 0.0
        self._prev_ns = now_ns
        since_mono_ns, self._prev_mono_ns = self._prev_mono_ns, time.monotonic_ns()
        lag = percentiles_ms(executor_lag_ns or [])
        # Models of the embedded core used by bindings are listed even when not loaded.
        used: dict[str, list[str]] = {}
        for b in bindings:
            if b.location == "local":
                used.setdefault(b.model, []).append(b.name)
        models = self._models(used, period_s)
        healths = [self._binding(b, period_s, since_mono_ns) for b in bindings]
        for health in healths:
            health.executor_lag_p50_ms, health.executor_lag_p99_ms = lag
        return models, healths

    # ---------------------------------------------------------------- models
    def _models(self, used: dict[str, list[str]], period_s: float) -> list[ModelHealth]:
        out: list[ModelHealth] = []
        entries = self._core.repository_index()
        listed = set()
        for entry in entries:
            if not entry.state and entry.name not in used:
                continue  # in the repository, never loaded, unused
            if entry.state == "UNAVAILABLE" and any(
                e.name == entry.name and e.state == "READY" for e in entries
            ):
                continue  # an older version; the ready one reports
            listed.add(entry.name)
            out.append(
                self._model(
                    entry.name,
                    entry.version,
                    entry.state,
                    entry.reason,
                    used.get(entry.name),
                    period_s,
                )
            )
        for name, names in used.items():
            if name not in listed:
                out.append(
                    ModelHealth(
                        name,
                        "",
                        "",
                        ERROR,
                        f"not in the model repository ({_bindings_text(names)})",
                    )
                )
        return out

    def _model(
        self,
        name: str,
        version: str,
        state: str,
        reason: str,
        bindings: list[str] | None,
        period_s: float,
    ) -> ModelHealth:
        p50, p99 = percentiles_ms(self._model_latency[name].drain())
        if state != "READY":
            if state in ("LOADING", "UNLOADING"):
                level, message = WARN, state.lower()
            elif reason == "unloaded" or not state:
                level = WARN if bindings else OK
                message = "unloaded" if state else "not loaded"
                if bindings:
                    message += f"; {_bindings_text(bindings)}"
            else:
                level, message = ERROR, reason or "unavailable"
            return ModelHealth(name, version, state or "UNAVAILABLE", level, message)
        try:
            model = self._core.get_model(name, int(version) if version else -1)
            stats = model.stats.snapshot()
            queue_depth = model.pending_request_count()
            missing_steps = getattr(model, "missing_steps", None)
            missing = missing_steps() if missing_steps is not None else []
        except Exception as exc:  # unloaded between the index and now
            return ModelHealth(name, version, "UNAVAILABLE", WARN, str(exc))
        key = (name, stats.version)
        now = (
            stats.success.count,
            stats.fail.count,
            stats.inference_count,
            stats.execution_count,
            stats.queue.ns,
            stats.compute_input.ns + stats.compute_infer.ns + stats.compute_output.ns,
        )
        prev = self._prev_models.get(key, (0,) * len(now))
        self._prev_models[key] = now
        d_success, d_fail, d_inf, d_exec, d_queue_ns, d_compute_ns = (
            a - b for a, b in zip(now, prev)
        )
        health = ModelHealth(
            name,
            version,
            state,
            OK,
            "ready",
            queue_depth=queue_depth,
            failures=d_fail,
            failures_total=stats.fail.count,
            mean_batch_size=d_inf / d_exec if d_exec else 0.0,
            mean_batch_size_total=(
                stats.inference_count / stats.execution_count if stats.execution_count else 0.0
            ),
            queue_ms=d_queue_ns / d_success / 1e6 if d_success else 0.0,
            compute_ms=d_compute_ns / d_success / 1e6 if d_success else 0.0,
            latency_p50_ms=p50,
            latency_p99_ms=p99,
        )
        if period_s > 0:
            health.input_rate = (d_success + d_fail) / period_s
            health.output_rate = d_success / period_s
            health.execution_rate = d_exec / period_s
        if missing:
            health.level, health.message = ERROR, missing_steps_text(missing)
        elif d_fail:
            health.level, health.message = WARN, f"{d_fail} failed requests in the last period"
        return health

    # ---------------------------------------------------------------- bindings
    def _binding(
        self, binding: BindingFigures, period_s: float, since_mono_ns: int = 0
    ) -> BindingHealth:
        health = BindingHealth(name=binding.name, model=binding.model, level=OK, message="ok")
        e2e: list[int] = []
        inference: list[int] = []
        period = SourceCounters()  # what happened in the last period, by reason
        totals = binding.retired.copy()  # sources unbound earlier still count
        stalled_ns = 0
        mono_now = time.monotonic_ns()
        for source in binding.sources:
            counters = source.counters
            e2e += source.e2e_ns
            inference += source.inference_ns
            key = (binding.name, source.topic)
            prev = self._prev_sources.get(key) or SourceCounters()
            self._prev_sources[key] = counters
            delta = SourceCounters(
                **{name: getattr(counters, name) - getattr(prev, name) for name in COUNTERS}
            )
            period.add(delta)
            stalled_ns = max(stalled_ns, source.stalled_ns)
            health.source_count += 1
            health.in_flight += source.in_flight
            totals.add(counters)
            health.sources.append(
                SourceHealth(
                    source.topic,
                    source.output_topic,
                    delta.received / period_s if period_s > 0 else 0.0,
                    delta.published / period_s if period_s > 0 else 0.0,
                    counters.dropped,
                    counters.unmatched,
                    ", ".join(
                        f"{name} {reason} {n}" for name, reason, n in source.unmatched_by_input
                    ),
                )
            )
        for name in COUNTERS:
            setattr(health, name, getattr(totals, name))
        health.latency_p50_ms, health.latency_p99_ms = percentiles_ms(e2e)
        health.inference_p50_ms, health.inference_p99_ms = percentiles_ms(inference)
        if period_s > 0:
            health.input_rate = period.received / period_s
            health.output_rate = period.published / period_s
            health.drop_rate = period.dropped / period_s
        last = binding.last_error
        if last is not None:
            health.last_error, health.last_error_age_s = last.text, last.age_s(mono_now)
        health.topic_errors = [
            (topic, error.text, error.age_s(mono_now)) for topic, error in binding.topic_errors
        ]
        # every topic with an error in this period, not only the latest one's
        recent = [
            topic for topic, error in binding.topic_errors if error.monotonic_ns > since_mono_ns
        ]
        topics_text = f" (on {', '.join(recent)})" if recent else ""
        last_text = topics_text + (f"; last error: {last.text}" if last is not None else "")

        health.state = binding.model_state
        failed = {name: getattr(period, name) for name in FAIL_REASONS if getattr(period, name)}
        if not binding.model_ready:
            health.level = ERROR
            if binding.model_state == "READY":  # listed ready, but it cannot serve
                health.message = (
                    f"model '{binding.model}' cannot serve: {binding.model_reason}"
                    f"; frames are dropped as unavailable"
                )
            else:
                if binding.model_state:
                    detail = (
                        f"{binding.model_state}: {binding.model_reason}"
                        if binding.model_reason
                        else binding.model_state
                    )
                else:
                    detail = binding.model_reason or "not loaded"
                health.message = (
                    f"model '{binding.model}' is not ready ({detail}); frames are "
                    f"dropped as unavailable"
                )
        elif failed:
            health.level = ERROR if period.published == 0 else WARN
            reasons = ", ".join(f"{n} {name}" for name, n in failed.items())
            health.message = (
                f"{period.failed} of {period.received} frames failed in the last "
                f"period ({reasons}){last_text}"
            )
        elif stalled_ns > STALLED_WARN_S * 1e9:
            health.level = WARN
            health.message = (
                f"{health.in_flight} frame(s) in the model without a result for "
                f"{stalled_ns / 1e9:.0f} s"
            )
        elif period.dropped_malformed:
            health.level = WARN
            health.message = (
                f"{period.dropped_malformed} malformed frames in the last period{last_text}"
            )
        elif period.dropped_stale:
            stale = binding.last_stale
            health.level = WARN
            health.message = (
                f"{period.dropped_stale} of {period.received} frames dropped as "
                f"stale (older than max_age_ms {binding.max_age_ms})"
                f"{topics_text}"
                + (
                    f"; last: {stale.summary}"
                    if stale is not None
                    else f". Likely cause: {STALE_CAUSES}"
                )
            )
        elif period.stamped_ahead:
            stale = binding.last_stale
            health.level = WARN
            health.message = (
                f"{period.stamped_ahead} of {period.received} frames stamped more "
                f"than max_age_ms {binding.max_age_ms} ahead of this node's clock "
                f"(processed){topics_text}"
                + (
                    f"; last: {stale.summary}"
                    if stale is not None
                    else f". Likely cause: {STALE_CAUSES}"
                )
            )
        elif period.unstamped:
            health.level = WARN
            health.message = (
                f"{period.unstamped} of {period.received} frames stamped 0 "
                f"(header.stamp unset: max_age_ms cannot apply; processed)"
                f"{last_text}"
            )
        elif period.dropped_unavailable:
            health.level = WARN
            health.message = (
                f"{period.dropped_unavailable} frames dropped while the model "
                f"was not serving{last_text}"
            )
        elif period.unmatched:
            health.level = WARN
            reasons = ", ".join(
                f"{name[len('unmatched_') :]} {getattr(period, name)}"
                for name in UNMATCHED_REASONS
                if getattr(period, name)
            )
            health.message = (
                f"{period.unmatched} input messages found no partner within "
                f"sync_slop_ms {binding.sync_slop_ms:g} in the last period "
                f"({reasons}){last_text}"
            )
        elif not health.source_count:
            health.level = WARN
            what = (
                "no source namespace with every input topic yet"
                if binding.sync_slop_ms is not None
                else "no input topic yet"
            )
            health.message = f"{what} (waiting for " + ", ".join(binding.inputs) + ")"
        elif period.received and period.dropped > DROP_WARN_FRACTION * period.received:
            health.level = WARN
            health.message = (
                f"dropping {period.dropped} of {period.received} frames "
                f"(overloaded: lower the frame rate or raise max_in_flight)"
            )
        return health
