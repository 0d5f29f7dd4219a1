#!/usr/bin/env python3
"""Soak: mixed load with hostile inputs on one inference node; exits non-zero when a target fails.

``.venv/bin/python -m bench.soak.soak [--duration 600] [--reload-every 30] [--results FILE]``

One ``inference_node`` process (the product: KServe v2 gRPC and HTTP endpoints and a camera
binding on one core) serves, for ``--duration`` seconds:

- good gRPC requests (``--grpc-workers`` tritonclient.grpc clients) and good HTTP requests
  (``--http-workers`` tritonclient.http clients) on ``simple``, each answer checked against
  ground truth (OUTPUT0 = a + b, OUTPUT1 = a - b), each paced to ``--rate`` requests/s;
- ROS frames: ``--cameras`` synthetic cameras at ``--fps`` into a binding on the bundled
  ``detector``; detections are counted here, drops by reason come from the node's ``~/status``;
- hostile inputs interleaved every ``--hostile-every`` seconds, in turn: gRPC messages (overflowing
  shapes, a string ``classification``, unknown model with a 1 MB payload, log level 2**32-1,
  loads of unknown names, of unparsable overrides, of a 256-character file override, of a label
  file outside the model, shared memory while disabled), HTTP bodies (broken JSON, JSON nested
  30,000 deep, overflowing shapes, a ``0x2`` header size) and malformed sensor_msgs/Image frames
  (a lying step) on a camera of the same binding. Each must get its expected status;
- ``simple`` reloaded every ``--reload-every`` seconds (a config override that alternates its
  batching delay, so that every load really swaps versions under traffic);
- health probes (gRPC ServerLive and HTTP /v2/health/live) every 0.5 s.

Targets (each failure is printed and makes the exit status 1): 0 lost good requests (an error
or a wrong answer on a good gRPC/HTTP request, a good frame that the node counts as failed),
every hostile input answered with its expected status, every reload successful, good answers
of every kind in every minute, the node alive throughout and exiting 0, its RSS (with children)
at the end within ``--rss-tolerance`` of its RSS after ``--warmup``, health p99 within
``--health-p99-ms``. Reported per minute: good requests and p99 latency by protocol, frames,
hostile inputs, health latency and RSS. ``--results`` writes the report with the machine and
the commit (bench/out/soak.md by default; ``--results ''`` for none).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import platform
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import yaml

from bench.common import (
    LOAD_AT_START,
    ROOT,
    commit,
    cpu_seconds,
    default_out,
    free_port,
    machine_lines,
)

os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(101, 200)))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))

TOKEN = secrets.token_hex(3)
NS = f"/soak{TOKEN}"


def machine() -> str:
    mem = open("/proc/meminfo").readline().split()[1]
    return (
        f"{machine_lines()}\n- memory: {int(mem) // 1024} MiB\n"
        f"- Python: {platform.python_version()}\n"
        f"- load average (1, 5, 15 min) at start: {LOAD_AT_START}, at the end: "
        f"{open('/proc/loadavg').read().split()[:3]} (other programs share this machine)"
    )


def tree_rss_bytes(pid: int) -> int:
    """RSS of a process and all its descendants (Python backend stubs included), from /proc."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
                children[int(fields[1])].append(int(entry))
            except (OSError, IndexError):
                continue
    total, todo = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            total += int(open(f"/proc/{p}/statm").read().split()[1]) * page
        except OSError:
            pass
        todo.extend(children.get(p, []))
    return total


def simple_config() -> dict:
    """The bundled ``simple`` model's configuration as the load API's JSON override."""

    def tensors(*names):
        return [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in names]

    return {
        "name": "simple",
        "platform": "onnxruntime_onnx",
        "max_batch_size": 8,
        "input": tensors("INPUT0", "INPUT1"),
        "output": tensors("OUTPUT0", "OUTPUT1"),
        "dynamic_batching": {},
    }


