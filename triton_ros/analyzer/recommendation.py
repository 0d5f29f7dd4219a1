"""The recommendation: the best configuration under the constraints, as a ready config.pbtxt.

The configuration is the user's own (parsed by the core) with the swept fields changed, written
by the core's writer with a comment header saying what it was chosen for and what was measured;
``recommendation.json`` beside it has the same figures and the perf_analyzer flags that measured
them, so that it can be checked again (``triton-ros-server`` on a repository with this
config.pbtxt, then perf_analyzer with those flags at the stated concurrency).
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from .confirmation import Comparison, Verdict
from .measurement import Constraints, Measurement, RunConfigResult
from .model_variant import config_text
from .search_space import describe


@dataclass(frozen=True)
class Recommendation:
    """The answer: a change that beat the model's own configuration in every confirmation round
    by more than their spread, or the model's own (``keep``), with the rounds' figures."""

    result: RunConfigResult  # the configuration to use (the model's own: keep)
    measurement: Measurement  # its median confirmation round, at its concurrency
    sweep_measurement: Measurement | None  # what the sweep measured at its best
    constraints: Constraints
    default_measurement: Measurement | None  # the model's own, median round, same concurrency
    verdict: Verdict | None = None
    confirmed: bool = True

    @property
    def keep(self) -> bool:
        return self.verdict is None or self.verdict.keep

    @property
    def comparison(self) -> Comparison | None:
        """The recommended change's comparison; with ``keep``, the closest candidate's."""
        if self.verdict is None:
            return None
        return self.verdict.winner or self.verdict.closest()

    @property
    def speedup(self) -> float | None:
        """The median per-round ratio of the recommended change over the model's own at the
        same concurrency (None when the answer is to keep it)."""
        if self.keep or self.comparison.same_concurrency is None:
            return None
        return self.comparison.same_concurrency.median


def from_verdict(verdict: Verdict, constraints: Constraints) -> Recommendation | None:
    """The recommendation the confirmation's rounds support; None when neither a change nor
    the model's own configuration met the constraints in most rounds."""
    if verdict.winner is not None:
        w = verdict.winner
        c = w.concurrency
        default_m = verdict.default.median(c) if c in verdict.default.concurrencies() else None
        return Recommendation(
            w.candidate.result,
            w.candidate.median(c),
            constraints.best(w.candidate.result),
            constraints,
            default_m,
            verdict,
        )
    c = verdict.default_concurrency
    if c is None:
        return None
    m = verdict.default.median(c)
    return Recommendation(
        verdict.default.result, m, constraints.best(verdict.default.result), constraints, m, verdict
    )


def verdict_lines(rec: Recommendation) -> list[str]:
    """The answer in words, with the rounds' figures (for the console, the header, the page)."""
    v = rec.verdict
    metric = rec.constraints.latency_metric
    m = rec.measurement
    point = (
        f"{m.throughput:.1f} infer/s at concurrency {m.concurrency}, {metric} "
        f"{m.latency(metric):.2f} ms, peak RSS {m.server.peak_rss_mb:.0f} MB"
    )
    rounds = v.rounds if v is not None else 0
    if rec.keep:
        lines = [
            f"keep your configuration: {rec.result.variant} measured {point} (median of "
            f"{rounds} alternating rounds); no change beat it by more than the rounds' "
            f"spread"
        ]
        for c in v.comparisons if v is not None else ():
            ratio = c.same_concurrency.text() if c.same_concurrency else "no figure"
            lines.append(
                f"  {c.variant} [{_changes(c.candidate.result)}]: {ratio} of it at "
                f"concurrency {c.concurrency}: {c.why_not()}"
            )
        if v is not None and not v.comparisons:
            lines.append("  no other configuration met the constraints in the sweep")
        return lines
    w = rec.comparison
    d = rec.default_measurement
    return [
        f"recommended: {rec.result.variant} [{_changes(rec.result)}]: "
        f"{w.same_concurrency.text()} the throughput of the model's own configuration "
        f"at concurrency {w.concurrency}, in alternating rounds: {point}"
        + (
            f"; the model's own {d.throughput:.1f} infer/s, {metric} "
            f"{d.latency(metric):.2f} ms there"
            if d is not None
            else ""
        ),
        f"  against the model's own best under the constraints in each round: "
        f"{w.best_vs_best.text()}",
    ]


def _changes(result: RunConfigResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in describe(result.changes).items()) or "as written"


def candidates(
    results: list[RunConfigResult], constraints: Constraints
) -> list[tuple[RunConfigResult, Measurement]]:
    """Configurations with a measurement under the constraints, best first (highest throughput,
    then less memory; the model's own configuration first among equals)."""
    eligible = [r for r in results if constraints.best(r) is not None]
    eligible.sort(key=lambda r: (constraints.score(r), r.is_default), reverse=True)
    return [(r, constraints.best(r)) for r in eligible]


