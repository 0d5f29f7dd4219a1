#!/usr/bin/env python3
"""Per-request cost of triton-ros-server, side by side for one or more checkouts, in one run.

    .venv/bin/python -m bench.server.request_path                       # this checkout
    .venv/bin/python -m bench.server.request_path --checkout /tmp/base --checkout .   # before/after
    .venv/bin/python -m bench.server.request_path --cases simple:grpc:1,simple:http:1 --rounds 3

Each checkout's ``triton-ros-server`` (run as ``python -m triton_ros.server_main`` with that
checkout first on ``PYTHONPATH``, this virtual environment's interpreter) serves one generated
repository: ``tinydet`` (the peer benchmark's model, ``../shared/peer-bench/``: max_batch_size 32,
2000 us queue delay, 2 instances x 1 ONNX Runtime thread as in its shared configuration, or
``--instances`` x ``--ort-threads``), ``tiny16`` (bench/peer/tiny_model.py: next to no compute,
configured like tinydet) and the bundled ``simple``. perf_analyzer drives each case
(``model:protocol:concurrency``, batch-1 requests, the peer benchmark's JSON input for tinydet,
zeros for the others). Checkouts alternate
within each round, so a foreign load on the machine hits both alike: read the ratios.

Per case it reports perf_analyzer's throughput, p50 and p99, and two figures that a shared
machine's load disturbs much less than latencies:

- ``server CPU us/req``: the server process's CPU time (user + system, /proc) over the
  measurement, per request it answered (the server's own statistics);
- ``beyond model us/req``: that CPU time minus the model's own compute (``compute_infer``
  durations of the statistics): what the server spends per request outside the model.

Variants of one checkout are compared the same way: give the checkout twice with two labels, and
for a label ``--variant-env LABEL:KEY=VALUE`` (the server's environment, e.g. glibc's
``MALLOC_ARENA_MAX``), ``--variant-config LABEL:LINE`` (a line added to tinydet's config.pbtxt,
e.g. an ONNX Runtime parameter) or ``--variant-server LABEL:SCRIPT`` (a script run instead of
``triton_ros.server_main``, with the same flags: a server variant written for one experiment,
such as the synchronous servicer or the cached floor of bench/DECISIONS.md, kept in git's
history).

A separate ``rss`` pass starts a fresh server per checkout, drives tinydet at ``--rss-concurrency``
(32) and reads the server's peak RSS (VmHWM). Results: a markdown file naming the machine
and the commit (``--out``, default bench/out/server-request_path.md); raw perf_analyzer logs in
bench/out/. Exits 1 when a case or an RSS pass failed.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    OUT,
    PEER_DIR,
    ROOT,
    ServerProcess,
    commit,
    cpu_seconds,
    default_out,
    find_perf_analyzer,
    machine,
    minor_faults,
    proc_status_kb,
)
from bench.peer.tiny_model import build as build_tiny16


TINYDET_CONFIG = """name: "{name}"
backend: "onnxruntime"
max_batch_size: 32
dynamic_batching {{ max_queue_delay_microseconds: 2000 }}
instance_group [ {{ count: {instances}, kind: KIND_CPU }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{threads}" }} }}
"""


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def build_repository(
    dest: Path,
    extra_config: tuple[str, ...] | list[str] = (),
    *,
    instances: int = 2,
    threads: int = 1,
) -> Path:
    model = PEER_DIR / "models" / "tinydet.onnx"
    if not model.exists():
        raise SystemExit(f"{model} is missing: run ../shared/peer-bench/setup.sh first")
    (dest / "tinydet" / "1").mkdir(parents=True)
    shutil.copy(model, dest / "tinydet" / "1" / "model.onnx")
    (dest / "tinydet" / "config.pbtxt").write_text(
        TINYDET_CONFIG.format(name="tinydet", instances=instances, threads=threads)
        + "".join(line + "\n" for line in extra_config)
    )
    # tiny16: next to no compute (bench/peer/tiny_model.py), batched like tinydet
    import onnx

    (dest / "tiny16" / "1").mkdir(parents=True)
    onnx.save(build_tiny16(), dest / "tiny16" / "1" / "model.onnx")
    (dest / "tiny16" / "config.pbtxt").write_text(
        TINYDET_CONFIG.format(name="tiny16", instances=instances, threads=threads)
    )
    shutil.copytree(ROOT / "model_repository" / "simple", dest / "simple")
    return dest


class Server(ServerProcess):
    """One checkout's triton-ros-server on a repository, with its statistics."""

    def __init__(
        self,
        checkout: Path,
        repository: Path,
        log: Path,
        *,
        env_extra: dict[str, str] | None = None,
        script: str | None = None,
    ) -> None:
        super().__init__(
            f"--model-repository={repository}",
            log=log,
            checkout=checkout,
            env_extra=env_extra,
            script=script,
        )

    def stats(self, model: str) -> tuple[int, int, int, int]:
        """(successful requests, inferences, compute_infer ns, queue ns) of every version of
        ``model``."""
        s = self.client.get_inference_statistics(model, as_json=True)["model_stats"]
        req = sum(int(m["inference_stats"]["success"].get("count", 0)) for m in s)
        inf = sum(int(m.get("inference_count", 0)) for m in s)
        # Per execution (batch_stats), not per request: a batch's compute counts once.
        ns = sum(int(b["compute_infer"].get("ns", 0)) for m in s for b in m.get("batch_stats", []))
        # Per request: the time each waited in the scheduler (the batcher's delay included).
        queue = sum(int(m["inference_stats"]["queue"].get("ns", 0)) for m in s)
        return req, inf, ns, queue


@dataclass
class Row:
    checkout: str
    case: str
    throughput: float = 0.0
    p50_us: float = 0.0
    p99_us: float = 0.0
    cpu_us: float = 0.0  # server CPU per request
    beyond_us: float = 0.0  # server CPU per request minus the model's compute
    queue_us: float = 0.0  # the server's queue time per request (its statistics)
    faults: float = 0.0  # the server's minor page faults per request
    load: str = ""
    error: str = ""
    extra: dict = field(default_factory=dict)


def run_case(server: Server, label: str, case: str, args, pa: Path, pa_env: dict) -> Row:
    model, protocol, conc = case.split(":")
    data = str(PEER_DIR / "models" / "tinydet_input.json") if model == "tinydet" else "zero"
    csv_path = OUT / f"rp_{label}_{model}_{protocol}_c{conc}.csv"
    log_path = csv_path.with_suffix(".log")
    csv_path.unlink(missing_ok=True)
    cmd = [
        str(pa),
        "-m",
        model,
        "-i",
        protocol,
        "-u",
        server.url(protocol),
        "--concurrency-range",
        f"{conc}:{conc}",
        "--measurement-mode",
        "time_windows",
        "-p",
        str(args.window_ms),
        "--max-trials",
        str(args.trials),
        "-s",
        "100000",
        "--percentile",
        "99",
        "--input-data",
        data,
        "-f",
        str(csv_path),
    ]
    r0, _, ns0, q0 = server.stats(model)
    c0, f0 = cpu_seconds(server.proc.pid), minor_faults(server.proc.pid)
    with open(log_path, "w") as log:
        rc = subprocess.run(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=pa_env,
            timeout=args.window_ms / 1000 * (args.trials + 2) * 3 + 60,
        ).returncode
    c1, f1 = cpu_seconds(server.proc.pid), minor_faults(server.proc.pid)
    r1, _, ns1, q1 = server.stats(model)
    row = Row(label, case, load=loadavg())
    if rc != 0 or not csv_path.exists():
        row.error = f"perf_analyzer rc={rc}, see {log_path}"
        return row
    last = list(csv.DictReader(open(csv_path)))[-1]
    row.throughput = float(last["Inferences/Second"])
    row.p50_us = float(last["p50 latency"])
    row.p99_us = float(last["p99 latency"])
    requests = max(1, r1 - r0)
    row.cpu_us = (c1 - c0) * 1e6 / requests
    row.beyond_us = row.cpu_us - (ns1 - ns0) / 1e3 / requests
    row.queue_us = (q1 - q0) / 1e3 / requests
    row.faults = (f1 - f0) / requests
    return row


def rss_pass(
    checkout: Path, label: str, repository: Path, args, pa: Path, pa_env: dict, variant: dict
) -> dict:
    server = Server(checkout, repository, OUT / f"rp_{label}_rss_server.log", **variant)
    try:
        idle = proc_status_kb(server.proc.pid, "VmRSS")
        row = run_case(
            server, f"{label}_rss", f"tinydet:grpc:{args.rss_concurrency}", args, pa, pa_env
        )
        return {
            "idle_mb": idle / 1024,
            "peak_mb": proc_status_kb(server.proc.pid, "VmHWM") / 1024,
            "throughput": row.throughput,
            "p99_us": row.p99_us,
            "error": row.error,
        }
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--checkout",
        action="append",
        default=[],
        help="a project checkout to run (repeatable; default: this one)",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        help="a name per --checkout, in order (default: the folder's name)",
    )
    parser.add_argument(
        "--cases",
        default="simple:grpc:1,simple:http:1,simple:grpc:16,"
        "simple:http:16,tinydet:grpc:1,tinydet:grpc:16",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rss-concurrency", type=int, default=32, help="0: no RSS pass")
    parser.add_argument(
        "--variant-env",
        action="append",
        default=[],
        metavar="LABEL:KEY=VALUE",
        help="environment of that label's server (repeatable)",
    )
    parser.add_argument(
        "--variant-config",
        action="append",
        default=[],
        metavar="LABEL:LINE",
        help="a line added to tinydet's config.pbtxt for that label (repeatable)",
    )
    parser.add_argument(
        "--variant-server",
        action="append",
        default=[],
        metavar="LABEL:SCRIPT",
        help="a script run instead of triton_ros.server_main for that label",
    )
    parser.add_argument("--instances", type=int, default=2, help="tinydet's CPU instances")
    parser.add_argument(
        "--ort-threads",
        type=int,
        default=1,
        help="ONNX Runtime intra-op threads per tinydet instance",
    )
    parser.add_argument("--out", default=default_out("server-request_path"))
    args = parser.parse_args()
    checkouts = [Path(c).resolve() for c in (args.checkout or [str(ROOT)])]
    labels = args.label + [c.name for c in checkouts[len(args.label) :]]
    if len(set(labels)) != len(labels):
        parser.error(f"labels must differ: {labels}")
    variants = {label: {"env_extra": {}, "script": None} for label in labels}
    configs: dict[str, list[str]] = {label: [] for label in labels}
    for option, values in (
        ("--variant-env", args.variant_env),
        ("--variant-config", args.variant_config),
        ("--variant-server", args.variant_server),
    ):
        for value in values:
            label, sep, what = value.partition(":")
            if not sep or label not in variants or (option == "--variant-env" and "=" not in what):
                parser.error(
                    f"{option} {value!r}: expected LABEL:... with LABEL one of {labels}"
                    + (" and KEY=VALUE after it" if option == "--variant-env" else "")
                )
            if option == "--variant-env":
                key, _, val = what.partition("=")
                variants[label]["env_extra"][key] = val
            elif option == "--variant-config":
                configs[label].append(what)
            else:
                variants[label]["script"] = what
    pa, pa_env = find_perf_analyzer()
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = Path("/proc/loadavg").read_text().split()[:3]
    cases = args.cases.split(",")
    rows: list[Row] = []
    rss: dict[str, list[dict]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory(prefix="bench_rp_") as tmp:
        repositories = {
            label: build_repository(
                Path(tmp) / f"repo_{i}",
                configs[label],
                instances=args.instances,
                threads=args.ort_threads,
            )
            for i, label in enumerate(labels)
        }
        for rnd in range(args.rounds):
            order = list(zip(checkouts, labels))
            if rnd % 2:
                order.reverse()  # alternate who goes first
            for checkout, label in order:
                server = Server(
                    checkout, repositories[label], OUT / f"rp_{label}_server.log", **variants[label]
                )
                try:
                    for case in cases:
                        row = run_case(server, label, case, args, pa, pa_env)
                        rows.append(row)
                        print(
                            f"round {rnd + 1} {label:>10} {case:<18} {row.throughput:8.1f}/s "
                            f"p50 {row.p50_us:8.0f} p99 {row.p99_us:8.0f} us  CPU/req "
                            f"{row.cpu_us:7.0f} beyond model {row.beyond_us:7.0f} us  faults/req "
                            f"{row.faults:5.0f}  load "
                            f"{row.load} {row.error}",
                            flush=True,
                        )
                finally:
                    server.stop()
            if args.rss_concurrency:
                for checkout, label in order:
                    r = rss_pass(
                        checkout, label, repositories[label], args, pa, pa_env, variants[label]
                    )
                    rss[label].append(r)
                    print(
                        f"round {rnd + 1} {label:>10} RSS idle {r['idle_mb']:.0f} MB, peak "
                        f"{r['peak_mb']:.0f} MB at c={args.rss_concurrency} "
                        f"({r['throughput']:.0f}/s) {r['error']}",
                        flush=True,
                    )
    text = report(rows, rss, labels, checkouts, cases, args, started, load_start)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    # A failed case or RSS pass is in the tables (for the record) and in the exit status.
    failures = [f"{r.checkout} {r.case}: {r.error}" for r in rows if r.error] + [
        f"{label} RSS pass: {r['error']}" for label, rs in rss.items() for r in rs if r["error"]
    ]
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


def median(values: list[float]) -> float:
    values = sorted(values)
    n = len(values)
    if not n:
        return float("nan")
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def report(
    rows: list[Row],
    rss: dict,
    labels: list[str],
    checkouts: list[Path],
    cases: list[str],
    args,
    started: str,
    load_start: list[str],
) -> str:
    lines = [
        "# Request path: per-request cost of triton-ros-server",
        "",
        f"`python -m bench.server.request_path {' '.join(sys.argv[1:])}`, run {started}; "
        f"checkouts at "
        + ", ".join(f"{label} {commit(c)}" for label, c in zip(labels, checkouts))
        + ".",
        "",
        f"Machine: {machine()}. Load average at start {load_start}, at end "
        f"{Path('/proc/loadavg').read_text().split()[:3]} (the machine is shared; perf_analyzer "
        "runs on the same cores as the server).",
        "",
        f"perf_analyzer, batch-1 requests, {args.trials} windows of {args.window_ms} ms per case, "
        f"{args.rounds} round(s), checkouts alternating; medians over the rounds; tinydet served "
        f"by {args.instances} instance(s) x {args.ort_threads} ONNX "
        "Runtime thread(s). `CPU/req`: the "
        "server process's CPU time per answered request; `beyond model`: minus the model's "
        "compute_infer time (wall time of the model's runs: meaningful when the model's thread is "
        "not descheduled, i.e. at concurrency 1 on a quiet machine; n/a when it exceeds the CPU "
        "time); `queue`: the server's own queue time per request (its statistics: for tinydet "
        "the batcher's delay and how late its wait ended).",
        "",
        "| case | "
        + " | ".join(labels)
        + (" | ratio (last / first) |" if len(labels) > 1 else " |"),
        "|---|" + "---|" * len(labels) + ("---|" if len(labels) > 1 else ""),
    ]
    for case in cases:
        cells, thr = [], []
        for label in labels:
            rs = [r for r in rows if r.checkout == label and r.case == case and not r.error]
            if not rs:
                cells.append("failed")
                thr.append(float("nan"))
                continue
            t = median([r.throughput for r in rs])
            thr.append(t)
            beyond = median([r.beyond_us for r in rs])
            cells.append(
                f"{t:.0f}/s, p50 {median([r.p50_us for r in rs]) / 1e3:.2f} ms, p99 "
                f"{median([r.p99_us for r in rs]) / 1e3:.1f} ms, CPU/req "
                f"{median([r.cpu_us for r in rs]):.0f} us, beyond model "
                + (f"{beyond:.0f} us" if beyond >= 0 else "n/a")
                + f", queue {median([r.queue_us for r in rs]):.0f} us, page faults/req "
                f"{median([r.faults for r in rs]):.0f}"
            )
        ratio = f" {thr[-1] / thr[0]:.2f}x |" if len(labels) > 1 else ""
        lines.append(f"| {case} | " + " | ".join(cells) + " |" + ratio)
    if any(rss.values()):
        lines += [
            "",
            f"Peak RSS (VmHWM) of a fresh server driven with tinydet at concurrency "
            f"{args.rss_concurrency} (target <= 250 MB):",
            "",
        ]
        for label in labels:
            rs = rss[label]
            if rs:
                lines.append(
                    f"- {label}: idle {median([r['idle_mb'] for r in rs]):.0f} MB, peak "
                    f"{median([r['peak_mb'] for r in rs]):.0f} MB (each round: "
                    + ", ".join(f"{r['peak_mb']:.0f}" for r in rs)
                    + ")"
                )
    lines += [
        "",
        "Every run:",
        "",
        "| round order | checkout | case | infer/s | p50 us | p99 us | "
        "CPU/req us | beyond model us | queue us | faults/req | load1 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows):
        lines.append(
            f"| {i + 1} | {r.checkout} | {r.case} | {r.throughput:.1f} | {r.p50_us:.0f} | "
            f"{r.p99_us:.0f} | {r.cpu_us:.0f} | {r.beyond_us:.0f} | {r.queue_us:.0f} | "
            f"{r.faults:.0f} | {r.load} |" + (f" {r.error}" if r.error else "")
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
