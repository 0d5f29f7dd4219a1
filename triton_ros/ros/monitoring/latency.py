"""Latency samples of one kind (a topic's end-to-end latency, a model's, an endpoint's round
trips), kept since the diagnostics reporter last read them, and their percentiles."""

from __future__ import annotations

import collections
import threading
from typing import Iterable

import numpy as np


class LatencyWindow:
    """Latency samples (ns) since the last :meth:`drain`, at most ``capacity`` most recent."""

    def __init__(self, capacity: int = 4096) -> None:
        self._samples: collections.deque[int] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(self, ns: int) -> None:
        with self._lock:
            self._samples.append(ns)

    def drain(self) -> list[int]:
        with self._lock:
            out = list(self._samples)
            self._samples.clear()
            return out


def percentiles_ms(samples: Iterable[int]) -> tuple[float, float]:
    """(p50, p99) in milliseconds; (0, 0) without samples."""
    arr = np.fromiter(samples, np.float64)
    if arr.size == 0:
        return 0.0, 0.0
    p50, p99 = np.percentile(arr, [50, 99])
    return float(p50) / 1e6, float(p99) / 1e6
