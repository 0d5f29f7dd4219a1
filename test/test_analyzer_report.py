"""The analyzer's pictures and tables, drawn from synthetic measurements with the real
matplotlib: concurrency labels never overlap, grey curves are named, the memory axis spans a
narrow band rather than 0..max, tables sit in a page-wide scroll box, the summary row of a
confirmed configuration is the recommendation box's point, "Preferred Batch Sizes" is what the
written config.pbtxt says, and the ros chart has whole camera counts and the frames received."""

from __future__ import annotations

import argparse

import pytest

from triton_ros.analyzer import confirmation as cf
from triton_ros.analyzer import report
from triton_ros.analyzer import search_space as ss
from triton_ros.analyzer.measurement import Constraints, Measurement, RunConfigResult
from triton_ros.analyzer.perf_analyzer import PerfResult
from triton_ros.analyzer.recommendation import from_verdict
from triton_ros.analyzer.server_monitor import ProcessSample
from triton_ros.core.protos import model_config_pb2 as mc

pytestmark = pytest.mark.unit


def m(
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
            command=("perf_analyzer", "-m", "m", "--concurrency-range", str(concurrency)),
        ),
        ProcessSample(1.0, rss, rss, None, 1.0),
    )


def crowded_results(n: int = 14) -> list[RunConfigResult]:
    """Configurations whose curves lie almost on top of each other (as on a busy host), RSS
    in a 100-112 MB band."""
    out = []
    for i in range(n):
        variant = "m_config_default" if i == 0 else f"m_config_{i - 1}"
        changes = {} if i == 0 else {ss.COUNT: i}
        out.append(
            RunConfigResult(
                variant,
                {ss.COUNT: i + 1},
                changes,
                mc.ModelConfig(),
                [
                    m(variant, c, 100 * (1 + k) + 2 * i, 5.0 * (k + 1) + 0.3 * i, rss=100 + 0.8 * i)
                    for k, c in enumerate((1, 2, 4, 8, 16))
                ],
            )
        )
    return out


@pytest.fixture
def placed(monkeypatch):
    """What each chart wrote: its labels' texts and boxes (display pixels), and its y limits."""
    charts = []
    original = report._place_labels

    def spy(fig, ax, labels):
        written = original(fig, ax, labels)
        renderer = fig.canvas.get_renderer()
        charts.append(
            {
                "labels": [(a.get_text(), a.get_window_extent(renderer)) for a in written],
                "ylim": ax.get_ylim(),
            }
        )
        return written

    monkeypatch.setattr(report, "_place_labels", spy)
    return charts


def test_labels_never_overlap_and_grey_curves_are_named(tmp_path, placed):
    results = crowded_results()
    c = Constraints(latency_budget_ms=100.0)
    chosen = c.best(results[3])
    report.plot_throughput_v_latency(results, c, chosen, "m", tmp_path / "t.png")
    report.plot_memory_v_throughput(results, c, chosen, "m", tmp_path / "mem.png")
    for chart in placed:
        boxes = [box for _, box in chart["labels"]]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not a.overlaps(b), (a, b)
        texts = [t for t, _ in chart["labels"]]
        # every grey configuration is named by its number (the legend says #n is m_config_n)
        styled = report._styles(results, c, chosen.variant)
        grey = [r.variant for r in results if r.variant not in styled]
        assert grey and all(report._short(v) in texts for v in grey), texts
        assert any(t.isdigit() for t in texts)  # concurrencies
    # the memory axis spans the 100-112 MB band, not 0..112
    low, high = placed[1]["ylim"]
    assert 90 < low < 100 and 110 < high < 125, placed[1]["ylim"]
    assert placed[0]["ylim"][0] == 0  # throughput still from 0


def test_memory_axis_from_zero_when_the_values_spread():
    assert report.narrow_band([100, 104, 110])
    assert not report.narrow_band([20, 110])


def test_tables_sit_in_a_page_wide_scroll_box():
    html = report._table([["a", "b"], ["1", "2"]])
    assert html.startswith("<div class='scroll'><table>") and html.endswith("</table></div>")
    assert ".scroll{max-width:100%;overflow-x:auto}" in report._CSS
    assert "white-space:normal" in report._CSS


