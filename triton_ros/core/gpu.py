"""GPU discovery, imported lazily so that CPU-only machines never load CUDA libraries.

``supported_gpus()`` is what Triton's ``GetSupportedGPUs`` gives: the CUDA device ids this process
can use. It asks the CUDA runtime through cuda-python (``cuda.bindings`` or the older ``cuda``
package) and falls back to NVML; with neither, or no driver, there are no GPUs.
"""

from __future__ import annotations

import functools
import logging

_log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def supported_gpus() -> frozenset[int]:
    count = _count_with_cuda_runtime()
    if count is None:
        count = _count_with_nvml()
    return frozenset(range(count or 0))


def cuda_runtime_module():
    """cuda-python's CUDA runtime bindings (``cuda.bindings.runtime``, or ``cuda.cudart`` of
    releases before 12.6), or None when cuda-python is not installed."""
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[no-redef]  # older cuda-python
        except ImportError:
            return None
    return cudart


def _count_with_cuda_runtime() -> int | None:
    cudart = cuda_runtime_module()
    if cudart is None:
        return None
    try:
        err, count = cudart.cudaGetDeviceCount()
    except Exception as exc:  # a broken driver must not take the server down
        _log.debug("cudaGetDeviceCount failed: %s", exc)
        return None
    return int(count) if int(err) == 0 else 0


def _count_with_nvml() -> int | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        _log.debug("NVML unavailable: %s", exc)
        return 0
