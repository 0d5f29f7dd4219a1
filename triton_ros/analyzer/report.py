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
from .search_space import describe

if TYPE_CHECKING:  # pragma: no cover
    from .profile_result import ProfileResult

HIGHLIGHTED = 5          # best configurations drawn in colour (model_analyzer shows the top 3)
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
    return [labels.get(name, "") for name in present]


def _present_dimensions(results: Iterable[RunConfigResult]) -> list[tuple[str, str]]:
    names = set()
    for r in results:
        names.update(r.values)
    return [(n, title) for n, title in DIMENSION_COLUMNS if n in names]


# -- CSV -------------------------------------------------------------------------------------

def inference_rows(results: list[RunConfigResult], constraints: Constraints) -> list[list[str]]:
    dims = _present_dimensions(results)
    header = ["Model Config", *[t for _, t in dims], "Batch Size", "Concurrency",
              "Throughput (infer/sec)", "Avg Latency (ms)", "p50 Latency (ms)",
              "p90 Latency (ms)", "p95 Latency (ms)", "p99 Latency (ms)",
              "Server Queue (ms)", "Server Compute (ms)", "Server CPU (cores)",
              "Server RAM Peak RSS (MB)", "GPU Memory Used (MB)", "Stability Checked",
              "Satisfies Constraints"]
    rows = [header]
    for r in results:
        for m in r.measurements:
            rows.append([r.variant, *_dimension_cells(r, [n for n, _ in dims]),
                         str(m.batch_size), str(m.concurrency), _fmt(m.throughput),
                         *[_fmt(m.latency(k), 2) for k in ("avg", "p50", "p90", "p95", "p99")],
                         _fmt(m.perf.server_queue_ms, 2), _fmt(m.perf.server_compute_ms, 2),
                         _fmt(m.server.cpu_cores, 2), _fmt(m.server.peak_rss_mb),
                         _fmt(m.server.peak_gpu_memory_mb),
                         {True: "yes", False: "no (unstable)", None: "no (--quick)"}[m.perf.stable],
                         "yes" if constraints.meets(m) else "no"])
    return rows


def summary_rows(results: list[RunConfigResult], constraints: Constraints) -> list[list[str]]:
    """One row per configuration, best first: its best measurement under the constraints (or,
    when none meets them, its highest throughput)."""
    dims = _present_dimensions(results)
    metric = constraints.latency_metric
    header = ["Model Config", *[t for _, t in dims], "Satisfies Constraints", "Concurrency",
              "Throughput (infer/sec)", "p50 Latency (ms)", "p95 Latency (ms)",
              "p99 Latency (ms)", "Server CPU (cores)", "Server RAM Peak RSS (MB)",
              "GPU Memory Used (MB)", "Measured (s)", "Error"]
    rows = [header]
    for r in sorted(results, key=constraints.score, reverse=True):
        best = constraints.best(r)
        m = best or (max(r.measurements, key=lambda x: (x.throughput, -x.latency(metric)))
                     if r.measurements else None)
        cells = [r.variant, *_dimension_cells(r, [n for n, _ in dims]),
                 "yes" if best else "no"]
        if m is None:
            cells += [""] * 8
        else:
            cells += [str(m.concurrency), _fmt(m.throughput), _fmt(m.latency("p50"), 2),
                      _fmt(m.latency("p95"), 2), _fmt(m.latency("p99"), 2),
                      _fmt(m.server.cpu_cores, 2), _fmt(m.server.peak_rss_mb),
                      _fmt(m.server.peak_gpu_memory_mb)]
        cells += [_fmt(r.seconds, 0), r.error.splitlines()[0] if r.error else ""]
        rows.append(cells)
    return rows


def confirmation_rows(results: list[RunConfigResult], constraints: Constraints) -> list[list[str]]:
    metric = constraints.latency_metric
    rows = [["Model Config", "Concurrency", "Throughput (infer/sec)", f"{metric} Latency (ms)",
             "Server RAM Peak RSS (MB)", "Satisfies Constraints"]]
    for r in results:
        for m in r.confirmations:
            rows.append([r.variant, str(m.concurrency), _fmt(m.throughput),
                         _fmt(m.latency(metric), 2), _fmt(m.server.peak_rss_mb),
                         "yes" if constraints.meets(m) else "no"])
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