def test_the_summary_row_shows_the_recommendation_boxs_point():
    c = Constraints(latency_budget_ms=100.0)
    default = RunConfigResult(
        "m_config_default", {}, {}, mc.ModelConfig(), [m("m_config_default", 8, 500, 40.0)]
    )  # the sweep's figure
    cand = RunConfigResult(
        "m_config_0",
        {ss.COUNT: 3},
        {ss.COUNT: 3},
        mc.ModelConfig(),
        [m("m_config_0", 8, 900, 40.0)],
    )  # a lucky sweep
    d_rounds = cf.Rounds(
        default, [{8: m("m_config_default", 8, t, 40.0)} for t in (300, 310, 290, 305)]
    )
    c_rounds = cf.Rounds(cand, [{8: m("m_config_0", 8, t, 40.0)} for t in (360, 370, 350, 365)])
    verdict = cf.decide(d_rounds, [c_rounds], c, 0.05)
    rec = from_verdict(verdict, c)
    rows = report.summary_rows([default, cand], c, verdict)
    header = rows[0]
    row = next(r for r in rows if r[0] == "m_config_0")
    col = header.index("Throughput (infer/sec)")
    assert row[col] == f"{rec.measurement.throughput:.1f}" == "360.0"
    assert row[header.index("Concurrency")] == str(rec.measurement.concurrency)
    assert row[header.index("Measured In")].startswith("confirmation (median of 4 rounds)")
    assert "1.20x (per round 1.19-1.21x" in row[header.index("Vs Model's Own (per round)")]
    own = next(r for r in rows if r[0] == "m_config_default")
    assert own[col] == "300.0"  # its median round, not the sweep's 500


def test_preferred_batch_sizes_are_the_written_configs():
    config = mc.ModelConfig(max_batch_size=4)
    config.dynamic_batching.preferred_batch_size.extend([4])
    # the point's value was the model's own [4, 8]; max_batch_size 4 clipped it to [4]
    r = RunConfigResult(
        "m_config_0",
        {ss.MAX_BATCH_SIZE: 4, ss.PREFERRED: ss.PreferredSizes(literal=(4, 8))},
        {ss.MAX_BATCH_SIZE: 4},
        config,
        [m("m_config_0", 1, 10, 1.0)],
    )
    rows = report.summary_rows([r], Constraints())
    assert rows[1][rows[0].index("Preferred Batch Sizes")] == "[4]"
    assert (
        report.inference_rows([r], Constraints())[1][rows[0].index("Preferred Batch Sizes")]
        == "[4]"
    )
    off = RunConfigResult(
        "m_config_1", {ss.PREFERRED: ss.PreferredSizes()}, {}, mc.ModelConfig(max_batch_size=4), []
    )
    assert report.written_preferred_sizes(off) == "off"


