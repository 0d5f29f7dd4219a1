"""The PyTorch backend (platform pytorch_libtorch): TorchScript models written here with torch,
served by a real server over gRPC and HTTP, their outputs compared with the same module run
eagerly; Triton's naming conventions, batching, instance kinds and parameters.

torch is an optional extra: these tests need it and skip without it (CPython 3.10 here: no CPU
wheel of torch for 3.10 is reachable on these machines; see docs/backends.md)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch",
    reason="torch is not installed (an optional extra; CPython 3.10 has no CPU wheel "
    "of torch reachable here, see docs/backends.md)",
)

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from torch_models import INDEXED, Detector, detector_config, write  # noqa: E402

pytestmark = pytest.mark.integration


class Introspect(torch.nn.Module):
    """What forward sees: grad mode and whether its input is an inference tensor."""

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[0]
        grad = torch.full([n, 1], int(torch.is_grad_enabled()), dtype=torch.int32)
        inference = torch.full([n, 1], int(x.is_inference()), dtype=torch.int32)
        return grad, inference


class DictInput(torch.nn.Module):
    def forward(self, inputs: Dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"] * 2.0 + inputs["b"]


class Words(torch.nn.Module):
    def forward(self, words: List[str]) -> List[str]:
        return [w.upper() + "!" for w in words]


@pytest.fixture(scope="module")
def torch_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("torch_models")
    detector = Detector().eval()
    write(repo, "ts_indexed", detector, detector_config("ts_indexed"))
    # forward()'s argument names; outputs by the configuration's order
    write(
        repo,
        "ts_named",
        detector,
        detector_config("ts_named", ("image", "gain", "pooled", "heat", "count")),
    )
    # no config.pbtxt at all: auto-complete must say what is missing
    write(repo, "ts_no_config", detector, None)
    write(repo, "ts_gpu", detector, detector_config("ts_gpu", instances="count: 1 kind: KIND_GPU"))
    # KIND_MODEL: the module stays where it was saved, the inputs are CPU tensors
    write(
        repo,
        "ts_kind_model",
        detector,
        detector_config("ts_kind_model", instances="count: 1 kind: KIND_MODEL"),
    )
    write(
        repo,
        "ts_introspect",
        Introspect(),
        """
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
""",
    )
    write(
        repo,
        "ts_introspect_no_inference_mode",
        Introspect(),
        """
platform: "pytorch_libtorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
""",
    )
    write(
        repo,
        "ts_dict",
        DictInput(),
        """
backend: "pytorch"
max_batch_size: 0
input [ { name: "a" data_type: TYPE_FP32 dims: [ 2, 3 ] },
        { name: "b" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2, 3 ] } ]
""",
    )
    write(
        repo,
        "ts_words",
        Words(),
        """
