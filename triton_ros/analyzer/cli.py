"""``triton-ros-analyzer``: the command line (model_analyzer's option names where they exist).

::

    triton-ros-analyzer profile --model-repository R --profile-models M
        [--latency-budget-ms X] [--memory-cap-mb Y] [--quick] [--output-dir D] ...
    triton-ros-analyzer ros --model-repository R --model M --rates 30
        [--camera-size 640x480] [--latency-budget-ms X] [--quick] [--output-dir D] ...

Exit status: 0 a recommendation was written; 3 the sweep finished but nothing met the
constraints; 1 the sweep could not run; 2 a usage error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .arguments import existing_repository, fraction, number_list, positive
from .confirmation import QUICK_ROUNDS, ROUNDS
from .config_search import QUICK, SEARCH_MODES, ConcurrencySweepSettings
from .errors import AnalyzerError, ExitStatus
from .measurement import DEFAULT_HEADROOM, DEFAULT_LATENCY_METRIC, Constraints
from .perf_analyzer import LATENCY_METRICS, NO_STABILITY_CHECK, PerfAnalyzerSettings
from .search_space import SearchLimits

#: ``--quick``: what it changes, so that a sweep ends within about two minutes on 2 cores.
QUICK_TIME_BUDGET_S = 60.0
QUICK_LIMITS = dict(max_instance_count=4, max_model_batch_size=32)
QUICK_MAX_CONCURRENCY = 32
QUICK_MEASUREMENT_INTERVAL_MS = 500


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="triton-ros-analyzer",
        description="Triton model_analyzer's answer for a model of a repository: sweep its "
        "configurations with perf_analyzer against triton-ros-server, chart them, "
        "and recommend one under a latency budget or memory cap.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = p.add_subparsers(dest="command", required=True)

    prof = sub.add_parser("profile", help="sweep a model's configurations (server + perf_analyzer)")
    prof.add_argument(
        "--model-repository",
        "-m",
        action="append",
        required=True,
        type=existing_repository,
        help="model repository (repeat for several); only read, never written",
    )
    prof.add_argument(
        "--profile-models", required=True, metavar="MODEL", help="the model to profile"
    )
    _constraint_arguments(prof)
    prof.add_argument(
        "--latency-headroom",
        type=fraction,
        default=DEFAULT_HEADROOM,
        metavar="FRACTION",
        help="choose only measurements at most budget*(1-FRACTION), so that "
        "the recommendation meets the budget when measured again on a noisy "
        f"host (default {DEFAULT_HEADROOM})",
    )
    prof.add_argument(
        "--memory-cap-mb",
        type=positive(float),
        default=None,
        help="cap on the server's peak RSS (its processes), MB",
    )
    prof.add_argument(
        "--gpu-memory-cap-mb",
        type=positive(float),
        default=None,
        help="cap on the GPU memory of the server's processes, MB",
    )
    prof.add_argument(
        "--output-dir",
        "--export-path",
        "-e",
        type=Path,
        default=Path("profile_results"),
        help="where results, plots, reports and the recommendation go (default ./profile_results)",
    )
    prof.add_argument(
        "--quick",
        action="store_true",
        help=f"a short sweep (about 3 minutes on 2 cores): quick search, "
        f"{QUICK_MEASUREMENT_INTERVAL_MS} ms windows without the "
        f"stability check, concurrency <= {QUICK_MAX_CONCURRENCY}, "
        f"configurations started within {QUICK_TIME_BUDGET_S:.0f} s, then "
        f"the model's own configuration and the best candidates measured "
        f"again in {QUICK_ROUNDS} alternating rounds",
    )
    prof.add_argument(
        "--run-config-search-mode",
        choices=SEARCH_MODES,
        default=QUICK,
        help="quick: hill climbing over every dimension (default); brute: every "
        "instance kind x count x max batch size",
    )
    prof.add_argument(
        "--time-budget-s",
        type=positive(float),
        default=None,
        help="start no configuration that would end after this many seconds",
    )
    prof.add_argument(
        "--max-configs",
        type=positive(int),
        metavar="N",
        default=None,
        help="measure at most this many configurations (the model's own included)",
    )
    d = SearchLimits()
    prof.add_argument(
        "--run-config-search-min-instance-count",
        type=positive(int),
        metavar="N",
        default=d.min_instance_count,
    )
    prof.add_argument(
        "--run-config-search-max-instance-count",
        type=positive(int),
        metavar="N",
        default=None,
        help=f"default {d.max_instance_count}",
    )
    prof.add_argument(
        "--run-config-search-min-model-batch-size",
        type=positive(int),
        metavar="N",
        default=d.min_model_batch_size,
    )
    prof.add_argument(
        "--run-config-search-max-model-batch-size",
        type=positive(int),
        metavar="N",
        default=None,
        help=f"default {d.max_model_batch_size}",
    )
    prof.add_argument(
        "--max-queue-delay-microseconds",
        default=None,
        type=number_list(int, what="delays (us)", zero_allowed=True),
        metavar="US,US,...",
        help="dynamic batcher delays to try (default "
        + ",".join(str(v) for v in d.max_queue_delays_us)
        + ")",
    )
    prof.add_argument(
        "--run-config-search-max-thread-count",
        type=positive(int),
        metavar="N",
        default=None,
        help="largest ONNX Runtime thread count (default: the CPU count)",
    )
    c = ConcurrencySweepSettings()
    prof.add_argument(
        "--run-config-search-min-concurrency",
        type=positive(int),
        metavar="N",
        default=c.min_concurrency,
    )
    prof.add_argument(
        "--run-config-search-max-concurrency",
        type=positive(int),
        metavar="N",
        default=None,
        help=f"default {c.max_concurrency} ({QUICK_MAX_CONCURRENCY} with --quick)",
    )
    prof.add_argument(
        "--quick-passes",
        type=positive(int),
        metavar="N",
        default=None,
        help="rounds of the quick search over all dimensions (default 2)",
    )
    prof.add_argument(
        "--confirm-candidates",
        type=positive(int),
        metavar="N",
        default=2,
        help="the best N configurations of the sweep are measured again, "
        "alternating with the model's own, before one is recommended "
        "(default 2)",
    )
    prof.add_argument(
        "--confirm-rounds",
        type=positive(int),
        metavar="N",
        default=None,
        help=f"alternating rounds of that confirmation (default {ROUNDS}; "
        f"{QUICK_ROUNDS} with --quick); a change is recommended only when "
        f"it beat the model's own configuration in every round",
    )
    _perf_arguments(prof)
    prof.add_argument(
        "--server-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra triton-ros-server argument (repeat), e.g. --server-arg=--log-verbose=1",
    )
    prof.add_argument("--no-progress", action="store_true", help="no progress bar")

    ros = sub.add_parser(
        "ros", help="cameras x rate an inference_node serves within a per-frame latency budget"
    )
    from .ros_profiler import add_arguments as add_ros_arguments

    add_ros_arguments(ros)
    return p


def _constraint_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--latency-budget-ms",
        "--latency-budget",
        type=positive(float),
        default=None,
        help="latency budget, ms (on --latency-metric)",
    )
    p.add_argument(
        "--latency-metric",
        choices=LATENCY_METRICS,
        default=DEFAULT_LATENCY_METRIC,
        help=f"the latency the budget applies to (default {DEFAULT_LATENCY_METRIC}: "
        "model_analyzer's perf_latency_p99)",
    )


def _perf_arguments(p: argparse.ArgumentParser) -> None:
    d = PerfAnalyzerSettings()
    p.add_argument(
        "--measurement-interval",
        type=positive(int),
        default=None,
        metavar="MS",
        help=f"perf_analyzer's window, ms (default {d.measurement_interval_ms}; "
        f"{QUICK_MEASUREMENT_INTERVAL_MS} with --quick)",
    )
    p.add_argument(
        "--stability-percentage",
        type=positive(float),
        default=None,
        help=f"perf_analyzer's -s (default {d.stability_percentage:g}; an unstable "
        "point is measured again without the check and marked)",
    )
    p.add_argument("--max-trials", type=positive(int), default=d.max_trials)
    p.add_argument(
        "--batch-size",
        "-b",
        type=positive(int),
        default=d.batch_size,
        help="client batch size of each request",
    )
    p.add_argument("--protocol", choices=("grpc",), default=d.protocol)
    p.add_argument(
        "--input-data",
        default=d.input_data,
        help="perf_analyzer's --input-data: zero (default), random or a JSON file",
    )
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D1,D2",
        help="shape of an input with variable dimensions (perf_analyzer's --shape)",
    )
    p.add_argument(
        "--perf-analyzer-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra perf_analyzer flag (repeat), e.g. --perf-analyzer-flag=--async",
    )


def profile_options(args: argparse.Namespace):
    from .profile_result import ProfileOptions

    quick = args.quick
    defaults = SearchLimits()
    delays = defaults.max_queue_delays_us
    if args.max_queue_delay_microseconds:
        delays = tuple(args.max_queue_delay_microseconds)
    limits = SearchLimits(
        min_instance_count=args.run_config_search_min_instance_count,
        max_instance_count=args.run_config_search_max_instance_count
        or (QUICK_LIMITS["max_instance_count"] if quick else defaults.max_instance_count),
        min_model_batch_size=args.run_config_search_min_model_batch_size,
        max_model_batch_size=args.run_config_search_max_model_batch_size
        or (QUICK_LIMITS["max_model_batch_size"] if quick else defaults.max_model_batch_size),
        max_queue_delays_us=delays,
        max_thread_count=args.run_config_search_max_thread_count or 0,
    )
    sweep = ConcurrencySweepSettings(
        min_concurrency=args.run_config_search_min_concurrency,
        max_concurrency=args.run_config_search_max_concurrency
        or (QUICK_MAX_CONCURRENCY if quick else ConcurrencySweepSettings().max_concurrency),
        tries=ConcurrencySweepSettings().tries,
    )
    d = PerfAnalyzerSettings()
    perf = PerfAnalyzerSettings(
        measurement_interval_ms=args.measurement_interval
        or (QUICK_MEASUREMENT_INTERVAL_MS if quick else d.measurement_interval_ms),
        stability_percentage=args.stability_percentage
        or (NO_STABILITY_CHECK if quick else d.stability_percentage),
        max_trials=3 if quick and args.max_trials == d.max_trials else args.max_trials,
        batch_size=args.batch_size,
        protocol=args.protocol,
        input_data=args.input_data,
        shapes=tuple(args.shape),
        extra_flags=tuple(args.perf_analyzer_flag),
    )
    constraints = Constraints(
        latency_budget_ms=args.latency_budget_ms,
        latency_metric=args.latency_metric,
        headroom=args.latency_headroom,
        memory_cap_mb=args.memory_cap_mb,
        gpu_memory_cap_mb=args.gpu_memory_cap_mb,
    )
    return ProfileOptions(
        model_repositories=[p.resolve() for p in args.model_repository],
        model=args.profile_models,
        output_dir=args.output_dir.resolve(),
        constraints=constraints,
        mode=args.run_config_search_mode,
        quick_passes=args.quick_passes or 2,
        limits=limits,
        concurrency=sweep,
        perf=perf,
        time_budget_s=args.time_budget_s or (QUICK_TIME_BUDGET_S if quick else None),
        max_configs=args.max_configs,
        confirm_candidates=args.confirm_candidates,
        confirm_rounds=args.confirm_rounds or (QUICK_ROUNDS if quick else ROUNDS),
        server_args=tuple(args.server_arg),
        progress=not args.no_progress,
    )


def run_profile(args: argparse.Namespace) -> int:
    from .profiler import profile

    result = profile(profile_options(args))
    out = sys.stdout
    print(
        f"\n{result.model}: {len(result.results)} configurations in {result.seconds:.0f} s "
        f"({result.options.mode} search"
        f"{', stopped by its budget' if result.stopped_by_budget else ''})",
        file=out,
    )
    print(f"constraints: {result.constraints.describe()}", file=out)
    for key in (
        "summary_csv",
        "inference_csv",
        "throughput_v_latency",
        "cpu_mem_v_throughput",
        "html",
    ):
        print(f"  {key}: {result.files[key]}", file=out)
    rec = result.recommendation
    if rec is None:
        print(
            "no configuration met the constraints (the model's own in most confirmation "
            "rounds, or any in the sweep): no recommendation",
            file=out,
        )
        return ExitStatus.NO_RECOMMENDATION
    from .recommendation import verdict_lines

    for line in verdict_lines(rec):
        print(line, file=out)
    print(f"  config.pbtxt: {result.files['recommended_config']}", file=out)
    return ExitStatus.OK


_RANGES = {  # (least, most) option pairs, checked once both are parsed
    "profile": (
        ("run_config_search_min_instance_count", "run_config_search_max_instance_count"),
        ("run_config_search_min_model_batch_size", "run_config_search_max_model_batch_size"),
        ("run_config_search_min_concurrency", "run_config_search_max_concurrency"),
    ),
    "ros": (("min_cameras", "max_cameras"),),
}


def check_ranges(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A least above its most is a usage error (argparse's exit 2), not an empty sweep."""
    for low, high in _RANGES.get(args.command, ()):
        lo, hi = getattr(args, low), getattr(args, high)
        if lo is not None and hi is not None and lo > hi:
            parser.error(f"--{low.replace('_', '-')} {lo} is above --{high.replace('_', '-')} {hi}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, args)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname).1s %(name)s] %(message)s",
    )
    try:
        if args.command == "profile":
            return int(run_profile(args))
        from .ros_profiler import run as run_ros

        return int(run_ros(args))
    except AnalyzerError as exc:
        print(f"triton-ros-analyzer: {exc}", file=sys.stderr)
        return int(exc.status)
    except KeyboardInterrupt:
        print("triton-ros-analyzer: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
