"""Process-wide memory settings of a serving process (glibc's allocator).

A server answers requests on many threads (gRPC, HTTP, model instances, ROS callbacks), and glibc
gives each thread that allocates concurrently an arena of its own, up to 8 per core; every arena
keeps the request tensors and batches it has freed for reuse. :func:`limit_malloc_arenas` bounds
the arenas through ``mallopt`` (what the ``MALLOC_ARENA_MAX`` environment variable does at
start-up), unless the environment already chose a value: fewer arenas hold less freed memory at
no cost in speed. On other C libraries it does nothing.

A node that receives camera frames has the opposite problem: every frame is a new buffer of about
a megabyte (rclpy's take, the message's array, the tensor), which glibc serves by mapping fresh
pages, each costing a fault, once a freed one has been trimmed off the top of its heap or
returned with ``munmap``. :func:`keep_freed_buffers` makes the allocator keep them: buffers below
32 MiB come from the heap (``M_MMAP_THRESHOLD``, which also stops glibc moving that threshold by
itself) and up to 64 MiB of free memory stays at the top of each heap (``M_TRIM_THRESHOLD``), so
a frame reuses the pages of the one before, for a bounded amount of memory per arena.

For large requests (tens of MB: images, point clouds, batches) glibc's defaults keep freed
buffers in the heaps, up to twice the largest freed at the top of each, and ``malloc_trim``
cannot return the top of the heaps of arenas other than the main one. ``triton-ros-server``
therefore uses one arena (:func:`limit_malloc_arenas` ``(1)``), keeps freed buffers for reuse
while requests come (:func:`keep_freed_buffers` with :data:`SERVER_KEEP_AT_TOP`), and hands what
the heap holds free back to the system once requests have stopped for :data:`IDLE_TRIM_S`
seconds (:class:`IdleTrim`, started by the core).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
import threading
import time
from typing import Callable

_log = logging.getLogger("triton_ros.memory")
M_ARENA_MAX = -8  # glibc's mallopt parameter numbers
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEEP_BELOW = (
    32 << 20
)  # the ceiling of glibc's own moving threshold (64-bit DEFAULT_MMAP_THRESHOLD_MAX)
KEEP_AT_TOP = 64 << 20
SERVER_KEEP_AT_TOP = 256 << 20  # triton-ros-server: kept while busy, trimmed once idle
DEFAULT_ARENAS = 2
IDLE_TRIM_S = 3.0  # IdleTrim: seconds without activity before memory is trimmed
_done = False
_kept = False


def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (mallopt, malloc_trim), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError as exc:
        _log.debug("cannot load the C library: %s", exc)
        return None


def _mallopt(*settings: tuple[int, int]) -> bool:
    """Apply glibc mallopt settings; False where this is not glibc or one is refused."""
    libc = _glibc()
    if libc is None:
        return False
    for param, value in settings:
        if not libc.mallopt(param, value):  # glibc refused it: say so, apply no more
            _log.warning(
                "glibc refused mallopt(%d, %d); the settings after it were not applied",
                param,
                value,
            )
            return False
    return True


def limit_malloc_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """At most ``arenas`` glibc malloc arenas in this process; True if the limit was set."""
    global _done
    if _done or "MALLOC_ARENA_MAX" in os.environ:
        return False
    _done = _mallopt((M_ARENA_MAX, arenas))
    return _done


def keep_freed_buffers(below: int = KEEP_BELOW, at_top: int = KEEP_AT_TOP) -> bool:
    """Let glibc keep freed buffers under ``below`` bytes, and up to ``at_top`` bytes of free
    memory at the top of each heap, for reuse (see the module docstring); True if set. An
    environment that sets either threshold (``MALLOC_MMAP_THRESHOLD_``,
    ``MALLOC_TRIM_THRESHOLD_``) wins."""
    global _kept
    if _kept or "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return False
    _kept = _mallopt((M_MMAP_THRESHOLD, below), (M_TRIM_THRESHOLD, at_top))
    return _kept


def resident_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/statm``); 0 where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class IdleTrim:
    """Returns the memory glibc's heaps hold free to the system (``malloc_trim(0)``) once the
    process has been idle for ``idle_s`` seconds after some activity: once per quiet spell,
    never under load. ``activity()`` is any number that changes while the process works (the
    core's count of requests). Does nothing where the C library is not glibc."""

    def __init__(
        self, activity: Callable[[], int], *, idle_s: float = IDLE_TRIM_S, period_s: float = 1.0
    ) -> None:
        self._activity = activity
        self._idle_s = idle_s
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trim = getattr(_glibc(), "malloc_trim", None)
        self.trims = 0
        self._seen: int | None = None  # the activity at the last look
        self._changed = 0.0  # when it last changed
        self._trimmed: int | None = None  # the activity at the last trim

    def start(self) -> None:
        if self._trim is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="idle_trim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            self.poll(time.monotonic())

    def poll(self, now: float) -> bool:
        """Look at the activity at time ``now`` (monotonic seconds); trim if the process has
        been idle for ``idle_s`` since its last activity and has not been trimmed since.
        True if it trimmed."""
        seen = self._activity()
        if self._seen is None or seen != self._seen:
            self._seen, self._changed = seen, now
            if self._trimmed is None:
                self._trimmed = seen  # what came before the first look: not a burst
            return False
        if seen == self._trimmed or now - self._changed < self._idle_s:
            return False
        self._trimmed = seen
        self.trim_now()
        return True

    def trim_now(self) -> int:
        """Trim now; the bytes of resident memory it returned (as far as RSS tells)."""
        before = resident_bytes()
        self._trim(0)
        self.trims += 1
        released = before - resident_bytes()
        _log.debug("idle: malloc_trim returned %.1f MB to the system", released / 1e6)
        return released
