"""``triton-ros-analyzer profile``: sweep a model's configurations and recommend one.

For every configuration the search asks for (:mod:`.config_search`), the profiler writes it into
the scratch repository (:mod:`.model_variant`), starts a fresh ``triton-ros-server`` on it
(:mod:`.triton_server`), sweeps client concurrency with perf_analyzer while sampling the
server's CPU and memory (:mod:`.server_monitor`), and stops the server. The user's own
configuration is measured first: the server's completed copy of it (the ModelConfig RPC) defines
the search space. A configuration the server refuses (a max_batch_size the model's fixed batch
dimension cannot take, say) is kept in the tables with the server's reason and ranks last.
Configurations that come out identical (preferred sizes without a dynamic batcher) are measured
once.

Output (``--output-dir``, model_analyzer's export layout)::

    results/metrics-model-inference.csv        every measurement
    results/metrics-summary.csv                every configuration's best under the constraints
    plots/simple/<model>/throughput_v_latency.png, cpu_mem_v_throughput.png (gpu_mem_v_... )
    reports/summaries/<model>/result_summary.html
    output_model_repository/<model>_config_<n>/config.pbtxt   each configuration measured
    recommended/<model>/config.pbtxt, recommendation.json
    logs/                                       the servers' and perf_analyzer's logs

A progress bar (tqdm) counts configurations against the search's plan, with the time per
configuration so far and an estimate of the time left (bounded by ``--time-budget-s``).
"""
from __future__ import annotations

import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from . import recommendation as recommendation_module
from . import report
from .config_search import (BRUTE, SearchStopped, brute_plan, brute_search, quick_plan_size,
                            quick_search, sweep_concurrency)
from .errors import AnalyzerError, ModelLoadError, PerfAnalyzerError, ServerStartError
from .measurement import Constraints, Measurement, RunConfigResult
from .profile_result import ProfileOptions, ProfileResult
from .model_variant import ScratchRepository, config_text, variant_name
from .perf_analyzer import PerfAnalyzer
from .search_space import SearchSpace, apply_changes, describe, model_search_space
from .server_monitor import GpuMemoryReader, ProcessMonitor
from .triton_server import TritonServer

_log = logging.getLogger(__name__)

#: Seconds a configuration is assumed to take before one has been measured.
FIRST_GUESS_S = 15.0


