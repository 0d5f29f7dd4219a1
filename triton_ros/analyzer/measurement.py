"""Measurements of configurations, the constraints they are held to and how they are ranked.

A :class:`Measurement` is one perf_analyzer run (a configuration at one client concurrency) with
the server's CPU and memory over it. A :class:`RunConfigResult` is a configuration's measurements
at every concurrency swept. :class:`Constraints` are model_analyzer's: a latency budget on one
latency metric (``perf_latency_p99`` by default) and a memory cap (peak RSS of the server's
processes; ``gpu_used_memory`` where a GPU is present). A configuration's score is its best
throughput among the measurements that meet them; configurations meeting them rank above those
that do not, which rank by how close they came.

The latency budget is applied with ``headroom``: a measurement qualifies when its latency is at
most ``budget * (1 - headroom)``. A recommendation is measured again by whoever uses it, and on a
shared host a second measurement of the same configuration varies (here 10-30 % within minutes);
the headroom keeps a recommendation inside its budget when measured again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..core.protos import model_config_pb2 as mc
from .perf_analyzer import PerfResult
from .server_monitor import ProcessSample

DEFAULT_LATENCY_METRIC = "p99"
DEFAULT_HEADROOM = 0.2


@dataclass(frozen=True)
class Measurement:
    variant: str
    concurrency: int
    batch_size: int
    perf: PerfResult
    server: ProcessSample

    @property
    def throughput(self) -> float:
        return self.perf.throughput

    def latency(self, metric: str) -> float:
        return self.perf.latency_ms[metric]


@dataclass
class RunConfigResult:
    """A configuration variant and what was measured of it."""

    variant: str
    values: dict[str, Any]  # the point's values by dimension (search_space)
    changes: dict[str, Any]  # what differs from the model's own configuration
    config: mc.ModelConfig  # its configuration (the user's, changed)
    measurements: list[Measurement] = field(default_factory=list)
    confirmations: list[Measurement] = field(default_factory=list)  # measured again
    error: str = ""  # why it could not be measured (failed to load...)
    seconds: float = 0.0  # wall time spent on it (server start to stop)

    @property
    def is_default(self) -> bool:
        return self.variant.endswith("_config_default")


@dataclass(frozen=True)
class Constraints:
    latency_budget_ms: float | None = None
    latency_metric: str = DEFAULT_LATENCY_METRIC
    headroom: float = DEFAULT_HEADROOM
    memory_cap_mb: float | None = None
    gpu_memory_cap_mb: float | None = None

    @property
    def latency_limit_ms(self) -> float | None:
        """The latency a measurement must not exceed (the budget less the headroom)."""
        if self.latency_budget_ms is None:
            return None
        return self.latency_budget_ms * (1.0 - self.headroom)

    def violations(self, m: Measurement) -> list[str]:
        """What ``m`` exceeds; empty when it meets every constraint."""
        out = []
        limit = self.latency_limit_ms
        if limit is not None and m.latency(self.latency_metric) > limit:
            out.append(
                f"{self.latency_metric} latency {m.latency(self.latency_metric):.1f} ms > "
                f"{limit:.1f} ms"
            )
        if self.memory_cap_mb is not None and m.server.peak_rss_mb > self.memory_cap_mb:
            out.append(f"memory {m.server.peak_rss_mb:.0f} MB > {self.memory_cap_mb:.0f} MB")
        gpu = m.server.peak_gpu_memory_mb
        if self.gpu_memory_cap_mb is not None and gpu is not None and gpu > self.gpu_memory_cap_mb:
            out.append(f"GPU memory {gpu:.0f} MB > {self.gpu_memory_cap_mb:.0f} MB")
        return out

    def meets(self, m: Measurement) -> bool:
        return not self.violations(m)

    def _excess(self, m: Measurement) -> float:
        """How far ``m`` is outside the constraints, as the largest ratio over a limit."""
        ratios = [1.0]
        limit = self.latency_limit_ms
        if limit is not None:
            ratios.append(m.latency(self.latency_metric) / limit)
        if self.memory_cap_mb is not None:
            ratios.append(m.server.peak_rss_mb / self.memory_cap_mb)
        gpu = m.server.peak_gpu_memory_mb
        if self.gpu_memory_cap_mb is not None and gpu is not None:
            ratios.append(gpu / self.gpu_memory_cap_mb)
        return max(ratios)

    def best(self, result: RunConfigResult) -> Measurement | None:
        """The measurement of ``result`` with the highest throughput that meets the constraints
        (ties: the lower latency)."""
        ok = [m for m in result.measurements if self.meets(m)]
        if not ok:
            return None
        return max(ok, key=lambda m: (m.throughput, -m.latency(self.latency_metric)))

    def score(self, result: RunConfigResult) -> tuple:
        """Sort key, higher is better: (meets the constraints, throughput or closeness, less
        memory)."""
        best = self.best(result)
        if best is not None:
            return (1, best.throughput, -best.server.peak_rss_mb)
        if not result.measurements:
            return (-1, -math.inf, 0.0)
        excess = min(self._excess(m) for m in result.measurements)
        return (0, -excess, 0.0)

    def describe(self) -> str:
        parts = []
        if self.latency_budget_ms is not None:
            parts.append(
                f"{self.latency_metric} latency <= {self.latency_budget_ms:g} ms "
                f"(chosen at <= {self.latency_limit_ms:.3g} ms: "
                f"{self.headroom:.0%} headroom)"
            )
        if self.memory_cap_mb is not None:
            parts.append(f"server memory (peak RSS) <= {self.memory_cap_mb:g} MB")
        if self.gpu_memory_cap_mb is not None:
            parts.append(f"GPU memory <= {self.gpu_memory_cap_mb:g} MB")
        return "; ".join(parts) or "none (highest throughput)"


def better(a: tuple, b: tuple, min_gain: float) -> bool:
    """Score ``a`` beats ``b`` by enough to move to it: a better class, or (both meeting the
    constraints) ``min_gain`` more throughput, as model_analyzer's THROUGHPUT_MINIMUM_GAIN; a
    gain inside the noise of this host does not move the search."""
    if a[0] != b[0]:
        return a[0] > b[0]
    if a[0] == 1:
        return a[1] > b[1] * (1.0 + min_gain)
    return a[1] > b[1] + min_gain
