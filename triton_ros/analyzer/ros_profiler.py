"""``triton-ros-analyzer ros``: how many cameras, at which rate, an inference node serves.

The question robotics users have ("how many cameras does this model serve on this computer at
30 Hz?") answered the way the node is used: the ``inference_node`` console script runs as a
process (``inference_node --ros-args --params-file ...``) on a scratch copy of the model, bound
by a topic pattern to the cameras of the bundled ``synthetic_cameras`` console script, which
runs as a second process (``synthetic_cameras --camera ROBOT/CAM:WxH --rate HZ``). Nothing of
the node is imported: the analyzer reads it through ROS, as an operator's tools do:

- ``~/status`` (triton_ros_interfaces/InferenceStatus, the figures of ``/diagnostics``): the
  binding's frames received and published and its drops and failures by reason (totals since
  start: a step's are the differences over its window), its per-frame latency (input stamp to
  publication) p50/p99 over each diagnostics period, its level and message;
- ``~/get_model_statistics`` (Triton's ModelStatistics): executions and rows inferred (the mean
  executed batch) and the time queued and computing, over the step;
- the node's CPU and memory from psutil.

For each rate, the camera count grows 1, 2, 4, ... until a step fails, then is bisected between
the last count that passed and the first that failed. The diagnostics period is set to
``window_s``, so that every p99 is over all of one window's frames; a step measures ``windows``
whole periods (repeated windows) after one to warm up. A window passes when its p99 latency is
within the budget (default: one frame period at that rate) and the frames it published are at
least ``1 - max_drop_fraction`` of the frames the cameras were asked for in it, less one a
camera (the frame in flight at its edge); drops anywhere count: the node's, the middleware's,
or a camera process that fell behind. A step passes when nothing failed and more than half of
its windows passed (one window is decided by its slowest frame or two: one stall of a busy
host). The answer is then confirmed: the count found is measured again with fresh cameras
over more windows; where it does not hold, the confirmation bisects down towards the next lower
count that passed in the search. The count reported held in a confirmation step, and the report
says how it was checked.

The node, the cameras and this process use the package's Fast DDS profile (config/fastdds.xml,
as scripts/run.sh and the launch file set it) unless FASTDDS_DEFAULT_PROFILES_FILE is set
already: without it a 640x480 image does not fit Fast DDS's default shared-memory segment.

The cameras are simulated on the same computer, so their rendering and publishing take CPU from
the node: where the camera process could not keep its rate, the step says so (the count found is
then a lower bound for cameras that are real devices).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .arguments import (
    existing_file,
    existing_repository,
    fraction,
    number_list,
    positive,
    ros_parameter,
    size,
)
from .errors import AnalyzerError, ExitStatus
from .model_variant import ScratchRepository, find_model_dir
from .server_monitor import ProcessMonitor
from .triton_server import stop_process

BINDING = "analyzer"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-repository",
        "-m",
        action="append",
        required=True,
        type=existing_repository,
        help="model repository (repeat for several); only read, never written",
    )
    p.add_argument(
        "--model",
        "--profile-models",
        dest="model",
        required=True,
        help="the model the cameras are bound to",
    )
    p.add_argument(
        "--config",
        type=existing_file,
        default=None,
        metavar="CONFIG_PBTXT",
        help="serve the model with this config.pbtxt (e.g. the one `profile` "
        "recommended) instead of its own",
    )
    p.add_argument(
        "--rates",
        default=(30.0,),
        metavar="HZ,HZ,...",
        type=number_list(float, what="rates (Hz)", zero_allowed=False),
        help="camera frame rates to try (default 30)",
    )
    p.add_argument(
        "--camera-size",
        default=(640, 480),
        type=size,
        metavar="WxH",
        help="each camera's image size (default 640x480)",
    )
    p.add_argument("--encoding", default="rgb8", help="image encoding (default rgb8)")
    p.add_argument(
        "--latency-budget-ms",
        type=positive(float),
        default=None,
        help="per-frame p99 latency budget, input stamp to publication, ms "
        "(default: one frame period at each rate)",
    )
    p.add_argument(
        "--max-drop-fraction",
        type=fraction,
        default=0.02,
        help="frames that may go unpublished, as a fraction of those the cameras "
        "were asked for (default 0.02)",
    )
    p.add_argument(
        "--min-cameras",
        type=positive(int),
        default=1,
        metavar="N",
        help="the first camera count tried (default 1)",
    )
    p.add_argument(
        "--max-cameras",
        type=positive(int),
        default=32,
        metavar="N",
        help="the most cameras tried (default 32)",
    )
    p.add_argument(
        "--window-s",
        type=positive(float),
        default=None,
        help="one measuring window (the node's diagnostics period), s (default 3; 2 with --quick)",
    )
    p.add_argument(
        "--windows",
        type=positive(int),
        default=None,
        help="windows measured per step (default 4; 3 with --quick); a step "
        "passes when more than half of them met the budget and published "
        "enough frames",
    )
    p.add_argument(
        "--format",
        choices=("auto", "detections", "classification", "tensors"),
        default="auto",
        help="the binding's output format (auto: detections where "
        "the model has a 'detections' output or 'boxes' and 'scores', else tensors)",
    )
    p.add_argument(
        "--binding-param",
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        type=ros_parameter,
        help="another parameter of the binding (repeat), e.g. max_in_flight:=2",
    )
    p.add_argument(
        "--node-param",
        action="append",
        default=[],
        metavar="NAME:=VALUE",
        type=ros_parameter,
        help="another parameter of the node (repeat), e.g. worker_threads:=2",
    )
    p.add_argument(
        "--output-dir",
        "--export-path",
        "-e",
        type=Path,
        default=Path("profile_results"),
        help="where results, plots, reports and the answer go (default ./profile_results)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="shorter windows and fewer of them (about 2-3 minutes a rate on 2 cores)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# -- the node and the cameras as processes ----------------------------------------------------


def console_script(name: str, module: str) -> list[str]:
    """A console script of this package next to this Python (a virtual environment) or on
    PATH; else its module through this Python (a colcon install puts the scripts in
    lib/triton_ros, off PATH)."""
    script = Path(sys.executable).parent / name
    if os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which(name)
    if found:
        return [found]
    return [sys.executable, "-m", module]


def _params(pairs: list[tuple[str, object]]) -> dict:
    """--binding-param / --node-param values (parsed by :func:`.arguments.ros_parameter`)."""
    return dict(pairs)


def output_format(user_config, requested: str) -> str:
    if requested != "auto":
        return requested
    names = {o.name for o in user_config.output}
    if "detections" in names or {"boxes", "scores"} <= names:
        return "detections"
    return "tensors"


def node_params(
    repository: Path,
    model: str,
    prefix: str,
    *,
    fmt: str,
    window_s: float,
    binding: dict,
    node: dict,
) -> dict:
    params = {
        "model_repository": str(repository),
        "model_control_mode": "explicit",
        "startup_models": [model],
        "grpc": {"enable": False},
        "http": {"enable": False},
        "metrics": {"enable": False},
        "diagnostics_period_s": window_s,
        "bindings": [BINDING],
        BINDING: {
            "model": model,
            "topic_patterns": [f"{prefix}/**/image_raw"],
            "format": fmt,
            "forget_after_s": 1.0,
            **binding,
        },
        **node,
    }
    return {"/**": {"ros__parameters": params}}


class Process:
    """A child process with its output in a log file; stopped with SIGINT."""

    def __init__(self, cmd: list[str], log_path: Path) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> int:
        return stop_process(self.proc)


# -- the middleware's profile -------------------------------------------------------------------

SOURCE_ROOT = Path(__file__).resolve().parents[2]


def fastdds_profile_file() -> Path | None:
    """config/fastdds.xml of this package: the checkout's, else the installed share's (the
    lookup of triton_ros.ros.package_files, which the analyzer may not import)."""
    candidate = SOURCE_ROOT / "config" / "fastdds.xml"
    if candidate.is_file() and (SOURCE_ROOT / "package.xml").is_file():
        return candidate
    try:
        from ament_index_python.packages import get_package_share_directory

        candidate = Path(get_package_share_directory("triton_ros")) / "config" / "fastdds.xml"
    except Exception:  # not installed as a ROS package, or no AMENT_PREFIX_PATH
        return None
    return candidate if candidate.is_file() else None


def use_fastdds_profile() -> str:
    """Set FASTDDS_DEFAULT_PROFILES_FILE to the package's profile unless the user set one, as
    scripts/run.sh and launch/inference.launch.py do: before this process's participant is
    created and for the node and cameras it starts. Without it a 640x480 image does not fit
    Fast DDS's default shared-memory segment and most frames are lost (3-20 % arrived).
    Returns the profile in use ("" where there is none)."""
    if not os.environ.get(FASTDDS_ENV):
        found = fastdds_profile_file()
        if found is not None:
            os.environ[FASTDDS_ENV] = str(found)
    return os.environ.get(FASTDDS_ENV, "")


FASTDDS_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"


# -- reading the node through ROS -------------------------------------------------------------


class NodeObserver:
    """An rclpy node of this process: the node's ~/status and ~/get_model_statistics."""

    def __init__(self, node_name: str) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from triton_ros_interfaces.msg import InferenceStatus
        from triton_ros_interfaces.srv import GetModelStatistics

        self._rclpy = rclpy
        self._srv = GetModelStatistics
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(
            f"triton_ros_analyzer_{secrets.token_hex(3)}", context=self.context
        )
        self.statuses: list = []
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.node.create_subscription(InferenceStatus, f"/{node_name}/status", self._on_status, 50)
        self.stats_client = self.node.create_client(
            GetModelStatistics, f"/{node_name}/get_model_statistics"
        )
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, name="ros-observer", daemon=True)
        self._thread.start()

    def _on_status(self, msg) -> None:
        with self._cond:
            self.statuses.append(msg)
            self._cond.notify_all()

    def count(self) -> int:
        with self._lock:
            return len(self.statuses)

    def wait_status(self, after: int, timeout: float):
        """The first status message with index >= ``after`` (None on timeout)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.statuses) <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self.statuses[after]

    def model_statistics(self, model: str, timeout: float = 10.0):
        if not self.stats_client.wait_for_service(timeout_sec=timeout):
            raise AnalyzerError("the node's ~/get_model_statistics service is not available")
        done = threading.Event()
        future = self.stats_client.call_async(self._srv.Request(model_name=model))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout):
            raise AnalyzerError("~/get_model_statistics did not answer")
        response = future.result()
        if not response.success:
            raise AnalyzerError(f"~/get_model_statistics failed: {response.message}")
        return response.model_stats[0] if response.model_stats else None

    def close(self) -> None:
        self.executor.shutdown()
        self._thread.join(timeout=10)
        self.node.destroy_node()
        self._rclpy.try_shutdown(context=self.context)


def binding_status(msg):
    return next((b for b in msg.bindings if b.name == BINDING), None)


def model_state(msg, model: str) -> str:
    return next((m.state for m in msg.models if m.name == model), "")


# -- one step: N cameras at R Hz ---------------------------------------------------------------


@dataclass
class CameraStep:
    rate_hz: float
    cameras: int
    budget_ms: float
    seconds: float = 0.0  # measured window
    received: int = 0
    published: int = 0
    drops: dict = field(default_factory=dict)  # reason -> frames
    failed: int = 0
    latency_p50_ms: float = 0.0  # median of the windows' p50
    latency_p99_ms: float = 0.0  # median of the windows' p99
    window_p99_ms: list = field(default_factory=list)  # each window's p99
    window_published: list = field(default_factory=list)  # each window's frames published
    window_asked: list = field(default_factory=list)  # and the frames asked for in it
    confirmation: bool = False  # the answer's count, measured again
    inference_p99_ms: float = 0.0
    mean_batch: float = 0.0
    queue_ms: float = 0.0  # mean time a request queued in the core
    node_cpu_cores: float = 0.0
    node_peak_rss_mb: float = 0.0
    camera_cpu_cores: float = 0.0  # the camera process's CPU over the window
    level: int = 0
    message: str = ""
    error: str = ""

    @property
    def expected(self) -> float:
        return self.cameras * self.rate_hz * self.seconds

    @property
    def delivered(self) -> float:
        return self.published / self.expected if self.expected > 0 else 0.0

    @property
    def offered(self) -> float:
        """Frames the node received, as a fraction of those asked for."""
        return self.received / self.expected if self.expected > 0 else 0.0

    @property
    def cameras_kept_up(self) -> bool:
        """False when the camera process (one Python thread rendering every camera) was busy
        all the time and the node received fewer frames than were asked for."""
        return self.offered >= 0.95 or self.camera_cpu_cores < CAMERA_SATURATED_CORES

    def window_ok(self, k: int, max_drop_fraction: float) -> tuple[bool, bool]:
        """Window ``k``: (its p99 met the budget, it published enough). Enough: at least
        ``1 - max_drop_fraction`` of the frames asked for in it, less one a camera (a frame in
        flight at the window's edge is published in the next one)."""
        latency = self.window_p99_ms[k] <= self.budget_ms
        if k < len(self.window_published):
            asked = self.window_asked[k]
            frames = self.window_published[k] >= (1.0 - max_drop_fraction) * asked - self.cameras
        else:
            frames = self.delivered >= 1.0 - max_drop_fraction
        return latency, frames

    def windows_failed(self, max_drop_fraction: float) -> tuple[int, int]:
        """How many windows missed the latency budget, and how many published too few."""
        oks = [self.window_ok(k, max_drop_fraction) for k in range(len(self.window_p99_ms))]
        return sum(not a for a, _ in oks), sum(not b for _, b in oks)

    def windows_passed(self, max_drop_fraction: float) -> int:
        return sum(
            all(self.window_ok(k, max_drop_fraction)) for k in range(len(self.window_p99_ms))
        )

    def passes(self, max_drop_fraction: float) -> bool:
        """Nothing failed, and more than half of the windows met the budget and published
        enough: one window is decided by its slowest frame or two, and one scheduling stall of
        a busy host decides it; a count that fails most windows does not hold."""
        if self.error or self.failed:
            return False
        if not self.window_p99_ms:  # no windows recorded: the step's totals
            return (
                self.latency_p99_ms <= self.budget_ms and self.delivered >= 1.0 - max_drop_fraction
            )
        return 2 * self.windows_passed(max_drop_fraction) > len(self.window_p99_ms)

    def why(self, max_drop_fraction: float) -> str:
        reasons = []
        if self.error:
            reasons.append(self.error)
        if self.failed:
            reasons.append(f"{self.failed} frames failed")
        n = len(self.window_p99_ms)
        if n:
            slow, short = self.windows_failed(max_drop_fraction)
            if slow:
                reasons.append(
                    f"p99 over {self.budget_ms:.1f} ms in {slow} of {n} windows ("
                    + ", ".join(f"{p:.1f}" for p in self.window_p99_ms)
                    + " ms)"
                )
            if short:
                reasons.append(
                    f"under {1 - max_drop_fraction:.0%} of the frames published in "
                    f"{short} of {n} windows ({self.delivered:.1%} over all)"
                )
        else:
            if self.latency_p99_ms > self.budget_ms:
                reasons.append(f"p99 {self.latency_p99_ms:.1f} ms > {self.budget_ms:.1f} ms")
            if self.delivered < 1.0 - max_drop_fraction:
                reasons.append(f"published {self.delivered:.1%} of the frames")
        if not self.cameras_kept_up:
            reasons.append(
                f"the camera process was saturated ({self.camera_cpu_cores:.2f} "
                f"cores) and the node received {self.offered:.0%} of the frames"
            )
        if reasons and n and self.passes(max_drop_fraction):
            return "passes in most windows; " + "; ".join(reasons)
        return "; ".join(reasons) or "ok"


CAMERA_SATURATED_CORES = 0.9
QUICK_WINDOWS = 3  # windows a step measures, with --quick
WINDOWS = 4  # and without
CONFIRM_WINDOWS = 5  # windows of the answer's confirmation
CONFIRM_TRIES = 4  # confirmation steps at most, the search's answer first
LEVELS = {0: "OK", 1: "WARN", 2: "ERROR"}  # diagnostic_msgs/DiagnosticStatus levels
DROP_FIELDS = ("dropped_stale", "dropped_superseded", "dropped_malformed", "dropped_unavailable")


class RosProfiler:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model = args.model
        self.out = args.output_dir.resolve()
        self.logs = self.out / "logs" / "ros"
        self.quick = args.quick
        self.window_s = args.window_s or (2.0 if self.quick else 3.0)
        self.windows = args.windows or (QUICK_WINDOWS if self.quick else WINDOWS)
        self.confirm_windows = max(self.windows, CONFIRM_WINDOWS)
        self.fastdds_profile = ""
        self.confirmed: dict[float, int] = {}
        self.rates = list(dict.fromkeys(args.rates))
        self.size = tuple(args.camera_size)
        self.token = secrets.token_hex(3)
        self.prefix = f"/triton_ros_analyzer_{self.token}"
        self.node_name = f"triton_ros_analyzer_node_{self.token}"
        self.steps: list[CameraStep] = []
        self._step_no = 0

    def budget(self, rate: float) -> float:
        return self.args.latency_budget_ms or 1000.0 / rate

    def run(self) -> dict:
        t0 = time.monotonic()
        scratch_root = Path(tempfile.mkdtemp(prefix="triton_ros_analyzer_ros_"))
        node = observer = None
        progress = None
        try:
            scratch = ScratchRepository(
                [p.resolve() for p in self.args.model_repository],
                self.model,
                scratch_root / "models",
            )
            config = scratch.user_config
            if self.args.config is not None:
                from ..core.model_config import parse_config_text

                config = parse_config_text(
                    self.args.config.read_text(encoding="utf-8"),
                    model_name=self.model,
                    source=str(self.args.config),
                )
                scratch.write_config(config)
            params = node_params(
                scratch.root,
                self.model,
                self.prefix,
                fmt=output_format(config, self.args.format),
                window_s=self.window_s,
                binding=_params(self.args.binding_param),
                node=_params(self.args.node_param),
            )
            params_file = scratch_root / "params.yaml"
            params_file.write_text(yaml.safe_dump(params))
            self.logs.mkdir(parents=True, exist_ok=True)
            # the same parameters on the user's own repository, for checking the count (the
            # scratch copy is removed at the end; with --config, copy it in first)
            user_repo = find_model_dir(
                [r.resolve() for r in self.args.model_repository], self.model
            ).parent
            kept = node_params(
                user_repo,
                self.model,
                f"{self.prefix}/check",
                fmt=output_format(config, self.args.format),
                window_s=self.window_s,
                binding=_params(self.args.binding_param),
                node=_params(self.args.node_param),
            )
            (self.logs / "params.yaml").write_text(
                (
                    "# with the config.pbtxt of --config in place of the model's own\n"
                    if self.args.config is not None
                    else ""
                )
                + yaml.safe_dump(kept)
            )
            self.fastdds_profile = use_fastdds_profile()
            observer = NodeObserver(self.node_name)
            node = Process(
                [
                    *console_script("inference_node", "triton_ros.ros.inference_node"),
                    "--ros-args",
                    "--params-file",
                    str(params_file),
                    "-r",
                    f"__node:={self.node_name}",
                ],
                self.logs / "inference_node.log",
            )
            self._wait_ready(node, observer)
            progress = _progress(len(self.rates) * self.steps_per_rate(), not self.args.no_progress)
            for rate in self.rates:
                self._sweep_rate(rate, node, observer, progress)
        finally:
            if progress is not None:
                progress.close()
            if observer is not None:
                observer.close()
            if node is not None:
                node.stop()
            shutil.rmtree(scratch_root, ignore_errors=True)
        answer = {rate: self.capacity(rate) for rate in self.rates}
        return {
            "answer": answer,
            "seconds": time.monotonic() - t0,
            "files": write_report(self, answer),
        }

    def steps_per_rate(self) -> int:
        """At most how many steps one rate takes (the search run against every answer)."""
        low, high = max(1, self.args.min_cameras), self.args.max_cameras
        return max(
            len(camera_counts(low, high, lambda n, t=t: n < t)) for t in range(low, high + 2)
        )

    def capacity(self, rate: float) -> int:
        """The count confirmed at ``rate`` (:meth:`_confirm_rate`); 0 when none held."""
        return self.confirmed.get(rate, 0)

    @staticmethod
    def _check_alive(node: Process) -> None:
        if node.proc.poll() is not None:
            raise AnalyzerError(
                f"inference_node exited with {node.proc.returncode}:\n"
                + "\n".join(node.log().splitlines()[-20:])
            )

    def _wait_ready(self, node: Process, observer: NodeObserver) -> None:
        deadline = time.monotonic() + 120.0
        seen = 0
        while time.monotonic() < deadline:
            self._check_alive(node)
            msg = observer.wait_status(seen, timeout=1.0)
            if msg is None:
                continue
            seen += 1
            state = model_state(msg, self.model)
            if state == "READY" and binding_status(msg) is not None:
                return
            if state == "UNAVAILABLE":
                raise AnalyzerError(
                    f"model '{self.model}' did not load in the node:\n"
                    + "\n".join(node.log().splitlines()[-20:])
                )
        raise AnalyzerError("the node did not report the model READY on ~/status within 120 s")

    def _sweep_rate(self, rate: float, node: Process, observer: NodeObserver, progress) -> None:
        def passes(cameras: int) -> bool:
            step = self._step(rate, cameras, node, observer)
            self.steps.append(step)
            ok = step.passes(self.args.max_drop_fraction)
            if progress is not None:
                progress.update(1)
                progress.write(
                    f"  {cameras} cameras at {rate:g} Hz: "
                    + ("ok" if ok else "fails")
                    + f" (p99 {step.latency_p99_ms:.1f} ms,"
                    f" published {step.delivered:.1%}, node {step.node_cpu_cores:.2f}"
                    f" cores; {step.why(self.args.max_drop_fraction)})"
                )
            return ok

        camera_counts(max(1, self.args.min_cameras), self.args.max_cameras, passes)
        self._confirm_rate(rate, node, observer, progress)

    def _confirm_rate(self, rate: float, node: Process, observer: NodeObserver, progress) -> None:
        """Measure the search's answer again with fresh cameras and more windows. Where it does
        not hold, bisect down between it and the next lower count that passed in the search,
        each with a confirmation step (at most :data:`CONFIRM_TRIES` steps in all); the count
        kept is the first that held. None held: 0."""
        passed = sorted(
            {
                s.cameras
                for s in self.steps
                if s.rate_hz == rate
                and not s.confirmation
                and s.passes(self.args.max_drop_fraction)
            },
            reverse=True,
        )
        self.confirmed[rate] = 0
        if not passed:
            return
        cameras = passed[0]
        for _ in range(CONFIRM_TRIES):
            step = self._step(rate, cameras, node, observer, windows=self.confirm_windows)
            step.confirmation = True
            self.steps.append(step)
            ok = step.passes(self.args.max_drop_fraction)
            if progress is not None:
                progress.write(
                    f"  confirming {cameras} cameras at {rate:g} Hz: "
                    + ("holds" if ok else "does not hold")
                    + f" ({step.why(self.args.max_drop_fraction)})"
                )
            if ok:
                self.confirmed[rate] = cameras
                return
            lower = [c for c in passed if c < cameras]
            if not lower:
                return
            cameras = (lower[0] + cameras) // 2 if cameras - lower[0] > 1 else lower[0]

    def _step(
        self,
        rate: float,
        cameras: int,
        node: Process,
        observer: NodeObserver,
        windows: int | None = None,
    ) -> CameraStep:
        self._step_no += 1
        self._check_alive(node)
        windows = windows or self.windows
        step = CameraStep(rate, cameras, self.budget(rate))
        w, h = self.size
        specs = [f"--camera=r{i}/camera:{w}x{h}:{self.args.encoding}" for i in range(cameras)]
        cams = Process(
            [
                *console_script("synthetic_cameras", "triton_ros.ros.tools.synthetic_cameras"),
                *specs,
                "--rate",
                f"{rate:g}",
                "--prefix",
                f"{self.prefix}/s{self._step_no}",
            ],
            self.logs / f"synthetic_cameras_{self._step_no}.log",
        )
        try:
            # warm up: every camera bound and one whole period published
            start = observer.count()
            deadline = time.monotonic() + 10 * self.window_s + 30
            first = None
            while time.monotonic() < deadline:
                msg = observer.wait_status(start, timeout=self.window_s * 2 + 5)
                start += 1
                if msg is None:
                    continue
                b = binding_status(msg)
                if b is None or b.source_count < cameras or b.output_rate <= 0:
                    continue
                if first is None:
                    first = msg  # the period in which all were bound: not yet measured
                    continue
                break
            else:
                step.error = "the cameras were not all bound within the warm-up"
                return step
            stats0 = observer.model_statistics(self.model)
            monitor = ProcessMonitor(node.pid).start()
            camera_monitor = ProcessMonitor(cams.pid).start()
            begin = binding_status(msg)
            begin_stamp = _stamp(msg)
            periods = []
            for _k in range(windows):
                m = observer.wait_status(start, timeout=self.window_s * 3 + 5)
                start += 1
                if m is None:
                    self._check_alive(node)
                    step.error = "~/status stopped arriving"
                    monitor.stop()
                    camera_monitor.stop()
                    return step
                periods.append(m)
            sample = monitor.stop()
            step.camera_cpu_cores = camera_monitor.stop().cpu_cores
            stats1 = observer.model_statistics(self.model)
        finally:
            cams.stop()
        end = binding_status(periods[-1])
        step.seconds = _stamp(periods[-1]) - begin_stamp
        step.received = end.received - begin.received
        step.published = end.published - begin.published
        step.drops = {f: getattr(end, f) - getattr(begin, f) for f in DROP_FIELDS}
        step.failed = end.failed - begin.failed
        bs = [binding_status(m) for m in periods]
        step.latency_p50_ms = statistics.median(b.latency_p50_ms for b in bs)
        step.window_p99_ms = [b.latency_p99_ms for b in bs]
        edges = [(begin, begin_stamp)] + [(b, _stamp(m)) for b, m in zip(bs, periods)]
        step.window_published = [
            b.published - a.published for (a, _), (b, _) in zip(edges, edges[1:])
        ]
        step.window_asked = [
            cameras * rate * (t1 - t0) for (_, t0), (_, t1) in zip(edges, edges[1:])
        ]
        step.latency_p99_ms = statistics.median(step.window_p99_ms)
        step.inference_p99_ms = max(b.inference_p99_ms for b in bs)
        worst = max(bs, key=lambda b: b.level)
        step.level, step.message = worst.level, worst.message
        step.node_cpu_cores = sample.cpu_cores
        step.node_peak_rss_mb = sample.peak_rss_mb
        if stats0 is not None and stats1 is not None:
            executions = stats1.execution_count - stats0.execution_count
            rows = stats1.inference_count - stats0.inference_count
            step.mean_batch = rows / executions if executions else 0.0
            done = stats1.success.count - stats0.success.count
            step.queue_ms = ((stats1.queue.ns - stats0.queue.ns) / done / 1e6) if done else 0.0
        return step


def camera_counts(low: int, high: int, passes) -> list[int]:
    """The camera counts tried: low, 2*low, 4*low ... (the last one clamped to ``high``) while
    ``passes(n)``, then a bisection between the most that passed and the fewest that failed.
    Returns the counts in the order tried."""
    tried: list[int] = []
    lo, hi, n = 0, None, low
    while True:
        n = min(n, high)
        tried.append(n)
        if passes(n):
            lo = n
            if hi is None:
                if n >= high:
                    break  # the most asked for: at least this many
                n *= 2
                continue
        else:
            hi = n
        if hi - lo <= 1:
            break
        n = (lo + hi) // 2
    return tried


def _stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="step", desc="cameras", file=sys.stderr, dynamic_ncols=True)