class _Progress:
    """tqdm over configurations, with our own estimate of the time left (tqdm's assumes the
    plan is exact; the quick search usually stops before its plan)."""

    def __init__(self, total: int, enabled: bool, budget_s: float | None, t0: float) -> None:
        self.total = total
        self.budget_s = budget_s
        self.t0 = t0
        self.bar = None
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="config", desc="profiling", file=sys.stderr,
                            dynamic_ncols=True, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                            "configs [{elapsed}{postfix}]")

    def estimate_left(self, done: int, per_config_s: float) -> float:
        left = max(self.total - done, 0) * per_config_s
        if self.budget_s is not None:
            left = min(left, max(self.budget_s - (time.monotonic() - self.t0), 0.0))
        return left

    def update(self, done: int, per_config_s: float, best: str) -> None:
        if self.bar is None:
            return
        self.bar.n = min(done, self.total)
        self.bar.set_postfix_str(f"~{self.estimate_left(done, per_config_s):.0f} s left, "
                                 f"best: {best}", refresh=True)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            _log.info("%s", text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Profiler:
    def __init__(self, options: ProfileOptions) -> None:
        self.options = options
        self.model = options.model
        self.constraints = options.constraints
        self.out = Path(options.output_dir)
        self.logs = self.out / "logs"
        self.results: list[RunConfigResult] = []
        self._by_point: dict[tuple, RunConfigResult] = {}
        self._by_text: dict[str, RunConfigResult] = {}
        self._gpu: GpuMemoryReader | None = None
        self._perf: PerfAnalyzer | None = None
        self._scratch: ScratchRepository | None = None
        self._served = None
        self._space: SearchSpace | None = None
        self._t0 = 0.0
        self._progress: _Progress | None = None

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> ProfileResult:
        self._t0 = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        self._perf = PerfAnalyzer(self.options.perf, self.logs)
        self._gpu = GpuMemoryReader()
        scratch_root = Path(tempfile.mkdtemp(prefix="triton_ros_analyzer_"))
        stopped = False
        try:
            self._scratch = ScratchRepository(self.options.model_repositories, self.model,
                                              scratch_root / "models")
            default = self._measure_default()
            if default.error and not default.measurements:
                raise AnalyzerError(f"the model's own configuration could not be measured: "
                                    f"{default.error}")
            space = self._space
            plan = (len(brute_plan(space)) if self.options.mode == BRUTE
                    else quick_plan_size(space, self.options.quick_passes))
            if self.options.max_configs is not None:
                plan = min(plan, self.options.max_configs)
            self._progress = _Progress(plan, self.options.progress, self.options.time_budget_s,
                                       self._t0)
            self._progress.write(
                f"{self.model}: {space.size} configurations in the space "
                f"({', '.join(f'{d.name}: {len(d)}' for d in space.dimensions) or 'none'}); "
                f"{self.options.mode} search measures at most {plan}"
                + (f" within {self.options.time_budget_s:.0f} s"
                   if self.options.time_budget_s else ""))
            self._report_progress(default)
            try:
                if self.options.mode == BRUTE:
                    brute_search(space, self._evaluate)
                else:
                    quick_search(space, self._evaluate, min_gain=self.options.concurrency.min_gain,
                                 passes=self.options.quick_passes)
            except SearchStopped:
                stopped = True
                self._progress.write("time budget (or --max-configs) spent: the search stops "
                                     "here")
            rec = self._confirm()
        finally:
            if self._progress is not None:
                self._progress.close()
            if self._gpu is not None:
                self._gpu.close()
            shutil.rmtree(scratch_root, ignore_errors=True)
        result = ProfileResult(self.model, self.results, self._space, self.constraints, rec,
                               time.monotonic() - self._t0, stopped, self.options)
        if rec is not None:
            config, js = recommendation_module.write(rec, self.model,
                                                     self.out / "recommended" / self.model)
            result.files.update(recommended_config=config, recommendation_json=js)
        result.files.update(report.write_all(result, self.out))
        return result

    # -- configurations --------------------------------------------------------------------

    def _measure_default(self) -> RunConfigResult:
        scratch = self._scratch
        name = variant_name(self.model, None)
        result = RunConfigResult(name, {}, {}, scratch.user_config)
        self._save_variant(result)
        self._measure(result, on_start=self._learn_space)
        if self._space is None:
            raise AnalyzerError(f"the server did not serve '{self.model}' in its own "
                                f"configuration: {result.error}")
        result.values = self._space.values(self._space.default)
        self._by_point[self._space.default] = result
        self._by_text[config_text(scratch.user_config)] = result
        self.results.append(result)
        return result

    def _learn_space(self, server: TritonServer) -> None:
        self._served = server.model_config()
        self._check_shapes(self._served)
        self._space = model_search_space(self._served, self.options.limits,
                                         gpu_count=len(self._gpu_ids()))

    def _check_shapes(self, served) -> None:
        """perf_analyzer needs a shape for every variable dimension: say which input lacks one
        before it fails with its own words."""
        given = {s.split(":", 1)[0] for s in self.options.perf.shapes}
        if Path(self.options.perf.input_data).is_file():
            return                         # a JSON data file gives its own shapes
        for tensor in served.input:
            if -1 in tensor.dims and tensor.name not in given:
                example = ",".join("224" if d == -1 else str(d) for d in tensor.dims)
                raise AnalyzerError(
                    f"input '{tensor.name}' of '{self.model}' has variable dimensions "
                    f"{list(tensor.dims)}: give the shape to measure with --shape "
                    f"{tensor.name}:{example} (perf_analyzer's --shape, without the batch "
                    f"dimension), or --input-data FILE.json")

    def _gpu_ids(self) -> frozenset[int]:
        if self._gpu is None or not self._gpu.available:
            return frozenset()
        from ..core import gpu
        return gpu.supported_gpus()

    def _evaluate(self, point) -> tuple:
        if point in self._by_point:
            return self.constraints.score(self._by_point[point])
        space = self._space
        changes = space.changes(point)
        proto = apply_changes(self._scratch.user_config, changes, self._served,
                              space.values(point))
        text = config_text(proto)
        same = self._by_text.get(text)
        if same is not None:           # identical configuration: measured already
            self._by_point[point] = same
            return self.constraints.score(same)
        self._check_budget()
        result = RunConfigResult(variant_name(self.model, len(self.results) - 1),
                                 space.values(point), changes, proto)
        self._save_variant(result)
        self._scratch.write_config(proto)
        self._measure(result)
        self._by_point[point] = result
        self._by_text[text] = result
        self.results.append(result)
        self._report_progress(result)
        return self.constraints.score(result)

    def _per_config_s(self) -> float:
        measured = [r.seconds for r in self.results if r.seconds > 0]
        return statistics.fmean(measured) if measured else FIRST_GUESS_S

    def _check_budget(self) -> None:
        if self.options.max_configs is not None and len(self.results) >= self.options.max_configs:
            raise SearchStopped()
        budget = self.options.time_budget_s
        if budget is None:
            return
        elapsed = time.monotonic() - self._t0
        if elapsed + self._per_config_s() > budget:
            raise SearchStopped()

    def _save_variant(self, result: RunConfigResult) -> None:
        path = self.out / "output_model_repository" / result.variant / "config.pbtxt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config_text(result.config), encoding="utf-8")

    # -- the recommendation ----------------------------------------------------------------

    def _confirm(self) -> recommendation_module.Recommendation | None:
        """Measure the best candidates again, each on a fresh server with ``confirm_perf``, at
        the concurrency the sweep chose (and lower ones while that misses the constraints);
        recommend the best confirmed one. The sweep's measurement of a point is one sample on
        a noisy host: a recommendation must hold when measured again."""
        ranked = recommendation_module.candidates(self.results, self.constraints)
        default = recommendation_module.default_best(self.results, self.constraints)
        if not ranked:
            return None
        perf = PerfAnalyzer(self.options.confirm_perf or self.options.perf,
                            self.logs / "confirmation", executable=self._perf.executable)
        confirmed = []
        for result, sweep_best in ranked[:self.options.confirm_candidates]:
            self._progress.write(f"confirming {result.variant} at concurrency "
                                 f"{sweep_best.concurrency} on a fresh server")
            m = self._confirm_one(result, sweep_best, perf)
            if m is not None:
                confirmed.append((m.throughput, result, m, sweep_best))
                self._progress.write(f"  confirmed: {_point(m, self.constraints)}")
            else:
                self._progress.write(f"  {result.variant} missed the constraints when measured "
                                     f"again")
        if not confirmed:
            return None
        _, result, m, sweep_best = max(confirmed, key=lambda c: c[0])
        return recommendation_module.Recommendation(result, m, sweep_best, self.constraints,
                                                    default)

    def _confirm_one(self, result: RunConfigResult, sweep_best: Measurement,
                     perf: PerfAnalyzer) -> Measurement | None:
        if result.is_default:
            self._scratch.restore_user_config()
        else:
            self._scratch.write_config(result.config)
        server = TritonServer(self._scratch.root, self.model,
                              self.logs / f"server_{result.variant}_confirmation.log",
                              extra_args=self.options.server_args)
        try:
            server.start()
            concurrency = sweep_best.concurrency
            while concurrency >= self.options.concurrency.min_concurrency:
                monitor = ProcessMonitor(server.pid, gpu=self._gpu).start()
                try:
                    p = perf.measure(self.model, server.url, concurrency)
                finally:
                    sample = monitor.stop()
                m = Measurement(result.variant, concurrency, self.options.perf.batch_size, p,
                                sample)
                result.confirmations.append(m)
                if self.constraints.meets(m):
                    return m
                concurrency //= 2
            return None
        except (ModelLoadError, ServerStartError, PerfAnalyzerError) as exc:
            self._progress.write(f"  confirmation failed: {exc}")
            return None
        finally:
            server.stop()

    # -- measuring one configuration -------------------------------------------------------

    def _measure(self, result: RunConfigResult, on_start=None) -> None:
        t0 = time.monotonic()
        server = TritonServer(self._scratch.root, self.model,
                              self.logs / f"server_{result.variant}.log",
                              extra_args=self.options.server_args)
        try:
            server.start()
            if on_start is not None:
                on_start(server)
            result.measurements = self._sweep(result, server)
        except (ModelLoadError, ServerStartError) as exc:
            result.error = str(exc)
        finally:
            server.stop()
            result.seconds = time.monotonic() - t0

    def _sweep(self, result: RunConfigResult, server: TritonServer) -> list[Measurement]:
        done: list[Measurement] = []

        def measure(concurrency: int) -> Measurement:
            monitor = ProcessMonitor(server.pid, gpu=self._gpu).start()
            try:
                perf = self._perf.measure(self.model, server.url, concurrency)
            finally:
                sample = monitor.stop()
            m = Measurement(result.variant, concurrency, self.options.perf.batch_size, perf,
                            sample)
            done.append(m)
            return m

        try:
            return sweep_concurrency(measure, self.options.concurrency, self.constraints)
        except PerfAnalyzerError as exc:
            result.error = str(exc)
            return done

    def _report_progress(self, result: RunConfigResult) -> None:
        if self._progress is None:
            return
        best_result = max(self.results, key=self.constraints.score)
        best = self.constraints.best(best_result)
        best_text = (f"{best.throughput:.0f} infer/s ({best_result.variant})" if best
                     else "none meets the constraints yet")
        self._progress.write(_line(result, self.constraints))
        self._progress.update(len(self.results), self._per_config_s(), best_text)


def _point(m: Measurement, constraints: Constraints) -> str:
    metric = constraints.latency_metric
    return (f"{m.throughput:.0f} infer/s at concurrency {m.concurrency}, {metric} "
            f"{m.latency(metric):.1f} ms, {m.server.peak_rss_mb:.0f} MB")


def _line(result: RunConfigResult, constraints: Constraints) -> str:
    changes = ", ".join(f"{k}={v}" for k, v in describe(result.changes).items()) or "as written"
    if result.error and not result.measurements:
        return f"  {result.variant} [{changes}]: failed: {result.error.splitlines()[0]}"
    best = constraints.best(result)
    metric = constraints.latency_metric
    if best is None:
        top = max(result.measurements, key=lambda m: m.throughput)
        return (f"  {result.variant} [{changes}]: no measurement meets the constraints; at best "
                f"{top.throughput:.0f} infer/s, {metric} {top.latency(metric):.1f} ms "
                f"({result.seconds:.0f} s)")
    return f"  {result.variant} [{changes}]: {_point(best, constraints)} ({result.seconds:.0f} s)"


def profile(options: ProfileOptions) -> ProfileResult:
    return Profiler(options).run()

