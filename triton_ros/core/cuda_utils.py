"""CUDA streams and device buffers for GPU backends (Triton's cuda_utils), imported lazily.

:class:`CudaStream` is what one model instance owns on its GPU: a non-blocking stream on a given
device, device buffers that grow when a larger batch arrives, and asynchronous host<->device
copies ordered on that stream. It talks to the CUDA runtime through cuda-python
(``cuda.bindings.runtime``, or ``cuda.cudart`` of older releases) and falls back to pycuda (the
primary context of the device) when cuda-python is missing; with neither, creating one raises
UNAVAILABLE with what to install.

Every call first makes the instance's device current on the calling thread (CUDA keeps the
current device per thread, and an instance is created on the loading thread but runs on its own).
Host arrays are pageable numpy memory; a copy is complete once :meth:`CudaStream.synchronize`
returns.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .errors import internal, unavailable
from .gpu import cuda_runtime_module


@dataclass
class DeviceBuffer:
    """Device memory owned by a stream's instance: ``ptr`` is the device address."""

    ptr: int
    nbytes: int
    handle: object = None  # what must stay alive (pycuda's allocation)


class _CudaPython:
    """The CUDA runtime through cuda-python."""

    name = "cuda-python"

    def __init__(self, cudart) -> None:
        self.rt = cudart

    def _check(self, result, what: str):
        err = result[0]
        if err != self.rt.cudaError_t.cudaSuccess:
            _, text = self.rt.cudaGetErrorString(err)
            raise internal(
                f"CUDA error in {what}: {text.decode() if isinstance(text, bytes) else text}"
            )
        return result[1] if len(result) == 2 else result[1:]

    def use_device(self, device: int) -> None:
        self._check(self.rt.cudaSetDevice(device), f"cudaSetDevice({device})")

    def create_stream(self, device: int):
        self.use_device(device)
        return self._check(
            self.rt.cudaStreamCreateWithFlags(self.rt.cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags",
        )

    def stream_handle(self, stream) -> int:
        return int(stream) if hasattr(stream, "__int__") else int(stream.getPtr())

    def destroy_stream(self, stream) -> None:
        self._check(self.rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def malloc(self, nbytes: int) -> DeviceBuffer:
        ptr = self._check(self.rt.cudaMalloc(nbytes), f"cudaMalloc({nbytes})")
        return DeviceBuffer(int(ptr), nbytes)

    def free(self, buffer: DeviceBuffer) -> None:
        self._check(self.rt.cudaFree(buffer.ptr), "cudaFree")

    def h2d(self, dst: int, src: int, nbytes: int, stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._check(self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync H2D")

    def d2h(self, dst: int, src: int, nbytes: int, stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._check(self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync D2H")

    def synchronize(self, stream) -> None:
        self._check(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")


class _PyCuda:
    """The CUDA driver through pycuda, on each device's primary context."""

    name = "pycuda"

    def __init__(self, driver) -> None:
        self.cuda = driver
        driver.init()
        self._contexts: dict[int, object] = {}
        self._lock = threading.Lock()
        self._local = threading.local()

    def use_device(self, device: int) -> None:
        with self._lock:
            context = self._contexts.get(device)
            if context is None:
                context = self._contexts[device] = self.cuda.Device(device).retain_primary_context()
        current = getattr(self._local, "device", None)
        if current != device:
            if current is not None:
                self.cuda.Context.pop()
            context.push()
            self._local.device = device

    def create_stream(self, device: int):
        self.use_device(device)
        return self.cuda.Stream()

    def stream_handle(self, stream) -> int:
        return int(stream.handle)

    def destroy_stream(self, stream) -> None:
        del stream  # pycuda frees it with the object

    def malloc(self, nbytes: int) -> DeviceBuffer:
        allocation = self.cuda.mem_alloc(nbytes)
        return DeviceBuffer(int(allocation), nbytes, allocation)

    def free(self, buffer: DeviceBuffer) -> None:
        buffer.handle.free()

    def h2d(self, dst: int, src: int, nbytes: int, stream) -> None:
        self.cuda.memcpy_htod_async(dst, _host_view(src, nbytes), stream)

    def d2h(self, dst: int, src: int, nbytes: int, stream) -> None:
        self.cuda.memcpy_dtoh_async(_host_view(dst, nbytes), src, stream)

    def synchronize(self, stream) -> None:
        stream.synchronize()


def _host_view(address: int, nbytes: int) -> np.ndarray:
    import ctypes

    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


_api_lock = threading.Lock()
_api = None


def cuda_api():
    """The CUDA binding in use (cuda-python, else pycuda); UNAVAILABLE if there is none."""
    global _api
    with _api_lock:
        if _api is None:
            cudart = cuda_runtime_module()
            if cudart is not None:
                _api = _CudaPython(cudart)
            else:
                try:
                    import pycuda.driver as driver
                except ImportError:
                    raise unavailable(
                        "no CUDA Python binding: install cuda-python "
                        "(pip install cuda-python; JetPack ships it) or pycuda"
                    ) from None
                try:
                    _api = _PyCuda(driver)
                except Exception as exc:
                    raise unavailable(f"pycuda cannot initialize CUDA: {exc}") from None
        return _api


class CudaStream:
    """A model instance's stream on one GPU, with the device buffers it uses."""

    def __init__(self, device_id: int) -> None:
        self.device_id = int(device_id)
        self.api = cuda_api()
        self.stream = self.api.create_stream(self.device_id)
        self._buffers: list[DeviceBuffer] = []

    @property
    def handle(self) -> int:
        """The cudaStream_t as an integer (what TensorRT's execute_async_v3 takes)."""
        return self.api.stream_handle(self.stream)

    def activate(self) -> None:
        """Make this stream's device current on the calling thread."""
        self.api.use_device(self.device_id)

    def alloc(self, nbytes: int) -> DeviceBuffer:
        self.activate()
        buffer = self.api.malloc(max(int(nbytes), 1))
        self._buffers.append(buffer)
        return buffer

    def ensure(self, buffer: DeviceBuffer | None, nbytes: int) -> DeviceBuffer:
        """``buffer`` if it holds ``nbytes``, else a new one (the old one is freed)."""
        if buffer is not None and buffer.nbytes >= nbytes:
            return buffer
        if buffer is not None:
            self.release(buffer)
        # Grow geometrically so that a rising batch size reallocates only a few times.
        return self.alloc(max(int(nbytes), 2 * buffer.nbytes if buffer is not None else 0))

    def release(self, buffer: DeviceBuffer) -> None:
        self.activate()
        self.api.free(buffer)
        self._buffers = [b for b in self._buffers if b is not buffer]

    def copy_to_device(self, buffer: DeviceBuffer, array: np.ndarray) -> None:
        """Queue a copy of a C-contiguous host array into the buffer."""
        if not array.flags.c_contiguous:
            raise internal("copy_to_device needs a C-contiguous array")
        if array.nbytes > buffer.nbytes:
            raise internal(f"device buffer of {buffer.nbytes} bytes cannot hold {array.nbytes}")
        self.activate()
        if array.nbytes:
            self.api.h2d(buffer.ptr, array.ctypes.data, array.nbytes, self.stream)

    def copy_to_host(self, array: np.ndarray, buffer: DeviceBuffer) -> None:
        """Queue a copy of the buffer's first ``array.nbytes`` bytes into the host array."""
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise internal("copy_to_host needs a writable C-contiguous array")
        if array.nbytes > buffer.nbytes:
            raise internal(f"device buffer of {buffer.nbytes} bytes is smaller than {array.nbytes}")
        self.activate()
        if array.nbytes:
            self.api.d2h(array.ctypes.data, buffer.ptr, array.nbytes, self.stream)

    def synchronize(self) -> None:
        self.activate()
        self.api.synchronize(self.stream)

    def close(self) -> None:
        """Free every buffer and the stream."""
        self.activate()
        for buffer in self._buffers:
            self.api.free(buffer)
        self._buffers = []
        if self.stream is not None:
            self.api.destroy_stream(self.stream)
            self.stream = None
