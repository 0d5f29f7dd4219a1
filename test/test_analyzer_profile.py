"""``triton-ros-analyzer profile`` end to end: the console script sweeps a model with the real
perf_analyzer against real triton-ros-server processes on a scratch copy (the user's repository
stays byte-identical), writes the tables, charts, HTML and a config.pbtxt; that config.pbtxt,
loaded into a fresh server and measured again with perf_analyzer by this test, meets the latency
budget it was chosen for.

The margin: none beyond the budget itself. The analyzer chose the configuration at most 80 % of
the budget (its default 20 % headroom) and confirmed it on a fresh server with windows twice as
long and perf_analyzer's stability check; on this shared 2-core host a second measurement of the
same point has varied by 10-30 %, which that headroom covers. The budget (50 ms p99 for a model
that answers in about a millisecond) binds only once the host is very busy; the sweep stops at
concurrency 2 to stay short.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server_process import MODEL_REPOSITORY, ServerProcess
from triton_ros.analyzer.errors import PerfAnalyzerError
from triton_ros.analyzer.perf_analyzer import NO_STABILITY_CHECK, PerfAnalyzer, PerfAnalyzerSettings
from triton_ros.core.model_config import load_model_config, parse_config_text

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
BUDGET_MS = 50.0


def digest(root: Path) -> dict[str, str]:
    """Every file and folder below root, with the hash of each file's bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


@pytest.fixture
def user_repository(tmp_path) -> Path:
    """A user's repository: two bundled models (only one is profiled)."""
    repo = tmp_path / "user_models"
    for model in ("simple", "color_detector"):
        shutil.copytree(MODEL_REPOSITORY / model, repo / model)
    return repo


def remeasure(repo: Path, model: str, concurrency: int) -> dict[str, float]:
    """p50/p99 (ms) of ``model`` in ``repo`` on a fresh server, perf_analyzer with 500 ms windows
    and its stability check (measured once more without it if it cannot settle)."""
    server = ServerProcess(
        "--model-repository", str(repo), "--allow-http", "false", "--allow-metrics", "false"
    )
    try:
        server.wait_live()
        perf = PerfAnalyzer(PerfAnalyzerSettings(measurement_interval_ms=500), repo.parent / "pa")
        result = perf.measure(model, server.url, concurrency)
    finally:
        assert server.stop() == 0, server.log()
    return result.latency_ms


