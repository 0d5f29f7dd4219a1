"""Prometheus metrics of a real triton-ros-server, scraped and parsed with a plain text parser
while gRPC and HTTP clients load it; counters must agree exactly with ModelStatistics."""

from __future__ import annotations

import shutil
import threading
import urllib.error
import urllib.request

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from prometheus_text import parse, scrape
from simple_model import simple_array, simple_inputs


pytestmark = pytest.mark.integration

MODEL_FAMILIES = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
)
COUNTERS = MODEL_FAMILIES[:-1]


def _stats_by_model(client) -> dict[str, dict]:
    stats = client.get_inference_statistics()
    return {s["name"]: s for s in stats["model_stats"]}


def test_metric_families_types_and_labels(bundled_server):
    families = scrape(bundled_server.metrics_url)
    for name in MODEL_FAMILIES:
        assert name in families, name
        expected = "gauge" if name == "nv_inference_pending_request_count" else "counter"
        assert families[name].type == expected, name
    for fam in ("nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"):
        assert families[fam].type == "gauge"
        value = families[fam].value()
        assert value >= 0
    assert 0.0 <= families["nv_cpu_utilization"].value() <= 1.0
    assert (
        families["nv_cpu_memory_used_bytes"].value()
        <= families["nv_cpu_memory_total_bytes"].value()
    )
    # model and version labels on every model series; the four failure reasons from the start
    for model in ("simple", "detector"):
        assert families["nv_inference_request_success"].get(model=model, version="1") is not None
        reasons = families["nv_inference_request_failure"].by("reason", model=model, version="1")
        assert set(reasons) == {"REJECTED", "CANCELED", "BACKEND", "OTHER"}
    # no cache configured: no cache metrics; no GPU here (CI): no GPU metrics
    assert not any(name.startswith("nv_cache") for name in families)


def test_metrics_endpoint_errors(bundled_server):
    base = bundled_server.metrics_url.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(base + "/nothing", timeout=10)
    assert info.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(
            urllib.request.Request(bundled_server.metrics_url, data=b"x"), timeout=10
        )
    assert info.value.code == 405
    assert "nv_inference_count" in scrape(bundled_server.metrics_url)


