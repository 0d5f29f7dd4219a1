"""Tables, charts and the HTML summary of a profile (model_analyzer's results/, plots/, reports/).

Charts are drawn with matplotlib (the Agg backend, no display): throughput against latency per
configuration (one curve each over client concurrency, labelled with the concurrencies), and
server memory against throughput (peak RSS; GPU memory in a chart of its own where a GPU is
present). The best few configurations, the model's own and the recommended one get colours and
legend entries; the rest are drawn thin and grey so that a sweep of twenty configurations stays
readable. The budget and the memory cap are drawn as lines.

The HTML page is written with the standard library (``html.escape``): it is a heading, the
recommendation, the charts (embedded as PNG data, so the file stands alone) and two tables, for
which a templating library would add a dependency and no safety that escaping does not give.
"""

from __future__ import annotations

import base64
import csv
import html
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from .measurement import Constraints, Measurement, RunConfigResult
from .recommendation import reproducible_flags, verdict_lines
from .search_space import PREFERRED, describe

if TYPE_CHECKING:  # pragma: no cover
    from .confirmation import Verdict
    from .profile_result import ProfileResult

HIGHLIGHTED = 5  # best configurations drawn in colour (model_analyzer shows the top 3)
DIMENSION_COLUMNS = (
    ("instance_group.kind", "Instance Kind"),
    ("instance_group.count", "Instance Count"),
    ("max_batch_size", "Max Batch Size"),
    ("dynamic_batching.max_queue_delay_microseconds", "Max Queue Delay (us)"),
    ("dynamic_batching.preferred_batch_size", "Preferred Batch Sizes"),
    ("parameters.intra_op_thread_count", "ORT intra_op_thread_count"),
    ("parameters.inter_op_thread_count", "ORT inter_op_thread_count"),
)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _dimension_cells(result: RunConfigResult, present: list[str]) -> list[str]:
    labels = describe(result.values)
    if PREFERRED in present:  # as written in its config.pbtxt (clipped to its max)
        labels[PREFERRED] = written_preferred_sizes(result)
    return [labels.get(name, "") for name in present]


def written_preferred_sizes(result: RunConfigResult) -> str:
    """``dynamic_batching.preferred_batch_size`` of the configuration as written: "[4, 8]",
    "none" (a dynamic batcher without preferred sizes) or "off" (no dynamic batcher)."""
    config = result.config
    if not config.HasField("dynamic_batching"):
        return "off"
    sizes = list(config.dynamic_batching.preferred_batch_size)
    return "[" + ", ".join(str(v) for v in sizes) + "]" if sizes else "none"


def _present_dimensions(results: Iterable[RunConfigResult]) -> list[tuple[str, str]]:
    names = set()
    for r in results:
        names.update(r.values)
    return [(n, title) for n, title in DIMENSION_COLUMNS if n in names]


# -- CSV -------------------------------------------------------------------------------------


def inference_rows(results: list[RunConfigResult], constraints: Constraints) -> list[list[str]]:
    dims = _present_dimensions(results)
    header = [
        "Model Config",
        *[t for _, t in dims],
        "Batch Size",
        "Concurrency",
        "Throughput (infer/sec)",
        "Avg Latency (ms)",
        "p50 Latency (ms)",
        "p90 Latency (ms)",
        "p95 Latency (ms)",
        "p99 Latency (ms)",
        "Server Queue (ms)",
        "Server Compute (ms)",
        "Server CPU (cores)",
        "Server RAM Peak RSS (MB)",
        "GPU Memory Used (MB)",
        "Stability Checked",
        "Satisfies Constraints",
    ]
    rows = [header]
    for r in results:
        for m in r.measurements:
            rows.append(
                [
                    r.variant,
                    *_dimension_cells(r, [n for n, _ in dims]),
                    str(m.batch_size),
                    str(m.concurrency),
                    _fmt(m.throughput),
                    *[_fmt(m.latency(k), 2) for k in ("avg", "p50", "p90", "p95", "p99")],
                    _fmt(m.perf.server_queue_ms, 2),
                    _fmt(m.perf.server_compute_ms, 2),
                    _fmt(m.server.cpu_cores, 2),
                    _fmt(m.server.peak_rss_mb),
                    _fmt(m.server.peak_gpu_memory_mb),
                    {True: "yes", False: "no (unstable)", None: "no (--quick)"}[m.perf.stable],
                    "yes" if constraints.meets(m) else "no",
                ]
            )
    return rows


