"""GPU check of the core's device handling; skipped without a GPU (test/gpu/conftest.py)::

    python3 -m pytest test/gpu/test_gpu_device_handling.py -v -s

With the in-process core (no network frontends) on a temporary repository it checks that:
- ``gpu.supported_gpus()`` sees the GPUs the CUDA runtime reports;
- an ONNX model that names no instance kind (KIND_AUTO) loads on the CPU when onnxruntime has no
  CUDA provider, and on the GPU when it has one, and serves;
- an ONNX model with ``KIND_GPU`` either serves on the CUDA provider (onnxruntime-gpu) or fails to
  load with the clear "no CUDAExecutionProvider" reason, while the other models keep serving;
- a Python model with KIND_GPU gets Triton's ``model_instance_kind`` "GPU" and its device id.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from model_factory import add_sub_graph, write_model
from triton_ros.core import InferenceServer, InferRequest, ServerOptions
from triton_ros.core import gpu as core_gpu

# the Python model's instance runs in a stub process of its own
pytestmark = pytest.mark.integration

IO = """
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

PY_MODEL = """
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
"""


def has_cuda_provider() -> bool:
    import onnxruntime as ort

    print(f"onnxruntime {ort.__version__} providers: {ort.get_available_providers()}", flush=True)
    return "CUDAExecutionProvider" in ort.get_available_providers()


@pytest.fixture(scope="module")
def server(gpu, tmp_path_factory):
    repo = tmp_path_factory.mktemp("gpu_models")
    write_model(
        repo, "auto_kind", add_sub_graph(), f'name: "auto_kind"\nbackend: "onnxruntime"\n{IO}'
    )
    write_model(
        repo,
        "gpu_kind",
        add_sub_graph(),
        f'name: "gpu_kind"\nbackend: "onnxruntime"\n{IO}'
        "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]\n",
    )
    (repo / "py_gpu" / "1").mkdir(parents=True)
    (repo / "py_gpu" / "1" / "model.py").write_text(PY_MODEL)
    (repo / "py_gpu" / "config.pbtxt").write_text(
        'name: "py_gpu"\nbackend: "python"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        "instance_group [ { kind: KIND_GPU count: 1 } ]\n"
    )
    core = InferenceServer(ServerOptions(model_repositories=(str(repo),)))
    core.start()
    yield core
    core.stop()


def index_entry(server, name: str):
    return {e.name: e for e in server.repository_index()}.get(name)


def test_supported_gpus_finds_the_cuda_devices(gpu):
    assert core_gpu.supported_gpus(), "supported_gpus() found none"


def test_kind_auto_onnx_model_resolves_to_where_onnxruntime_can_run_and_serves(server):
    assert server.model_ready("auto_kind"), str(index_entry(server, "auto_kind"))
    kind = server.model_config("auto_kind").instance_groups[0].kind
    assert kind == ("KIND_GPU" if has_cuda_provider() else "KIND_CPU")
    a = np.ones((2, 4), np.float32)
    out = server.infer_sync(InferRequest("auto_kind", {"INPUT0": a, "INPUT1": a}), timeout=60)
    assert np.array_equal(out.outputs["OUTPUT0"], 2 * a)


def test_kind_gpu_onnx_model_serves_or_fails_with_a_clear_reason(server):
    entry = index_entry(server, "gpu_kind")
    if has_cuda_provider():
        assert server.model_ready("gpu_kind"), entry.reason if entry else "not in the index"
    else:
        assert entry is not None and entry.state == "UNAVAILABLE", str(entry)
        assert "CUDAExecutionProvider" in entry.reason, entry.reason[:200]


def test_python_model_with_kind_gpu_gets_its_kind_and_device(server):
    assert server.model_ready("py_gpu"), str(index_entry(server, "py_gpu"))
    out = server.infer_sync(
        InferRequest("py_gpu", {"INPUT0": np.zeros((1, 1), np.float32)}), timeout=60
    )
    where = json.loads(out.outputs["WHERE"][0, 0].decode())
    assert where == {"kind": "GPU", "device": "0"}