def test_counters_agree_with_statistics_under_concurrent_load(start_server, repo_copy):
    """gRPC and HTTP clients (good and bad requests) load the server while a scraper parses
    /metrics; counters never decrease, and once load stops they equal ModelStatistics."""
    repo = repo_copy
    # A model whose every request times out in the queue (1 us): failures with reason REJECTED.
    timeout_dir = repo / "simple_timeout"
    shutil.copytree(repo / "simple", timeout_dir)
    text = (
        (timeout_dir / "config.pbtxt")
        .read_text()
        .replace('name: "simple"', 'name: "simple_timeout"')
    )
    text += (
        "dynamic_batching { default_queue_policy { timeout_action: REJECT "
        "default_timeout_microseconds: 1 } }\n"
    )
    (timeout_dir / "config.pbtxt").write_text(text)
    server = start_server("--model-repository", str(repo))

    per_thread = 40
    counts = {"ok": 0, "bad": 0, "rejected": 0, "other_errors": []}
    lock = threading.Lock()
    stop_scraping = threading.Event()
    scrape_errors: list[str] = []
    scrapes = [0]

    def client_thread(kind: str, index: int) -> None:
        module = grpcclient if kind == "grpc" else httpclient
        client = server.client() if kind == "grpc" else server.http_client()
        for i in range(per_thread):
            bad = i % 10 == 3
            model = "simple_timeout" if i % 10 == 7 else "simple"
            try:
                client.infer(
                    model,
                    simple_inputs(module, simple_array(rows=1 + (i % 3))[:, : 8 if bad else None]),
                )
                with lock:
                    counts["ok"] += 1
            except InferenceServerException as exc:
                with lock:
                    if bad:
                        counts["bad"] += 1
                    elif model == "simple_timeout" and "timeout" in exc.message().lower():
                        counts["rejected"] += 1
                    else:
                        counts["other_errors"].append(exc.message())

    def scraper() -> None:
        previous: dict = {}
        while not stop_scraping.is_set():
            try:
                families = scrape(server.metrics_url)
            except Exception as exc:  # noqa: BLE001 - reported below
                scrape_errors.append(repr(exc))
                return
            scrapes[0] += 1
            for name in COUNTERS:
                for key, value in families[name].samples.items():
                    if value < previous.get((name, key), 0):
                        scrape_errors.append(f"{name}{key} decreased")
                    previous[(name, key)] = value

    scraper_thread = threading.Thread(target=scraper)
    scraper_thread.start()
    workers = [
        threading.Thread(target=client_thread, args=(kind, i))
        for kind in ("grpc", "http")
        for i in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    stop_scraping.set()
    scraper_thread.join(timeout=60)
    assert not scrape_errors, scrape_errors
    assert not counts["other_errors"], counts["other_errors"]
    assert scrapes[0] >= 1

    families = scrape(server.metrics_url)
    stats = _stats_by_model(server.http_client())
    total_requests = 4 * per_thread
    assert counts["ok"] + counts["bad"] + counts["rejected"] == total_requests

    for model in ("simple", "simple_timeout", "detector"):
        s = stats[model]
        inf = s["inference_stats"]
        labels = {"model": model, "version": "1"}
        assert families["nv_inference_request_success"].value(**labels) == inf["success"]["count"]
        failures = families["nv_inference_request_failure"].by("reason", **labels)
        assert sum(failures.values()) == inf["fail"]["count"]
        assert families["nv_inference_count"].value(**labels) == s["inference_count"]
        assert families["nv_inference_exec_count"].value(**labels) == s["execution_count"]
        for fam, field in (
            ("nv_inference_request_duration_us", "success"),
            ("nv_inference_queue_duration_us", "queue"),
            ("nv_inference_compute_input_duration_us", "compute_input"),
            ("nv_inference_compute_infer_duration_us", "compute_infer"),
            ("nv_inference_compute_output_duration_us", "compute_output"),
        ):
            assert families[fam].value(**labels) == inf[field]["ns"] // 1000, fam
        assert families["nv_inference_pending_request_count"].value(**labels) == 0

    simple = families["nv_inference_request_failure"].by("reason", model="simple", version="1")
    timeout = families["nv_inference_request_failure"].by(
        "reason", model="simple_timeout", version="1"
    )
    # what the clients saw, by reason: malformed requests are OTHER, queue timeouts REJECTED
    assert simple["OTHER"] == counts["bad"] and simple["REJECTED"] == 0
    assert timeout["REJECTED"] == counts["rejected"] and timeout["OTHER"] == 0
    assert counts["rejected"] > 0
    assert (
        families["nv_inference_request_success"].value(model="simple", version="1") == counts["ok"]
    )
    # batch sizes 1..3 were sent: inference_count counts rows, success counts requests
    assert (
        stats["simple"]["inference_count"] > stats["simple"]["inference_stats"]["success"]["count"]
    )


def test_parser_rejects_malformed_text():
    with pytest.raises(ValueError):
        parse("nv_x 1\n")  # no TYPE
    with pytest.raises(ValueError):
        parse('# TYPE a counter\na{x="1"} 1\na{x="1"} 2\n')  # duplicate series
    families = parse('# HELP a h\n# TYPE a gauge\na{l="q\\"\\\\"} 2.5\n')
    assert families["a"].value(l='q"\\') == 2.5


def test_grafana_dashboard_uses_exported_metrics():
    import json
    import re

    from server_process import ROOT
    from triton_ros.core.metrics import FAMILIES

    dashboard = json.loads((ROOT / "config" / "grafana" / "triton_ros_dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\b(?:nv|triton_ros)_[a-z_]+", e)}
    assert used and used <= set(FAMILIES), used - set(FAMILIES)
    # every per-model and per-interval family of Triton's the server exports has a panel
    assert {f for f in FAMILIES if f.startswith("nv_")} - used <= {
        "nv_cache_hit_duration_per_model",
        "nv_cache_miss_duration_per_model",
        "nv_cache_num_hits",
        "nv_cache_num_misses",
        "nv_cache_num_lookups",
        "nv_cache_lookup_duration",
        "nv_cache_insertion_duration",
    }
