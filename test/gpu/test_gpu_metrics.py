"""GPU check: the NVML GPU metrics of triton_ros.core.metrics on a real GPU, read through a plain
Prometheus text parser; skipped without a GPU (test/gpu/conftest.py). Needs pynvml
(nvidia-ml-py) and PyTorch with CUDA (to load the GPU)::

    python3 -m pytest test/gpu/test_gpu_metrics.py -v -s

The GPU families are exported for the visible GPU with its UUID; under a few seconds of matrix
products the energy counter is positive, the memory used grows and the utilization stays a
fraction; ``CUDA_VISIBLE_DEVICES`` filters the GPUs as Triton does: empty lists none, an index or
the GPU's UUID lists that GPU, an index that does not exist lists none.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from prometheus_text import parse
from triton_ros.core import metrics as core_metrics

pytestmark = pytest.mark.unit

FAMILIES = [
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
]


class _Repository:
    def ready_models(self):
        return []


class _Core:
    """What the metrics collector reads of a server: no models, no response cache."""

    repository = _Repository()
    response_cache = None


def scrape(monkeypatch, visible: str | None):
    """A fresh collector under ``CUDA_VISIBLE_DEVICES=visible`` (None: unset): (it, its
    families)."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    collector = core_metrics.Metrics(_Core(), interval_ms=0)
    return collector, parse(collector.render())


def gpu_uuid(families) -> str:
    return list(families["nv_gpu_memory_total_bytes"].samples)[0][0][1]


def test_gpu_families_are_exported_and_move_under_load(gpu, monkeypatch):
    import pynvml

    print("pynvml", getattr(pynvml, "__version__", "?"), flush=True)
    print(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout, flush=True)
    collector, before = scrape(monkeypatch, None)
    missing = [n for n in FAMILIES if n not in before or not before[n].samples]
    assert not missing, f"families without samples: {missing}"
    uuid = gpu_uuid(before)
    assert uuid.startswith("GPU-"), uuid

    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < 4:
        a @ a
    torch.cuda.synchronize()
    after = parse(collector.render())
    util = after["nv_gpu_utilization"].value(gpu_uuid=uuid)
    energy = after["nv_energy_consumption"].value(gpu_uuid=uuid)
    used = after["nv_gpu_memory_used_bytes"].value(gpu_uuid=uuid)
    print(f"utilization {util}, energy {energy} J, memory used {used} B", flush=True)
    assert energy > 0
    assert used > before["nv_gpu_memory_used_bytes"].value(gpu_uuid=uuid)
    assert 0 <= util <= 1


def test_cuda_visible_devices_filters_the_gpus(gpu, monkeypatch):
    uuid = gpu_uuid(scrape(monkeypatch, None)[1])
    listed = {}
    for name, visible in (("none", ""), ("zero", "0"), ("uuid", uuid), ("bad", "7")):
        families = scrape(monkeypatch, visible)[1]
        listed[name] = (
            len(families["nv_gpu_memory_total_bytes"].samples)
            if "nv_gpu_memory_total_bytes" in families
            else 0
        )
    print("visible-device filtering", listed, flush=True)
    assert listed == {"none": 0, "zero": 1, "uuid": 1, "bad": 0}