def test_the_ros_chart_has_whole_camera_counts_and_frames_received(tmp_path):
    from triton_ros.analyzer.ros_profiler import CameraStep, plot_steps

    args = argparse.Namespace(max_drop_fraction=0.02, encoding="rgb8", max_cameras=32)
    profiler = argparse.Namespace(
        args=args,
        rates=[15.0],
        size=(640, 480),
        model="m",
        budget=lambda rate: 1000 / rate,
        steps=[
            CameraStep(
                15.0,
                n,
                66.7,
                seconds=2.0,
                received=int(30 * n * 0.9),
                published=int(30 * n * 0.85),
                latency_p99_ms=10.0 * n,
            )
            for n in (1, 2, 3)
        ],
    )
    axes = plot_steps(profiler, {15.0: 2}, tmp_path / "ros.png", return_axes=True)
    ticks = [
        t for t in axes[-1].get_xticks() if axes[-1].get_xlim()[0] <= t <= axes[-1].get_xlim()[1]
    ]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    labels = [line.get_label() for ax in axes for line in ax.get_lines()]
    assert any("received" in label for label in labels), labels
    assert (tmp_path / "ros.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- ros: the count is confirmed, and how it was checked is said -------------------------------


def ros_profiler(tmp_path, capacity_in_search: int, holds: set[int]):
    """A RosProfiler whose steps are decided by a table: every count up to
    ``capacity_in_search`` passes in the search; in the confirmation only ``holds`` do."""
    from triton_ros.analyzer import ros_profiler as rp
    from triton_ros.analyzer.cli import build_parser

    args = build_parser().parse_args(
        [
            "ros",
            "-m",
            str(tmp_path),
            "--model",
            "m",
            "--rates",
            "15",
            "--quick",
            "-e",
            str(tmp_path / "out"),
        ]
    )
    profiler = rp.RosProfiler(args)

    def step(rate, cameras, node, observer, windows=None):
        ok = (
            cameras in holds
            if windows == profiler.confirm_windows
            else cameras <= capacity_in_search
        )
        p99 = [20.0] * (windows or profiler.windows) if ok else [90.0] * (windows or 3)
        s = rp.CameraStep(
            rate,
            cameras,
            66.7,
            seconds=6.0,
            received=cameras * 90,
            published=cameras * 90,
            window_p99_ms=p99,
        )
        s.latency_p99_ms = p99[0]
        return s

    profiler._step = step
    profiler._sweep_rate(15.0, None, None, None)
    return profiler


def test_ros_count_is_confirmed_and_its_check_is_stated(tmp_path):
    from triton_ros.analyzer.ros_profiler import answer_text

    p = ros_profiler(tmp_path, 7, holds={7})
    assert p.capacity(15.0) == 7
    assert [(s.cameras, s.confirmation) for s in p.steps][-1] == (7, True)
    text = "\n".join(answer_text(p, {15.0: 7}))
    assert "serves 7 camera(s)" in text
    assert (
        "checked: 7 camera(s) passed in the search (3 windows of 2 s) and again with "
        "fresh cameras over 5 windows"
    ) in text and "8 failed (p99 over 66.7 ms in 3 of 3" in text


def test_ros_count_that_does_not_hold_steps_down(tmp_path):
    p = ros_profiler(tmp_path, 15, holds={14, 12, 8, 7})
    # 15 passed the search but not again; 14 (the next lower that passed) held
    assert p.capacity(15.0) == 14
    confirmations = [s.cameras for s in p.steps if s.confirmation]
    assert confirmations == [15, 14]
    none = ros_profiler(tmp_path, 15, holds=set())
    # nothing holds: 15, 14, then bisecting down to the search's 12: 13, 12; four at most
    assert none.capacity(15.0) == 0
    assert [s.cameras for s in none.steps if s.confirmation] == [15, 14, 13, 12]
    # 12 passed the search, is refuted; bisected towards the next lower that passed (8): 10
    gap = ros_profiler(tmp_path, 12, holds={10, 9, 8})
    assert gap.capacity(15.0) == 10
    assert [s.cameras for s in gap.steps if s.confirmation] == [12, 10]
    from triton_ros.analyzer.ros_profiler import checked_text

    assert "10 camera(s) held with fresh cameras over 5 windows" in checked_text(gap, 15.0)


def test_a_step_passes_on_most_windows_not_on_the_worst_one():
    from triton_ros.analyzer.ros_profiler import CameraStep

    step = CameraStep(
        15.0, 4, 66.7, seconds=6.0, received=360, published=358, window_p99_ms=[30.0, 95.0, 31.0]
    )
    assert step.passes(0.02)  # one hiccup in three windows
    step.window_p99_ms = [30.0, 95.0, 80.0]
    assert not step.passes(0.02) and "p99 over 66.7 ms in 2 of 3 windows" in step.why(0.02)


def test_a_window_allows_one_frame_a_camera_in_flight_at_its_edge():
    from triton_ros.analyzer.ros_profiler import CameraStep

    step = CameraStep(
        15.0,
        1,
        66.7,
        seconds=6.0,
        received=90,
        published=84,
        window_p99_ms=[9.0, 12.0, 347.0],
        window_published=[29, 30, 25],
        window_asked=[30.0, 30.0, 30.0],
    )
    # 29 of 30 is the frame in flight at the edge; the stalled third window is outvoted
    assert step.passes(0.02)
    assert step.why(0.02).startswith("passes in most windows; p99 over 66.7 ms in 1 of 3")
    step.window_published = [29, 25, 25]
    step.window_p99_ms = [9.0, 12.0, 13.0]
    assert not step.passes(0.02)
    assert "under 98% of the frames published in 2 of 3 windows" in step.why(0.02)
