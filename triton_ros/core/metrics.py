"""Prometheus metrics with Triton's names, types, labels and units (metrics.cc,
metric_model_reporter.cc, the local cache's metrics).

:class:`Metrics` renders the Prometheus text exposition (format 0.0.4) of the server's state; it
has no transport (``frontend/metrics_server.py`` serves it over HTTP, the ROS node the same way).

Per-model metrics (labels ``model`` and ``version``; ``reason`` on failures) are derived at each
scrape from the same :class:`~triton_ros.core.infer_stats.ModelStats` snapshots that answer
ModelStatistics, for every READY model version, so the counters agree exactly with the
statistics once traffic stops: ``nv_inference_request_success`` is ``success.count``,
``nv_inference_request_failure`` summed over reasons is ``fail.count``, ``nv_inference_count`` and
``nv_inference_exec_count`` are ``inference_count`` and ``execution_count``, and each
``*_duration_us`` counter is the matching statistic's nanoseconds // 1000. The cache metrics per
model appear only for models that use the response cache, as in Triton.

Per-interval metrics are sampled when a scrape finds the last sample older than the interval
(``--metrics-interval-ms``, default 2000): CPU utilization over the time since the previous sample
and memory from /proc (Linux), GPU utilization, memory, power and energy through NVML
(``nvidia-ml-py``, imported lazily; without it or without a GPU these families are omitted), and
the response cache's own gauges.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .metric_family import COUNTER, GAUGE, Family, render_families

if TYPE_CHECKING:
    from .server import InferenceServer

_log = logging.getLogger("triton_ros.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

# name -> (type, help), in Triton's words (metrics.cc and local_cache).
FAMILIES: dict[str, tuple[str, str]] = {
    "nv_inference_request_success": (
        COUNTER,
        "Number of successful inference requests, all batch sizes",
    ),
    "nv_inference_request_failure": (
        COUNTER,
        "Number of failed inference requests, all batch sizes",
    ),
    "nv_inference_count": (
        COUNTER,
        "Number of inferences performed (does not include cached requests)",
    ),
    "nv_inference_exec_count": (
        COUNTER,
        "Number of model executions performed (does not include cached requests)",
    ),
    "nv_inference_request_duration_us": (
        COUNTER,
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    "nv_inference_queue_duration_us": (
        COUNTER,
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    "nv_inference_compute_input_duration_us": (
        COUNTER,
        "Cumulative compute input duration in microseconds (does not include cached requests)",
    ),
    "nv_inference_compute_infer_duration_us": (
        COUNTER,
        "Cumulative compute inference duration in microseconds (does not include cached requests)",
    ),
    "nv_inference_compute_output_duration_us": (
        COUNTER,
        "Cumulative inference compute output duration in microseconds (does not include "
        "cached requests)",
    ),
    "nv_inference_pending_request_count": (
        GAUGE,
        "Instantaneous number of pending requests awaiting execution per-model.",
    ),
    "nv_model_load_duration_secs": (GAUGE, "Model load time in seconds"),
    "nv_cache_num_hits_per_model": (COUNTER, "Number of cache hits per model"),
    "nv_cache_hit_duration_per_model": (
        COUNTER,
        "Total cache hit duration per model, in microseconds",
    ),
    "nv_cache_num_misses_per_model": (COUNTER, "Number of cache misses per model"),
    "nv_cache_miss_duration_per_model": (
        COUNTER,
        "Total cache miss (insert+lookup) duration per model, in microseconds",
    ),
    "nv_cache_util": (GAUGE, "Cache utilization [0.0 - 1.0]"),
    # Not Triton's: the transports' counts (core/infer_stats.EndpointStats).
    "triton_ros_connections_closed": (
        COUNTER,
        "Connections an endpoint closed or lost before it answered a request, by reason: "
        "aborted (the client closed it within a request), evicted (closed at the "
        "connection limit to admit a new one), refused (over the connection limit), "
        "timeout (a request head or body too slow), malformed",
    ),
    "nv_cache_num_entries": (GAUGE, "Number of responses stored in response cache"),
    "nv_cache_num_hits": (GAUGE, "Number of cache hits in response cache"),
    "nv_cache_num_misses": (GAUGE, "Number of cache misses in response cache"),
    "nv_cache_num_lookups": (GAUGE, "Number of cache lookups in response cache"),
    "nv_cache_num_evictions": (GAUGE, "Number of cache evictions in response cache"),
    "nv_cache_lookup_duration": (
        GAUGE,
        "Total cache lookup duration (hit and miss), in microseconds",
    ),
    "nv_cache_insertion_duration": (GAUGE, "Total cache insertion duration, in microseconds"),
    "nv_gpu_utilization": (GAUGE, "GPU utilization rate [0.0 - 1.0)"),
    "nv_gpu_memory_total_bytes": (GAUGE, "GPU total memory, in bytes"),
    "nv_gpu_memory_used_bytes": (GAUGE, "GPU used memory, in bytes"),
    "nv_gpu_power_usage": (GAUGE, "GPU power usage in watts"),
    "nv_gpu_power_limit": (GAUGE, "GPU power management limit in watts"),
    "nv_energy_consumption": (
        COUNTER,
        "GPU energy consumption in joules since the Triton Server started",
    ),
    "nv_cpu_utilization": (GAUGE, "CPU utilization rate [0.0 - 1.0]"),
    "nv_cpu_memory_total_bytes": (GAUGE, "CPU total memory (RAM), in bytes"),
    "nv_cpu_memory_used_bytes": (GAUGE, "CPU used memory (RAM), in bytes"),
    # Request tracing (core/tracer.py; not Triton's: it has no trace metrics).
    "triton_ros_trace_written": (COUNTER, "Number of request traces written to trace files"),
    "triton_ros_trace_dropped": (
        COUNTER,
        "Number of request traces lost (trace file not writable, or the trace writer behind)",
    ),
    "triton_ros_trace_file_errors": (COUNTER, "Number of failed writes of a trace file"),
}

# Families every scrape carries, even with no model loaded (as Triton registers them at start).
_MODEL_FAMILIES = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_model_load_duration_secs",
)
_MODEL_CACHE_FAMILIES = (
    "nv_cache_num_hits_per_model",
    "nv_cache_hit_duration_per_model",
    "nv_cache_num_misses_per_model",
    "nv_cache_miss_duration_per_model",
)


def _family(name: str) -> Family:
    kind, help_text = FAMILIES[name]
    return Family(name, kind, help_text)


# ------------------------------------------------------------------------------------------
# CPU (/proc) and GPU (NVML) samplers
# ------------------------------------------------------------------------------------------


def read_cpu_times(path: str = "/proc/stat") -> tuple[int, int] | None:
    """(busy, idle) jiffies of the aggregate 'cpu' line, as Triton counts them."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return user + nice + system + irq + softirq + steal, idle + iowait