def _styles(results: list[RunConfigResult], constraints: Constraints,
            recommended: str | None) -> dict[str, dict]:
    """Colour and label of each configuration drawn in colour; the others are absent."""
    measured = [r for r in results if r.measurements]
    ranked = sorted(measured, key=constraints.score, reverse=True)
    chosen = ranked[:HIGHLIGHTED]
    for r in measured:
        if (r.is_default or r.variant == recommended) and r not in chosen:
            chosen.append(r)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
               "#bcbd22"]
    styles = {}
    for i, r in enumerate(chosen):
        changes = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in describe(r.changes).items())
        label = r.variant + (" (model's own)" if r.is_default else f": {changes}")
        if r.variant == recommended:
            label += "  [recommended]"
        styles[r.variant] = {"color": palette[i % len(palette)], "label": _wrap(label),
                             "lw": 3.0 if r.variant == recommended else 1.6,
                             "zorder": 4 if r.variant == recommended else 3}
    return styles


def _coloured_first(results: list[RunConfigResult], styles: dict) -> list[RunConfigResult]:
    return ([r for r in results if r.variant in styles]
            + [r for r in results if r.variant not in styles])


def _wrap(text: str, width: int = 60) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width, subsequent_indent="    "))


def _curves(ax, results: list[RunConfigResult], styles: dict[str, dict], x, y) -> None:
    """One curve per configuration over concurrency (``x(m)``, ``y(m)``; a measurement whose
    value is None is left out), labelled with the concurrencies; grey for the unstyled."""
    others = 0
    for r in _coloured_first(results, styles):
        points = [m for m in sorted(r.measurements, key=lambda m: m.concurrency)
                  if x(m) is not None and y(m) is not None]
        if not points:
            continue
        xs, ys = [x(m) for m in points], [y(m) for m in points]
        style = styles.get(r.variant)
        if style is None:
            ax.plot(xs, ys, color="#b0b0b0", lw=0.8, marker=".", ms=3, zorder=1,
                    label=None if others else "other configurations")
            others += 1
            continue
        ax.plot(xs, ys, color=style["color"], lw=style["lw"], marker="o", ms=4,
                label=style["label"], zorder=style["zorder"])
        for m, px, py in zip(points, xs, ys):
            ax.annotate(str(m.concurrency), (px, py), textcoords="offset points", xytext=(3, 3),
                        fontsize=7, color=style["color"])


def _finish(plt, fig, ax, path: Path, title: str) -> Path:
    """Axes from zero, the title, the legend beside the plot; saved as PNG and closed."""
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, title="configuration", fontsize=8, title_fontsize=9,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_throughput_v_latency(results: list[RunConfigResult], constraints: Constraints,
                              recommended: Measurement | None, model: str, path: Path) -> Path:
    plt = _pyplot()
    metric = constraints.latency_metric
    styles = _styles(results, constraints, recommended.variant if recommended else None)
    fig, ax = plt.subplots(figsize=(12, 6.5))
    _curves(ax, results, styles, lambda m: m.latency(metric), lambda m: m.throughput)
    if constraints.latency_budget_ms is not None:
        ax.axvline(constraints.latency_budget_ms, color="red", ls="--", lw=1.2,
                   label=f"latency budget {constraints.latency_budget_ms:g} ms")
        ax.axvline(constraints.latency_limit_ms, color="red", ls=":", lw=1.0,
                   label=f"chosen under {constraints.latency_limit_ms:.3g} ms "
                         f"({constraints.headroom:.0%} headroom)")
    if recommended is not None:
        ax.plot([recommended.latency(metric)], [recommended.throughput], marker="*", ms=16,
                color="gold", markeredgecolor="black", zorder=5, ls="none",
                label=f"recommended, measured again on a fresh server:\n"
                      f"{recommended.throughput:.0f} infer/s at concurrency "
                      f"{recommended.concurrency}")
    ax.set_xlabel(f"{metric} latency (ms), perf_analyzer")
    ax.set_ylabel("throughput (inferences/s)")
    return _finish(plt, fig, ax, path, f"{model}: throughput vs {metric} latency per "
                   f"configuration (numbers: client concurrency)")


def plot_memory_v_throughput(results: list[RunConfigResult], constraints: Constraints,
                             recommended: Measurement | None, model: str, path: Path,
                             *, gpu: bool = False) -> Path:
    plt = _pyplot()
    styles = _styles(results, constraints, recommended.variant if recommended else None)
    fig, ax = plt.subplots(figsize=(12, 6.5))

    def memory(m: Measurement) -> float | None:
        return m.server.peak_gpu_memory_mb if gpu else m.server.peak_rss_mb

    _curves(ax, results, styles, lambda m: m.throughput, memory)
    cap = constraints.gpu_memory_cap_mb if gpu else constraints.memory_cap_mb
    if cap is not None:
        ax.axhline(cap, color="red", ls="--", lw=1.2, label=f"memory cap {cap:g} MB")
    if recommended is not None and memory(recommended) is not None:
        ax.plot([recommended.throughput], [memory(recommended)], marker="*", ms=16,
                color="gold", markeredgecolor="black", zorder=5, ls="none",
                label="recommended, measured again on a fresh server")
    what = "GPU memory used by the server (MB, NVML)" if gpu else \
        "server memory, peak RSS of its processes (MB)"
    ax.set_xlabel("throughput (inferences/s), perf_analyzer")
    ax.set_ylabel(what)
    return _finish(plt, fig, ax, path, f"{model}: {'GPU' if gpu else 'server'} memory vs "
                   f"throughput per configuration (numbers: client concurrency)")