def summary_rows(
    results: list[RunConfigResult], constraints: Constraints, verdict: "Verdict | None" = None
) -> list[list[str]]:
    """One row per configuration, best first: its best measurement under the constraints (or,
    when none meets them, its highest throughput). A configuration the confirmation measured
    again shows its confirmed point instead (the median round at its best concurrency, as the
    recommendation box), with its ratio to the model's own."""
    dims = _present_dimensions(results)
    metric = constraints.latency_metric
    header = [
        "Model Config",
        *[t for _, t in dims],
        "Satisfies Constraints",
        "Concurrency",
        "Throughput (infer/sec)",
        "p50 Latency (ms)",
        "p95 Latency (ms)",
        "p99 Latency (ms)",
        "Server CPU (cores)",
        "Server RAM Peak RSS (MB)",
        "GPU Memory Used (MB)",
        "Measured In",
        "Vs Model's Own (per round)",
        "Measured (s)",
        "Error",
    ]
    confirmed = _confirmed_points(verdict, constraints)
    rows = [header]
    for r in sorted(results, key=constraints.score, reverse=True):
        best = constraints.best(r)
        m = best or (
            max(r.measurements, key=lambda x: (x.throughput, -x.latency(metric)))
            if r.measurements
            else None
        )
        source, ratio = "sweep", ""
        if r.variant in confirmed:
            m, ratio = confirmed[r.variant]
            best = m if constraints.meets(m) else None
            source = f"confirmation (median of {verdict.rounds} rounds)"
        cells = [r.variant, *_dimension_cells(r, [n for n, _ in dims]), "yes" if best else "no"]
        if m is None:
            cells += [""] * 8
        else:
            cells += [
                str(m.concurrency),
                _fmt(m.throughput),
                _fmt(m.latency("p50"), 2),
                _fmt(m.latency("p95"), 2),
                _fmt(m.latency("p99"), 2),
                _fmt(m.server.cpu_cores, 2),
                _fmt(m.server.peak_rss_mb),
                _fmt(m.server.peak_gpu_memory_mb),
            ]
        cells += [
            source if m is not None else "",
            ratio,
            _fmt(r.seconds, 0),
            r.error.splitlines()[0] if r.error else "",
        ]
        rows.append(cells)
    return rows


def _confirmed_points(
    verdict: "Verdict | None", constraints: Constraints
) -> dict[str, tuple[Measurement, str]]:
    """variant -> (its median confirmation round at its best concurrency, its ratio text)."""
    if verdict is None or not verdict.default.rounds:
        return {}
    out = {}
    c = verdict.default_concurrency
    if c is None:
        c = max(verdict.default.concurrencies())
    out[verdict.default.variant] = (verdict.default.median(c), "1 (itself)")
    for comparison in verdict.comparisons:
        rounds = comparison.candidate
        if not rounds.rounds:
            continue
        cc = comparison.concurrency or max(rounds.concurrencies())
        ratio = (
            comparison.same_concurrency.text()
            if comparison.same_concurrency
            else "missed the constraints"
        )
        out[rounds.variant] = (rounds.median(cc), ratio)
    return out