def test_profile_recommends_a_config_that_meets_its_budget_measured_again(
    user_repository, tmp_path
):
    before = digest(user_repository)
    out = tmp_path / "profile"
    cmd = [
        str(BIN / "triton-ros-analyzer"),
        "profile",
        "-m",
        str(user_repository),
        "--profile-models",
        "simple",
        "--latency-budget-ms",
        str(BUDGET_MS),
        "--quick",
        "--max-configs",
        "2",
        "--run-config-search-max-instance-count",
        "2",
        "--run-config-search-max-model-batch-size",
        "8",
        "--max-queue-delay-microseconds",
        "0,1000",
        "--run-config-search-max-concurrency",
        "2",
        "--measurement-interval",
        "250",
        "--confirm-candidates",
        "1",
        "-e",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert digest(user_repository) == before, "the user's repository was changed"
    # the progress bar and its time estimate went to stderr
    assert "configs [" in proc.stderr and " s left" in proc.stderr, proc.stderr

    # every measurement is perf_analyzer's, per configuration and concurrency
    import csv

    with open(out / "results" / "metrics-model-inference.csv") as f:
        rows = list(csv.DictReader(f))
    variants = {r["Model Config"] for r in rows}
    assert variants == {"simple_config_default", "simple_config_0"}, log
    for r in rows:
        assert float(r["Throughput (infer/sec)"]) > 0
        assert (
            float(r["p50 Latency (ms)"])
            <= float(r["p95 Latency (ms)"])
            <= float(r["p99 Latency (ms)"])
        )
        assert float(r["Server RAM Peak RSS (MB)"]) > 20 and float(r["Server CPU (cores)"]) > 0
    default = [int(r["Concurrency"]) for r in rows if r["Model Config"] == "simple_config_default"]
    assert default[:2] == [1, 2], default
    # each configuration measured is kept, and is a configuration the core accepts
    for variant in variants:
        text = (out / "output_model_repository" / variant / "config.pbtxt").read_text()
        parse_config_text(text, model_name="simple")

    # the pictures and the page
    plots = out / "plots" / "simple" / "simple"
    for name in ("throughput_v_latency.png", "cpu_mem_v_throughput.png"):
        assert (plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "reports" / "summaries" / "simple" / "result_summary.html").read_text()
    assert (
        "Recommendation" in page or "Keep your configuration" in page
    ) and "data:image/png;base64," in page

    # the recommendation: a ready config.pbtxt, measured again here on a fresh server
    rec = json.loads((out / "recommended" / "simple" / "recommendation.json").read_text())
    assert rec["confirmed"] is True and rec["constraints"]["latency_metric"] == "p99"
    # a measured claim: the model's own configuration was confirmed too, in alternating rounds
    # beside the candidate, and a change is recommended only when it won every round
    assert rec["confirmation_rounds"] == 4 and rec["model_config_measured"] is not None, rec
    with open(out / "results" / "metrics-summary.csv") as f:
        summary = {r["Model Config"]: r for r in csv.DictReader(f)}
    assert summary["simple_config_default"]["Measured In"].startswith("confirmation"), summary
    assert "Confirmation rounds" in page and page.count("<td>simple_config_default</td>") >= 5
    if rec["keep_model_config"]:
        assert rec["variant"] == "simple_config_default" and rec["changes"] == {}
        assert "keep your configuration" in proc.stdout, log
    else:
        ratio = rec["comparisons"][0]["ratio_same_concurrency"]
        assert ratio["low"] > 1.05, rec
        assert f"{ratio['median']:.2f}x (per round" in proc.stdout, log
    measured = rec["measured"]
    assert measured["latency_ms"]["p99"] <= BUDGET_MS * 0.8
    fresh = tmp_path / "fresh"
    shutil.copytree(user_repository / "simple", fresh / "simple")
    shutil.copy(out / "recommended" / "simple" / "config.pbtxt", fresh / "simple" / "config.pbtxt")
    load_model_config("simple", fresh / "simple")  # the core's validation
    latency = remeasure(fresh, "simple", measured["concurrency"])
    assert latency["p99"] <= BUDGET_MS, (latency, rec)


def test_an_unstable_point_is_measured_again_without_the_check(tmp_path):
    """perf_analyzer exits 2 when its windows disagree: the point is measured once more with
    the check off and marked; any other failure is an error with perf_analyzer's words."""
    fake = tmp_path / "perf_analyzer"
    fake.write_text(
        "#!/bin/sh\n"
        "case \"$*\" in *'-s 100000'*) ;; *) echo 'Failed to obtain stable "
        "measurement.'; exit 2;; esac\n"
        'while [ $# -gt 0 ]; do [ "$1" = -f ] && out=$2; shift; done\n'
        "printf 'Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,"
        "Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,"
        "Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\\n"
        '2,100,1,2,3,4,5,6,7,10,20,30,40\\n\' > "$out"\n'
    )
    fake.chmod(0o755)
    perf = PerfAnalyzer(PerfAnalyzerSettings(), tmp_path / "logs", executable=str(fake))
    result = perf.measure("m", "127.0.0.1:1", 2)
    assert result.stable is False and result.throughput == 100.0
    assert f"-s {NO_STABILITY_CHECK}" in " ".join(result.command)
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'error: failed to get model metadata'; exit 99\n")
    failing.chmod(0o755)
    with pytest.raises(PerfAnalyzerError) as info:
        PerfAnalyzer(PerfAnalyzerSettings(), tmp_path / "logs2", executable=str(failing)).measure(
            "m", "127.0.0.1:1", 1
        )
    assert info.value.returncode == 99 and "model metadata" in str(info.value)


def test_a_model_that_is_not_there_is_a_clear_failure(user_repository, tmp_path):
    proc = subprocess.run(
        [
            str(BIN / "triton-ros-analyzer"),
            "profile",
            "-m",
            str(user_repository),
            "--profile-models",
            "nope",
            "-e",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert proc.returncode == 1
    assert "model 'nope' is not in the model repository" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_input_with_variable_dimensions_asks_for_its_shape(tmp_path):
    from model_factory import identity_graph, write_model

    repo = tmp_path / "models"
    write_model(
        repo,
        "anysize",
        identity_graph("FP32", ["N", 3, "H", "W"]),
        'backend: "onnxruntime"\nmax_batch_size: 4\n',
    )
    before = digest(repo)
    proc = subprocess.run(
        [
            str(BIN / "triton-ros-analyzer"),
            "profile",
            "-m",
            str(repo),
            "--profile-models",
            "anysize",
            "--no-progress",
            "-e",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "input 'INPUT0' of 'anysize' has variable dimensions [3, -1, -1]" in proc.stderr
    assert "--shape INPUT0:3,224,224" in proc.stderr and "Traceback" not in proc.stderr
    assert digest(repo) == before
