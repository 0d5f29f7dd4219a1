"""perf_analyzer, unchanged, against models and load modes other than the benchmarks' ones: every
run must finish (exit 0) with a throughput, and the server's statistics must count the requests.

The models are real ONNX graphs built here (model_factory), each exercising a configuration the
benchmarks do not: FP16 tensors, INT64 without batching, a 2.4 MB output at batch 2, two inputs
and outputs on two instances, and a model without config.pbtxt (auto-complete); the load modes
are perf_analyzer's synchronous, --async, --streaming (ModelStreamInfer) and --request-rate-range
over gRPC, and HTTP.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from model_factory import add_sub_graph, identity_graph, save, write_model
from server_process import perf_analyzer


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(start_module_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("pa_models")
    write_model(
        repo,
        "fp16",
        identity_graph("FP16", ["N", 3, 64, 64]),
        'backend: "onnxruntime"\nmax_batch_size: 8\ndynamic_batching {}\n',
    )
    write_model(
        repo, "i64", identity_graph("INT64", [16]), 'backend: "onnxruntime"\nmax_batch_size: 0\n'
    )
    write_model(
        repo,
        "bigout",
        identity_graph("FP32", ["N", 3, 448, 448]),
        'backend: "onnxruntime"\nmax_batch_size: 4\n'
        "dynamic_batching { max_queue_delay_microseconds: 500 }\n",
    )
    write_model(
        repo,
        "addsub",
        add_sub_graph("FP32", ["N", 16]),
        'backend: "onnxruntime"\nmax_batch_size: 8\ndynamic_batching {}\n'
        "instance_group [ { count: 2, kind: KIND_CPU } ]\n",
    )
    save(identity_graph("INT32", ["N", 8]), repo / "noconfig" / "1" / "model.onnx")
    return start_module_server("--model-repository", str(repo))


CASES = [
    ("fp16", "grpc", ["--concurrency-range", "1:4:3"]),
    ("fp16", "http", ["--concurrency-range", "2"]),
    ("i64", "grpc", ["--concurrency-range", "2"]),
    ("bigout", "grpc", ["--concurrency-range", "2", "-b", "2"]),
    ("addsub", "grpc", ["--concurrency-range", "4", "--async"]),
    ("addsub", "grpc", ["--concurrency-range", "2", "--streaming"]),
    ("addsub", "grpc", ["--request-rate-range", "100"]),
    ("noconfig", "grpc", ["--concurrency-range", "2", "-b", "4"]),
]


@pytest.mark.parametrize(
    "model, protocol, load", CASES, ids=[f"{m}-{p}-{'_'.join(a).strip('-')}" for m, p, a in CASES]
)
def test_perf_analyzer_runs_unchanged(server, model, protocol, load):
    analyzer = perf_analyzer()
    url = server.url if protocol == "grpc" else server.http_url
    stats0 = server.client().get_inference_statistics(model).model_stats[0].inference_count
    result = subprocess.run(
        [
            str(analyzer),
            "-m",
            model,
            "-i",
            protocol,
            "-u",
            url,
            "--measurement-interval",
            "800",
            "-s",
            "100000",
            "--max-trials",
            "3",
        ]
        + load,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rates = [float(x) for x in re.findall(r"throughput: ([\d.]+) infer/sec", result.stdout)]
    assert rates and all(r > 0 for r in rates), result.stdout[-3000:]
    stats1 = server.client().get_inference_statistics(model).model_stats[0].inference_count
    assert stats1 > stats0
