"""GPU check of the CUDA part of the TensorRT backend (no TensorRT needed).

Needs an NVIDIA GPU and cuda-python (``cuda-bindings``) or pycuda; skipped without a GPU
(test/gpu/conftest.py)::

    python3 -m pytest test/gpu/test_gpu_cuda_streams.py -v -s

It uses :class:`triton_ros.core.cuda_utils.CudaStream` exactly as TensorRT instances do: one
stream per instance on each device, each instance on its own thread (as model instances run),
device buffers sized for a batch of 1 and grown (``ensure``) for larger batches, and
host->device->host round trips of tensors of several data types, checked bit for bit. It also
checks that ``triton_ros.core.gpu.supported_gpus()`` sees the devices, and prints the pageable
copy bandwidth. ``TRITON_ROS_GPU_DEVICES`` (comma-separated, default ``0``) and
``TRITON_ROS_GPU_INSTANCES`` (streams per device, default 2) choose what runs.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from triton_ros.core import gpu as core_gpu
from triton_ros.core.cuda_utils import CudaStream, cuda_api

pytestmark = pytest.mark.unit

DEVICES = [int(d) for d in os.environ.get("TRITON_ROS_GPU_DEVICES", "0").split(",")]
INSTANCES = int(os.environ.get("TRITON_ROS_GPU_INSTANCES", "2"))
BATCHES = (1, 4, 16, 3)


class Checks:
    """PASS/FAIL lines from several threads; the test asserts that none failed."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, name: str, ok: bool, detail: str = "") -> None:
        line = f"{name}{(': ' + detail) if detail else ''}"
        with self._lock:
            print(f"{'PASS' if ok else 'FAIL'} {line}", flush=True)
            if not ok:
                self.failed.append(line)


def instance_round_trips(check: Checks, device: int, instance: int) -> None:
    """What one TensorRT instance does per batch: grow buffers, copy in, copy out, sync."""
    name = f"gpu{device}/instance{instance}"
    try:
        stream = CudaStream(device)
    except Exception as exc:
        check(f"{name} stream", False, repr(exc))
        return
    try:
        check(f"{name} stream", stream.handle != 0, f"cudaStream_t {stream.handle:#x}")
        rng = np.random.default_rng(1000 * device + instance)
        buffers: dict[str, object] = {}
        grown = 0
        tensors: dict[str, np.ndarray] = {}
        for batch in BATCHES:
            tensors = {
                "images": rng.random((batch, 3, 256, 256), dtype=np.float32),
                "scores": rng.random((batch, 256, 8)).astype(np.float16),
                "ids": rng.integers(-(2**31), 2**31 - 1, (batch, 100), dtype=np.int32),
                "mask": rng.integers(0, 2, (batch, 64), dtype=np.uint8).astype(bool),
                "empty": np.zeros((batch, 0), np.float32),
            }
            for key, array in tensors.items():
                before = buffers.get(key)
                buffers[key] = stream.ensure(before, array.nbytes)
                grown += buffers[key] is not before
                stream.copy_to_device(buffers[key], array)
            back = {key: np.empty_like(array) for key, array in tensors.items()}
            for key in tensors:
                stream.copy_to_host(back[key], buffers[key])
            stream.synchronize()
            bad = [
                k
                for k in tensors
                if not np.array_equal(tensors[k].view(np.uint8), back[k].view(np.uint8))
            ]
            check(
                f"{name} round trip batch {batch}",
                not bad,
                f"mismatch in {bad}" if bad else f"{sum(a.nbytes for a in tensors.values())} B",
            )
        check(
            f"{name} buffers grow with the batch",
            grown >= len(tensors),
            f"{grown} allocations for {len(BATCHES)} batches",
        )
    except Exception as exc:
        check(f"{name} round trips", False, repr(exc))
    finally:
        try:
            stream.close()
            check(f"{name} close", True)
        except Exception as exc:
            check(f"{name} close", False, repr(exc))


def test_a_cuda_binding_sees_the_devices(gpu):
    api = cuda_api()  # raises with what to install when there is no binding
    print(f"CUDA binding: {api.name}", flush=True)
    seen = core_gpu.supported_gpus()
    assert all(d in seen for d in DEVICES), f"supported {sorted(seen)}, asked {DEVICES}"


def test_each_instance_round_trips_tensors_on_its_own_stream(gpu):
    check = Checks()
    threads = [
        threading.Thread(target=instance_round_trips, args=(check, d, i))
        for d in DEVICES
        for i in range(INSTANCES)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not check.failed, "\n".join(check.failed)


@pytest.mark.parametrize("device", DEVICES)
def test_pageable_copy_bandwidth(gpu, device):
    megabytes = 256
    stream = CudaStream(device)
    try:
        host = np.ones(megabytes << 20, np.uint8)
        buffer = stream.alloc(host.nbytes)
        stream.copy_to_device(buffer, host)
        stream.synchronize()
        t0 = time.perf_counter()
        stream.copy_to_device(buffer, host)
        stream.synchronize()
        t1 = time.perf_counter()
        host[:] = 0  # so that the copy back must bring the ones back
        t2 = time.perf_counter()
        stream.copy_to_host(host, buffer)
        stream.synchronize()
        t3 = time.perf_counter()
    finally:
        stream.close()
    print(
        f"gpu{device} pageable copy bandwidth: H2D {megabytes / 1024 / (t1 - t0):.1f} GiB/s, "
        f"D2H {megabytes / 1024 / (t3 - t2):.1f} GiB/s",
        flush=True,
    )
    assert np.all(host == 1), "the round trip through the device changed the bytes"