# -- report --------------------------------------------------------------------------------------


def step_rows(steps: list[CameraStep], max_drop_fraction: float) -> list[list[str]]:
    rows = [
        [
            "Rate (Hz)",
            "Cameras",
            "Step",
            "Passes",
            "p50 Latency (ms)",
            "p99 Latency (ms, median of windows)",
            "Window p99s (ms)",
            "Budget (ms)",
            "Published (% of asked)",
            "Received",
            "Published",
            *[f.replace("dropped_", "Dropped ") for f in DROP_FIELDS],
            "Failed",
            "Mean Batch",
            "Queue (ms)",
            "Inference p99 (ms)",
            "Node CPU (cores)",
            "Node Peak RSS (MB)",
            "Received (% of asked)",
            "Camera Process CPU (cores)",
            "Diagnostics",
            "Why",
        ]
    ]
    for s in steps:
        rows.append(
            [
                f"{s.rate_hz:g}",
                str(s.cameras),
                "confirmation" if s.confirmation else "search",
                "yes" if s.passes(max_drop_fraction) else "no",
                f"{s.latency_p50_ms:.1f}",
                f"{s.latency_p99_ms:.1f}",
                " ".join(f"{p:.1f}" for p in s.window_p99_ms),
                f"{s.budget_ms:.1f}",
                f"{100 * s.delivered:.1f}",
                str(s.received),
                str(s.published),
                *[str(s.drops.get(f, 0)) for f in DROP_FIELDS],
                str(s.failed),
                f"{s.mean_batch:.2f}",
                f"{s.queue_ms:.2f}",
                f"{s.inference_p99_ms:.1f}",
                f"{s.node_cpu_cores:.2f}",
                f"{s.node_peak_rss_mb:.0f}",
                f"{100 * s.offered:.1f}",
                f"{s.camera_cpu_cores:.2f}",
                f"{LEVELS.get(s.level, s.level)}: {s.message}"
                if s.message
                else str(LEVELS.get(s.level, s.level)),
                s.why(max_drop_fraction),
            ]
        )
    return rows


