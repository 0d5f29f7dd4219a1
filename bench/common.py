"""Helpers every benchmark area shares: the project's root and the benchmarks' output folder,
the machine and commit a result names, a free loopback port, a process's (and each of its
threads') CPU time, page faults and memory, a ROS stamp in nanoseconds, and printing (and
writing) a results text.

The benchmarks are modules of the ``bench`` namespace package, run from the project's root so
that this tree's ``triton_ros`` and ``bench`` are the ones imported, e.g.
``.venv/bin/python -m bench.server.request_path``.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# raw logs and the results texts the benchmarks write by default (ignored by git)
OUT = ROOT / "bench" / "out"
# the shared peer benchmark's set-up (../shared/peer-bench/setup.sh): tinydet, perf_analyzer
PEER_DIR = Path(os.environ.get("PEER_DIR", "/tmp/peer"))

# the load average when the benchmark started (its results file reports it with the machine)
LOAD_AT_START = open("/proc/loadavg").read().split()[:3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(client, timeout: float = 60.0) -> None:
    """Wait until a tritonclient client's server says it is ready; TimeoutError past
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if client.is_server_ready():
                return
        except Exception:  # not listening yet
            pass
        time.sleep(0.2)
    raise TimeoutError("server did not become ready")


def cpu_model() -> str:
    try:
        return next(
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        return "unknown"


def find_perf_analyzer() -> tuple[Path, dict]:
    """perf_analyzer and the environment it needs (this venv's, else the peer benchmark's);
    exits with the set-up to run when there is neither."""
    own = Path(sys.executable).parent / "perf_analyzer"
    if own.exists():
        return own, dict(os.environ)
    peer = PEER_DIR / "pa" / "tritonclient-2.50.0.data" / "data" / "bin" / "perf_analyzer"
    libs = sorted(PEER_DIR.glob("venv-pa/lib/python3*/site-packages/nvidia/cuda_runtime/lib"))
    if peer.exists() and libs:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = f"{libs[0]}:{env.get('LD_LIBRARY_PATH', '')}"
        return peer, env
    raise SystemExit(
        "perf_analyzer not found: run scripts/setup.sh (or ../shared/peer-bench/setup.sh)"
    )


def machine() -> str:
    """One line: host, CPU model, cores, memory, kernel and Python (a results text's machine)."""
    mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return (
        f"{platform.node()}: {cpu_model()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, "
        f"{platform.platform()}, Python {platform.python_version()}"
    )


def commit(tree: Path = ROOT) -> str:
    """The short commit of a checkout, ``+`` when its tracked files have changes ("?" outside
    git)."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(tree), "diff", "--quiet", "HEAD"]).returncode
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return rev + ("+" if dirty else "")


def default_out(name: str) -> str:
    """Where a benchmark writes its results text unless ``--out`` says otherwise."""
    return str(OUT / f"{name}.md")


def machine_lines() -> str:
    """Markdown list items: uname, core count and CPU model."""
    return (
        f"- `uname -a`: {' '.join(platform.uname())}\n- `nproc`: {os.cpu_count()}\n"
        f"- CPU: {cpu_model()}"
    )


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
        except OSError:  # ended meanwhile
            continue
        threads[int(tid)] = (text[text.index("(") + 1 : text.rindex(")")], _stat_cpu_seconds(text))
    return threads


class ServerProcess:
    """A checkout's ``triton-ros-server`` (``python -m triton_ros.server_main``, or ``script``
    with the same flags) on free ports of 127.0.0.1 with ``args``, its output in ``log``; ready
    once its gRPC endpoint says so and its HTTP port accepts. ``stop()`` sends SIGINT and
    returns the exit status."""

    def __init__(
        self,
        *args: str,
        log: Path,
        checkout: Path = ROOT,
        env_extra: dict[str, str] | None = None,
        script: str | None = None,
    ) -> None:
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = f"{checkout}:{env.get('PYTHONPATH', '')}"
        env.update(env_extra or {})
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log
        self._log = open(log, "w")
        entry = [str(Path(script).resolve())] if script else ["-m", "triton_ros.server_main"]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *entry,
                f"--grpc-port={self.grpc_port}",
                f"--http-port={self.http_port}",
                f"--metrics-port={self.metrics_port}",
                *args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(checkout),
        )
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(self.url("grpc"))
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.client.is_server_ready() and self._http_up():
                    break
            except Exception:  # not listening yet
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server of {checkout} did not start: see {log}")
            time.sleep(0.3)

    def _http_up(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.http_port)) == 0

    def url(self, protocol: str = "grpc") -> str:
        return f"127.0.0.1:{self.grpc_port if protocol == 'grpc' else self.http_port}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def stamp_ns(stamp) -> int:
    """A ROS ``builtin_interfaces/Time`` in nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def emit(text: str, out: str) -> int:
    """Print a results text, also write it to ``out`` when one is given; a main()'s exit status."""
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)
    return 0


def emit_checked(lines: list[str], failures: list[str], out: str) -> int:
    """A results text with its ``## Checks`` section (each failed check, or "all passed"),
    printed and written as :func:`emit` does; a main()'s exit status: 1 when a check failed."""
    lines = (
        lines + ["", "## Checks", ""] + ([f"- FAILED: {f}" for f in failures] or ["- all passed"])
    )
    emit("\n".join(lines) + "\n", out)
    return 1 if failures else 0


def start_inference_node(params: dict, params_file: Path, log_path: Path, node_name: str):
    """inference_node in a process of its own, started from the checkout, with ``params``
    written to ``params_file`` as a ROS params file and its output in ``log_path``: the
    process and the open log (the callers' stop_run closes both)."""
    import yaml

    params_file.write_text(yaml.safe_dump(params))
    log = open(log_path, "w")
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_ros.ros.inference_node",
            "--ros-args",
            "--params-file",
            str(params_file),
            "-r",
            f"__node:={node_name}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    return node, log


def stop_run(node, cameras, log, probe, subscriptions) -> None:
    """The end of a node benchmark's run: the cameras and the node stopped with SIGINT (waited
    for), the node's log closed, the probe's subscriptions destroyed."""
    import signal

    if cameras is not None:
        cameras.send_signal(signal.SIGINT)
        cameras.communicate(timeout=60)
    node.send_signal(signal.SIGINT)
    node.wait(timeout=120)
    log.close()
    for sub in subscriptions:
        probe.destroy_subscription(sub)


def follow_status(
    probe,
    node_name: str,
    subscriptions: list,
    *,
    node=None,
    what: str = "",
    log_name: str = "",
    timeout_s: float = 60.0,
):
    """Subscribe ``probe`` to ``/<node_name>/status`` (added to ``subscriptions``); returns
    ``fresh_status(after_ns)``: the first status stamped after ``after_ns`` (node clock).
    RuntimeError when ``node`` (its Popen) exits or no such status comes in ``timeout_s``."""
    import time

    from triton_ros_interfaces.msg import InferenceStatus

    status: dict = {}
    subscriptions.append(
        probe.create_subscription(
            InferenceStatus, f"/{node_name}/status", lambda m: status.__setitem__("last", m), 10
        )
    )
    see = f"; see {log_name}" if log_name else ""

    def fresh_status(after_ns: int):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = status.get("last")
            if msg is not None and stamp_ns(msg.header.stamp) > after_ns:
                return msg
            if node is not None and node.poll() is not None:
                raise RuntimeError(f"{what}: the node exited{see}")
            time.sleep(0.02)
        raise RuntimeError(f"{what}: no ~/status from the node{see}")

    return fresh_status