def read_memory(path: str = "/proc/meminfo") -> tuple[int, int] | None:
    """(total, used) bytes with used = MemTotal - MemAvailable, Triton's definition."""
    info: dict[str, int] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] in ("MemTotal:", "MemAvailable:"):
                    info[parts[0][:-1]] = int(parts[1]) * 1024
    except (OSError, ValueError):
        return None
    if "MemTotal" not in info or "MemAvailable" not in info:
        return None
    total = info["MemTotal"]
    return total, max(0, total - info["MemAvailable"])


@dataclass
class GpuSample:
    uuid: str
    utilization: float | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    power_usage: float | None = None
    power_limit: float | None = None
    energy_joules: float | None = None


class NvmlSampler:
    """GPU readings through NVML for the devices CUDA can see; unavailable -> no devices."""

    def __init__(self) -> None:
        self._nvml = None
        self._handles: list = []
        self._energy_start: dict[int, int] = {}
        try:
            import pynvml  # nvidia-ml-py; absent on machines without NVIDIA drivers

            pynvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError (no driver / no GPU)
            _log.info("GPU metrics unavailable: %s", exc)
            return
        self._nvml = pynvml
        try:
            self._handles = self._visible_handles()
        except Exception as exc:
            _log.warning("GPU metrics unavailable: cannot enumerate GPUs: %s", exc)
            self._handles = []
        for index, handle in enumerate(self._handles):
            try:
                self._energy_start[index] = int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            except Exception:
                pass  # not every GPU reports energy (e.g. pre-Volta)

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def _visible_handles(self) -> list:
        nvml = self._nvml
        count = int(nvml.nvmlDeviceGetCount())
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return handles
        # CUDA_VISIBLE_DEVICES names devices by index (taken in NVML's PCI order) or UUID.
        by_uuid = {self._uuid(h): h for h in handles}
        out = []
        for item in (x.strip() for x in visible.split(",") if x.strip()):
            if item.isdigit():
                if int(item) < count:
                    out.append(handles[int(item)])
                else:
                    break  # CUDA stops at the first invalid entry
            else:
                match = next((h for u, h in by_uuid.items() if u.startswith(item)), None)
                if match is None:
                    break
                out.append(match)
        return out

    def _uuid(self, handle) -> str:
        uuid = self._nvml.nvmlDeviceGetUUID(handle)
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)

    def sample(self) -> list[GpuSample]:
        nvml = self._nvml
        out: list[GpuSample] = []
        for index, handle in enumerate(self._handles):
            try:
                s = GpuSample(uuid=self._uuid(handle))
            except Exception:
                continue
            try:
                s.utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu * 0.01
            except Exception:
                pass
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                s.memory_total, s.memory_used = int(memory.total), int(memory.used)
            except Exception:
                pass
            try:
                s.power_usage = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW -> W
            except Exception:
                pass
            try:
                s.power_limit = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
            except Exception:
                pass
            if index in self._energy_start:
                try:
                    now_mj = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
                    s.energy_joules = max(0, now_mj - self._energy_start[index]) / 1000.0
                except Exception:
                    pass
            out.append(s)
        return out