def plot_steps(profiler: RosProfiler, answer: dict, path: Path, *, return_axes: bool = False):
    """p99 latency, frames received and published, and the node's CPU against the camera count
    (whole cameras on the axis). Returns the PNG's path (the axes with ``return_axes``, for
    the tests, before they are closed)."""
    from matplotlib.ticker import MaxNLocator

    from .report import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
    limit = 1.0 - profiler.args.max_drop_fraction
    for i, rate in enumerate(profiler.rates):
        everything = [s for s in profiler.steps if s.rate_hz == rate]
        steps = sorted((s for s in everything if not s.confirmation), key=lambda s: s.cameras)
        checks = [s for s in everything if s.confirmation]
        if not everything:
            continue
        c = colours[i % len(colours)]
        xs = [s.cameras for s in steps]
        label = f"{rate:g} Hz: serves {answer[rate]} camera(s)"
        axes[0].plot(xs, [s.latency_p99_ms for s in steps], "o-", color=c, label=label)
        axes[0].axhline(
            profiler.budget(rate),
            color=c,
            ls="--",
            lw=1,
            label=f"{rate:g} Hz budget {profiler.budget(rate):.1f} ms",
        )
        axes[1].plot(
            xs, [100 * s.delivered for s in steps], "o-", color=c, label=f"{rate:g} Hz: published"
        )
        axes[1].plot(
            xs,
            [100 * s.offered for s in steps],
            "s:",
            color=c,
            ms=4,
            label=f"{rate:g} Hz: received by the node",
        )
        axes[2].plot(xs, [s.node_cpu_cores for s in steps], "o-", color=c, label=label)
        if checks:  # the confirmation of the answer: markers, no line
            kw = dict(marker="D", ls="none", ms=8, mfc="none", mec=c, mew=1.5)
            axes[0].plot(
                [s.cameras for s in checks],
                [s.latency_p99_ms for s in checks],
                label=f"{rate:g} Hz: measured again (confirmation)",
                **kw,
            )
            axes[1].plot([s.cameras for s in checks], [100 * s.delivered for s in checks], **kw)
            axes[2].plot([s.cameras for s in checks], [s.node_cpu_cores for s in checks], **kw)
        for s in everything:
            if not s.passes(profiler.args.max_drop_fraction):
                axes[0].plot([s.cameras], [s.latency_p99_ms], "x", color="red", ms=10, mew=2)
    axes[1].axhline(100 * limit, color="red", ls="--", lw=1, label=f"required {100 * limit:.0f} %")
    axes[0].set_ylabel("per-frame p99 latency (ms, median\nof windows), stamp to publication")
    axes[1].set_ylabel("frames received and published\n(% of frames asked for)")
    axes[2].set_ylabel("inference node CPU (cores)")
    axes[2].set_xlabel(
        "cameras (each " + f"{profiler.size[0]}x{profiler.size[1]} {profiler.args.encoding})"
    )
    w, h = profiler.size
    axes[0].set_title(
        f"{profiler.model}: inference_node with synthetic cameras ({w}x{h}); red x: step failed",
        fontsize=11,
    )
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8, loc="best")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole cameras
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    if return_axes:
        return axes
    plt.close(fig)
    return path


