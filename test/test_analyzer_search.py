"""triton-ros-analyzer without processes: the search space of real model configurations, the
variants written with the core's writer (and accepted by the core's own validation), the search
strategies, the concurrency sweep's early exit, the constraints and the recommendation, the
perf_analyzer CSV reader, the charts and the HTML page, and the import boundaries."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from server_process import MODEL_REPOSITORY, ROOT
from triton_ros.analyzer import search_space as ss
from triton_ros.analyzer.config_search import (
    ConcurrencySweepSettings,
    brute_plan,
    quick_plan_size,
    quick_search,
    sweep_concurrency,
)
from triton_ros.analyzer.measurement import Constraints, Measurement, RunConfigResult
from triton_ros.analyzer.model_variant import ScratchRepository, config_text, read_user_config
from triton_ros.analyzer.perf_analyzer import PerfResult, read_csv
from triton_ros.analyzer.recommendation import candidates, reproducible_flags
from triton_ros.analyzer.server_monitor import ProcessSample
from triton_ros.core.model_config import load_model_config, parse_config_text
from triton_ros.core.protos import model_config_pb2 as mc

pytestmark = pytest.mark.unit


def served(model: str) -> mc.ModelConfig:
    """The normalized configuration the server would serve (the bundled configs are complete)."""
    return load_model_config(model, MODEL_REPOSITORY / model).proto


# -- search space ------------------------------------------------------------------------------


def test_detector_space_has_every_dimension_with_the_models_values_as_default():
    space = ss.model_search_space(served("detector"), cpu_count=2)
    assert space.names == (
        ss.KIND,
        ss.COUNT,
        ss.MAX_BATCH_SIZE,
        ss.DELAY,
        ss.PREFERRED,
        ss.INTRA_OP,
        ss.INTER_OP,
    )
    values = space.values(space.default)
    assert values[ss.KIND] == "KIND_CPU" and values[ss.COUNT] == 2
    assert values[ss.MAX_BATCH_SIZE] == 16 and values[ss.DELAY] == 0
    assert values[ss.PREFERRED] == ss.PreferredSizes(literal=(4, 8))
    assert values[ss.INTRA_OP] == 1 and values[ss.INTER_OP] == 0
    dims = {d.name: d.values for d in space.dimensions}
    assert dims[ss.COUNT] == (1, 2, 3, 4, 5)  # model_analyzer's default range
    assert dims[ss.MAX_BATCH_SIZE] == (1, 2, 4, 8, 16, 32, 64, 128)
    assert dims[ss.KIND] == ("KIND_CPU",)  # no GPU here
    assert space.changes(space.default) == {}


def test_gpu_adds_kind_gpu_and_models_without_batching_or_ort_lose_those_dimensions():
    space = ss.model_search_space(served("detector"), gpu_count=1, cpu_count=2)
    assert dict((d.name, d.values) for d in space.dimensions)[ss.KIND] == ("KIND_CPU", "KIND_GPU")
    unbatched = parse_config_text('backend: "onnxruntime"\nmax_batch_size: 0\n', model_name="u")
    unbatched.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=1)
    names = ss.model_search_space(unbatched, cpu_count=2).names
    assert ss.MAX_BATCH_SIZE not in names and ss.DELAY not in names and ss.INTRA_OP in names
    python = ss.model_search_space(served("detector_preprocess"), cpu_count=2).names
    assert ss.INTRA_OP not in python and ss.DELAY in python
    assert ss.model_search_space(served("detector_pipeline"), cpu_count=2).names == ()
    # a model without a dynamic batcher keeps "off" as a value (and its default)
    simple = ss.model_search_space(served("simple"), cpu_count=2)
    delays = dict((d.name, d.values) for d in simple.dimensions)[ss.DELAY]
    assert delays[0] is None and simple.values(simple.default)[ss.DELAY] is None


def test_variants_are_the_users_config_changed_and_pass_the_cores_validation(tmp_path):
    space = ss.model_search_space(served("detector"), cpu_count=2)
    user = read_user_config(MODEL_REPOSITORY / "detector")
    point = list(space.default)
    for name, index in (
        (ss.COUNT, 0),
        (ss.MAX_BATCH_SIZE, 5),
        (ss.DELAY, 2),
        (ss.PREFERRED, 1),
        (ss.INTRA_OP, 1),
        (ss.INTER_OP, 1),
    ):
        point[space.index(name)] = index
    changes = space.changes(tuple(point))
    assert changes[ss.COUNT] == 1 and changes[ss.MAX_BATCH_SIZE] == 32
    proto = ss.apply_changes(user, changes, served("detector"), space.values(tuple(point)))
    text = config_text(proto)
    # written with the core's writer, read back with the core's parser: the same message
    assert parse_config_text(text, model_name="detector") == proto
    model_dir = tmp_path / "detector"
    shutil.copytree(MODEL_REPOSITORY / "detector", model_dir)
    (model_dir / "config.pbtxt").write_text(text)
    config = load_model_config("detector", model_dir)  # the core's full validation
    assert config.max_batch_size == 32
    assert [(g.kind, g.count) for g in config.instance_groups] == [("KIND_CPU", 1)]
    assert config.dynamic_batching.max_queue_delay_us == 2000
    assert config.dynamic_batching.preferred_batch_sizes == (16,)  # [max/2] of 32
    assert config.parameters["intra_op_thread_count"] == "2"
    assert config.parameters["inter_op_thread_count"] == "2"
    assert config.parameters["execution_mode"] == "1"  # inter-op threads need it
    # everything the user wrote and the sweep did not touch is kept
    assert [o.label_filename for o in config.outputs] == ["", "labels.txt"]


def test_a_new_max_batch_size_clips_the_models_own_preferred_sizes():
    space = ss.model_search_space(served("detector"), cpu_count=2)
    point = list(space.default)
    point[space.index(ss.MAX_BATCH_SIZE)] = 2  # 4
    point = tuple(point)
    proto = ss.apply_changes(
        read_user_config(MODEL_REPOSITORY / "detector"),
        space.changes(point),
        served("detector"),
        space.values(point),
    )
    assert proto.max_batch_size == 4 and list(proto.dynamic_batching.preferred_batch_size) == [4]


def test_turning_the_dynamic_batcher_off_and_default_onnx_threads_remove_the_fields():
    space = ss.model_search_space(served("simple"), cpu_count=2)
    user = read_user_config(MODEL_REPOSITORY / "simple")
    on = list(space.default)
    on[space.index(ss.DELAY)] = 1  # 0 us: the batcher on
    proto = ss.apply_changes(user, space.changes(tuple(on)), served("simple"))
    assert proto.HasField("dynamic_batching")
    assert (
        ss.apply_changes(proto, {ss.DELAY: None, ss.INTRA_OP: 0}, served("simple")).HasField(
            "dynamic_batching"
        )
        is False
    )


def test_scratch_repository_copies_an_ensemble_with_its_steps_and_restores_the_users_file(tmp_path):
    scratch = ScratchRepository([MODEL_REPOSITORY], "detector_pipeline", tmp_path / "s")
    assert sorted(scratch.models) == [
        "color_detector",
        "detector_pipeline",
        "detector_postprocess",
        "detector_preprocess",
    ]
    original = (MODEL_REPOSITORY / "detector_pipeline" / "config.pbtxt").read_bytes()
    scratch.write_config(mc.ModelConfig(max_batch_size=4))
    assert scratch.config_path.read_bytes() != original
    scratch.restore_user_config()
    assert scratch.config_path.read_bytes() == original


# -- search strategies -------------------------------------------------------------------------


def test_quick_search_climbs_to_the_best_point_measuring_a_fraction_of_the_grid():
    space = ss.model_search_space(served("detector"), cpu_count=4)
    best_values = {ss.COUNT: 3, ss.MAX_BATCH_SIZE: 8, ss.INTRA_OP: 2}
    seen = []

    def evaluate(point):
        seen.append(point)
        values = space.values(point)
        distance = sum(
            abs(
                space.dimensions[space.index(n)].values.index(values[n])
                - space.dimensions[space.index(n)].values.index(v)
            )
            for n, v in best_values.items()
        )
        return (1, 100.0 - 10 * distance, 0.0)

    found = quick_search(space, evaluate, passes=2)
    assert {n: space.values(found)[n] for n in best_values} == best_values
    assert len(set(seen)) <= quick_plan_size(space, 2) < space.size / 20


def test_quick_search_does_not_move_for_gains_inside_the_noise():
    space = ss.model_search_space(served("detector"), cpu_count=2)
    calls = []

    def evaluate(point):
        calls.append(point)
        return (1, 100.0 + 3.0 * (point != space.default), 0.0)  # +3 %: noise

    assert quick_search(space, evaluate, min_gain=0.05) == space.default


def test_brute_plan_starts_with_the_models_config_and_crosses_kind_count_batch():
    space = ss.model_search_space(served("detector"), cpu_count=2)
    plan = brute_plan(space)
    assert plan[0] == space.default and len(plan) == len(set(plan)) == 1 * 5 * 8
    fixed = [space.index(n) for n in (ss.DELAY, ss.PREFERRED, ss.INTRA_OP)]
    assert all(p[i] == space.default[i] for p in plan for i in fixed)


# -- measurements, constraints, recommendation --------------------------------------------------


def measurement(
    variant: str, concurrency: int, throughput: float, p99: float, rss: float = 100.0
) -> Measurement:
    latency = {"avg": p99 / 3, "p50": p99 / 4, "p90": p99 / 2, "p95": p99 / 1.5, "p99": p99}
    return Measurement(
        variant,
        concurrency,
        1,
        PerfResult(
            concurrency,
            throughput,
            latency,
            0.1,
            1.0,
            command=(
                "perf_analyzer",
                "-m",
                "m",
                "-u",
                "127.0.0.1:1",
                "-f",
                "/tmp/x.csv",
                "--concurrency-range",
                str(concurrency),
            ),
        ),
        ProcessSample(1.0, rss, rss, None, 1.0),
    )


def test_the_sweep_stops_at_a_throughput_plateau_and_past_the_budget():
    curve = {
        1: (100, 2.0),
        2: (180, 3.0),
        4: (200, 5.0),
        8: (204, 9.0),
        16: (205, 17.0),
        32: (206, 33.0),
        64: (206, 65.0),
    }
    asked = []

    def measure(c):
        asked.append(c)
        return measurement("v", c, *curve[c])

    sweep_concurrency(measure, ConcurrencySweepSettings(max_concurrency=64, tries=2), Constraints())
    assert asked == [1, 2, 4, 8, 16]  # 204 and 205 are < 5 % over 200
    asked.clear()
    sweep_concurrency(
        measure,
        ConcurrencySweepSettings(max_concurrency=64, tries=10),
        Constraints(latency_budget_ms=10.0, headroom=0.2),
    )
    assert asked == [1, 2, 4, 8]  # 9 ms > 8 ms (budget less 20 %): stop


def test_constraints_choose_the_best_throughput_under_the_budget_with_headroom():
    c = Constraints(latency_budget_ms=10.0, headroom=0.2, memory_cap_mb=150.0)
    fast = RunConfigResult(
        "m_config_0",
        {},
        {},
        mc.ModelConfig(),
        [
            measurement("m_config_0", 1, 100, 4.0),
            measurement("m_config_0", 2, 190, 7.9),
            measurement("m_config_0", 4, 300, 8.5),
        ],
    )  # 8.5 ms: over 8 ms
    big = RunConfigResult(
        "m_config_1", {}, {}, mc.ModelConfig(), [measurement("m_config_1", 4, 400, 6.0, rss=200.0)]
    )  # over the memory cap
    default = RunConfigResult(
        "m_config_default", {}, {}, mc.ModelConfig(), [measurement("m_config_default", 1, 90, 5.0)]
    )
    assert c.best(fast).throughput == 190 and c.best(big) is None
    assert c.violations(big.measurements[0]) == ["memory 200 MB > 150 MB"]
    ranked = candidates([default, big, fast], c)
    assert [r.variant for r, _ in ranked] == ["m_config_0", "m_config_default"]
    assert c.score(big) < c.score(default) < c.score(fast)
    assert Constraints().best(big).throughput == 400  # no constraint: throughput
    flags = reproducible_flags(fast.measurements[0].perf.command)
    assert flags == ["-m", "m", "--concurrency-range", "1"]


def test_perf_analyzer_csv_as_perf_analyzer_2_50_writes_it(tmp_path):
    path = tmp_path / "pa.csv"
    path.write_text(
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
        "p50 latency,p90 latency,p95 latency,p99 latency\n"
        "4,224.627,96,6167,5198,0,6129,24,2,16278,26882,30166,36160\n"
    )
    r = read_csv(path)
    assert r.concurrency == 4 and r.throughput == pytest.approx(224.627)
    assert r.latency_ms["p50"] == pytest.approx(16.278)
    assert r.latency_ms["p99"] == pytest.approx(36.16)
    # perf_analyzer's average latency is the sum of its parts (it printed 17620 usec)
    assert r.latency_ms["avg"] == pytest.approx(17.616)
    assert r.server_queue_ms == pytest.approx(5.198)
    assert r.server_compute_ms == pytest.approx(6.153)


def test_cameras_double_then_bisect_and_a_step_says_why_it_failed():
    from triton_ros.analyzer.ros_profiler import CameraStep, camera_counts

    assert camera_counts(1, 32, lambda n: n < 11) == [1, 2, 4, 8, 16, 12, 10, 11]
    assert camera_counts(1, 6, lambda n: True) == [1, 2, 4, 6]  # clamped to the most
    assert camera_counts(1, 32, lambda n: False) == [1]
    step = CameraStep(30.0, 4, 33.3, seconds=2.0, received=240, published=200, latency_p99_ms=40.0)
    assert not step.passes(0.02)
    assert step.why(0.02) == "p99 40.0 ms > 33.3 ms; published 83.3% of the frames"
    step.latency_p99_ms, step.published = 20.0, 238
    assert step.passes(0.02) and step.cameras_kept_up
    step.received, step.camera_cpu_cores = 150, 1.0  # the camera process lagged
    assert not step.cameras_kept_up and "camera process was saturated" in step.why(0.02)


# -- report --------------------------------------------------------------------------------------


def test_charts_and_html_are_written_and_readable(tmp_path):
    from triton_ros.analyzer import report

    c = Constraints(latency_budget_ms=10.0)
    results = [
        RunConfigResult(
            f"m_config_{i}",
            {ss.COUNT: i + 1},
            {ss.COUNT: i + 1},
            mc.ModelConfig(),
            [measurement(f"m_config_{i}", k, 50 * k + i, k * (1 + i / 10)) for k in (1, 2, 4, 8)],
        )
        for i in range(8)
    ]
    results.append(
        RunConfigResult(
            "m_config_8", {}, {ss.COUNT: 9}, mc.ModelConfig(), error="model 'm' did not load: boom"
        )
    )
    chosen = c.best(results[0])
    png = report.plot_throughput_v_latency(results, c, chosen, "m", tmp_path / "t.png")
    mem = report.plot_memory_v_throughput(results, c, chosen, "m", tmp_path / "m.png")
    for path in (png, mem):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    rows = report.summary_rows(results, c)
    assert rows[0][0] == "Model Config" and rows[-1][0] == "m_config_8"
    assert rows[-1][-1] == "model 'm' did not load: boom"
    assert len(report.inference_rows(results, c)) == 1 + 8 * 4


# -- boundaries ------------------------------------------------------------------------------------


def _imports(path: Path, *, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    return names


def test_core_frontend_and_ros_never_import_the_analyzer_nor_it_the_ros_node():
    package = ROOT / "triton_ros"
    for area in ("core", "frontend", "ros"):
        for path in (package / area).rglob("*.py"):
            assert not any("analyzer" in name for name in _imports(path)), path
    for path in (package / "analyzer").rglob("*.py"):
        for name in _imports(path):
            assert not name.startswith(("triton_ros.ros", "..ros")), (path, name)
            if name.startswith("rclpy"):
                assert path.name == "ros_profiler.py", (path, name)
        # rclpy, matplotlib and NVML load only when a command needs them
        assert not {
            n
            for n in _imports(path, top_level_only=True)
            if n.split(".")[0] in ("rclpy", "matplotlib", "pynvml")
        }, path


def test_the_monitor_sees_this_processs_cpu_and_memory_and_no_gpu_here():
    import os
    import time

    from triton_ros.analyzer.server_monitor import GpuMemoryReader, ProcessMonitor

    gpu = GpuMemoryReader()
    monitor = ProcessMonitor(os.getpid(), interval_s=0.05, gpu=gpu).start()
    block = bytearray(64 * 1024 * 1024)  # 64 MB resident while it samples
    end = time.process_time() + 0.4
    while time.process_time() < end:
        block[::4096] = b"\x01" * len(block[::4096])
    sample = monitor.stop()
    del block
    # 0.4 s of CPU burnt here (however long the busy host made it take), 64 MB held
    assert sample.cpu_cores * sample.seconds >= 0.35 and sample.peak_rss_mb > 64
    if not gpu.available:  # this machine: no NVML device
        assert sample.peak_gpu_memory_mb is None and gpu.used_mb({os.getpid()}) is None
    gpu.close()