# ------------------------------------------------------------------------------------------
# Families from outside the core (a frontend's own counters)
# ------------------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------
# The metrics of a server
# ------------------------------------------------------------------------------------------


class Metrics:
    """Renders the metrics of one :class:`InferenceServer`; safe to call from many threads."""

    def __init__(
        self,
        core: "InferenceServer",
        *,
        allow_gpu_metrics: bool = True,
        allow_cpu_metrics: bool = True,
        interval_ms: float = 2000.0,
    ) -> None:
        self._core = core
        self._interval_ns = int(max(0.0, interval_ms) * 1e6)
        self._allow_cpu = allow_cpu_metrics
        self._lock = threading.Lock()
        self._last_poll_ns = 0
        self._cpu_times = read_cpu_times() if allow_cpu_metrics else None
        self._cpu_utilization = 0.0
        self._memory: tuple[int, int] | None = None
        self._gpu = NvmlSampler() if allow_gpu_metrics else None
        self._gpu_samples: list[GpuSample] = []

    # ---------------------------------------------------------------- per-interval sampling
    def poll(self) -> None:
        """Sample CPU, memory and GPU now (also done by render() once the interval passed)."""
        with self._lock:
            self._poll_locked()

    def _poll_locked(self) -> None:
        self._last_poll_ns = time.monotonic_ns()
        if self._allow_cpu:
            times = read_cpu_times()
            if times is not None and self._cpu_times is not None:
                busy = max(0, times[0] - self._cpu_times[0])
                idle = max(0, times[1] - self._cpu_times[1])
                if busy + idle > 0:
                    self._cpu_utilization = busy / (busy + idle)
            if times is not None:
                self._cpu_times = times
            self._memory = read_memory()
        if self._gpu is not None and self._gpu.available:
            self._gpu_samples = self._gpu.sample()

    def _maybe_poll(self) -> None:
        with self._lock:
            if (
                self._last_poll_ns == 0
                or time.monotonic_ns() - self._last_poll_ns >= self._interval_ns
            ):
                self._poll_locked()

    # ---------------------------------------------------------------- rendering
    def families(self) -> list[Family]:
        self._maybe_poll()
        fams = {name: _family(name) for name in _MODEL_FAMILIES}
        cache_fams = {name: _family(name) for name in _MODEL_CACHE_FAMILIES}
        for model in self._core.repository.ready_models():
            stats = getattr(model, "stats", None)
            if stats is None:
                continue
            s = stats.snapshot()
            labels = {"model": s.name, "version": str(s.version)}
            fams["nv_inference_request_success"].add(labels, s.success.count)
            for reason in FAILURE_REASONS:
                fams["nv_inference_request_failure"].add(
                    {**labels, "reason": reason}, s.failures_by_reason.get(reason, 0)
                )
            fams["nv_inference_count"].add(labels, s.inference_count)
            fams["nv_inference_exec_count"].add(labels, s.execution_count)
            fams["nv_inference_request_duration_us"].add(labels, s.success.ns // 1000)
            fams["nv_inference_queue_duration_us"].add(labels, s.queue.ns // 1000)
            fams["nv_inference_compute_input_duration_us"].add(labels, s.compute_input.ns // 1000)
            fams["nv_inference_compute_infer_duration_us"].add(labels, s.compute_infer.ns // 1000)
            fams["nv_inference_compute_output_duration_us"].add(labels, s.compute_output.ns // 1000)
            pending = getattr(model, "pending_request_count", None)
            fams["nv_inference_pending_request_count"].add(labels, pending() if pending else 0)
            fams["nv_model_load_duration_secs"].add(
                labels, getattr(model, "load_duration_ns", 0) / 1e9
            )
            if getattr(model, "response_cache_enabled", False):
                cache_fams["nv_cache_num_hits_per_model"].add(labels, s.cache_hit.count)
                cache_fams["nv_cache_hit_duration_per_model"].add(labels, s.cache_hit.ns // 1000)
                cache_fams["nv_cache_num_misses_per_model"].add(labels, s.cache_miss.count)
                cache_fams["nv_cache_miss_duration_per_model"].add(labels, s.cache_miss.ns // 1000)
        out = list(fams.values())
        out.extend(f for f in cache_fams.values() if f.samples)
        out.extend(self._cache_families())
        out.extend(self._gpu_families())
        out.extend(self._cpu_families())
        out.extend(self._endpoint_families())
        out.extend(self._trace_families())
        sources = getattr(self._core, "metric_sources", None)
        if sources is not None:
            out.extend(sources.families())
        return out

    def _trace_families(self) -> list[Family]:
        tracer = getattr(self._core, "tracer", None)
        if tracer is None:
            return []
        st = tracer.statistics()
        out = []
        for name, value in (
            ("triton_ros_trace_written", st.written),
            ("triton_ros_trace_dropped", st.dropped),
            ("triton_ros_trace_file_errors", st.file_errors),
        ):
            fam = _family(name)
            fam.add({}, value)
            out.append(fam)
        return out

    def _endpoint_families(self) -> list[Family]:
        counts = self._core.endpoint_stats.snapshot()
        if not counts:
            return []
        fam = _family("triton_ros_connections_closed")
        for (endpoint, reason), value in sorted(counts.items()):
            fam.add({"endpoint": endpoint, "reason": reason}, value)
        return [fam]

    def render(self) -> str:
        """The whole exposition, as GET /metrics returns it."""
        return render_families(self.families())

    def _cache_families(self) -> list[Family]:
        cache = self._core.response_cache
        if cache is None:
            return []
        st = cache.stats()
        values = {
            "nv_cache_util": st.utilization,
            "nv_cache_num_entries": st.num_entries,
            "nv_cache_num_hits": st.num_hits,
            "nv_cache_num_misses": st.num_misses,
            "nv_cache_num_lookups": st.num_lookups,
            "nv_cache_num_evictions": st.num_evictions,
            "nv_cache_lookup_duration": st.lookup_ns // 1000,
            "nv_cache_insertion_duration": st.insertion_ns // 1000,
        }
        out = []
        for name, value in values.items():
            fam = _family(name)
            fam.add({}, value)
            out.append(fam)
        return out

    def _gpu_families(self) -> list[Family]:
        with self._lock:
            samples = list(self._gpu_samples)
        if not samples:
            return []
        fields = (
            ("nv_gpu_utilization", "utilization"),
            ("nv_gpu_memory_total_bytes", "memory_total"),
            ("nv_gpu_memory_used_bytes", "memory_used"),
            ("nv_gpu_power_usage", "power_usage"),
            ("nv_gpu_power_limit", "power_limit"),
            ("nv_energy_consumption", "energy_joules"),
        )
        out = []
        for name, attr in fields:
            fam = _family(name)
            for s in samples:
                value = getattr(s, attr)
                if value is not None:
                    fam.add({"gpu_uuid": s.uuid}, value)
            if fam.samples:
                out.append(fam)
        return out

    def _cpu_families(self) -> list[Family]:
        if not self._allow_cpu:
            return []
        with self._lock:
            utilization, memory = self._cpu_utilization, self._memory
        out = []
        fam = _family("nv_cpu_utilization")
        fam.add({}, utilization)
        out.append(fam)
        if memory is not None:
            total = _family("nv_cpu_memory_total_bytes")
            total.add({}, memory[0])
            used = _family("nv_cpu_memory_used_bytes")
            used.add({}, memory[1])
            out.extend((total, used))
        return out
