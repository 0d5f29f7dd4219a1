"""Do the analyzer's answers hold? Quick profiles in a row, each answer measured again.

Runs ``triton-ros-analyzer profile --quick`` ``--runs`` times on one model with one latency
budget, as a user would (the console script). Each time it recommends a change, the change is
measured again beside the model's own configuration, independently of the analyzer: two
``triton-ros-server`` processes (the model's own config.pbtxt, and the recommended one copied
into a fresh repository) and the ``perf_analyzer`` executable at the recommended concurrency, in
``--rounds`` alternating rounds (ABBA order). The ratio is the median of the per-round ratios
(recommended over own), with their min..max, and the own configuration's own round-to-round
spread is the noise. A change holds when its median ratio is at least 1 less that noise. A
"keep your configuration" holds by definition (the user keeps what they measured); with
``--check-keep`` the candidate that came closest is measured A/B too, to see whether "keep" hid
a real gain (its config.pbtxt is the run's output_model_repository/<variant>/config.pbtxt).

    .venv/bin/python -m bench.analyzer.recheck --runs 5 --model detector --budget-ms 100
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    LOAD_AT_START,
    OUT,
    ROOT,
    ServerProcess,
    commit,
    emit,
    find_perf_analyzer,
    machine_lines,
)

ANALYZER = Path(sys.executable).parent / "triton-ros-analyzer"


def perf(
    executable: Path,
    env: dict,
    model: str,
    url: str,
    concurrency: int,
    csv_path: Path,
    interval_ms: int,
) -> float:
    """perf_analyzer's throughput (infer/s) of one run: three windows, no stability check."""
    cmd = [
        str(executable),
        "-m",
        model,
        "-i",
        "grpc",
        "-u",
        url,
        "--concurrency-range",
        str(concurrency),
        "--measurement-interval",
        str(interval_ms),
        "-s",
        "100000",
        "--max-trials",
        "3",
        "--input-data",
        "zero",
        "-f",
        str(csv_path),
    ]
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    with open(csv_path, newline="") as f:
        row = [r for r in csv.DictReader(f) if r.get("Concurrency", "").strip()][-1]
    return float(row["Inferences/Second"])


