"""The response cache (--cache-config local,size=N with response_cache { enable: true }): hits
are answered without executing, the cache is bounded in bytes (LRU eviction), and hits/misses
show in statistics and metrics. Real server, real clients."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from server_process import ServerProcess, copy_models
from simple_model import simple_inputs
from prometheus_text import scrape


pytestmark = pytest.mark.integration

# One cached response of "simple": a 16-byte key, and OUTPUT0 and OUTPUT1 (7-byte names,
# 16 INT32 = 64 bytes each).
ENTRY_BYTES = 16 + 2 * (7 + 64)


def _repo(tmp_path: Path, *, cached: bool = True) -> Path:
    repo = copy_models(tmp_path / "models", "simple")
    if cached:
        config = repo / "simple" / "config.pbtxt"
        config.write_text(config.read_text() + "response_cache { enable: true }\n")
    return repo


def _infer(client, module, value: int, outputs=None):
    return client.infer("simple", simple_inputs(module, value), outputs=outputs)


def _stats(server) -> dict:
    return server.http_client().get_inference_statistics("simple")["model_stats"][0]


def test_hits_are_answered_without_executing(start_server, tmp_path):
    server = start_server(
        "--model-repository", str(_repo(tmp_path)), "--cache-config", "local,size=1048576"
    )
    http, grpc = server.http_client(), server.client()
    first = _infer(http, httpclient, 3)
    second = _infer(grpc, grpcclient, 3)  # same request through the other protocol: a hit
    third = _infer(http, httpclient, 3)
    for result in (first, second, third):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 6))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16)))
    # a different requested output set is a different request
    only0 = _infer(http, httpclient, 3, outputs=[httpclient.InferRequestedOutput("OUTPUT0")])
    assert only0.as_numpy("OUTPUT1") is None
    s = _stats(server)
    inf = s["inference_stats"]
    assert inf["success"]["count"] == 4
    assert inf["cache_hit"]["count"] == 2 and inf["cache_miss"]["count"] == 2
    assert s["execution_count"] == 2 and s["inference_count"] == 2
    assert inf["compute_infer"]["count"] == 2  # hits computed nothing
    assert inf["queue"]["count"] == 4

    families = scrape(server.metrics_url)
    labels = {"model": "simple", "version": "1"}
    assert families["nv_cache_num_hits_per_model"].value(**labels) == 2
    assert families["nv_cache_num_misses_per_model"].value(**labels) == 2
    assert (
        families["nv_cache_hit_duration_per_model"].value(**labels)
        == inf["cache_hit"]["ns"] // 1000
    )
    assert (
        families["nv_cache_miss_duration_per_model"].value(**labels)
        == inf["cache_miss"]["ns"] // 1000
    )
    assert families["nv_inference_request_success"].value(**labels) == 4
    assert families["nv_inference_exec_count"].value(**labels) == 2
    assert families["nv_cache_num_entries"].value() == 2
    assert families["nv_cache_num_lookups"].value() == 4
    assert families["nv_cache_num_hits"].value() == 2
    assert families["nv_cache_num_misses"].value() == 2
    assert 0 < families["nv_cache_util"].value() < 1


def test_cache_is_bounded_in_bytes_with_lru_eviction(start_server, tmp_path):
    # room for two responses, not three
    server = start_server(
        "--model-repository",
        str(_repo(tmp_path)),
        "--cache-config",
        f"local,size={2 * ENTRY_BYTES + ENTRY_BYTES // 2}",
    )
    c = server.http_client()
    for value in (1, 2, 1, 3):  # 1 miss, 2 miss, 1 hit (now most recent), 3 miss evicts 2
        _infer(c, httpclient, value)
    _infer(c, httpclient, 1)  # still cached: hit
    _infer(c, httpclient, 2)  # evicted: miss (and evicts 3, the least recently used)
    inf = _stats(server)["inference_stats"]
    assert inf["cache_hit"]["count"] == 2 and inf["cache_miss"]["count"] == 4
    families = scrape(server.metrics_url)
    assert families["nv_cache_num_evictions"].value() == 2
    assert families["nv_cache_num_entries"].value() == 2
    assert families["nv_cache_util"].value() == pytest.approx(
        2 * ENTRY_BYTES / (2.5 * ENTRY_BYTES), abs=0.01
    )


def test_response_larger_than_the_cache_is_not_cached(start_server, tmp_path):
    server = start_server(
        "--model-repository", str(_repo(tmp_path)), "--cache-config", "local,size=100"
    )
    c = server.http_client()
    for _ in range(3):
        np.testing.assert_array_equal(
            _infer(c, httpclient, 5).as_numpy("OUTPUT0"), np.full((1, 16), 10)
        )
    inf = _stats(server)["inference_stats"]
    assert inf["cache_hit"]["count"] == 0 and inf["cache_miss"]["count"] == 3
    assert scrape(server.metrics_url)["nv_cache_num_entries"].value() == 0


def test_model_cache_without_server_cache_is_not_used(start_server, tmp_path):
    server = start_server("--model-repository", str(_repo(tmp_path)))
    c = server.http_client()
    for _ in range(2):
        _infer(c, httpclient, 4)
    s = _stats(server)
    assert s["execution_count"] == 2 and s["inference_stats"]["cache_hit"]["count"] == 0
    assert "enables response_cache but the server has no cache" in server.log()
    families = scrape(server.metrics_url)
    assert not any(name.startswith("nv_cache") for name in families)


def test_server_cache_without_model_opt_in_is_not_used(start_server, tmp_path):
    server = start_server(
        "--model-repository",
        str(_repo(tmp_path, cached=False)),
        "--cache-config",
        "local,size=1048576",
    )
    c = server.http_client()
    for _ in range(2):
        _infer(c, httpclient, 4)
    s = _stats(server)
    assert s["execution_count"] == 2 and s["inference_stats"]["cache_miss"]["count"] == 0
    families = scrape(server.metrics_url)
    assert "nv_cache_num_hits_per_model" not in families
    assert families["nv_cache_num_lookups"].value() == 0


@pytest.mark.parametrize(
    "flag, message",
    [
        ("redis,host=x", "cache implementation 'redis' is not available"),
        ("local", "--cache-config option format"),
        ("local,size=abc", "'size' must be an integer"),
    ],
)
def test_bad_cache_config_is_refused(tmp_path, flag, message):
    server = ServerProcess("--model-repository", str(_repo(tmp_path)), "--cache-config", flag)
    try:
        assert server.proc.wait(timeout=60) == 1
        assert message in server.log()
    finally:
        server.stop()
