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

from .measurement import Constraints, Measurement, RunConfigResult
from .model_variant import config_text
from .search_space import describe


@dataclass(frozen=True)
class Recommendation:
    result: RunConfigResult
    measurement: Measurement                  # the confirmation on a fresh server
    sweep_measurement: Measurement            # what the sweep measured at its best
    constraints: Constraints
    default_measurement: Measurement | None   # the user's configuration's best, if it met them
    confirmed: bool = True                    # False: confirmation was skipped (no time left)

    @property
    def speedup(self) -> float | None:
        """Sweep throughput over the user's configuration's, both under the constraints."""
        if self.default_measurement is None or self.default_measurement.throughput <= 0:
            return None
        return self.sweep_measurement.throughput / self.default_measurement.throughput


def candidates(results: list[RunConfigResult],
               constraints: Constraints) -> list[tuple[RunConfigResult, Measurement]]:
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
        f"Recommended by triton-ros-analyzer for model '{model}' ({rec.result.variant}).",
        f"Constraints: {rec.constraints.describe()}.",
        ("Confirmed on a fresh server" if rec.confirmed else "Measured (not confirmed)")
        + f" with perf_analyzer at concurrency {m.concurrency} (batch size "
        f"{m.batch_size}): {m.throughput:.1f} infer/s, p50 {m.latency('p50'):.2f} ms, "
        f"p99 {m.latency('p99'):.2f} ms ({metric} is the constrained metric);",
        f"server peak RSS {m.server.peak_rss_mb:.0f} MB, CPU {m.server.cpu_cores:.2f} cores"
        + (f", GPU memory {m.server.peak_gpu_memory_mb:.0f} MB"
           if m.server.peak_gpu_memory_mb is not None else "") + ".",
        f"Host: {cpu_model()}, {os.cpu_count()} CPUs; "
        f"{time.strftime('%Y-%m-%d %H:%M')}.",
    ]
    changes = describe(rec.result.changes)
    lines.append("Changed from the model's configuration: "
                 + (", ".join(f"{k} = {v}" for k, v in changes.items()) or "nothing") + ".")
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


def to_json(rec: Recommendation, model: str) -> dict:
    m = rec.measurement
    flags = reproducible_flags(m.perf.command)
    return {
        "model": model,
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
        "confirmed": rec.confirmed,
        "sweep_measurement": _measurement_json(rec.sweep_measurement),
        "speedup_over_model_config": rec.speedup,
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

