"""Process-wide memory settings of a serving process (glibc's allocator).

A server answers requests on many threads (gRPC, HTTP, model instances, ROS callbacks), and glibc
gives each thread that allocates concurrently an arena of its own, up to 8 per core; every arena
keeps the multi-megabyte request tensors and batches it has freed for reuse. Measured with
tinydet at concurrency 32 (bench/RESULTS-request-path.md), the default let the server's peak RSS
reach about 330 MB; two arenas held it near 250 MB for no measurable loss of throughput.
:func:`limit_malloc_arenas` sets that limit through ``mallopt`` (what the ``MALLOC_ARENA_MAX``
environment variable does at start-up), unless the environment already chose a value. On other C
libraries it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform

_log = logging.getLogger("triton_ros.memory")
M_ARENA_MAX = -8            # glibc's mallopt parameter number
DEFAULT_ARENAS = 2
_done = False


def limit_malloc_arenas(arenas: int = DEFAULT_ARENAS) -> bool:
    """At most ``arenas`` glibc malloc arenas in this process; True if the limit was set."""
    global _done
    if _done or "MALLOC_ARENA_MAX" in os.environ or platform.system() != "Linux" \
            or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError) as exc:
        _log.debug("cannot limit malloc arenas: %s", exc)
        return False
    _done = ok
    return ok