def checked_text(profiler: RosProfiler, rate: float) -> str:
    """How the count at ``rate`` was checked, in words."""
    drop = profiler.args.max_drop_fraction
    steps = [s for s in profiler.steps if s.rate_hz == rate]
    n = profiler.capacity(rate)
    confirmations = [s for s in steps if s.confirmation]
    if not confirmations:
        return "no count passed the search, so none was confirmed"
    failed = [s for s in steps if not s.confirmation and not s.passes(drop) and s.cameras > n]
    above = min(failed, key=lambda s: s.cameras) if failed else None
    held = next((s for s in confirmations if s.cameras == n and s.passes(drop)), None)
    parts = []
    refuted = [s.cameras for s in confirmations if not s.passes(drop)]
    if refuted:
        parts.append(f"{', '.join(map(str, refuted))} camera(s) did not hold when measured again")
    if held is not None:
        searched = any(s.cameras == n and s.passes(drop) for s in steps if not s.confirmation)
        parts.append(
            f"{n} camera(s) "
            + (
                f"passed in the search ({profiler.windows} windows of "
                f"{profiler.window_s:g} s) and again"
                if searched
                else "held"
            )
            + " with fresh cameras over "
            f"{len(held.window_p99_ms)} windows (p99 "
            + ", ".join(f"{p:.0f}" for p in held.window_p99_ms)
            + f" ms; {held.delivered:.1%} published)"
        )
    if above is not None:
        parts.append(f"{above.cameras} failed ({above.why(drop)})")
    elif n >= profiler.args.max_cameras:
        parts.append(f"{n} is --max-cameras: more were not tried")
    return "checked: " + "; ".join(parts) if parts else "not confirmed"