backend: "pytorch"
max_batch_size: 0
input [ { name: "INPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]
""",
    )
    write(
        repo,
        "ts_bad_parameter",
        detector,
        detector_config(
            "ts_bad_parameter",
            extra=(
                'parameters { key: "DISABLE_OPTIMIZED_EXECUTION"\n'
                '             value: { string_value: "maybe" } }\n'
            ),
        ),
    )
    write(
        repo,
        "ts_too_few_inputs",
        detector,
        """
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 8 ] } ]
""",
    )
    return repo


@pytest.fixture(scope="module")
def server(start_module_server, torch_repo):
    return start_module_server("--model-repository", str(torch_repo), timeout=120)


def eager(image: np.ndarray, gain: np.ndarray) -> list[np.ndarray]:
    with torch.no_grad():
        outs = Detector().eval()(torch.from_numpy(image), torch.from_numpy(gain))
    return [o.numpy() for o in outs]


def frames(n: int, h: int, w: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.random((n, 3, h, w), dtype=np.float32),
        rng.uniform(0.5, 2.0, (n, 1)).astype(np.float32),
    )


def infer(client, module, model: str, image: np.ndarray, gain: np.ndarray, names):
    i0, i1, o0, o1, o2 = names
    inputs = [
        module.InferInput(i0, list(image.shape), "FP32"),
        module.InferInput(i1, list(gain.shape), "FP32"),
    ]
    inputs[0].set_data_from_numpy(image)
    inputs[1].set_data_from_numpy(gain)
    result = client.infer(model, inputs)
    return [result.as_numpy(n) for n in (o0, o1, o2)]


def index(server) -> dict[str, tuple[str, str]]:
    return {
        m.name: (m.state, m.reason) for m in server.client().get_model_repository_index().models
    }


NAMED = ("image", "gain", "pooled", "heat", "count")


@pytest.mark.parametrize(
    "model, names", [("ts_indexed", INDEXED), ("ts_named", NAMED), ("ts_kind_model", INDEXED)]
)
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_outputs_match_the_module_run_eagerly_at_every_shape(server, model, names, protocol):
    client = server.client() if protocol == "grpc" else server.http_client()
    module = grpcclient if protocol == "grpc" else httpclient
    for seed, (n, h, w) in enumerate([(1, 32, 32), (3, 48, 64), (2, 17, 9)]):
        image, gain = frames(n, h, w, seed)
        got = infer(client, module, model, image, gain, names)
        want = eager(image, gain)
        assert [g.shape for g in got] == [(n, 8), (n, (h + 1) // 2, (w + 1) // 2), (n, 1)]
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[2], want[2])
        assert got[2].dtype == np.int64


def test_concurrent_requests_are_batched_and_each_gets_its_own_rows(server):
    client = server.client()
    stats_before = client.get_inference_statistics("ts_indexed", as_json=True)
    requests = [frames(1 + i % 3, 40, 40, 100 + i) for i in range(24)]

    def one(pair):
        own = server.client()
        return infer(own, grpcclient, "ts_indexed", *pair, INDEXED)

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(one, requests))
    for (image, gain), got in zip(requests, results):
        want = eager(image, gain)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    after = client.get_inference_statistics("ts_indexed", as_json=True)
    stat = lambda s, key: int(s["model_stats"][0].get(key, 0))  # noqa: E731
    inferences = stat(after, "inference_count") - stat(stats_before, "inference_count")
    executions = stat(after, "execution_count") - stat(stats_before, "execution_count")
    assert inferences == sum(len(image) for image, _ in requests)
    assert executions < len(requests), "no two requests ran in one batch"


def test_no_gradient_and_inference_mode_by_default_and_off_by_parameter(server):
    client = server.client()
    x = grpcclient.InferInput("INPUT__0", [2, 1], "FP32")
    x.set_data_from_numpy(np.zeros((2, 1), np.float32))
    on = client.infer("ts_introspect", [x])
    assert on.as_numpy("OUTPUT__0").ravel().tolist() == [0, 0]  # no grad
    assert on.as_numpy("OUTPUT__1").ravel().tolist() == [1, 1]  # inference tensors
    off = client.infer("ts_introspect_no_inference_mode", [x])
    assert off.as_numpy("OUTPUT__0").ravel().tolist() == [0, 0]  # still no grad
    assert off.as_numpy("OUTPUT__1").ravel().tolist() == [0, 0]


def test_a_single_dict_argument_gets_the_inputs_by_name(server):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, np.float32)
    inputs = [
        httpclient.InferInput("a", [2, 3], "FP32"),
        httpclient.InferInput("b", [2, 3], "FP32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    out = server.http_client().infer("ts_dict", inputs).as_numpy("OUTPUT__0")
    np.testing.assert_array_equal(out, a * 2 + b)


def test_strings_are_lists_of_str(server):
    words = np.array([b"red", b"gr\xc3\xbcn"], dtype=np.object_)
    x = grpcclient.InferInput("INPUT__0", [2], "BYTES")
    x.set_data_from_numpy(words)
    out = server.client().infer("ts_words", [x]).as_numpy("OUTPUT__0")
    # UTF-8 both ways (TorchScript's str.upper changes ASCII letters only)
    assert [v.decode() for v in out] == ["RED!", "GRüN!"]


def test_load_failures_say_what_is_wrong_and_the_rest_serves(server):
    states = index(server)
    state, reason = states["ts_no_config"]
    assert state == "UNAVAILABLE"
    assert "config.pbtxt must list its inputs and outputs" in reason
    state, reason = states["ts_gpu"]
    assert state == "UNAVAILABLE"
    assert "KIND_GPU" in reason and ("no GPUs are available" in reason or "CUDA" in reason)
    state, reason = states["ts_bad_parameter"]
    assert state == "UNAVAILABLE" and "DISABLE_OPTIMIZED_EXECUTION" in reason
    state, reason = states["ts_too_few_inputs"]
    assert state == "UNAVAILABLE"
    assert "configuration expects 1 inputs, model provides 2" in reason
    assert server.client().is_model_ready("ts_indexed")


def test_a_request_the_module_rejects_fails_alone(server):
    # 2 channels where the convolution takes 3: torch raises; the client gets the error and the
    # model keeps serving
    client = server.client()
    x = grpcclient.InferInput("INPUT__0", [1, 3, 8, 8], "FP32")
    x.set_data_from_numpy(np.zeros((1, 3, 8, 8), np.float32))
    y = grpcclient.InferInput("INPUT__1", [1, 1], "FP32")
    y.set_data_from_numpy(np.ones((1, 1), np.float32))
    bad = grpcclient.InferInput("INPUT__0", [1, 3, 0, 8], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3, 0, 8), np.float32))
    with pytest.raises(InferenceServerException) as err:
        client.infer("ts_indexed", [bad, y])
    assert "PyTorch execute failure" in str(err.value)
    assert client.infer("ts_indexed", [x, y]).as_numpy("OUTPUT__0").shape == (1, 8)
    assert "Traceback" not in server.log()


def test_intra_op_threads_are_set_on_each_instance_thread(explicit_core):
    """Two models with different INTRA_OP_THREAD_COUNT: each execution thread runs with its
    model's count (torch keeps it per thread)."""
    repo = explicit_core.repo_path
    for name, count in (("one", 1), ("two", 2)):
        write(
            repo,
            name,
            Detector().eval(),
            detector_config(name, instances="count: 1 kind: KIND_CPU").replace(
                'string_value: "1"', f'string_value: "{count}"'
            ),
        )
        explicit_core.load_model(name)
    from triton_ros.core.infer_request import InferRequest

    seen = {}

    def run(name):
        instance = explicit_core.get_model(name).instances[0]
        image, gain = frames(1, 16, 16, 0)
        request = InferRequest(name, {"INPUT__0": image, "INPUT__1": gain}, batch_size=1)
        result = instance.execute([request])
        assert not isinstance(result.responses[0], Exception), result.responses[0]
        seen[name] = torch.get_num_threads()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("two", "one")]
    for t in threads:
        t.start()
        t.join()
    assert seen == {"one": 1, "two": 2}


def test_kind_gpu_without_cuda_fails_the_instance_with_what_to_do(tmp_path):
    """The backend's own check (the configuration's GPU check comes first on a machine without
    GPUs): a torch without CUDA refuses KIND_GPU, and CUDA is never initialized for it."""
    from triton_ros.core.backends.pytorch_backend import PyTorchModel
    from triton_ros.core.errors import StatusCode, TritonRosError
    from triton_ros.core.model_config import load_model_config

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device (test/gpu/test_gpu_pytorch.py)")
    folder = write(tmp_path, "g", Detector().eval(), detector_config("g"))
    config = load_model_config("g", folder)
    model = PyTorchModel(config, version=1, model_path=folder, version_path=folder / "1")
    with pytest.raises(TritonRosError) as err:
        model.create_instance(name="g_0_gpu0", kind="KIND_GPU", device_id=0)
    assert err.value.code == StatusCode.UNAVAILABLE
    assert "torch.cuda.is_available() is false" in err.value.message
    assert "use KIND_CPU" in err.value.message
    assert not torch.cuda.is_initialized()
