"""Triton's ``perf_analyzer``, run as a process, and its CSV file read back.

Every throughput and latency figure of the analyzer is perf_analyzer's own: one run per
concurrency (``--concurrency-range C``), results from its ``-f`` CSV file (microseconds there,
milliseconds here). The CSV has the p50/p90/p95/p99 latencies and the average's parts (client
send, network and server send/receive, server queue, compute input/infer/output, client
receive); their sum is perf_analyzer's average latency.

perf_analyzer exits 2 (``STABILITY_ERROR``) when ``--max-trials`` windows did not agree within
``--stability-percentage``; on this noisy shared host that happens. Such a point is measured once
more with the stability check off (the last three windows, as perf_analyzer merges them) and
marked unstable in the tables, rather than dropped: the sweep still needs a figure for it.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PerfAnalyzerError, ToolNotFoundError

#: Environment variable naming the perf_analyzer executable (default: next to this Python).
PERF_ANALYZER_ENV = "TRITON_ROS_PERF_ANALYZER"

# perf_analyzer's exit statuses (perf_analyzer/constants.h)
STABILITY_ERROR = 2
OPTION_ERROR = 3

NO_STABILITY_CHECK = 100000  # a stability percentage no set of windows can miss

LATENCY_METRICS = ("avg", "p50", "p90", "p95", "p99")
_PERCENTILE_COLUMNS = {
    "p50": "p50 latency",
    "p90": "p90 latency",
    "p95": "p95 latency",
    "p99": "p99 latency",
}
_AVERAGE_PARTS = (
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
)


def find_perf_analyzer() -> str:
    """The perf_analyzer executable: $TRITON_ROS_PERF_ANALYZER, the one scripts/setup.sh puts
    next to this Python, or the first on PATH."""
    candidates = [
        os.environ.get(PERF_ANALYZER_ENV, ""),
        str(Path(sys.executable).parent / "perf_analyzer"),
        shutil.which("perf_analyzer") or "",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise ToolNotFoundError(
        "perf_analyzer not found: scripts/setup.sh installs it into the virtual environment "
        f"(.venv/bin/perf_analyzer); or set {PERF_ANALYZER_ENV} to its path"
    )


@dataclass(frozen=True)
class PerfAnalyzerSettings:
    """How perf_analyzer measures one point (its own flag names)."""

    measurement_interval_ms: int = 1000
    stability_percentage: float = 25.0
    max_trials: int = 6
    batch_size: int = 1
    protocol: str = "grpc"
    input_data: str = "zero"  # zero | random | a JSON file (perf_analyzer's --input-data)
    shapes: tuple[str, ...] = ()  # NAME:D1,D2 for inputs with variable dimensions
    extra_flags: tuple[str, ...] = ()  # any other perf_analyzer flags, passed as they are
    timeout_s: float = 120.0

    def command(
        self,
        executable: str,
        model: str,
        url: str,
        concurrency: int,
        csv_path: Path,
        *,
        stability_percentage: float | None = None,
    ) -> list[str]:
        stability = (
            self.stability_percentage if stability_percentage is None else stability_percentage
        )
        cmd = [
            executable,
            "-m",
            model,
            "-i",
            self.protocol,
            "-u",
            url,
            "-b",
            str(self.batch_size),
            "--concurrency-range",
            str(concurrency),
            "--measurement-interval",
            str(self.measurement_interval_ms),
            "-s",
            f"{stability:g}",
            "--max-trials",
            str(self.max_trials),
            "--input-data",
            self.input_data,
            "-f",
            str(csv_path),
        ]
        for shape in self.shapes:
            cmd += ["--shape", shape]
        return cmd + list(self.extra_flags)


@dataclass(frozen=True)
class PerfResult:
    """One perf_analyzer measurement: a concurrency's throughput and latencies."""

    concurrency: int
    throughput: float  # inferences/s
    latency_ms: dict[str, float]  # avg, p50, p90, p95, p99
    server_queue_ms: float
    server_compute_ms: float  # compute input + infer + output
    stable: bool | None = True  # None: the stability check was off
    command: tuple[str, ...] = field(default=(), compare=False)


def read_csv(
    path: Path, *, stable: bool | None = True, command: tuple[str, ...] = ()
) -> PerfResult:
    """The single row of perf_analyzer's ``-f`` CSV file of a one-concurrency run."""
    with open(path, newline="") as f:
        rows = [row for row in csv.DictReader(f) if row.get("Concurrency", "").strip()]
    if not rows:
        raise PerfAnalyzerError(f"perf_analyzer wrote no measurement to {path}", None)
    row = rows[-1]
    try:
        us = {name: float(row[column]) for name, column in _PERCENTILE_COLUMNS.items()}
        us["avg"] = sum(float(row[part]) for part in _AVERAGE_PARTS)
        queue = float(row["Server Queue"])
        compute = sum(
            float(row[part])
            for part in ("Server Compute Input", "Server Compute Infer", "Server Compute Output")
        )
        return PerfResult(
            concurrency=int(row["Concurrency"]),
            throughput=float(row["Inferences/Second"]),
            latency_ms={k: us[k] / 1000.0 for k in LATENCY_METRICS},
            server_queue_ms=queue / 1000.0,
            server_compute_ms=compute / 1000.0,
            stable=stable,
            command=command,
        )
    except (KeyError, ValueError) as exc:
        raise PerfAnalyzerError(f"unexpected perf_analyzer CSV in {path}: {exc!r}", None) from None


class PerfAnalyzer:
    """Runs perf_analyzer against one server and model, one concurrency at a time."""

    def __init__(
        self, settings: PerfAnalyzerSettings, workdir: Path, executable: str | None = None
    ) -> None:
        self.settings = settings
        self.workdir = workdir
        self.executable = executable or find_perf_analyzer()
        self._runs = 0

    def measure(self, model: str, url: str, concurrency: int) -> PerfResult:
        """Measure ``concurrency``; an unstable point is measured again without the check."""
        try:
            return self._run(model, url, concurrency, None)
        except PerfAnalyzerError as exc:
            if exc.returncode != STABILITY_ERROR:
                raise
        return self._run(model, url, concurrency, NO_STABILITY_CHECK)

    def _run(self, model: str, url: str, concurrency: int, stability: float | None) -> PerfResult:
        self._runs += 1
        self.workdir.mkdir(parents=True, exist_ok=True)
        csv_path = self.workdir / f"perf_analyzer_{self._runs}.csv"
        log_path = self.workdir / f"perf_analyzer_{self._runs}.log"
        cmd = self.settings.command(
            self.executable, model, url, concurrency, csv_path, stability_percentage=stability
        )
        with open(log_path, "w") as log:
            try:
                proc = subprocess.run(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=self.settings.timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise PerfAnalyzerError(
                    f"perf_analyzer did not finish within {self.settings.timeout_s:.0f} s at "
                    f"concurrency {concurrency} (log: {log_path})",
                    None,
                ) from None
        if proc.returncode != 0:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise PerfAnalyzerError(
                f"perf_analyzer exited {proc.returncode} at concurrency {concurrency}: "
                f"{' / '.join(tail)} (log: {log_path})",
                proc.returncode,
            )
        if stability is not None:
            stable = False  # measured again without the check
        elif self.settings.stability_percentage >= NO_STABILITY_CHECK:
            stable = None  # not checked (--quick)
        else:
            stable = True
        return read_csv(csv_path, stable=stable, command=tuple(cmd))
