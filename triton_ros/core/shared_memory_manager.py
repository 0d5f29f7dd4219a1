"""Client shared memory regions (Triton's shared_memory_manager), shared by every frontend.

A client creates a POSIX shared memory object (``shm_open`` key, e.g. ``/input_simple``), then
registers a named region of it (key, offset, byte size) with the server. Inference requests then
name the region, an offset in it and a byte size instead of carrying tensor data: inputs are read
from it and outputs written into it. This module holds the one registry of regions that the gRPC
and HTTP endpoints share, with Triton's rules and messages:

- register: a duplicate name is ALREADY_EXISTS; a key that cannot be opened, or a block that does
  not fit the object (an empty one too), is INTERNAL; keys with a reserved prefix are
  INVALID_ARG.
- status of an unknown name is NOT_FOUND; unregistering an unknown name succeeds (nothing to do).
- a request's (region, offset, byte size) is checked as Triton's ``GetMemoryInfo`` does: an
  unknown region is NOT_FOUND, an offset or size past the region's end INVALID_ARG.
- an output larger than the block the request gave for it is Triton's INTERNAL error.

Safety choices. Input bytes are copied out of the region when a request is decoded, so a client
that rewrites or unregisters a region while its request is queued cannot change or break it. A
request keeps a reference to the regions of its outputs: unregistering one while the request is
in flight only drops it from the registry, and the mapping is released when the last request
using it is done (Triton's deferred unregister). Before every access the object's current size
is checked, so a client that shrinks (``ftruncate``) its object after registering gets an error
instead of the SIGBUS that touching the lost pages would raise in the server (Triton has no such
check). Only a shrink in the microseconds between that check and the copy can still fault; the
copies stay on ``mmap`` (not ``pread``/``pwrite``, which cannot fault) because they are about
twice as fast for large tensors.

Deviations from Triton: an offset need not be page-aligned (the mapping starts at the page that
holds it; Triton's ``mmap`` refuses such offsets); CUDA shared memory is not supported: CUDA
status lists no regions, unregister has nothing to do, and register is INVALID_ARG (what
tritonserver answers without a GPU). Clients may register system regions only when the server
allows it (``allow_client_shm``, off by default: tritonserver has no such switch and always
allows it; docs/shared_memory.md says why); status and unregister always answer. This module
imports no transport.
"""

from __future__ import annotations

import logging
import mmap
import os
import stat
import threading
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .datatypes import tensor_to_bytes
from .errors import StatusCode, TritonRosError, internal, invalid_arg, not_found, unsupported
from .strict_parse import require_size

_log = logging.getLogger("triton_ros.shared_memory")

SHM_DIR = "/dev/shm"
UINT64_MAX = 2**64 - 1  # the protocols' type of offsets and sizes
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
# Prefixes of shared memory objects the server creates for itself (Triton's Python backend, and
# ours: python_stub/ipc.py SEGMENT_PREFIX); clients may not register them.
RESERVED_KEY_PREFIXES = ("triton_python_backend_shm_region_", "triton_ros_py_")


@dataclass(frozen=True)
class SystemRegionStatus:
    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True)
class CudaRegionStatus:
    name: str
    device_id: int
    byte_size: int