def answer_text(profiler: RosProfiler, answer: dict) -> list[str]:
    w, h = profiler.size
    lines = []
    for rate, n in answer.items():
        budget = profiler.budget(rate)
        limited = [s for s in profiler.steps if s.rate_hz == rate and not s.cameras_kept_up]
        served = f"at least {n}" if n >= profiler.args.max_cameras else str(n)
        text = (
            f"{profiler.model} serves {served} camera(s) of {w}x{h} "
            f"{profiler.args.encoding} at {rate:g} Hz on this computer (per-frame p99 <= "
            f"{budget:.1f} ms in most windows, at least "
            f"{1 - profiler.args.max_drop_fraction:.0%} of the frames published)"
        )
        if limited:
            text += (
                "; the camera simulator itself fell behind at "
                + ", ".join(str(s.cameras) for s in limited)
                + " camera(s), so more real "
                "cameras may be served"
            )
        lines.append(text)
        lines.append("  " + checked_text(profiler, rate))
    return lines


def reproduce_commands(profiler: RosProfiler, rate: float, cameras: int) -> list[str]:
    """Commands that run the node and the cameras as the count was measured, to check it."""
    w, h = profiler.size
    specs = " ".join(
        f"--camera r{i}/camera:{w}x{h}:{profiler.args.encoding}" for i in range(max(cameras, 1))
    )
    return [
        f"export {FASTDDS_ENV}={profiler.fastdds_profile}"
        if profiler.fastdds_profile
        else f"# no {FASTDDS_ENV} was found",
        f"inference_node --ros-args --params-file {profiler.logs / 'params.yaml'} "
        f"-r __node:=checked_node &",
        f"synthetic_cameras {specs} --rate {rate:g} --prefix {profiler.prefix}/check",
    ]


