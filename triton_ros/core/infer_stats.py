"""Per-model-version inference statistics with Triton's fields and meaning (infer_stats.cc).

- success / fail: requests completed, and their total time from arrival to response.
- queue, compute_input, compute_infer, compute_output: per successful request; a request that ran
  in a batch is charged the whole batch's compute times, as in Triton.
- inference_count: rows inferred (sum of request batch sizes); execution_count: model executions.
- batch_stats: per executed batch size, the number of executions and their compute times.
- cache_hit / cache_miss: response-cache lookups.
Failures also count by Triton's metric reason (REJECTED, CANCELED, BACKEND, OTHER).
Durations are nanoseconds; counters only grow, so metrics can be derived from snapshots.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += max(0, int(ns))


@dataclass
class BatchStat:
    batch_size: int
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class StatsSnapshot:
    name: str
    version: int
    last_inference_ms: int
    inference_count: int
    execution_count: int
    success: Duration
    fail: Duration
    queue: Duration
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration
    cache_hit: Duration
    cache_miss: Duration
    batch_stats: list[BatchStat]
    failures_by_reason: dict[str, int]


class ModelStats:
    """Thread-safe counters for one model version."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._last_inference_ms = 0
        self._inference_count = 0
        self._execution_count = 0
        self._success = Duration()
        self._fail = Duration()
        self._queue = Duration()
        self._compute_input = Duration()
        self._compute_infer = Duration()
        self._compute_output = Duration()
        self._cache_hit = Duration()
        self._cache_miss = Duration()
        self._batch: dict[int, BatchStat] = {}
        self._fail_reasons: dict[str, int] = {}

    def record_success(
        self,
        *,
        request_ns: int,
        queue_ns: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
    ) -> None:
        with self._lock:
            self._success.add(request_ns)
            self._queue.add(queue_ns)
            self._compute_input.add(compute_input_ns)
            self._compute_infer.add(compute_infer_ns)
            self._compute_output.add(compute_output_ns)
            self._last_inference_ms = int(time.time() * 1000)

    def record_failure(self, *, request_ns: int, reason: str = "OTHER") -> None:
        with self._lock:
            self._fail.add(request_ns)
            self._fail_reasons[reason] = self._fail_reasons.get(reason, 0) + 1

    def record_execution(
        self,
        *,
        batch_size: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
        inference_count: int | None = None,
    ) -> None:
        """One execution of a batch of ``batch_size`` rows, ``inference_count`` of them
        inferences (all by default; the sequence batcher's not-ready rows are not)."""
        with self._lock:
            self._execution_count += 1
            self._inference_count += batch_size if inference_count is None else inference_count
            stat = self._batch.get(batch_size)
            if stat is None:
                stat = self._batch[batch_size] = BatchStat(batch_size)
            stat.compute_input.add(compute_input_ns)
            stat.compute_infer.add(compute_infer_ns)
            stat.compute_output.add(compute_output_ns)
            self._last_inference_ms = int(time.time() * 1000)

    def record_cache_hit(self, *, request_ns: int, queue_ns: int, cache_hit_ns: int) -> None:
        """A request answered from the response cache (UpdateSuccessCacheHit): it succeeds and
        waits in the queue, but executes nothing (no compute, inference or execution count)."""
        with self._lock:
            self._success.add(request_ns)
            self._queue.add(queue_ns)
            self._cache_hit.add(cache_hit_ns)
            self._last_inference_ms = int(time.time() * 1000)

    def record_cache_miss(self, *, cache_miss_ns: int) -> None:
        """A computed response inserted into the cache (UpdateSuccessCacheMiss): lookup plus
        insertion time. The caller measures the request's success duration after the insertion,
        so it already includes this time (Triton adds it afterwards to the same effect)."""
        with self._lock:
            self._cache_miss.add(cache_miss_ns)

    def snapshot(self) -> StatsSnapshot:
        def d(x: Duration) -> Duration:
            return Duration(x.count, x.ns)

        with self._lock:
            return StatsSnapshot(
                name=self.name,
                version=self.version,
                last_inference_ms=self._last_inference_ms,
                inference_count=self._inference_count,
                execution_count=self._execution_count,
                success=d(self._success),
                fail=d(self._fail),
                queue=d(self._queue),
                compute_input=d(self._compute_input),
                compute_infer=d(self._compute_infer),
                compute_output=d(self._compute_output),
                cache_hit=d(self._cache_hit),
                cache_miss=d(self._cache_miss),
                batch_stats=[
                    BatchStat(
                        b.batch_size, d(b.compute_input), d(b.compute_infer), d(b.compute_output)
                    )
                    for _, b in sorted(self._batch.items())
                ],
                failures_by_reason=dict(self._fail_reasons),
            )


class EndpointStats:
    """Counters of what the network endpoints' transports end before a request reaches a model:
    connections a client abandoned within a request (``aborted``), closed at the connection
    limit to admit a new one (``evicted``) or refused there (``refused``), requests whose head or
    body came too slowly (``timeout``) and malformed ones (``malformed``), per endpoint
    (``http``, ``metrics``). Thread-safe; the counts only grow. Shown as the metric family
    ``triton_ros_connections_closed`` (core/metrics.py)."""

    REASONS = ("aborted", "evicted", "refused", "timeout", "malformed")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def register(self, endpoint: str) -> None:
        """List every reason of ``endpoint`` at 0, so a scrape shows them before they happen."""
        with self._lock:
            for reason in self.REASONS:
                self._counts.setdefault((endpoint, reason), 0)

    def count(self, endpoint: str, reason: str) -> int:
        """Count one; the count so far (for throttled logging)."""
        with self._lock:
            value = self._counts.get((endpoint, reason), 0) + 1
            self._counts[(endpoint, reason)] = value
            return value

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)
