"""Process-wide memory settings of a serving process (glibc's allocator).

A server answers requests on many threads (gRPC, HTTP, model instances, ROS callbacks), and glibc
gives each thread that allocates concurrently an arena of its own, up to 8 per core; every arena
keeps the multi-megabyte request tensors and batches it has freed for reuse. Measured with
tinydet at concurrency 32 (bench/RESULTS-request-path.md), the default let the server's peak RSS
reach about 330 MB; two arenas held it near 250 MB for no measurable loss of throughput.
:func:`limit_malloc_arenas` sets that limit through ``mallopt`` (what the ``MALLOC_ARENA_MAX``
environment variable does at start-up), unless the environment already chose a value. On other C
libraries it does nothing.

A node that receives camera frames has the opposite problem: every frame is a new buffer of about
a megabyte (rclpy's take, the message's array, the tensor), which glibc serves by mapping fresh
pages once a freed one has been trimmed off the top of its heap or returned with ``munmap``. Each
new page costs a fault: measured with bench/bench_ros_receive.py (8 cameras x 30 Hz, 640x480, a
callback that does nothing), most runs took 644 minor faults and about 1.8 ms of CPU per frame,
and the runs that happened not to fault about 0.46 ms. :func:`keep_freed_buffers` makes the
allocator keep them: buffers below 32 MiB come from the heap (``M_MMAP_THRESHOLD``, which also
stops glibc moving that threshold by itself) and up to 64 MiB of free memory stays at the top of
each heap (``M_TRIM_THRESHOLD``), so a frame reuses the pages of the one before. The price is
that memory, bounded by those settings per arena (the node's peak RSS grew by 8-11 MB:
bench/RESULTS-ros.md); the node calls it, the server does not (its
requests fault 2-10 pages each, and keeping buffers changed neither its throughput nor its peak
RSS: bench/results_server_page_faults.md).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform

_log = logging.getLogger("triton_ros.memory")
M_ARENA_MAX = -8            # glibc's mallopt parameter numbers
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
KEEP_BELOW = 32 << 20       # the ceiling of glibc's own moving threshold (64-bit DEFAULT_MMAP_THRESHOLD_MAX)
KEEP_AT_TOP = 64 << 20
DEFAULT_ARENAS = 2
_done = False
_kept = False


def _mallopt(*settings: tuple[int, int]) -> bool:
    """Apply glibc mallopt settings; False where this is not glibc or one is refused."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError as exc:
        _log.debug("cannot load the C library for mallopt: %s", exc)
        return False
    for param, value in settings:
        if not libc.mallopt(param, value):      # glibc refused it: say so, apply no more
            _log.warning("glibc refused mallopt(%d, %d); the settings after it were not applied",
                         param, value)
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