def write_report(profiler: RosProfiler, answer: dict) -> dict[str, Path]:
    import html

    from .report import _CSS, _image, _table, write_csv

    out = profiler.out
    rows = step_rows(profiler.steps, profiler.args.max_drop_fraction)
    files = {"csv": write_csv(out / "results" / "metrics-ros.csv", rows)}
    files["plot"] = plot_steps(
        profiler, answer, out / "plots" / "simple" / profiler.model / "ros_cameras.png"
    )
    lines = answer_text(profiler, answer)
    page = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>"
        f"{html.escape(profiler.model)}: cameras served</title><style>{_CSS}</style>"
        f"</head><body><h1>{html.escape(profiler.model)}: cameras an inference_node "
        f"serves</h1><div class='box'>"
        + "".join(f"<p><b>{html.escape(t)}</b></p>" for t in lines)
        + "</div><p>Each step ran the bundled synthetic_cameras with that many cameras "
        "against one inference_node process and read the node's ~/status (latency from "
        "each frame's stamp to its publication, drops by reason) and "
        "~/get_model_statistics over "
        + f"{profiler.windows} window(s) of {profiler.window_s:g} s; the answer was "
        f"measured again with fresh cameras over {profiler.confirm_windows} windows. "
        f"Fast DDS profile: {html.escape(profiler.fastdds_profile or 'none')}.</p>",
        _image(files["plot"], "cameras"),
        _table(rows),
        "</body></html>",
    ]
    files["html"] = out / "reports" / "summaries" / profiler.model / "ros_summary.html"
    files["html"].parent.mkdir(parents=True, exist_ok=True)
    files["html"].write_text("\n".join(page), encoding="utf-8")
    summary = {
        "model": profiler.model,
        "camera_size": f"{profiler.size[0]}x{profiler.size[1]}",
        "encoding": profiler.args.encoding,
        "config": str(profiler.args.config)
        if profiler.args.config
        else "the model's own config.pbtxt",
        "max_drop_fraction": profiler.args.max_drop_fraction,
        "cameras_served": {f"{r:g}": n for r, n in answer.items()},
        "checked": {f"{r:g}": checked_text(profiler, r) for r in answer},
        "fastdds_profile": profiler.fastdds_profile,
        "windows": {
            "search": profiler.windows,
            "confirmation": profiler.confirm_windows,
            "seconds": profiler.window_s,
        },
        "reproduce": {f"{r:g}": reproduce_commands(profiler, r, n) for r, n in answer.items()},
        "latency_budget_ms": {f"{r:g}": profiler.budget(r) for r in answer},
        "answer": lines,
    }
    files["json"] = out / "recommended" / profiler.model / "ros_capacity.json"
    files["json"].parent.mkdir(parents=True, exist_ok=True)
    files["json"].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return files


def run(args: argparse.Namespace) -> int:
    profiler = RosProfiler(args)
    result = profiler.run()
    for line in answer_text(profiler, result["answer"]):
        print(line)
    for key, path in result["files"].items():
        print(f"  {key}: {path}")
    return ExitStatus.OK if any(result["answer"].values()) else ExitStatus.NO_RECOMMENDATION
