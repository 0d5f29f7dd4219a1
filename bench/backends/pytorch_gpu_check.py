#!/usr/bin/env python3
"""GPU check of the PyTorch backend (run on a machine with an NVIDIA GPU and a CUDA build of
torch; bench/device_checks.sh runs it).

    PYTHONPATH=. python3 bench/backends/pytorch_gpu_check.py

With the in-process core on a temporary repository of TorchScript models it checks that:
- a KIND_GPU model (two instances on GPU 0) loads its module onto cuda:0 and answers every shape
  as the same module run eagerly on the GPU, and within 1e-3 of the CPU;
- a model that names no instance kind goes to the GPU (KIND_AUTO) when torch sees CUDA;
- concurrent requests are batched on the GPU instances, each request getting its own rows;
- ENABLE_CACHE_CLEANING and DISABLE_CUDNN load and run;
- a KIND_GPU instance naming a GPU that does not exist fails to load with its reason, while the
  other models keep serving.
Prints one PASS/FAIL line per check; exits 1 on any failure (2 when there is no CUDA at all).
"""
from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

failures = 0


def check(name: str, ok: bool, detail: str = "") -> None:
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print(f"FAIL torch {torch.__version__} sees no CUDA device", flush=True)
        return 2
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    from torch_models import INDEXED, Detector, detector_config, write
    from triton_ros.core import InferenceServer, InferRequest, ServerOptions

    module = Detector().eval()
    eager_gpu = Detector().eval().to("cuda:0")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write(repo, "ts_gpu", module, detector_config(
            "ts_gpu", instances="count: 2 kind: KIND_GPU gpus: [ 0 ]"))
        write(repo, "ts_auto", module, detector_config("ts_auto", instances=""))
        write(repo, "ts_clean", module, detector_config(
            "ts_clean", instances="count: 1 kind: KIND_GPU", extra=(
                'parameters { key: "ENABLE_CACHE_CLEANING" value: { string_value: "true" } }\n'
                'parameters { key: "DISABLE_CUDNN" value: { string_value: "true" } }\n')))
        count = torch.cuda.device_count()
        write(repo, "ts_missing_gpu", module, detector_config(
            "ts_missing_gpu", instances=f"count: 1 kind: KIND_GPU gpus: [ {count} ]"))
        server = InferenceServer(ServerOptions((str(repo),), model_control_mode="explicit"))
        server.start()
        try:
            for name in ("ts_gpu", "ts_auto", "ts_clean"):
                try:
                    server.load_model(name)
                    model = server.get_model(name)
                    devices = {str(i.device) for i in model.instances}
                    check(f"{name} loads on the GPU", devices == {"cuda:0"}, str(devices))
                except Exception as exc:
                    check(f"{name} loads on the GPU", False, repr(exc))
            try:
                server.load_model("ts_missing_gpu")
                check("a KIND_GPU instance on a missing GPU fails to load", False, "it loaded")
            except Exception as exc:
                check("a KIND_GPU instance on a missing GPU fails to load",
                      "GPU" in str(exc) or "gpu" in str(exc), str(exc)[:200])

            rng = np.random.default_rng(0)

            def request(name: str, n: int, h: int, w: int):
                image = rng.random((n, 3, h, w), dtype=np.float32)
                gain = rng.uniform(0.5, 2, (n, 1)).astype(np.float32)
                return image, gain, InferRequest(name, {INDEXED[0]: image, INDEXED[1]: gain},
                                                 batch_size=n)

            def compare(name: str, image, gain, out) -> str:
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
                return "; ".join(problems)

            for name in ("ts_gpu", "ts_auto", "ts_clean"):
                problems = []
                for n, h, w in ((1, 64, 64), (4, 37, 21), (8, 128, 96)):
                    image, gain, req = request(name, n, h, w)
                    out = server.infer_sync(req, timeout=120)
                    problem = compare(name, image, gain, out)
                    if problem:
                        problems.append(f"{n}x{h}x{w}: {problem}")
                check(f"{name} answers as the module run eagerly", not problems,
                      "; ".join(problems))

            sent = [request("ts_gpu", 1 + i % 3, 48, 48) for i in range(48)]
            results: list = [None] * len(sent)

            def send(i: int) -> None:
                try:
                    results[i] = server.infer_sync(sent[i][2], timeout=120)
                except Exception as exc:
                    results[i] = exc

            threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sent))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            bad = [i for i, r in enumerate(results) if isinstance(r, Exception)
                   or compare("ts_gpu", sent[i][0], sent[i][1], r)]
            check("48 concurrent requests on two GPU instances each get their own rows",
                  not bad, f"wrong: {bad[:5]}")
        finally:
            server.stop()
    print(f"pytorch GPU checks: {'all passed' if failures == 0 else f'{failures} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