class Stats:
    """Everything the soak counts, by minute where it matters (thread-safe)."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.lock = threading.Lock()
        self.good = collections.defaultdict(lambda: collections.defaultdict(list))  # min->kind->lat
        self.lost: collections.Counter = collections.Counter()  # kind -> count
        self.lost_samples: list[str] = []
        self.hostile: collections.Counter = collections.Counter()  # (name, got) -> count
        self.hostile_unexpected: collections.Counter = collections.Counter()
        self.unexpected_samples: list[str] = []
        self.hostile_by_minute: collections.Counter = collections.Counter()
        self.health = collections.defaultdict(list)  # minute -> latencies ms
        self.health_failures = 0
        self.reloads: list[float] = []
        self.reload_failures: list[str] = []
        self.frames_by_minute: collections.Counter = collections.Counter()
        self.rss: list[tuple[float, int]] = []

    def minute(self) -> int:
        return int((time.monotonic() - self.t0) // 60)

    def ok(self, kind: str, latency_s: float) -> None:
        with self.lock:
            self.good[self.minute()][kind].append(latency_s * 1000)

    def lose(self, kind: str, what: str) -> None:
        with self.lock:
            self.lost[kind] += 1
            if len(self.lost_samples) < 20:
                self.lost_samples.append(f"{kind}: {what}")

    def hostile_result(self, name: str, got: str, expected: tuple[str, ...]) -> None:
        with self.lock:
            self.hostile[(name, got)] += 1
            self.hostile_by_minute[self.minute()] += 1
            if got not in expected:
                self.hostile_unexpected[(name, got)] += 1
                if len(self.unexpected_samples) < 20:
                    self.unexpected_samples.append(f"{name}: got {got}, expected {expected}")


# ------------------------------------------------------------------------------------------
# Good load
# ------------------------------------------------------------------------------------------


def grpc_worker(url: str, stats: Stats, stop: threading.Event, rate: float, seed: int) -> None:
    import tritonclient.grpc as grpcclient

    rng = np.random.default_rng(seed)
    client = grpcclient.InferenceServerClient(url)
    period = 1.0 / rate
    while not stop.is_set():
        started = time.monotonic()
        a = rng.integers(-1000, 1000, (1, 16), dtype=np.int32)
        b = rng.integers(-1000, 1000, (1, 16), dtype=np.int32)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        try:
            result = client.infer("simple", inputs, client_timeout=30)
            if not (
                np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                and np.array_equal(result.as_numpy("OUTPUT1"), a - b)
            ):
                stats.lose("grpc wrong answer", "outputs differ from a+b, a-b")
            else:
                stats.ok("grpc", time.monotonic() - started)
        except Exception as exc:
            stats.lose(f"grpc {type(exc).__name__}", str(exc)[:300])
        stop.wait(max(0.0, period - (time.monotonic() - started)))
    client.close()


def http_worker(url: str, stats: Stats, stop: threading.Event, rate: float, seed: int) -> None:
    import tritonclient.http as httpclient

    rng = np.random.default_rng(seed)
    client = httpclient.InferenceServerClient(url, connection_timeout=30, network_timeout=30)
    period = 1.0 / rate
    binary = False
    while not stop.is_set():
        started = time.monotonic()
        binary = not binary  # alternate JSON and the binary tensor extension
        a = rng.integers(-1000, 1000, (1, 16), dtype=np.int32)
        b = rng.integers(-1000, 1000, (1, 16), dtype=np.int32)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        try:
            result = client.infer("simple", inputs)
            if not (
                np.array_equal(result.as_numpy("OUTPUT0"), a + b)
                and np.array_equal(result.as_numpy("OUTPUT1"), a - b)
            ):
                stats.lose("http wrong answer", "outputs differ from a+b, a-b")
            else:
                stats.ok("http", time.monotonic() - started)
        except Exception as exc:
            stats.lose(f"http {type(exc).__name__}", str(exc)[:300])
        stop.wait(max(0.0, period - (time.monotonic() - started)))
    client.close()


def health_prober(grpc_url: str, http_url: str, stats: Stats, stop: threading.Event) -> None:
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc.insecure_channel(grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    host, port = http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    while not stop.wait(0.5):
        for kind in ("grpc", "http"):
            started = time.monotonic()
            try:
                if kind == "grpc":
                    ok = stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
                else:
                    conn.request("GET", "/v2/health/live")
                    resp = conn.getresponse()
                    resp.read()
                    ok = resp.status == 200
            except Exception:
                ok = False
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
            with stats.lock:
                if ok:
                    stats.health[stats.minute()].append((time.monotonic() - started) * 1000)
                else:
                    stats.health_failures += 1
    conn.close()
    channel.close()


def reloader(grpc_url: str, stats: Stats, stop: threading.Event, every: float) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(grpc_url)
    config = simple_config()
    delay = 0
    while not stop.wait(every):
        delay = 100 if delay == 0 else 0
        config["dynamic_batching"] = {"max_queue_delay_microseconds": delay}
        started = time.monotonic()
        try:
            client.load_model("simple", config=json.dumps(config))
            got = client.get_model_config("simple").config.dynamic_batching
            if got.max_queue_delay_microseconds != delay:
                raise RuntimeError(
                    f"config after reload has delay "
                    f"{got.max_queue_delay_microseconds}, expected {delay}"
                )
            with stats.lock:
                stats.reloads.append(time.monotonic() - started)
        except Exception as exc:
            with stats.lock:
                stats.reload_failures.append(str(exc)[:300])
    client.close()


# ------------------------------------------------------------------------------------------
# Hostile inputs
# ------------------------------------------------------------------------------------------


def hostile_cases(grpc_url: str, http_url: str, ros_bad):
    """(name, callable returning the status it got, expected statuses)."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    channel = grpc.insecure_channel(grpc_url, options=[("grpc.max_send_message_length", -1)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    host, port = http_url.split(":")

    def grpc_call(method, request) -> str:
        try:
            getattr(stub, method)(request, timeout=30)
            return "OK"
        except grpc.RpcError as err:
            return err.code().name

    def simple_request() -> pb.ModelInferRequest:
        msg = pb.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            msg.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            msg.raw_input_contents.append(bytes(64))
        return msg

    def overflow():
        msg = simple_request()
        del msg.inputs[0].shape[:]
        msg.inputs[0].shape.extend([0, 2**62, 2**62])
        msg.raw_input_contents[0] = b""
        return grpc_call("ModelInfer", msg)

    def string_classification():
        msg = simple_request()
        msg.outputs.add(name="OUTPUT0").parameters["classification"].string_param = "2"
        return grpc_call("ModelInfer", msg)

    def unknown_model_big():
        msg = pb.ModelInferRequest(model_name="no_such_model")
        msg.inputs.add(name="X", datatype="UINT8", shape=[1 << 20])
        msg.raw_input_contents.append(os.urandom(1 << 20))
        return grpc_call("ModelInfer", msg)

    def sequence_params_ignored():
        msg = simple_request()
        msg.parameters["sequence_id"].int64_param = 7
        msg.parameters["sequence_start"].bool_param = True
        return grpc_call("ModelInfer", msg)

    def log_level():
        req = pb.LogSettingsRequest()
        req.settings["log_verbose_level"].uint32_param = 2**32 - 1
        got = grpc_call("LogSettings", req)
        after = grpc_call("LogSettings", pb.LogSettingsRequest())
        return got if after == "OK" else f"{got}, then LogSettings {after}"

    def load(name, config=None, files=None):
        req = pb.RepositoryModelLoadRequest(model_name=name)
        if config is not None:
            req.parameters["config"].string_param = config
        for k, v in (files or {}).items():
            req.parameters[k].bytes_param = v
        return grpc_call("RepositoryModelLoad", req)

    def shm_disabled():
        return grpc_call(
            "SystemSharedMemoryRegister",
            pb.SystemSharedMemoryRegisterRequest(name="x", key="/x", byte_size=64),
        )

    def http_post(path: str, body: bytes, headers: dict | None = None) -> str:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("POST", path, body, headers or {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            return str(resp.status)
        except Exception as exc:
            return type(exc).__name__
        finally:
            conn.close()

    infer_path = "/v2/models/simple/infer"
    overflow_json = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [0, 2**62, 2**62], "data": []},
                {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16},
            ]
        }
    ).encode()
    classification_json = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "data": [0] * 16}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": "2"}}],
        }
    ).encode()
    labelled = simple_config()
    labelled["output"][0]["label_filename"] = "/etc/passwd"

    return [
        ("grpc overflowing shape", overflow, ("INVALID_ARGUMENT",)),
        ("grpc string classification", string_classification, ("INVALID_ARGUMENT",)),
        ("grpc unknown model, 1 MB", unknown_model_big, ("INVALID_ARGUMENT", "NOT_FOUND")),
        ("grpc sequence parameters (ignored)", sequence_params_ignored, ("OK",)),
        ("grpc log_verbose_level 2**32-1", log_level, ("INVALID_ARGUMENT",)),
        ("grpc load unknown name", lambda: load("no_such_model"), ("INTERNAL",)),
        ("grpc load unparsable override", lambda: load("soak_ghost", config="{bad"), ("INTERNAL",)),
        (
            "grpc load 256-char file override",
            lambda: load("soak_ghost", config="{}", files={"file:" + "A" * 256: b"a"}),
            ("INTERNAL",),
        ),
        (
            "grpc load label_filename /etc/passwd",
            lambda: load("simple", config=json.dumps(labelled)),
            ("INVALID_ARGUMENT",),
        ),
        ("grpc shared memory while disabled", shm_disabled, ("UNIMPLEMENTED",)),
        ("http broken JSON", lambda: http_post(infer_path, b"{not json"), ("400",)),
        (
            "http JSON nested 30000 deep",
            lambda: http_post(infer_path, b"[" * 30000 + b"]" * 30000),
            ("400",),
        ),
        ("http overflowing shape", lambda: http_post(infer_path, overflow_json), ("400",)),
        (
            "http string classification",
            lambda: http_post(infer_path, classification_json),
            ("400",),
        ),
        (
            "http 0x2 header size",
            lambda: http_post(
                infer_path,
                b"{}" + bytes(16),
                {
                    "Inference-Header-Content-Length": "0x2",
                    "Content-Type": "application/octet-stream",
                },
            ),
            ("400",),
        ),
        ("ros frame with a lying step", ros_bad, ("sent",)),
    ]


