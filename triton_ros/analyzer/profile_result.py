"""What a profile is asked to do (:class:`ProfileOptions`) and what it found
(:class:`ProfileResult`): read by the profiler, which fills them, and by the report, which draws
them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import recommendation as recommendation_module
from .confirmation import Verdict
from .config_search import QUICK, ConcurrencySweepSettings
from .measurement import Constraints, RunConfigResult
from .perf_analyzer import PerfAnalyzerSettings
from .search_space import SearchLimits, SearchSpace


@dataclass
class ProfileOptions:
    model_repositories: list[Path]
    model: str
    output_dir: Path
    constraints: Constraints = Constraints()
    mode: str = QUICK
    quick_passes: int = 2
    limits: SearchLimits = SearchLimits()
    concurrency: ConcurrencySweepSettings = ConcurrencySweepSettings()
    perf: PerfAnalyzerSettings = PerfAnalyzerSettings()
    time_budget_s: float | None = None
    max_configs: int | None = None  # configurations measured, at most
    confirm_candidates: int = 2
    confirm_rounds: int = 5  # alternating rounds
    confirm_perf: PerfAnalyzerSettings | None = None  # None: as ``perf``
    server_args: tuple[str, ...] = ()
    progress: bool = True


@dataclass
class ProfileResult:
    model: str
    results: list[RunConfigResult]
    space: SearchSpace
    constraints: Constraints
    recommendation: recommendation_module.Recommendation | None
    seconds: float
    stopped_by_budget: bool
    options: ProfileOptions
    files: dict[str, Path] = field(default_factory=dict)
    verdict: Verdict | None = None  # the confirmation's rounds
