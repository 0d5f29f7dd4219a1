#!/usr/bin/env python3
"""GPU check of the core's device handling (run on a machine with an NVIDIA GPU).

    PYTHONPATH=. python3 bench/gpu_server_check.py

With the in-process core (no network frontends) on a temporary repository it checks that:
- ``gpu.supported_gpus()`` sees the GPUs the CUDA runtime reports;
- an ONNX model that names no instance kind (KIND_AUTO) loads on the CPU when onnxruntime has no
  CUDA provider, and on the GPU when it has one;
- an ONNX model with ``KIND_GPU`` either serves on the CUDA provider (onnxruntime-gpu) or fails to
  load with the clear "no CUDAExecutionProvider" reason, while the other models keep serving;
- a Python model with KIND_GPU gets Triton's ``model_instance_kind`` "GPU" and its device id.
Prints one PASS/FAIL line per check; exits 1 on any failure.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "test"))

from model_factory import add_sub_graph, write_model  # noqa: E402
from triton_ros.core import InferenceServer, InferRequest, ServerOptions  # noqa: E402
from triton_ros.core import gpu  # noqa: E402

failures = 0


def check(name: str, ok: bool, detail: str = "") -> None:
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)


IO = """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

PY_MODEL = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.where = json.dumps({"kind": args["model_instance_kind"],
                                 "device": args["model_instance_device_id"]})

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            where = np.array([[self.where.encode()]] * x.shape[0], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("WHERE", where)]))
        return out
'''


def main() -> int:
    import onnxruntime as ort

    gpus = gpu.supported_gpus()
    check("supported_gpus() finds the CUDA devices", len(gpus) > 0, f"{sorted(gpus)}")
    has_cuda_ep = "CUDAExecutionProvider" in ort.get_available_providers()
    print(f"onnxruntime {ort.__version__} providers: {ort.get_available_providers()}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        write_model(repo, "auto_kind", add_sub_graph(), f'name: "auto_kind"\nbackend: "onnxruntime"\n{IO}')
        write_model(repo, "gpu_kind", add_sub_graph(), f'name: "gpu_kind"\nbackend: "onnxruntime"\n{IO}'
                    'instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n')
        (repo / "py_gpu" / "1").mkdir(parents=True)
        (repo / "py_gpu" / "1" / "model.py").write_text(PY_MODEL)
        (repo / "py_gpu" / "config.pbtxt").write_text(
            'name: "py_gpu"\nbackend: "python"\nmax_batch_size: 4\n'
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            'output [ { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
            'instance_group [ { kind: KIND_GPU count: 1 } ]\n')
        server = InferenceServer(ServerOptions(model_repositories=(str(repo),)))
        server.start()
        try:
            index = {e.name: e for e in server.repository_index()}
            auto = server.model_config("auto_kind") if server.model_ready("auto_kind") else None
            kind = auto.instance_groups[0].kind if auto else "not loaded"
            expected = "KIND_GPU" if has_cuda_ep else "KIND_CPU"
            check("KIND_AUTO ONNX model resolves to where onnxruntime can run", kind == expected, kind)
            a = np.ones((2, 4), np.float32)
            if auto:
                out = server.infer_sync(InferRequest("auto_kind", {"INPUT0": a, "INPUT1": a}), timeout=60)
                check("KIND_AUTO ONNX model serves", np.array_equal(out.outputs["OUTPUT0"], 2 * a))
            entry = index.get("gpu_kind")
            if has_cuda_ep:
                ok = server.model_ready("gpu_kind")
                check("KIND_GPU ONNX model serves on the CUDA provider", ok, entry.reason if entry else "")
            else:
                reason = entry.reason if entry else ""
                check("KIND_GPU ONNX model without onnxruntime-gpu fails with a clear reason",
                      entry is not None and entry.state == "UNAVAILABLE"
                      and "CUDAExecutionProvider" in reason, reason[:200])
            ready = server.model_ready("py_gpu")
            check("Python model with KIND_GPU loads", ready,
                  "" if ready else str(index.get("py_gpu")))
            if ready:
                out = server.infer_sync(InferRequest("py_gpu", {"INPUT0": np.zeros((1, 1), np.float32)}),
                                        timeout=60)
                where = json.loads(out.outputs["WHERE"][0, 0].decode())
                check("Python model instance gets kind GPU and device 0",
                      where == {"kind": "GPU", "device": "0"}, json.dumps(where))
        finally:
            server.stop()
    print(f"{'ALL PASS' if failures == 0 else f'{failures} FAILED'}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