def confirmation_rows(verdict: "Verdict | None", constraints: Constraints) -> list[list[str]]:
    """Every measurement of the confirmation, round by round."""
    metric = constraints.latency_metric
    rows = [
        [
            "Round",
            "Model Config",
            "Concurrency",
            "Throughput (infer/sec)",
            f"{metric} Latency (ms)",
            "Server RAM Peak RSS (MB)",
            "Satisfies Constraints",
        ]
    ]
    if verdict is None:
        return rows
    everyone = [verdict.default, *(c.candidate for c in verdict.comparisons)]
    for k in range(verdict.rounds):
        for rounds in everyone:
            if k >= len(rounds.rounds):
                continue
            for concurrency, m in sorted(rounds.rounds[k].items()):
                rows.append(
                    [
                        str(k + 1),
                        rounds.variant,
                        str(concurrency),
                        _fmt(m.throughput),
                        _fmt(m.latency(metric), 2),
                        _fmt(m.server.peak_rss_mb),
                        "yes" if constraints.meets(m) else "no",
                    ]
                )
    return rows


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


# -- charts ----------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _styles(
    results: list[RunConfigResult], constraints: Constraints, recommended: str | None
) -> dict[str, dict]:
    """Colour and label of each configuration drawn in colour; the others are absent."""
    measured = [r for r in results if r.measurements]
    ranked = sorted(measured, key=constraints.score, reverse=True)
    chosen = ranked[:HIGHLIGHTED]
    for r in measured:
        if (r.is_default or r.variant == recommended) and r not in chosen:
            chosen.append(r)
    palette = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#17becf",
        "#bcbd22",
    ]
    styles = {}
    for i, r in enumerate(chosen):
        changes = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in describe(r.changes).items())
        label = r.variant + (" (model's own)" if r.is_default else f": {changes}")
        if r.variant == recommended:
            label += "  [keep: the answer]" if r.is_default else "  [recommended]"
        styles[r.variant] = {
            "color": palette[i % len(palette)],
            "label": _wrap(label),
            "lw": 3.0 if r.variant == recommended else 1.6,
            "zorder": 4 if r.variant == recommended else 3,
        }
    return styles


def _coloured_first(results: list[RunConfigResult], styles: dict) -> list[RunConfigResult]:
    return [r for r in results if r.variant in styles] + [
        r for r in results if r.variant not in styles
    ]


def _wrap(text: str, width: int = 60) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="    "))


def _short(variant: str) -> str:
    """The number of ``<model>_config_<n>`` ("#n"), as the grey curves are labelled."""
    return "#" + variant.rsplit("_", 1)[-1]


def _curves(ax, results: list[RunConfigResult], styles: dict[str, dict], x, y) -> list[tuple]:
    """One curve per configuration over concurrency (``x(m)``, ``y(m)``; a measurement whose
    value is None is left out). Returns the labels to place (:func:`_place_labels`), most
    important first: each grey curve's name ("#n") at its highest point, then the
    concurrencies of the coloured curves."""
    names, concurrencies = [], []
    others = 0
    for r in _coloured_first(results, styles):
        points = [
            m
            for m in sorted(r.measurements, key=lambda m: m.concurrency)
            if x(m) is not None and y(m) is not None
        ]
        if not points:
            continue
        xs, ys = [x(m) for m in points], [y(m) for m in points]
        style = styles.get(r.variant)
        if style is None:
            ax.plot(
                xs,
                ys,
                color="#909090",
                lw=0.8,
                marker=".",
                ms=3,
                zorder=1,
                label=None
                if others
                else "other configurations (grey; #n is <model>_config_n,\n"
                "written at each curve's highest point: see the summary table)",
            )
            others += 1
            order = sorted(range(len(points)), key=lambda i: -ys[i])
            names.append(([(xs[i], ys[i]) for i in order], _short(r.variant), "#505050"))
            continue
        ax.plot(
            xs,
            ys,
            color=style["color"],
            lw=style["lw"],
            marker="o",
            ms=4,
            label=style["label"],
            zorder=style["zorder"],
        )
        for m, px, py in zip(points, xs, ys):
            concurrencies.append(([(px, py)], str(m.concurrency), style["color"], style["zorder"]))
    concurrencies.sort(key=lambda item: -item[3])  # the recommended curve's first
    return names + [item[:3] for item in concurrencies]