# -- HTML ------------------------------------------------------------------------------------

def _table(rows: list[list[str]], highlight: str | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = []
    for row in rows[1:]:
        cls = ' class="rec"' if highlight and row and row[0] == highlight else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(path.name)}</figcaption></figure>")


_CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#eee}td:first-child,th:first-child{text-align:left}
tr.rec{background:#fff3b0;font-weight:bold}
figure{margin:1em 0}img{max-width:100%}.box{background:#f4f8ff;border:1px solid #9bd;padding:1em}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"""


def write_html(result: "ProfileResult", images: list[Path], summary: list[list[str]],
               inference: list[list[str]], path: Path) -> Path:
    rec = result.recommendation
    c = result.constraints
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
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
             f"from its processes during each measurement.</p>"]
    if rec is not None:
        m = rec.measurement
        speed = (f" &mdash; {rec.speedup:.2f}x the throughput of the model's own configuration "
                 f"under the same constraints" if rec.speedup else "")
        changes = describe(rec.result.changes)
        parts.append(
            "<div class='box'><h2>Recommendation</h2>"
            f"<p><b>{html.escape(rec.result.variant)}</b>: {m.throughput:.1f} infer/s at client "
            f"concurrency {m.concurrency}, {c.latency_metric} latency "
            f"{m.latency(c.latency_metric):.2f} ms, peak RSS {m.server.peak_rss_mb:.0f} MB"
            f"{speed}, measured again on a fresh server with perf_analyzer "
            f"{html.escape(' '.join(_flags(m)))} (the sweep had measured "
            f"{rec.sweep_measurement.throughput:.1f} infer/s, {c.latency_metric} "
            f"{rec.sweep_measurement.latency(c.latency_metric):.2f} ms).</p><p>Changes: "
            + html.escape(", ".join(f"{k} = {v}" for k, v in changes.items()) or
                          "none (the model's own configuration is the best)")
            + "</p><p>Ready to use: <code>recommended/"
            f"{html.escape(result.model)}/config.pbtxt</code></p><pre>"
            + html.escape(_config_body(result)) + "</pre></div>")
    else:
        parts.append("<div class='box'><h2>No recommendation</h2><p>No configuration measured "
                     "meets the constraints; the tables show how close each came.</p></div>")
    confirmations = confirmation_rows(result.results, c)
    if len(confirmations) > 1:
        parts.append("<h2>Candidates measured again</h2>" + _table(confirmations))
    parts.append("<h2>Charts</h2>" + "".join(_image(p, p.stem) for p in images))
    parts.append("<h2>Summary (best measurement of each configuration under the constraints)"
                 "</h2>" + _table(summary, rec.result.variant if rec else None))
    parts.append("<h2>Every measurement</h2>" + _table(inference))
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _flags(m: Measurement) -> list[str]:
    from .recommendation import reproducible_flags
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
    summary = summary_rows(result.results, c)
    files["inference_csv"] = write_csv(out / "results" / "metrics-model-inference.csv", inference)
    files["summary_csv"] = write_csv(out / "results" / "metrics-summary.csv", summary)
    plots = out / "plots" / "simple" / result.model
    images = [plot_throughput_v_latency(result.results, c, rec, result.model,
                                        plots / "throughput_v_latency.png"),
              plot_memory_v_throughput(result.results, c, rec, result.model,
                                       plots / "cpu_mem_v_throughput.png")]
    if any(m.server.peak_gpu_memory_mb is not None for r in result.results
           for m in r.measurements):
        images.append(plot_memory_v_throughput(result.results, c, rec, result.model,
                                               plots / "gpu_mem_v_throughput.png", gpu=True))
    files["throughput_v_latency"] = images[0]
    files["cpu_mem_v_throughput"] = images[1]
    files["html"] = write_html(result, images, summary, inference,
                               out / "reports" / "summaries" / result.model /
                               "result_summary.html")
    return files
