"""Shared-memory slots: each request's inputs written into a POSIX shared memory block that is
registered with a server on this host (Triton's system shared memory extension), so that the
image does not travel through the socket; outputs still come back in the response.

A :class:`SlotPool` keeps at most :data:`SHM_SLOTS_MAX` slots per model, one per request in
flight; a request that finds every slot busy goes over the wire. Registering a slot with an
endpoint, and deciding whether an endpoint takes shared memory at all, are the remote model's
(model.py): they are calls to that endpoint.
"""

from __future__ import annotations

import os
import secrets
from typing import Mapping

import numpy as np
from tritonclient.utils import shared_memory as shm

SHM_SLOTS_MAX = 64  # shared-memory slots per model (one per request in flight)


class ShmSlot:
    """One POSIX shared-memory block holding one request's inputs."""

    def __init__(self, byte_size: int) -> None:
        self.name = f"triton_ros_{os.getpid()}_{secrets.token_hex(4)}"
        self.key = "/" + self.name
        self.byte_size = byte_size
        self.handle = shm.create_shared_memory_region(self.name, self.key, byte_size)

    def write(self, inputs: Mapping[str, np.ndarray]) -> None:
        """The inputs one after the other, in their order (the request points at them so)."""
        offset = 0
        for array in inputs.values():
            shm.set_shared_memory_region(self.handle, [np.ascontiguousarray(array)], offset)
            offset += array.nbytes

    def destroy(self) -> None:
        try:
            shm.destroy_shared_memory_region(self.handle)
        except Exception:  # already gone: nothing to release
            pass


class SlotPool:
    """The slots of one model: free ones are reused, at most SHM_SLOTS_MAX exist."""

    def __init__(self) -> None:
        self._free: list[ShmSlot] = []
        self._all: list[ShmSlot] = []

    def acquire(self, byte_size: int) -> ShmSlot | None:
        """A free slot of at least ``byte_size`` bytes (a new one if none); None when every slot
        is busy."""
        while self._free:
            candidate = self._free.pop()
            if candidate.byte_size >= byte_size:
                return candidate
            candidate.destroy()  # the input grew (another model version)
            self._all.remove(candidate)
        if len(self._all) >= SHM_SLOTS_MAX:
            return None
        slot = ShmSlot(byte_size)
        self._all.append(slot)
        return slot

    def release(self, slot: ShmSlot) -> None:
        self._free.append(slot)

    def destroy_all(self) -> None:
        for slot in self._all:
            slot.destroy()