#: Where a label may go around its point (points, in display offsets), in order of preference.
_OFFSETS = ((3, 3), (3, -10), (-10, 3), (-10, -10), (6, 8), (6, -14), (-16, 8), (-16, -14))


def _place_labels(fig, ax, labels: list[tuple]) -> list:
    """Write each label next to one of its points where it overlaps no label already written
    (nor leaves the axes); one that fits nowhere is left out rather than drawn over another.
    Greedy, in the order given. matplotlib has no overlap avoidance of its own, and adjustText
    moves labels away from their points; a few offsets around the point are enough here.
    Returns the annotations written."""
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    placed, written = [], []
    for points, text, colour in labels:
        done = False
        for px, py in points:
            for dx, dy in _OFFSETS:
                label = ax.annotate(
                    text,
                    (px, py),
                    textcoords="offset points",
                    xytext=(dx, dy),
                    fontsize=7,
                    color=colour,
                )
                box = label.get_window_extent(renderer)
                inside = (
                    box.x0 >= frame.x0
                    and box.x1 <= frame.x1
                    and box.y0 >= frame.y0
                    and box.y1 <= frame.y1
                )
                if inside and not any(box.overlaps(other.expanded(1.05, 1.1)) for other in placed):
                    placed.append(box)
                    written.append(label)
                    done = True
                    break
                label.remove()
            if done:
                break
    return written


def _finish(
    plt, fig, ax, path: Path, title: str, labels: list[tuple], *, y_from_zero: bool = True
) -> Path:
    """Axes from zero (the y axis only where ``y_from_zero``), the title, the legend beside
    the plot, the labels placed without overlaps; saved as PNG and closed."""
    ax.set_xlim(left=0)
    if y_from_zero:
        ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=11)
    handles, legend_labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(
            handles,
            legend_labels,
            title="configuration",
            fontsize=8,
            title_fontsize=9,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            borderaxespad=0.0,
        )
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.canvas.draw()  # the final layout, before the labels are measured
    _place_labels(fig, ax, labels)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def narrow_band(values: list[float], share: float = 0.25) -> bool:
    """True when ``values`` spread over less than ``share`` of their largest: an axis from 0
    would squash them into a line."""
    values = [v for v in values if v is not None]
    if not values or max(values) <= 0:
        return False
    return (max(values) - min(values)) < share * max(values)


def _answer(m: Measurement) -> str:
    return "keep (the answer)" if m.variant.endswith("_config_default") else "recommended"


def plot_throughput_v_latency(
    results: list[RunConfigResult],
    constraints: Constraints,
    recommended: Measurement | None,
    model: str,
    path: Path,
) -> Path:
    plt = _pyplot()
    metric = constraints.latency_metric
    styles = _styles(results, constraints, recommended.variant if recommended else None)
    fig, ax = plt.subplots(figsize=(12, 6.5))
    labels = _curves(ax, results, styles, lambda m: m.latency(metric), lambda m: m.throughput)
    if constraints.latency_budget_ms is not None:
        ax.axvline(
            constraints.latency_budget_ms,
            color="red",
            ls="--",
            lw=1.2,
            label=f"latency budget {constraints.latency_budget_ms:g} ms",
        )
        ax.axvline(
            constraints.latency_limit_ms,
            color="red",
            ls=":",
            lw=1.0,
            label=f"chosen under {constraints.latency_limit_ms:.3g} ms "
            f"({constraints.headroom:.0%} headroom)",
        )
    if recommended is not None:
        ax.plot(
            [recommended.latency(metric)],
            [recommended.throughput],
            marker="*",
            ms=16,
            color="gold",
            markeredgecolor="black",
            zorder=5,
            ls="none",
            label=f"{_answer(recommended)}, median confirmation round:\n"
            f"{recommended.throughput:.0f} infer/s at concurrency "
            f"{recommended.concurrency}",
        )
    ax.set_xlabel(f"{metric} latency (ms), perf_analyzer")
    ax.set_ylabel("throughput (inferences/s)")
    return _finish(
        plt,
        fig,
        ax,
        path,
        f"{model}: throughput vs {metric} latency per configuration (numbers: client concurrency)",
        labels,
    )