def hostile_loop(cases, stats: Stats, stop: threading.Event, every: float) -> None:
    i = 0
    while not stop.wait(every):
        name, fn, expected = cases[i % len(cases)]
        i += 1
        try:
            got = fn()
        except Exception as exc:
            got = f"client exception {type(exc).__name__}: {exc}"[:200]
        stats.hostile_result(name, got, expected)


# ------------------------------------------------------------------------------------------
# ROS
# ------------------------------------------------------------------------------------------


class RosSide:
    """The probe node: synthetic cameras, the detections, the node's ~/status."""

    def __init__(self, node_name: str, cameras: int, fps: float, stats: Stats) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image
        from triton_ros_interfaces.msg import InferenceStatus

        from triton_ros.ros.codec.messages import DETECTIONS_TYPE
        from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

        self.rclpy = rclpy
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(f"soak_probe_{TOKEN}", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.stats = stats
        self.status = None
        self.results = 0
        self.specs = [parse_camera(f"robot{i}/cam:320x240:rgb8") for i in range(cameras)]
        self.scenes = [SyntheticScene(s, seed=i) for i, s in enumerate(self.specs)]
        self.pubs = [
            self.node.create_publisher(
                Image, f"{NS}/robot{i}/cam/image_raw", qos_profile_sensor_data
            )
            for i in range(cameras)
        ]
        self.bad_pub = self.node.create_publisher(
            Image, f"{NS}/bad/cam/image_raw", qos_profile_sensor_data
        )
        for i in range(cameras):
            self.node.create_subscription(
                DETECTIONS_TYPE, f"{NS}/robot{i}/cam/detections", self._on_result, 100
            )
        self.node.create_subscription(
            InferenceStatus, f"/{node_name}/status", lambda m: setattr(self, "status", m), 10
        )
        self.fps = fps
        self.sent = 0
        self.bad_sent = 0
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def _on_result(self, msg) -> None:
        with self.stats.lock:
            self.results += 1
            self.stats.frames_by_minute[self.stats.minute()] += 1

    @staticmethod
    def image(pixels: np.ndarray, frame_id: str, stamp):
        from sensor_msgs.msg import Image
        from triton_ros.ros.codec.messages import uint8_array

        msg = Image()
        msg.header.stamp = stamp
        msg.header.frame_id = frame_id
        msg.height, msg.width = pixels.shape[:2]
        msg.encoding = "rgb8"
        msg.step = pixels.shape[1] * 3
        msg.data = uint8_array(pixels.tobytes())
        return msg

    def run_cameras(self, stop: threading.Event) -> None:
        t0 = time.monotonic()
        while not stop.wait(1.0 / self.fps):
            stamp = self.node.get_clock().now().to_msg()
            for spec, scene, pub in zip(self.specs, self.scenes, self.pubs):
                pub.publish(self.image(scene.frame(time.monotonic() - t0), spec.frame_id, stamp))
                self.sent += 1

    def send_bad(self) -> str:
        msg = self.image(
            np.zeros((24, 32, 3), np.uint8), "bad", self.node.get_clock().now().to_msg()
        )
        msg.step = 2**32 - 1
        self.bad_pub.publish(msg)
        self.bad_sent += 1
        return "sent"

    def binding(self):
        status = self.status
        return next((b for b in status.bindings if b.name == "cams"), None) if status else None

    def close(self) -> None:
        self.executor.shutdown()
        self._thread.join(timeout=30)
        self.node.destroy_node()
        self.rclpy.shutdown(context=self.context)


# ------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------


def percentile(values, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    p.add_argument(
        "--warmup",
        type=float,
        default=60.0,
        help="seconds of load before the starting RSS is taken (default 60: the "
        "allocators of Python and onnxruntime settle in the first minute; every "
        "5 s sample is in the per-minute table)",
    )
    p.add_argument("--reload-every", type=float, default=30.0)
    p.add_argument("--grpc-workers", type=int, default=2)
    p.add_argument("--http-workers", type=int, default=2)
    p.add_argument("--rate", type=float, default=40.0, help="requests/s per worker")
    p.add_argument("--cameras", type=int, default=2)
    p.add_argument("--fps", type=float, default=10.0)
    p.add_argument("--hostile-every", type=float, default=0.1)
    p.add_argument("--rss-tolerance", type=float, default=0.10)
    p.add_argument("--health-p99-ms", type=float, default=50.0)
    p.add_argument("--results", default=default_out("soak"), help="report file ('' for none)")
    args = p.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="triton_ros_soak_"))
    repo = tmp / "models"
    for model in ("simple", "detector"):
        shutil.copytree(ROOT / "model_repository" / model, repo / model)
    grpc_port, http_port = free_port(), free_port()
    node_name = f"soak_node_{TOKEN}"
    topics = [f"{NS}/robot{i}/cam/image_raw" for i in range(args.cameras)]
    params = {
        "/**": {
            "ros__parameters": {
                "model_repository": str(repo),
                "model_control_mode": "explicit",
                "startup_models": ["simple", "detector"],
                "diagnostics_period_s": 1.0,
                "grpc": {"port": grpc_port},
                "http": {"port": http_port},
                "metrics": {"port": 0},
                "bindings": ["cams"],
                "cams": {
                    "model": "detector",
                    "topics": [*topics, f"{NS}/bad/cam/image_raw"],
                    "score_threshold": 0.25,
                    "max_age_ms": 5000,
                },
            }
        }
    }
    (tmp / "params.yaml").write_text(yaml.safe_dump(params))
    log_path = tmp / "node.log"
    log = open(log_path, "w")
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "triton_ros.ros.inference_node",
            "--ros-args",
            "--params-file",
            str(tmp / "params.yaml"),
            "-r",
            f"__node:={node_name}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    grpc_url, http_url = f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}"
    failures: list[str] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    ros = None
    stats = Stats(time.monotonic())
    rss_start = rss_end = 0
    node_rc = None
    node_cpu = float("nan")
    try:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(grpc_url)
        deadline = time.monotonic() + 180
        while True:
            if node.poll() is not None:
                raise RuntimeError(f"the node exited with {node.returncode}; see {log_path}")
            try:
                if client.is_model_ready("simple") and client.is_model_ready("detector"):
                    break
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node did not become ready; see {log_path}")
            time.sleep(0.5)
        client.close()
        ros = RosSide(node_name, args.cameras, args.fps, stats)
        stats = ros.stats = Stats(time.monotonic())
        cpu_start = cpu_seconds(node.pid)
        start = lambda fn, *a: threads.append(threading.Thread(target=fn, args=a, daemon=True))  # noqa: E731
        for i in range(args.grpc_workers):
            start(grpc_worker, grpc_url, stats, stop, args.rate, i)
        for i in range(args.http_workers):
            start(http_worker, http_url, stats, stop, args.rate, 100 + i)
        start(health_prober, grpc_url, http_url, stats, stop)
        start(reloader, grpc_url, stats, stop, args.reload_every)
        start(
            hostile_loop,
            hostile_cases(grpc_url, http_url, ros.send_bad),
            stats,
            stop,
            args.hostile_every,
        )
        start(ros.run_cameras, stop)
        for t in threads:
            t.start()
        end = stats.t0 + args.duration
        next_rss = time.monotonic()
        while time.monotonic() < end:
            if node.poll() is not None:
                failures.append(f"the node exited with {node.returncode} during the soak")
                break
            now = time.monotonic()
            if now >= next_rss:
                rss = tree_rss_bytes(node.pid)
                stats.rss.append((now - stats.t0, rss))
                if not rss_start and now - stats.t0 >= args.warmup:
                    rss_start = rss
                next_rss = now + 5.0
            time.sleep(0.2)
        rss_end = tree_rss_bytes(node.pid) if node.poll() is None else 0
        if node.poll() is None:
            node_cpu = (cpu_seconds(node.pid) - cpu_start) / (time.monotonic() - stats.t0)
        stop.set()
        for t in threads:
            t.join(timeout=60)
            if t.is_alive():
                failures.append(f"load thread {t.name} did not stop")
        time.sleep(2.5)  # a last ~/status with every frame counted
        binding = ros.binding()
    except Exception as exc:
        failures.append(f"soak aborted: {exc}")
        traceback.print_exc()
        binding = None
    finally:
        stop.set()
        if ros is not None:
            ros.close()
        if node.poll() is None:
            node.send_signal(signal.SIGINT)
            try:
                node_rc = node.wait(timeout=120)
            except subprocess.TimeoutExpired:
                node.kill()
                node_rc = node.wait()
        else:
            node_rc = node.returncode
        log.close()

    # ---------------------------------------------------------------- targets
    node_log = log_path.read_text(errors="replace")
    if node_rc != 0:
        failures.append(f"the node exited with {node_rc} (log: {log_path})")
    for bad in ("Traceback", "terminate called", "Aborted"):
        if bad in node_log:
            failures.append(f"'{bad}' in the node's log ({log_path})")
    lost_total = sum(stats.lost.values())
    if lost_total:
        failures.append(
            f"{lost_total} good gRPC/HTTP requests lost: {dict(stats.lost)}; "
            f"{stats.lost_samples[:5]}"
        )
    if binding is None:
        failures.append("no ~/status of the binding from the node")
    elif binding.failed:
        failures.append(f"{binding.failed} good frames failed in the node")
    if stats.hostile_unexpected:
        failures.append(
            f"hostile inputs with an unexpected status: "
            f"{dict(stats.hostile_unexpected)}; {stats.unexpected_samples[:5]}"
        )
    if stats.reload_failures:
        failures.append(f"{len(stats.reload_failures)} reloads failed: {stats.reload_failures[:3]}")
    expected_reloads = int(args.duration // args.reload_every) - 1
    if len(stats.reloads) < max(1, expected_reloads):
        failures.append(
            f"only {len(stats.reloads)} reloads done, expected at least {max(1, expected_reloads)}"
        )
    # Minutes of the run only (a request finishing after the end does not open a new minute).
    minutes = [
        m for m in sorted(set(stats.good) | set(stats.frames_by_minute)) if m * 60 < args.duration
    ]
    full_minutes = [m for m in minutes if (m + 1) * 60 <= args.duration] or minutes[:1]
    for m in full_minutes:
        for kind in ("grpc", "http"):
            if not stats.good[m][kind]:
                failures.append(f"minute {m}: no good {kind} answer")
        if not stats.frames_by_minute[m]:
            failures.append(f"minute {m}: no detections received")
    rss_growth = (rss_end - rss_start) / rss_start if rss_start and rss_end else float("nan")
    if not rss_start or not rss_end:
        failures.append("RSS was not measured at start and end")
    elif rss_growth > args.rss_tolerance:
        failures.append(f"RSS grew {rss_growth:.1%} (> {args.rss_tolerance:.0%})")
    health_all = [v for m in stats.health for v in stats.health[m]]
    health_p99 = percentile(health_all, 99)
    if stats.health_failures:
        failures.append(f"{stats.health_failures} health probes failed")
    if not health_all or health_p99 > args.health_p99_ms:
        failures.append(f"health p99 {health_p99:.1f} ms > {args.health_p99_ms} ms")

    # ---------------------------------------------------------------- report
    lines = [
        f"# Soak: {args.duration:.0f} s of mixed load with hostile inputs on one inference_node",
        "",
        f"Command: `.venv/bin/python -m bench.soak.soak --duration {args.duration:g} "
        f"--reload-every {args.reload_every:g}` "
        f"({args.grpc_workers} gRPC + {args.http_workers} HTTP workers at {args.rate:g} "
        f"req/s each, {args.cameras} cameras at {args.fps:g} fps 320x240 rgb8, one hostile "
        f"input every {args.hostile_every:g} s, `simple` reloaded every "
        f"{args.reload_every:g} s). Date: "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}.",
        "",
        "## Machine",
        "",
        machine(),
        "",
        f"## Verdict: {'PASS' if not failures else 'FAIL'}",
        "",
    ]
    lines += [f"- FAILED: {f}" for f in failures] or ["- every target met"]
    lines += [
        "",
        "## Totals",
        "",
        f"- RSS of the node (with children): {rss_start / 2**20:.1f} MiB after the "
        f"{args.warmup:g} s warm-up, {rss_end / 2**20:.1f} MiB at the end "
        f"({rss_growth:+.1%}); max {max((r for _, r in stats.rss), default=0) / 2**20:.1f} MiB",
        f"- good requests answered correctly: gRPC "
        f"{sum(len(stats.good[m]['grpc']) for m in stats.good)}, HTTP "
        f"{sum(len(stats.good[m]['http']) for m in stats.good)}; lost: {lost_total}"
        + (f" {dict(stats.lost)}" if lost_total else ""),
        f"- ROS: {ros.sent if ros else 0} good frames sent, {ros.results if ros else 0} "
        f"detections received; the node's binding counters: "
        + (
            ", ".join(
                f"{k} {getattr(binding, k)}"
                for k in (
                    "received",
                    "published",
                    "dropped_stale",
                    "dropped_superseded",
                    "dropped_malformed",
                    "dropped_unavailable",
                    "failed",
                )
            )
            if binding
            else "none"
        )
        + f"; {ros.bad_sent if ros else 0} malformed frames sent",
        f"- the node's CPU use: {node_cpu:.2f} cores on average (of {os.cpu_count()})",
        f"- reloads of `simple`: {len(stats.reloads)} ok "
        f"(mean {np.mean(stats.reloads) if stats.reloads else float('nan'):.2f} s), "
        f"{len(stats.reload_failures)} failed",
        f"- health (gRPC ServerLive + HTTP /v2/health/live every 0.5 s): p50 "
        f"{percentile(health_all, 50):.1f} ms, p99 {health_p99:.1f} ms, max "
        f"{max(health_all, default=float('nan')):.1f} ms, {stats.health_failures} failed",
        "",
        "## Hostile inputs (errors by kind)",
        "",
        "| input | status | count | expected |",
        "|---|---|---|---|",
    ]
    for (name, got), count in sorted(stats.hostile.items()):
        lines.append(
            f"| {name} | {got} | {count} | "
            f"{'no' if (name, got) in stats.hostile_unexpected else 'yes'} |"
        )
    lines += [
        "",
        "## Per minute",
        "",
        "| minute | gRPC ok | gRPC p99 ms | HTTP ok | HTTP p99 ms | detections | hostile "
        "| health max ms | RSS MiB (last sample) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in minutes:
        rss_m = [r for t, r in stats.rss if int(t // 60) == m]
        lines.append(
            f"| {m} | {len(stats.good[m]['grpc'])} | {percentile(stats.good[m]['grpc'], 99):.1f} "
            f"| {len(stats.good[m]['http'])} | {percentile(stats.good[m]['http'], 99):.1f} "
            f"| {stats.frames_by_minute[m]} | {stats.hostile_by_minute[m]} "
            f"| {max(stats.health.get(m, []), default=float('nan')):.1f} "
            f"| {rss_m[-1] / 2**20 if rss_m else float('nan'):.1f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.results:
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(report)
        print(f"written to {args.results}")
    if failures:
        print(f"node log kept at {log_path}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
