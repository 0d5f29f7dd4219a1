#!/usr/bin/env python3
"""GPU check of the CUDA part of the TensorRT backend (no TensorRT needed).

Run on a machine with an NVIDIA GPU and cuda-python (``cuda-bindings``) or pycuda::

    PYTHONPATH=. python3 bench/gpu_check.py --devices 0 --instances 2

It uses :class:`triton_ros.core.cuda_utils.CudaStream` exactly as TensorRT instances do: one
stream per instance on each given device, each instance on its own thread (as model instances
run), device buffers sized for a batch of 1 and grown (``ensure``) for larger batches, and
host->device->host round trips of tensors of several data types, checked bit for bit. It also
checks that ``triton_ros.core.gpu.supported_gpus()`` sees the devices. Prints one PASS/FAIL line
per check and exits non-zero on any failure.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton_ros.core import gpu  # noqa: E402
from triton_ros.core.cuda_utils import CudaStream, cuda_api  # noqa: E402

results: list[tuple[str, bool, str]] = []
_lock = threading.Lock()


def check(name: str, ok: bool, detail: str = "") -> None:
    with _lock:
        results.append((name, ok, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)


def instance_round_trips(device: int, instance: int, batches: list[int]) -> None:
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
        for batch in batches:
            tensors = {
                "images": rng.random((batch, 3, 256, 256), dtype=np.float32),
                "scores": rng.random((batch, 256, 8)).astype(np.float16),
                "ids": rng.integers(-2**31, 2**31 - 1, (batch, 100), dtype=np.int32),
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
            bad = [k for k in tensors if not np.array_equal(tensors[k].view(np.uint8),
                                                            back[k].view(np.uint8))]
            check(f"{name} round trip batch {batch}", not bad,
                  f"mismatch in {bad}" if bad else f"{sum(a.nbytes for a in tensors.values())} B")
        check(f"{name} buffers grow with the batch", grown >= len(tensors),
              f"{grown} allocations for {len(batches)} batches")
    except Exception as exc:
        check(f"{name} round trips", False, repr(exc))
    finally:
        try:
            stream.close()
            check(f"{name} close", True)
        except Exception as exc:
            check(f"{name} close", False, repr(exc))


def bandwidth(device: int, megabytes: int = 256) -> None:
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
        stream.copy_to_host(host, buffer)
        stream.synchronize()
        t2 = time.perf_counter()
        check(f"gpu{device} pageable copy bandwidth", True,
              f"H2D {megabytes / 1024 / (t1 - t0):.1f} GiB/s, D2H {megabytes / 1024 / (t2 - t1):.1f} GiB/s")
    finally:
        stream.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[0])
    parser.add_argument("--instances", type=int, default=2, help="streams (instances) per device")
    args = parser.parse_args()

    try:
        api = cuda_api()
    except Exception as exc:
        check("CUDA binding", False, str(exc))
        print("FAIL: no CUDA binding", flush=True)
        return 1
    check("CUDA binding", True, api.name)
    seen = gpu.supported_gpus()
    check("supported_gpus() sees the devices", all(d in seen for d in args.devices),
          f"supported {sorted(seen)}, asked {args.devices}")

    threads = [threading.Thread(target=instance_round_trips, args=(d, i, [1, 4, 16, 3]))
               for d in args.devices for i in range(args.instances)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for device in args.devices:
        try:
            bandwidth(device)
        except Exception as exc:
            check(f"gpu{device} pageable copy bandwidth", False, repr(exc))

    failed = [r for r in results if not r[1]]
    print(f"{'PASS' if not failed else 'FAIL'}: {len(results) - len(failed)} passed, "
          f"{len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