class _Region:
    """One registered region: the mapping of [offset, offset + byte_size) of a shm object.

    The mapping is released when the object is garbage collected, i.e. once neither the registry
    nor any in-flight request refers to it."""

    def __init__(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        path = os.path.join(SHM_DIR, _object_name(name, key))
        try:
            # shm_open's flags (no symlinks, not inherited by the Python backend's stubs), and
            # never block on something that is not a plain file.
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            raise internal(f"Unable to open shared memory region: '{key}'") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise internal(f"Invalid shared memory region: '{key}'")
            if byte_size == 0 or offset + byte_size > info.st_size:  # tritonserver's INTERNAL
                raise internal(f"Invalid shared memory region: '{key}'")
            # mmap offsets must be page-aligned: map from the page that holds `offset`.
            self._start = offset % mmap.ALLOCATIONGRANULARITY
            try:
                self._map = mmap.mmap(
                    fd,
                    self._start + byte_size,
                    mmap.MAP_SHARED,
                    mmap.PROT_READ | mmap.PROT_WRITE,
                    offset=offset - self._start,
                )
            except (OSError, ValueError) as exc:
                raise internal(
                    f"failed to register shared memory region '{name}': unable to map it: {exc}"
                ) from None
        finally:
            os.close(fd)  # the mapping keeps its own descriptor

    def _check_object_size(self) -> None:
        # mmap.size() is fstat() of the object: pages past its end would SIGBUS the server.
        try:
            size = self._map.size()
        except (OSError, ValueError) as exc:
            raise internal(
                f"shared memory region '{self.name}' is no longer usable: {exc}"
            ) from None
        if size < self.offset + self.byte_size:
            raise invalid_arg(
                f"shared memory region '{self.name}' (key '{self.key}') was "
                f"truncated to {size} bytes after it was registered with offset "
                f"{self.offset} and byte size {self.byte_size}"
            )

    def read(self, offset: int, byte_size: int) -> bytes:
        self._check_object_size()
        start = self._start + offset
        return self._map[start : start + byte_size]

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._check_object_size()
        start = self._start + offset
        self._map[start : start + len(data)] = data

    def status(self) -> SystemRegionStatus:
        return SystemRegionStatus(self.name, self.key, self.offset, self.byte_size)


def _object_name(name: str, key: str) -> str:
    """The file of ``key`` under /dev/shm, with shm_open's and Triton's rules for keys."""
    stripped = key.lstrip("/")
    if not stripped:
        raise invalid_arg(
            f"cannot register shared memory region '{name}' - invalid shm key '{key}'"
        )
    for prefix in RESERVED_KEY_PREFIXES:
        if stripped.startswith(prefix):
            raise invalid_arg(
                f"cannot register shared memory region '{name}' with key '{key}' "
                f"as the key contains the reserved prefix '{prefix}'"
            )
    if "/" in stripped or "\x00" in stripped or stripped in (".", ".."):
        # shm_open fails with EINVAL: a key names one object directly under /dev/shm.
        raise internal(f"Unable to open shared memory region: '{key}'")
    return stripped


@dataclass(frozen=True, eq=False)
class SharedMemoryBlock:
    """A validated [offset, offset + byte_size) of a registered region, named by a request.

    Holding a block keeps its region's mapping alive even if the region is unregistered."""

    region: _Region
    offset: int
    byte_size: int

    @property
    def region_name(self) -> str:
        return self.region.name

    def read(self) -> bytes:
        """A private copy of the block's bytes."""
        return self.region.read(self.offset, self.byte_size)

    def write(self, tensor_name: str, data: bytes | memoryview) -> None:
        self.check_fits(tensor_name, len(data))
        self.region.write(self.offset, data)

    def check_fits(self, tensor_name: str, byte_size: int) -> None:
        if byte_size > self.byte_size:
            raise internal(
                f"shared memory size specified with the request for output "
                f"'{tensor_name}' ({self.byte_size} bytes) should be at least "
                f"{byte_size} bytes to hold the results"
            )


SHM_PARAMETERS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")


def shared_memory_params(
    tensor_name: str, params: Mapping[str, str | int]
) -> tuple[str, int, int] | None:
    """(region, offset, byte size) of a tensor in shared memory, or None when it is not, from
    its shared memory parameters (already typed by the frontend: a str and two ints), with
    Triton's rules: offset defaults to 0, byte size is required with a region, neither goes
    without one."""
    region = params.get("shared_memory_region")
    for key in SHM_PARAMETERS[1:]:
        if key in params and region is None:
            raise invalid_arg(
                f"'{key}' can not be specified without 'shared_memory_region' "
                f"parameter for tensor '{tensor_name}'"
            )
    if region is None:
        return None
    if "shared_memory_byte_size" not in params:
        raise invalid_arg(
            f"'shared_memory_byte_size' must be specified along with "
            f"'shared_memory_region' parameter for tensor '{tensor_name}'"
        )
    if not isinstance(region, str):
        raise invalid_arg(
            f"invalid value type for 'shared_memory_region' parameter for tensor "
            f"'{tensor_name}', expected a string"
        )
    return (
        region,
        require_size(params.get("shared_memory_offset", 0), "shared_memory_offset"),
        require_size(params["shared_memory_byte_size"], "shared_memory_byte_size"),
    )


def write_outputs(
    outputs: Mapping[str, np.ndarray], blocks: Mapping[str, SharedMemoryBlock]
) -> None:
    """Write each output that has a block into it (BYTES length-prefixed). Every size is checked
    before anything is written, so a too-small block leaves every region untouched."""
    pending = []
    for name, block in blocks.items():
        array = outputs.get(name)
        if array is None:
            continue
        data = tensor_to_bytes(array)
        block.check_fits(name, len(data))
        pending.append((name, block, data))
    for name, block, data in pending:
        block.write(name, data)


class SharedMemoryManager:
    """The registry of client shared memory regions (thread-safe)."""

    def __init__(self, *, allow_client_shm: bool = False) -> None:
        self.allow_client_shm = allow_client_shm
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()

    def _require_allowed(self) -> None:
        if not self.allow_client_shm:
            raise unsupported(CLIENT_SHM_DISABLED)

    # ---------------------------------------------------------------- system shared memory
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._require_allowed()
        if not name:
            raise invalid_arg("'region name' is necessary to register system shared memory region")
        if not isinstance(name, str) or not isinstance(key, str):
            raise invalid_arg("shared memory region name and key must be strings")
        # Any uint64 (the protocols' type): a block that the object cannot hold, an empty one
        # among them, is refused once the object is opened (_Region), as tritonserver does.
        offset = require_size(offset, "offset", maximum=UINT64_MAX)
        byte_size = require_size(byte_size, "byte_size", maximum=UINT64_MAX)
        with self._lock:
            if name in self._regions:
                raise TritonRosError(
                    StatusCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
                )
            self._regions[name] = _Region(name, key, offset, byte_size)
        _log.debug(
            "registered system shared memory region '%s' (key '%s', offset %d, byte size %d)",
            name,
            key,
            offset,
            byte_size,
        )

    def system_status(self, name: str = "") -> list[SystemRegionStatus]:
        """Every region (sorted by name), or the one named; NOT_FOUND for an unknown name."""
        with self._lock:
            if not name:
                return [self._regions[n].status() for n in sorted(self._regions)]
            region = self._regions.get(name)
        if region is None:
            raise not_found(f"Unable to find system shared memory region: '{name}'")
        return [region.status()]

    def unregister_system(self, name: str = "") -> None:
        """Unregister one region, or every region for an empty name; unknown names are fine
        (also when clients may not register: there is nothing to unregister)."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for n in names:
                # Requests in flight keep their blocks' mappings until they are done.
                if self._regions.pop(n, None) is not None:
                    _log.debug("unregistered system shared memory region '%s'", n)

    def close(self) -> None:
        """Drop every region (server shutdown)."""
        with self._lock:
            self._regions.clear()

    # ---------------------------------------------------------------- CUDA shared memory
    def register_cuda(self, name: str, *, device_id: int, byte_size: int) -> None:
        """Always INVALID_ARG, whether or not clients may register system regions: no handle
        can be opened without CUDA, which is what tritonserver answers without a GPU."""
        raise invalid_arg(
            f"failed to register CUDA shared memory region '{name}': invalid "
            f"args (no CUDA device: triton_ros serves system shared memory only)"
        )

    def cuda_status(self, name: str = "") -> list[CudaRegionStatus]:
        """No CUDA region can exist: an empty list, or NOT_FOUND (Triton's messages)."""
        if not name:
            return []
        with self._lock:
            is_system = name in self._regions
        if is_system:
            raise not_found(
                f"The region named '{name}' is registered as system shared memory, "
                f"not CUDA shared memory"
            )
        raise not_found(f"Unable to find cuda shared memory region: '{name}'")

    def unregister_cuda(self, name: str = "") -> None:
        """Nothing to unregister: no CUDA region can exist (clients call this to start clean)."""

    # ---------------------------------------------------------------- use by requests
    def block(self, name: str, offset: int, byte_size: int) -> SharedMemoryBlock:
        """The block a request names, checked against its region (Triton's GetMemoryInfo)."""
        with self._lock:
            region = self._regions.get(name)
        if region is None:
            raise not_found(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or offset >= region.byte_size:
            raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
        if byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        return SharedMemoryBlock(region, offset, byte_size)

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """A private copy of a block's bytes (an input's data)."""
        return self.block(name, offset, byte_size).read()


# An empty registry that accepts no registration: the default for code that has no server.
NO_REGIONS = SharedMemoryManager()
