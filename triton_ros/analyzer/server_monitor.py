"""The server's CPU and memory while perf_analyzer measures it (model_analyzer's CPU metrics).

A :class:`ProcessMonitor` samples a process and its descendants (Python backend models run in
stub processes of their own) with psutil: resident memory (RSS, summed over the processes; the
peak over the samples is reported, as model_analyzer reports the peak of its samples) and CPU
time, whose growth over the window divided by the wall time is the number of cores the server
kept busy. GPU memory comes from NVML (nvidia-ml-py, imported only when asked): the memory NVML
attributes to the server's processes, summed over the GPUs; where NVML sees none of them (in a
container NVML may list processes under the host's ids) it is the memory used on the GPUs, as
model_analyzer's ``gpu_used_memory`` is. Without NVML or a GPU it is None.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psutil

_log = logging.getLogger(__name__)

MB = 1024 * 1024


@dataclass(frozen=True)
class ProcessSample:
    """What a process tree used over one measurement window."""

    cpu_cores: float  # CPU seconds per wall second (1.0: one core busy)
    peak_rss_mb: float
    mean_rss_mb: float
    peak_gpu_memory_mb: float | None  # None: no GPU (or no NVML)
    seconds: float


class GpuMemoryReader:
    """GPU memory NVML attributes to a set of processes; disabled (None) without NVML or GPUs."""

    def __init__(self) -> None:
        self._nvml = None
        self._handles: list = []
        try:
            import pynvml  # nvidia-ml-py: only where GPU memory is asked for

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
        except ImportError:
            _log.debug("nvidia-ml-py is not installed: no GPU memory figures")
        except Exception as exc:  # no driver, no device: NVMLError subclasses
            _log.debug("NVML unavailable (%s): no GPU memory figures", exc)

    @property
    def available(self) -> bool:
        return self._nvml is not None and bool(self._handles)

    def used_mb(self, pids: set[int]) -> float | None:
        if not self.available:
            return None
        total = device_used = 0
        matched = False
        for handle in self._handles:
            try:
                processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                device_used += int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)
            except Exception as exc:  # a device gone or not supported: count it as none
                _log.debug("NVML query failed: %s", exc)
                continue
            for process in processes:
                if process.pid in pids and process.usedGpuMemory is not None:
                    total += int(process.usedGpuMemory)
                    matched = True
        return (total if matched else device_used) / MB

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:
                _log.debug("nvmlShutdown failed: %s", exc)
            self._nvml = None


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


class ProcessMonitor:
    """Samples a process tree every ``interval_s`` from :meth:`start` to :meth:`stop`."""

    def __init__(
        self, pid: int, *, interval_s: float = 0.2, gpu: GpuMemoryReader | None = None
    ) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.gpu = gpu
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rss: list[float] = []
        self._gpu: list[float] = []
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._t0 = 0.0
        self._error: BaseException | None = None

    def start(self) -> "ProcessMonitor":
        self._t0 = time.monotonic()
        self._sample()
        self._cpu_start = dict(self._cpu_last)
        self._thread = threading.Thread(target=self._run, name="process-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self._sample()
        except BaseException as exc:  # kept and raised by stop(): never a silent death
            self._error = exc

    def _sample(self) -> None:
        rss = 0
        pids = set()
        try:
            processes = _tree(self.pid)
        except psutil.NoSuchProcess:
            return  # the server exited: stop() reports what was seen
        for process in processes:
            try:
                with process.oneshot():
                    rss += process.memory_info().rss
                    times = process.cpu_times()
                    self._cpu_last[process.pid] = times.user + times.system
                pids.add(process.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # a child that just exited
        self._rss.append(rss / MB)
        if self.gpu is not None:
            used = self.gpu.used_mb(pids)
            if used is not None:
                self._gpu.append(used)

    def stop(self) -> ProcessSample:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._error is not None:
            raise self._error
        self._sample()
        seconds = max(time.monotonic() - self._t0, 1e-9)
        cpu = sum(t - self._cpu_start.get(pid, 0.0) for pid, t in self._cpu_last.items())
        return ProcessSample(
            cpu_cores=max(cpu, 0.0) / seconds,
            peak_rss_mb=max(self._rss, default=0.0),
            mean_rss_mb=sum(self._rss) / len(self._rss) if self._rss else 0.0,
            peak_gpu_memory_mb=max(self._gpu) if self._gpu else None,
            seconds=seconds,
        )