def default_best(results: list[RunConfigResult], constraints: Constraints) -> Measurement | None:
    default = next((r for r in results if r.is_default), None)
    return constraints.best(default) if default is not None else None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(rec: Recommendation, model: str) -> str:
    m = rec.measurement
    metric = rec.constraints.latency_metric
    lines = [
        (
            f"Keep: the model's own configuration of '{model}', confirmed by triton-ros-analyzer."
            if rec.keep
            else f"Recommended by triton-ros-analyzer for model '{model}' ({rec.result.variant})."
        ),
        f"Constraints: {rec.constraints.describe()}.",
        *verdict_lines(rec),
        f"Median round with perf_analyzer at concurrency {m.concurrency} (batch size "
        f"{m.batch_size}): {m.throughput:.1f} infer/s, p50 {m.latency('p50'):.2f} ms, "
        f"p99 {m.latency('p99'):.2f} ms ({metric} is the constrained metric);",
        f"server peak RSS {m.server.peak_rss_mb:.0f} MB, CPU {m.server.cpu_cores:.2f} cores"
        + (
            f", GPU memory {m.server.peak_gpu_memory_mb:.0f} MB"
            if m.server.peak_gpu_memory_mb is not None
            else ""
        )
        + ".",
        f"Host: {cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M')}.",
    ]
    changes = describe(rec.result.changes)
    lines.append(
        "Changed from the model's configuration: "
        + (", ".join(f"{k} = {v}" for k, v in changes.items()) or "nothing")
        + "."
    )
    return "\n".join(lines)


def reproducible_flags(command: tuple[str, ...]) -> list[str]:
    """perf_analyzer's flags of a measurement without the executable, the server's address and
    the CSV file (which were this run's own)."""
    out, args = [], list(command[1:])
    while args:
        arg = args.pop(0)
        if arg in ("-u", "-f") and args:
            args.pop(0)
            continue
        out.append(arg)
    return out


def _measurement_json(m: Measurement) -> dict:
    return {
        "concurrency": m.concurrency,
        "batch_size": m.batch_size,
        "throughput_infer_per_s": m.throughput,
        "latency_ms": m.perf.latency_ms,
        "stability_checked": m.perf.stable,
        "server_peak_rss_mb": m.server.peak_rss_mb,
        "server_cpu_cores": m.server.cpu_cores,
        "server_peak_gpu_memory_mb": m.server.peak_gpu_memory_mb,
    }


def _comparison_json(c: Comparison) -> dict:
    return {
        "variant": c.variant,
        "changes": describe(c.candidate.result.changes),
        "concurrency": c.concurrency,
        "ratio_same_concurrency": c.same_concurrency.as_json() if c.same_concurrency else None,
        "ratio_vs_model_best": c.best_vs_best.as_json() if c.best_vs_best else None,
        "beats_model_config": c.beats,
        "why_not": c.why_not(),
    }


def to_json(rec: Recommendation, model: str) -> dict:
    m = rec.measurement
    flags = reproducible_flags(m.perf.command)
    v = rec.verdict
    return {
        "model": model,
        "keep_model_config": rec.keep,
        "variant": rec.result.variant,
        "changes": describe(rec.result.changes),
        "constraints": {
            "latency_budget_ms": rec.constraints.latency_budget_ms,
            "latency_metric": rec.constraints.latency_metric,
            "headroom": rec.constraints.headroom,
            "chosen_under_ms": rec.constraints.latency_limit_ms,
            "memory_cap_mb": rec.constraints.memory_cap_mb,
            "gpu_memory_cap_mb": rec.constraints.gpu_memory_cap_mb,
        },
        "measured": _measurement_json(m),
        "model_config_measured": (
            _measurement_json(rec.default_measurement)
            if rec.default_measurement is not None
            else None
        ),
        "confirmed": rec.confirmed,
        "confirmation_rounds": v.rounds if v is not None else 0,
        "speedup_over_model_config": rec.speedup,
        "comparisons": [_comparison_json(c) for c in v.comparisons] if v is not None else [],
        "sweep_measurement": (
            _measurement_json(rec.sweep_measurement) if rec.sweep_measurement is not None else None
        ),
        "answer": verdict_lines(rec),
        "perf_analyzer_flags": flags,
        "host": {"cpu": cpu_model(), "cpus": os.cpu_count()},
    }


def write(rec: Recommendation, model: str, directory: Path) -> tuple[Path, Path]:
    """Write ``config.pbtxt`` and ``recommendation.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "config.pbtxt"
    config.write_text(config_text(rec.result.config, header(rec, model)), encoding="utf-8")
    path = directory / "recommendation.json"
    path.write_text(json.dumps(to_json(rec, model), indent=2) + "\n", encoding="utf-8")
    return config, path
