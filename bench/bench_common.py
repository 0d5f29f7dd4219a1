"""Helpers the ROS benchmarks and the soak share: the machine's description for a results file,
a free loopback port, a process's (and each of its threads') CPU time and page faults, a ROS
stamp in nanoseconds, and printing (and writing) a results text."""
from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

# the load average when the benchmark started (its results file reports it with the machine)
LOAD_AT_START = open("/proc/loadavg").read().split()[:3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def machine_lines() -> str:
    """Markdown list items: uname, core count and CPU model."""
    return (f"- `uname -a`: {' '.join(platform.uname())}\n- `nproc`: {os.cpu_count()}\n"
            f"- CPU: {cpu_model()}")


def _stat_cpu_seconds(stat: str) -> float:
    """User + system CPU seconds of a /proc ``stat`` line (its fields after the ``(comm)``)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    return _stat_cpu_seconds(open(f"/proc/{pid}/stat").read())


def minor_faults(pid: int) -> int:
    """Minor page faults of a process so far (/proc/PID/stat ``minflt``): each is a page the
    kernel had to map on first touch, e.g. of a freshly allocated large buffer."""
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[7])


def proc_status_kb(pid: int, key: str) -> int:
    """A kB field of /proc/PID/status (``VmRSS``, ``VmHWM``: the resident size, its peak); 0 if
    absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def thread_cpu_seconds(pid: int) -> dict[int, tuple[str, float]]:
    """Each living thread of a process: tid -> (its name, user + system CPU seconds so far)
    (/proc/PID/task/TID/stat). A thread that ends between two readings drops out."""
    threads: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:                      # ended meanwhile
            continue
        threads[int(tid)] = (text[text.index("(") + 1:text.rindex(")")], _stat_cpu_seconds(text))
    return threads


def stamp_ns(stamp) -> int:
    """A ROS ``builtin_interfaces/Time`` in nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def emit(text: str, out: str) -> int:
    """Print a results text, also write it to ``out`` when one is given; a main()'s exit status."""
    print(text)
    if out:
        Path(out).write_text(text)
    return 0