def ab(
    model: str,
    own_dir: Path,
    config: Path,
    concurrency: int,
    rounds: int,
    interval_ms: int,
    work: Path,
) -> tuple[list[float], list[float]]:
    """Throughputs of the model's own config (A) and the recommended one (B), round by round."""
    repo_a, repo_b = work / "own", work / "recommended"
    shutil.copytree(own_dir, repo_a / model)
    shutil.copytree(own_dir, repo_b / model)
    shutil.copy(config, repo_b / model / "config.pbtxt")
    executable, env = find_perf_analyzer()
    servers = {}
    try:
        for name, repo in (("A", repo_a), ("B", repo_b)):
            servers[name] = ServerProcess(
                "--model-repository", str(repo), log=work / f"server_{name}.log"
            )
        a, b = [], []
        for k in range(rounds):
            for name in ("A", "B") if k % 2 == 0 else ("B", "A"):
                t = perf(
                    executable,
                    env,
                    model,
                    servers[name].url("grpc"),
                    concurrency,
                    work / f"pa_{k}_{name}.csv",
                    interval_ms,
                )
                (a if name == "A" else b).append(t)
        return a, b
    finally:
        for server in servers.values():
            server.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--model", default="detector")
    p.add_argument("--budget-ms", type=float, default=100.0)
    p.add_argument("--rounds", type=int, default=5, help="A/B rounds of each re-measure")
    p.add_argument("--interval-ms", type=int, default=1000)
    p.add_argument("--out", default=str(OUT / "analyzer_recheck.txt"))
    p.add_argument(
        "--check-keep", action="store_true", help="on keep, measure the closest candidate A/B too"
    )
    args = p.parse_args()
    repo = ROOT / "model_repository"
    lines = [
        f"triton-ros-analyzer profile --quick on {args.model}, latency budget "
        f"{args.budget_ms:g} ms, {args.runs} runs in a row; each change measured again "
        f"beside the model's own config, {args.rounds} ABBA rounds of perf_analyzer "
        f"({args.interval_ms} ms windows x 3)",
        *machine_lines().splitlines(),
        f"- commit {commit()}, load average at start {' '.join(LOAD_AT_START)}",
        "",
        "| run | answer | analyzer's ratio (per round) | s | re-measured ratio median "
        "(min-max) | own config spread | holds |",
        "|---|---|---|---|---|---|---|",
    ]
    failures = []
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="analyzer_recheck_") as tmp:
            work = Path(tmp)
            t0 = time.monotonic()
            proc = subprocess.run(
                [
                    str(ANALYZER),
                    "profile",
                    "-m",
                    str(repo),
                    "--profile-models",
                    args.model,
                    "--latency-budget-ms",
                    f"{args.budget_ms:g}",
                    "--quick",
                    "--no-progress",
                    "-e",
                    str(work / "out"),
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            seconds = time.monotonic() - t0
            rec_dir = work / "out" / "recommended" / args.model
            if proc.returncode != 0 or not (rec_dir / "recommendation.json").exists():
                lines.append(
                    f"| {run} | none (exit {proc.returncode}) | | {seconds:.0f} | | | "
                    f"yes (no claim) |"
                )
                continue
            rec = json.loads((rec_dir / "recommendation.json").read_text())
            if rec["keep_model_config"]:
                closest = max(
                    (c for c in rec["comparisons"] if c["ratio_same_concurrency"]),
                    key=lambda c: c["ratio_same_concurrency"]["median"],
                    default=None,
                )
                said = (
                    f"{closest['ratio_same_concurrency']['median']:.2f}x "
                    f"({closest['ratio_same_concurrency']['low']:.2f}-"
                    f"{closest['ratio_same_concurrency']['high']:.2f}) "
                    f"{closest['variant']}"
                    if closest
                    else ""
                )
                if not (args.check_keep and closest and closest["concurrency"]):
                    lines.append(f"| {run} | keep | {said} | {seconds:.0f} | | | yes (keep) |")
                    continue
                config = (
                    work / "out" / "output_model_repository" / closest["variant"] / "config.pbtxt"
                )
                a, b = ab(
                    args.model,
                    repo / args.model,
                    config,
                    closest["concurrency"],
                    args.rounds,
                    args.interval_ms,
                    work,
                )
                per = [y / x for x, y in zip(a, b)]
                noise = (max(a) - min(a)) / statistics.median(a)
                lines.append(
                    f"| {run} | keep | {said} at concurrency {closest['concurrency']} "
                    f"| {seconds:.0f} | closest candidate: "
                    f"{statistics.median(per):.2f}x ({min(per):.2f}-{max(per):.2f}) | "
                    f"{noise:.0%} | yes (keep) |"
                )
                continue
            c = rec["comparisons"]
            ratio = next(x for x in c if x["variant"] == rec["variant"])["ratio_same_concurrency"]
            a, b = ab(
                args.model,
                repo / args.model,
                rec_dir / "config.pbtxt",
                rec["measured"]["concurrency"],
                args.rounds,
                args.interval_ms,
                work,
            )
            per = [y / x for x, y in zip(a, b)]
            noise = (max(a) - min(a)) / statistics.median(a)
            median = statistics.median(per)
            holds = median >= 1.0 - noise
            if not holds:
                failures.append(f"run {run}: {rec['variant']} re-measured {median:.2f}x")
            lines.append(
                f"| {run} | {rec['variant']} {rec['changes']} at concurrency "
                f"{rec['measured']['concurrency']} | {ratio['median']:.2f}x "
                f"({ratio['low']:.2f}-{ratio['high']:.2f}) | {seconds:.0f} | "
                f"{median:.2f}x ({min(per):.2f}-{max(per):.2f}) | {noise:.0%} | "
                f"{'yes' if holds else 'NO'} |"
            )
    lines.append("")
    lines.append("failures: " + ("; ".join(failures) if failures else "none"))
    emit("\n".join(lines), args.out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
