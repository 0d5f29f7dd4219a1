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

from . import confirmation
from . import recommendation as recommendation_module
from . import report
from .config_search import (
    BRUTE,
    SearchStopped,
    brute_plan,
    brute_search,
    quick_plan_size,
    quick_search,
    sweep_concurrency,
)
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

            self.bar = tqdm(
                total=total,
                unit="config",
                desc="profiling",
                file=sys.stderr,
                dynamic_ncols=True,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} configs [{elapsed}{postfix}]",
            )

    def estimate_left(self, done: int, per_config_s: float) -> float:
        left = max(self.total - done, 0) * per_config_s
        if self.budget_s is not None:
            left = min(left, max(self.budget_s - (time.monotonic() - self.t0), 0.0))
        return left

    def update(self, done: int, per_config_s: float, best: str) -> None:
        if self.bar is None:
            return
        self.bar.n = min(done, self.total)
        self.bar.set_postfix_str(
            f"~{self.estimate_left(done, per_config_s):.0f} s left, best: {best}", refresh=True
        )

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
        self.verdict: confirmation.Verdict | None = None

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> ProfileResult:
        self._t0 = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        self._perf = PerfAnalyzer(self.options.perf, self.logs)
        self._gpu = GpuMemoryReader()
        scratch_root = Path(tempfile.mkdtemp(prefix="triton_ros_analyzer_"))
        stopped = False
        try:
            self._scratch = ScratchRepository(
                self.options.model_repositories, self.model, scratch_root / "models"
            )
            default = self._measure_default()
            if default.error and not default.measurements:
                raise AnalyzerError(
                    f"the model's own configuration could not be measured: {default.error}"
                )
            space = self._space
            plan = (
                len(brute_plan(space))
                if self.options.mode == BRUTE
                else quick_plan_size(space, self.options.quick_passes)
            )
            if self.options.max_configs is not None:
                plan = min(plan, self.options.max_configs)
            self._progress = _Progress(
                plan, self.options.progress, self.options.time_budget_s, self._t0
            )
            self._progress.write(
                f"{self.model}: {space.size} configurations in the space "
                f"({', '.join(f'{d.name}: {len(d)}' for d in space.dimensions) or 'none'}); "
                f"{self.options.mode} search measures at most {plan}"
                + (
                    f" within {self.options.time_budget_s:.0f} s"
                    if self.options.time_budget_s
                    else ""
                )
            )
            self._report_progress(default)
            try:
                if self.options.mode == BRUTE:
                    brute_search(space, self._evaluate)
                else:
                    quick_search(
                        space,
                        self._evaluate,
                        min_gain=self.options.concurrency.min_gain,
                        passes=self.options.quick_passes,
                    )
            except SearchStopped:
                stopped = True
                self._progress.write("time budget (or --max-configs) spent: the search stops here")
            rec = self._confirm()
        finally:
            if self._progress is not None:
                self._progress.close()
            if self._gpu is not None:
                self._gpu.close()
            shutil.rmtree(scratch_root, ignore_errors=True)
        result = ProfileResult(
            self.model,
            self.results,
            self._space,
            self.constraints,
            rec,
            time.monotonic() - self._t0,
            stopped,
            self.options,
            verdict=self.verdict,
        )
        if rec is not None:
            config, js = recommendation_module.write(
                rec, self.model, self.out / "recommended" / self.model
            )
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
            raise AnalyzerError(
                f"the server did not serve '{self.model}' in its own configuration: {result.error}"
            )
        result.values = self._space.values(self._space.default)
        self._by_point[self._space.default] = result
        self._by_text[config_text(scratch.user_config)] = result
        self.results.append(result)
        return result

    def _learn_space(self, server: TritonServer) -> None:
        self._served = server.model_config()
        self._check_shapes(self._served)
        self._space = model_search_space(
            self._served, self.options.limits, gpu_count=len(self._gpu_ids())
        )

    def _check_shapes(self, served) -> None:
        """perf_analyzer needs a shape for every variable dimension: say which input lacks one
        before it fails with its own words."""
        given = {s.split(":", 1)[0] for s in self.options.perf.shapes}
        if Path(self.options.perf.input_data).is_file():
            return  # a JSON data file gives its own shapes
        for tensor in served.input:
            if -1 in tensor.dims and tensor.name not in given:
                example = ",".join("224" if d == -1 else str(d) for d in tensor.dims)
                raise AnalyzerError(
                    f"input '{tensor.name}' of '{self.model}' has variable dimensions "
                    f"{list(tensor.dims)}: give the shape to measure with --shape "
                    f"{tensor.name}:{example} (perf_analyzer's --shape, without the batch "
                    f"dimension), or --input-data FILE.json"
                )

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
        proto = apply_changes(self._scratch.user_config, changes, self._served, space.values(point))
        text = config_text(proto)
        same = self._by_text.get(text)
        if same is not None:  # identical configuration: measured already
            self._by_point[point] = same
            return self.constraints.score(same)
        self._check_budget()
        result = RunConfigResult(
            variant_name(self.model, len(self.results) - 1), space.values(point), changes, proto
        )
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
        """The model's own configuration and the sweep's best candidates, each on a fresh
        server of its own, measured in alternating rounds at the same concurrencies
        (:mod:`.confirmation`); a change is recommended only when it beats the model's own by
        more than those rounds' spread, else the model's own is (``keep``)."""
        default = next(r for r in self.results if r.is_default)
        ranked = [
            r
            for r, _ in recommendation_module.candidates(self.results, self.constraints)
            if not r.is_default
        ][: self.options.confirm_candidates]
        chosen = [self.constraints.best(r) for r in [default, *ranked]]
        concurrencies = confirmation.confirmation_concurrencies(
            [m.concurrency if m is not None else None for m in chosen],
            least=self.options.concurrency.min_concurrency,
        )
        if not concurrencies:
            return None  # nothing met the constraints in the sweep
        perf = PerfAnalyzer(
            self.options.confirm_perf or self.options.perf,
            self.logs / "confirmation",
            executable=self._perf.executable,
        )
        rounds_wanted = self.options.confirm_rounds
        self._progress.write(
            f"confirming: {', '.join(r.variant for r in [default, *ranked])} in {rounds_wanted} "
            f"alternating rounds at concurrency {', '.join(map(str, concurrencies))}, each on "
            f"a fresh server"
        )
        servers: list[tuple[confirmation.Rounds, TritonServer]] = []
        try:
            for result in [default, *ranked]:
                server = self._start_confirmation_server(result)
                if server is not None:
                    servers.append((confirmation.Rounds(result), server))
            if not servers or servers[0][0].result is not default:
                self._progress.write(
                    "  the model's own configuration did not start again: nothing can be confirmed"
                )
                return None
            for k in range(rounds_wanted):
                measured: dict[str, dict[int, Measurement]] = {}
                for rounds, server in confirmation.round_order(servers, k):
                    measured[rounds.variant] = {}
                    for c in confirmation.round_order(concurrencies, k):
                        m = self._measure_on(server, rounds.result, c, perf)
                        if m is None:
                            break
                        measured[rounds.variant][c] = m
                        rounds.result.confirmations.append(m)
                if len(measured.get(default.variant, {})) != len(concurrencies):
                    continue  # the model's own missed a point: the round is void
                for rounds, _ in servers:
                    if len(measured.get(rounds.variant, {})) == len(concurrencies):
                        rounds.rounds.append(measured[rounds.variant])
                self._progress.write(
                    f"  round {k + 1}: "
                    + "; ".join(
                        f"{rounds.variant} "
                        + ", ".join(
                            f"{measured[rounds.variant][c].throughput:.0f}/s@{c}"
                            for c in concurrencies
                            if c in measured.get(rounds.variant, {})
                        )
                        for rounds, _ in servers
                    )
                )
        finally:
            for _, server in servers:
                server.stop()
        default_rounds = servers[0][0]
        complete = [r for r, _ in servers[1:] if len(r.rounds) == len(default_rounds.rounds)]
        if not default_rounds.rounds:
            return None
        verdict = confirmation.decide(
            default_rounds, complete, self.constraints, self.options.concurrency.min_gain
        )
        self.verdict = verdict
        for comparison in verdict.comparisons:
            text = comparison.same_concurrency.text() if comparison.same_concurrency else "no ratio"
            self._progress.write(
                f"  {comparison.variant}: {text} at concurrency {comparison.concurrency}"
                + ("" if comparison.beats else f": not recommended, {comparison.why_not()}")
            )
        return recommendation_module.from_verdict(verdict, self.constraints)

    def _start_confirmation_server(self, result: RunConfigResult) -> TritonServer | None:
        if result.is_default:
            self._scratch.restore_user_config()
        else:
            self._scratch.write_config(result.config)
        server = TritonServer(
            self._scratch.root,
            self.model,
            self.logs / f"server_{result.variant}_confirmation.log",
            extra_args=self.options.server_args,
        )
        try:
            server.start()  # loads the configuration now: the next one may be written
            return server
        except (ModelLoadError, ServerStartError) as exc:
            self._progress.write(f"  {result.variant} did not start again: {exc}")
            server.stop()
            return None

    def _measure_on(
        self, server: TritonServer, result: RunConfigResult, concurrency: int, perf: PerfAnalyzer
    ) -> Measurement | None:
        monitor = ProcessMonitor(server.pid, gpu=self._gpu).start()
        try:
            p = perf.measure(self.model, server.url, concurrency)
        except PerfAnalyzerError as exc:
            self._progress.write(f"  {result.variant} at concurrency {concurrency}: {exc}")
            return None
        finally:
            sample = monitor.stop()
        return Measurement(result.variant, concurrency, self.options.perf.batch_size, p, sample)

    # -- measuring one configuration -------------------------------------------------------

    def _measure(self, result: RunConfigResult, on_start=None) -> None:
        t0 = time.monotonic()
        server = TritonServer(
            self._scratch.root,
            self.model,
            self.logs / f"server_{result.variant}.log",
            extra_args=self.options.server_args,
        )
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
            m = Measurement(result.variant, concurrency, self.options.perf.batch_size, perf, sample)
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
        best_text = (
            f"{best.throughput:.0f} infer/s ({best_result.variant})"
            if best
            else "none meets the constraints yet"
        )
        self._progress.write(_line(result, self.constraints))
        self._progress.update(len(self.results), self._per_config_s(), best_text)


def _point(m: Measurement, constraints: Constraints) -> str:
    metric = constraints.latency_metric
    return (
        f"{m.throughput:.0f} infer/s at concurrency {m.concurrency}, {metric} "
        f"{m.latency(metric):.1f} ms, {m.server.peak_rss_mb:.0f} MB"
    )


def _line(result: RunConfigResult, constraints: Constraints) -> str:
    changes = ", ".join(f"{k}={v}" for k, v in describe(result.changes).items()) or "as written"
    if result.error and not result.measurements:
        return f"  {result.variant} [{changes}]: failed: {result.error.splitlines()[0]}"
    best = constraints.best(result)
    metric = constraints.latency_metric
    if best is None:
        top = max(result.measurements, key=lambda m: m.throughput)
        return (
            f"  {result.variant} [{changes}]: no measurement meets the constraints; at best "
            f"{top.throughput:.0f} infer/s, {metric} {top.latency(metric):.1f} ms "
            f"({result.seconds:.0f} s)"
        )
    return f"  {result.variant} [{changes}]: {_point(best, constraints)} ({result.seconds:.0f} s)"


def profile(options: ProfileOptions) -> ProfileResult:
    return Profiler(options).run()
