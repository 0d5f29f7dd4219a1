"""The response cache (Triton's cache_manager and its ``local`` cache implementation).

``--cache-config local,size=N`` creates one :class:`LocalCache` shared by every model and every
frontend, bounded to N bytes of cached output tensors and evicting the least recently used
responses to make room, as Triton's local cache does. A model uses it only when its
configuration also says ``response_cache { enable: true }``.

A request's key (:func:`request_cache_key`) is a 128-bit BLAKE2b digest of the model name and
version, every input (name, datatype, shape and bytes, in name order), the request's parameters
(names, types and values, which a model may read: the same input with ``tag: bob`` must not get
``tag: alice``'s answer) and the requested outputs (names and classification counts, in order).
Requests with parameters are cached too, under their own key, rather than not cached: a client
that always sends the same parameters keeps its hits. Triton hashes only the name, version and input
names and bytes with a 64-bit hash; including the types, shapes and requested outputs means two
requests share a response only when they are really the same request.

Only successful responses are cached; a response larger than the whole cache is not cached.
Cached tensors are private read-only copies, so a later response never shares memory with a
backend's batch buffers. The cache-level counters (entries, lookups, hits, misses, evictions,
utilization, lookup and insertion time) are what the local cache publishes as metrics.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from .datatypes import tensor_to_bytes
from .errors import TritonRosError, invalid_arg, unsupported
from .infer_request import InferRequest
from .strict_parse import parse_size

_log = logging.getLogger("triton_ros.cache")

LOCAL_CACHE = "local"
CACHE_NAMES = (LOCAL_CACHE,)


@dataclass(frozen=True)
class CacheConfig:
    """A ``--cache-config`` selection: the cache implementation and its settings."""

    name: str
    settings: Mapping[str, str] = field(default_factory=dict)


def parse_cache_config(args: Iterable[str]) -> CacheConfig | None:
    """``["local,size=1048576", ...]`` (tritonserver's ``<cache>,<setting>=<value>`` flags,
    repeatable) into one :class:`CacheConfig`; None when no flag is given."""
    name = ""
    settings: dict[str, str] = {}
    for arg in args:
        cache, sep, rest = arg.partition(",")
        if not sep or not cache:
            raise invalid_arg(
                f"No cache specified. --cache-config option format is "
                f"<cache name>,<setting>=<value>. Got {arg}"
            )
        key, eq, value = rest.partition("=")
        if not eq or not key or not value:
            raise invalid_arg(
                f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {arg}"
            )
        if name and cache != name:
            raise invalid_arg(
                f"only one cache implementation can be configured, got '{name}' and '{cache}'"
            )
        name = cache
        settings[key] = value
    return CacheConfig(name, settings) if name else None


def create_cache(config: CacheConfig | None) -> "LocalCache | None":
    """The server-wide cache for a configuration (TritonCacheManager::CreateCache)."""
    if config is None:
        return None
    if config.name not in CACHE_NAMES:
        raise unsupported(
            f"cache implementation '{config.name}' is not available (triton_ros "
            f"provides: {', '.join(CACHE_NAMES)})"
        )
    text = config.settings.get("size")
    if text is None:
        raise invalid_arg(
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
        )
    try:
        size = parse_size(text, "cache size")
    except TritonRosError as exc:
        raise invalid_arg(
            f"Failed to initialize LocalCache: 'size' must be an integer number of "
            f"bytes ({exc.message})"
        ) from None
    if size <= 0:
        raise invalid_arg(f"Failed to initialize LocalCache: 'size' must be > 0, got {size}")
    for key in config.settings:
        if key != "size":
            _log.warning(
                "--cache-config %s,%s=... is not a setting of the local cache; ignored",
                config.name,
                key,
            )
    return LocalCache(size)


# ------------------------------------------------------------------------------------------
# Keys and sizes
# ------------------------------------------------------------------------------------------


def request_cache_key(model_name: str, version: int, request: InferRequest) -> bytes:
    """The cache key of a normalized request for a model version."""
    h = hashlib.blake2b(digest_size=16)

    def put(text: str) -> None:
        raw = text.encode("utf-8")
        h.update(len(raw).to_bytes(4, "little"))
        h.update(raw)

    put(model_name)
    put(str(version))
    for name in sorted(request.inputs):
        array = request.inputs[name]
        put(name)
        put(str(array.dtype) if array.dtype != np.object_ else "BYTES")
        put(",".join(str(int(d)) for d in array.shape))
        # BYTES hash in the length-prefixed wire form, so equal tensors hash equal.
        data = tensor_to_bytes(array)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    # The request's parameters reach the model (a Python model reads them), so two requests
    # that differ only in a parameter may get different answers: the key covers them, with their
    # types (1, 1.0, True and "1" differ). priority and timeout are not among them.
    put(str(len(request.parameters)))
    for key in sorted(request.parameters):
        value = request.parameters[key]
        put(key)
        put(type(value).__name__)
        put(repr(value))
    if request.requested_outputs is None:
        put("*")
    else:
        for out in request.requested_outputs:
            put(f"{out.name}:{out.class_count}")
    return h.digest()


def tensor_byte_size(array: np.ndarray) -> int:
    """Bytes a tensor occupies in the cache (BYTES: 4-byte length prefix per element)."""
    if array.dtype == np.object_:
        return sum(4 + len(x) for x in array.reshape(-1))
    return int(array.nbytes)


# ------------------------------------------------------------------------------------------
# The local cache
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    outputs: Mapping[str, np.ndarray]  # read-only private copies, in response order
    parameters: Mapping[str, Any]
    byte_size: int


@dataclass(frozen=True)
class CacheStats:
    """Cache-wide counters (the local cache's nv_cache_* metrics)."""

    total_bytes: int
    used_bytes: int
    num_entries: int
    num_lookups: int
    num_hits: int
    num_misses: int
    num_evictions: int
    lookup_ns: int
    insertion_ns: int

    @property
    def utilization(self) -> float:
        return self.used_bytes / self.total_bytes if self.total_bytes else 0.0


class LocalCache:
    """An LRU map of request keys to responses, bounded in bytes; thread-safe."""

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = int(size_bytes)
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[bytes, CacheEntry] = collections.OrderedDict()
        self._used = 0
        self._lookups = self._hits = self._misses = self._evictions = 0
        self._lookup_ns = self._insertion_ns = 0

    def lookup(self, key: bytes) -> CacheEntry | None:
        start = time.monotonic_ns()
        with self._lock:
            entry = self._entries.get(key)
            self._lookups += 1
            if entry is None:
                self._misses += 1
            else:
                self._hits += 1
                self._entries.move_to_end(key)
            self._lookup_ns += time.monotonic_ns() - start
        return entry

    def insert(
        self,
        key: bytes,
        outputs: Mapping[str, np.ndarray],
        parameters: Mapping[str, Any] | None = None,
    ) -> bool:
        """Cache a response; False when it exists already or cannot fit in the whole cache."""
        start = time.monotonic_ns()
        # Copy outside the lock: backends' outputs are often views of a larger batch buffer.
        copies: dict[str, np.ndarray] = {}
        size = len(key)
        for name, array in outputs.items():
            copy = np.array(array, copy=True)
            copy.flags.writeable = False
            copies[name] = copy
            size += len(name.encode("utf-8")) + tensor_byte_size(copy)
        entry = CacheEntry(copies, dict(parameters or {}), size)
        inserted = False
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
            elif size > self.size_bytes:
                _log.warning(
                    "response of %d bytes is larger than the whole response cache (%d "
                    "bytes); not cached",
                    size,
                    self.size_bytes,
                )
            else:
                while self._used + size > self.size_bytes and self._entries:
                    _, evicted = self._entries.popitem(last=False)
                    self._used -= evicted.byte_size
                    self._evictions += 1
                self._entries[key] = entry
                self._used += size
                inserted = True
            self._insertion_ns += time.monotonic_ns() - start
        return inserted

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                total_bytes=self.size_bytes,
                used_bytes=self._used,
                num_entries=len(self._entries),
                num_lookups=self._lookups,
                num_hits=self._hits,
                num_misses=self._misses,
                num_evictions=self._evictions,
                lookup_ns=self._lookup_ns,
                insertion_ns=self._insertion_ns,
            )
