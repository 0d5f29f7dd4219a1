"""GPU check of the PyTorch backend; skipped without a GPU (test/gpu/conftest.py)::

    python3 -m pytest test/gpu/test_gpu_pytorch.py -v -s

Needs a CUDA build of torch. With the in-process core on a temporary repository of TorchScript
models (test/torch_models.py) it checks that:
- a KIND_GPU model (two instances on GPU 0), a model that names no instance kind (KIND_AUTO goes
  to the GPU when torch sees CUDA) and one with ENABLE_CACHE_CLEANING and DISABLE_CUDNN load onto
  cuda:0 and answer every shape as the same module run eagerly on the GPU, and within 1e-3 of the
  CPU;
- concurrent requests are batched on the GPU instances, each request getting its own rows;
- a KIND_GPU instance naming a GPU that does not exist fails to load with its reason.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.integration

SHAPES = ((1, 64, 64), (4, 37, 21), (8, 128, 96))


@pytest.fixture(scope="module")
def torch_cuda(gpu):
    torch = pytest.importorskip("torch")
    assert torch.cuda.is_available(), (
        f"torch {torch.__version__} sees no CUDA device (a CPU build of torch?)"
    )
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
    return torch


@pytest.fixture(scope="module")
def served(torch_cuda, tmp_path_factory):
    """The core with the TorchScript models written and loaded, and the module run eagerly."""
    from torch_models import Detector, detector_config, write
    from triton_ros.core import InferenceServer, ServerOptions

    module = Detector().eval()
    repo = Path(tmp_path_factory.mktemp("torch_gpu"))
    write(
        repo,
        "ts_gpu",
        module,
        detector_config("ts_gpu", instances="count: 2 kind: KIND_GPU gpus: [ 0 ]"),
    )
    write(repo, "ts_auto", module, detector_config("ts_auto", instances=""))
    write(
        repo,
        "ts_clean",
        module,
        detector_config(
            "ts_clean",
            instances="count: 1 kind: KIND_GPU",
            extra=(
                'parameters { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } }\n'
                'parameters { key: "DISABLE_CUDNN" value: { string_value: "true" } }\n'
            ),
        ),
    )
    count = torch_cuda.cuda.device_count()
    write(
        repo,
        "ts_missing_gpu",
        module,
        detector_config("ts_missing_gpu", instances=f"count: 1 kind: KIND_GPU gpus: [ {count} ]"),
    )
    server = InferenceServer(ServerOptions((str(repo),), model_control_mode="explicit"))
    server.start()
    try:
        yield server, module, Detector().eval().to("cuda:0")
    finally:
        server.stop()


def _request(name: str, n: int, h: int, w: int, rng):
    from torch_models import INDEXED
    from triton_ros.core import InferRequest

    image = rng.random((n, 3, h, w), dtype=np.float32)
    gain = rng.uniform(0.5, 2, (n, 1)).astype(np.float32)
    return image, gain, InferRequest(name, {INDEXED[0]: image, INDEXED[1]: gain}, batch_size=n)


def _problems(torch, module, eager_gpu, image, gain, out) -> list[str]:
    from torch_models import INDEXED

    with torch.no_grad():
        want = eager_gpu(torch.from_numpy(image).cuda(), torch.from_numpy(gain).cuda())
        cpu = module(torch.from_numpy(image), torch.from_numpy(gain))
    problems = []
    for key, w, c in zip(INDEXED[2:], want, cpu):
        got = out.outputs[key]
        if not np.allclose(got, w.cpu().numpy(), rtol=1e-5, atol=1e-5):
            problems.append(f"{key} differs from eager GPU")
        if not np.allclose(got, c.numpy(), rtol=1e-3, atol=1e-3):
            problems.append(f"{key} differs from CPU by more than 1e-3")
    return problems


@pytest.mark.parametrize("name", ["ts_gpu", "ts_auto", "ts_clean"])
def test_loads_on_the_gpu_and_answers_as_eager(torch_cuda, served, name):
    server, module, eager_gpu = served
    server.load_model(name)
    devices = {str(i.device) for i in server.get_model(name).instances}
    assert devices == {"cuda:0"}
    rng = np.random.default_rng(0)
    for n, h, w in SHAPES:
        image, gain, req = _request(name, n, h, w, rng)
        out = server.infer_sync(req, timeout=120)
        assert not _problems(torch_cuda, module, eager_gpu, image, gain, out), (n, h, w)


def test_a_missing_gpu_fails_to_load_with_its_reason(served):
    server, _, _ = served
    with pytest.raises(Exception) as caught:
        server.load_model("ts_missing_gpu")
    assert "gpu" in str(caught.value).lower()


def test_concurrent_requests_on_two_gpu_instances_get_their_own_rows(torch_cuda, served):
    server, module, eager_gpu = served
    server.load_model("ts_gpu")
    rng = np.random.default_rng(1)
    sent = [_request("ts_gpu", 1 + i % 3, 48, 48, rng) for i in range(48)]
    results: list = [None] * len(sent)

    def send(i: int) -> None:
        try:
            results[i] = server.infer_sync(sent[i][2], timeout=120)
        except Exception as exc:  # kept and reported below
            results[i] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sent))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [
        i
        for i, r in enumerate(results)
        if isinstance(r, Exception)
        or _problems(torch_cuda, module, eager_gpu, sent[i][0], sent[i][1], r)
    ]
    assert not bad, f"wrong answers for requests {bad[:5]}: {[results[i] for i in bad[:3]]}"