def plot_memory_v_throughput(
    results: list[RunConfigResult],
    constraints: Constraints,
    recommended: Measurement | None,
    model: str,
    path: Path,
    *,
    gpu: bool = False,
) -> Path:
    plt = _pyplot()
    styles = _styles(results, constraints, recommended.variant if recommended else None)
    fig, ax = plt.subplots(figsize=(12, 6.5))

    def memory(m: Measurement) -> float | None:
        return m.server.peak_gpu_memory_mb if gpu else m.server.peak_rss_mb

    labels = _curves(ax, results, styles, lambda m: m.throughput, memory)
    cap = constraints.gpu_memory_cap_mb if gpu else constraints.memory_cap_mb
    if cap is not None:
        ax.axhline(cap, color="red", ls="--", lw=1.2, label=f"memory cap {cap:g} MB")
    if recommended is not None and memory(recommended) is not None:
        ax.plot(
            [recommended.throughput],
            [memory(recommended)],
            marker="*",
            ms=16,
            color="gold",
            markeredgecolor="black",
            zorder=5,
            ls="none",
            label=f"{_answer(recommended)}, median confirmation round",
        )
    what = (
        "GPU memory used by the server (MB, NVML)"
        if gpu
        else "server memory, peak RSS of its processes (MB)"
    )
    ax.set_xlabel("throughput (inferences/s), perf_analyzer")
    ax.set_ylabel(what)
    values = [memory(m) for r in results for m in r.measurements]
    values += [memory(recommended)] if recommended is not None else []
    values += [cap] if cap is not None else []
    values = [v for v in values if v is not None]
    band = narrow_band(values)
    if band:  # a narrow band: the axis spans it (with a margin), not 0..max
        low, high = min(values), max(values)
        margin = max(0.15 * (high - low), 1.0)
        ax.set_ylim(low - margin, high + margin)
        ax.set_ylabel(what + " (axis not from 0)")
    return _finish(
        plt,
        fig,
        ax,
        path,
        f"{model}: {'GPU' if gpu else 'server'} memory vs "
        f"throughput per configuration (numbers: client concurrency)",
        labels,
        y_from_zero=not band,
    )


# -- HTML ------------------------------------------------------------------------------------


def _table(rows: list[list[str]], highlight: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = []
    for row in rows[1:]:
        cls = ' class="rec"' if highlight and row and row[0] == highlight else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return (
        f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}"
        f"</tbody></table></div>"
    )


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(path.name)}</figcaption></figure>"
    )


_CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:12px;margin:1em 0;width:100%}
th,td{border:1px solid #ccc;padding:2px 4px;text-align:right}
th{background:#eee;white-space:normal;overflow-wrap:anywhere;vertical-align:bottom}
td{overflow-wrap:anywhere}td:first-child,th:first-child{text-align:left}
tr.rec{background:#fff3b0;font-weight:bold}
figure{margin:1em 0}img{max-width:100%}.box{background:#f4f8ff;border:1px solid #9bd;padding:1em}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;white-space:pre-wrap}"""


def write_html(
    result: "ProfileResult",
    images: list[Path],
    summary: list[list[str]],
    inference: list[list[str]],
    path: Path,
) -> Path:
    rec = result.recommendation
    c = result.constraints
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(result.model)}: triton-ros-analyzer</title>"
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(result.model)}: configurations measured with perf_analyzer</h1>",
        f"<p>{len([r for r in result.results if r.measurements])} configurations measured "
        f"({result.options.mode} search, {result.seconds:.0f} s"
        f"{', stopped by its budget' if result.stopped_by_budget else ''}) on "
        f"{html.escape(_host())}, {time.strftime('%Y-%m-%d %H:%M')}. Constraints: "
        f"{html.escape(c.describe())}. Throughput and latency are perf_analyzer's "
        f"(batch size {result.options.perf.batch_size}, "
        f"{html.escape(result.options.perf.protocol)}); server CPU and memory were sampled "
        f"from its processes during each measurement.</p>",
    ]
    if rec is not None:
        changes = describe(rec.result.changes)
        title = "Keep your configuration" if rec.keep else "Recommendation"
        parts.append(
            f"<div class='box'><h2>{title}</h2>"
            + "".join(f"<p>{html.escape(line)}</p>" for line in verdict_lines(rec))
            + f"<p>Every figure above is from the confirmation: the model's own configuration "
            f"and the candidates, each on a fresh server, measured with perf_analyzer "
            f"{html.escape(' '.join(_flags(rec.measurement)))} in "
            f"{result.verdict.rounds if result.verdict else 0} alternating rounds at the same "
            f"concurrencies; the ratio is the median of the per-round ratios, with their "
            f"min-max.</p><p>Changes: "
            + html.escape(
                ", ".join(f"{k} = {v}" for k, v in changes.items())
                or "none (keep the model's own configuration)"
            )
            + "</p><p>Ready to use: <code>recommended/"
            f"{html.escape(result.model)}/config.pbtxt</code></p><pre>"
            + html.escape(_config_body(result))
            + "</pre></div>"
        )
    else:
        parts.append(
            "<div class='box'><h2>No recommendation</h2><p>No configuration met the "
            "constraints (in the sweep, or the model's own in most confirmation "
            "rounds); the tables show how close each came.</p></div>"
        )
    confirmations = confirmation_rows(result.verdict, c)
    if len(confirmations) > 1:
        parts.append(
            "<h2>Confirmation rounds (the model's own and the candidates, "
            "alternating)</h2>" + _table(confirmations)
        )
    parts.append("<h2>Charts</h2>" + "".join(_image(p, p.stem) for p in images))
    parts.append(
        "<h2>Summary (best measurement of each configuration under the constraints)"
        "</h2>" + _table(summary, rec.result.variant if rec else None)
    )
    parts.append("<h2>Every measurement</h2>" + _table(inference))
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _flags(m: Measurement) -> list[str]:
    return reproducible_flags(m.perf.command)


def _config_body(result: "ProfileResult") -> str:
    path = result.files.get("recommended_config")
    return path.read_text(encoding="utf-8") if path else ""


def _host() -> str:
    import os

    from .recommendation import cpu_model

    return f"{cpu_model()} ({os.cpu_count()} CPUs)"


def write_all(result: "ProfileResult", out: Path) -> dict[str, Path]:
    c = result.constraints
    rec = result.recommendation.measurement if result.recommendation else None
    files: dict[str, Path] = {}
    inference = inference_rows(result.results, c)
    summary = summary_rows(result.results, c, result.verdict)
    files["inference_csv"] = write_csv(out / "results" / "metrics-model-inference.csv", inference)
    files["summary_csv"] = write_csv(out / "results" / "metrics-summary.csv", summary)
    plots = out / "plots" / "simple" / result.model
    images = [
        plot_throughput_v_latency(
            result.results, c, rec, result.model, plots / "throughput_v_latency.png"
        ),
        plot_memory_v_throughput(
            result.results, c, rec, result.model, plots / "cpu_mem_v_throughput.png"
        ),
    ]
    if any(m.server.peak_gpu_memory_mb is not None for r in result.results for m in r.measurements):
        images.append(
            plot_memory_v_throughput(
                result.results, c, rec, result.model, plots / "gpu_mem_v_throughput.png", gpu=True
            )
        )
    files["throughput_v_latency"] = images[0]
    files["cpu_mem_v_throughput"] = images[1]
    files["html"] = write_html(
        result,
        images,
        summary,
        inference,
        out / "reports" / "summaries" / result.model / "result_summary.html",
    )
    return files
