"""Test helpers: the inference node in a process of its own, and a probe node in the test process.

The probe has its own rclpy context and a SingleThreadedExecutor spinning in a thread; it records
what it receives, publishes camera frames (recording their stamps) and calls services with
timeouts. ``close()`` shuts the executor down and joins it before the context shuts down.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

# test/: on sys.path through its conftest
from processes import ROOT, TIMEOUT, ManagedProcess, wait_until  # noqa: F401 (wait_until: for the tests)
from server_process import free_port


def stamp_ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class NodeProcess(ManagedProcess):
    """``python -m triton_ros.ros.inference_node`` with a params file; logs to a file."""

    what = "node"
    faults = ("terminate called", "Aborted", "Traceback")

    def __init__(
        self,
        params: dict | None,
        tmp_path: Path,
        *,
        name: str,
        grpc_port: int | None = None,
        params_file: Path | None = None,
    ) -> None:
        """``params`` (written as a params file), or ``params_file`` used as it is; the ports
        given with -p on the command line take precedence over either."""
        self.name = name
        self.grpc_port = grpc_port or free_port()
        if params_file is not None:
            self.params_file = params_file
        else:
            self.params_file = tmp_path / f"{name}.yaml"
            self.params_file.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
        cmd = [
            sys.executable,
            "-m",
            "triton_ros.ros.inference_node",
            "--ros-args",
            "--params-file",
            str(self.params_file),
            "-p",
            f"grpc.port:={self.grpc_port}",
            # HTTP and metrics take any free port, so that concurrent nodes never collide.
            "-p",
            "http.port:=0",
            "-p",
            "metrics.port:=0",
            "-r",
            f"__node:={name}",
        ]
        super().__init__(cmd, tmp_path / f"{name}.log")
        self._ready_client = None

    def service(self, name: str) -> str:
        return f"/{self.name}/{name}"

    def port(self, what: str) -> int:
        """The port of an endpoint as the node logs it (``<what> at 127.0.0.1:<port>``), once it
        has: HTTP and metrics take any free port."""
        match = wait_until(
            lambda: re.search(rf"{what} at 127\.0\.0\.1:(\d+)", self.log()),
            what=f"{what} port in the log",
        )
        return int(match.group(1))

    def ready(self) -> bool:
        """The node has logged "ready:" and its ~/list_models service is discovered."""
        return "ready:" in self.log() and self._ready_client.service_is_ready()

    def wait_ready(self, probe: "Probe", timeout: float = TIMEOUT) -> None:
        from triton_ros_interfaces.srv import ListModels

        self._ready_client = probe.client(ListModels, self.service("list_models"))
        super().wait_ready(timeout)


class Recorder:
    """Messages of one subscription with their receipt time (ns, node clock)."""

    def __init__(self) -> None:
        self.items: list[tuple[Any, int]] = []
        self.lock = threading.Lock()

    def add(self, msg, now_ns: int) -> None:
        with self.lock:
            self.items.append((msg, now_ns))

    def messages(self) -> list:
        with self.lock:
            return [m for m, _ in self.items]

    def count(self) -> int:
        with self.lock:
            return len(self.items)

    def wait_for(self, n: int, timeout: float = TIMEOUT, what: str = "messages") -> list:
        wait_until(lambda: self.count() >= n, timeout, f"{n} {what}")
        return self.messages()

    def last(self):
        with self.lock:
            return self.items[-1][0] if self.items else None


class Probe:
    """A node of the test process with its own context and executor thread."""

    def __init__(self, name: str) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor

        self._rclpy = rclpy
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()
        self._clients: dict[str, Any] = {}
        self._rigs: list[CameraRig] = []

    def now_ns(self) -> int:
        return self.node.get_clock().now().nanoseconds

    def subscribe(self, msg_type, topic: str, qos: int = 50) -> Recorder:
        rec = Recorder()
        self.node.create_subscription(msg_type, topic, lambda m: rec.add(m, self.now_ns()), qos)
        return rec

    def image_publisher(self, topic: str):
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        return self.node.create_publisher(Image, topic, qos_profile_sensor_data)

    def client(self, srv_type, name: str):
        if name not in self._clients:
            self._clients[name] = self.node.create_client(srv_type, name)
        return self._clients[name]

    def call(self, srv_type, name: str, timeout: float = TIMEOUT, **fields):
        client = self.client(srv_type, name)
        assert client.wait_for_service(timeout_sec=timeout), f"service {name} is not available"
        request = srv_type.Request(**fields)
        done = threading.Event()
        future = client.call_async(request)
        future.add_done_callback(lambda _f: done.set())
        assert done.wait(timeout), f"service {name} did not answer within {timeout:.0f} s"
        return future.result()

    def cameras(
        self, specs, *, prefix: str = "", rate: float = 20.0, topics: list[str] | None = None
    ) -> "CameraRig":
        rig = CameraRig(self, specs, prefix=prefix, rate=rate, topics=topics)
        self._rigs.append(rig)
        return rig

    def close(self) -> None:
        for rig in self._rigs:
            rig.stop()
        self.executor.shutdown()
        self._thread.join(timeout=30)
        self.node.destroy_node()
        self._rigs.clear()
        self._rclpy.shutdown(context=self.context)


def bundled_core(model: str):
    """A started core on the bundled repository with ``model`` loaded (the caller stops it)."""
    from triton_ros.core.server import InferenceServer, ServerOptions

    core = InferenceServer(
        ServerOptions(
            model_repositories=(str(ROOT / "model_repository"),),
            model_control_mode="explicit",
            startup_models=(model,),
        )
    )
    core.start()
    return core


def detections_probe(node, image_topic: str, detections_topic: str):
    """On ``node``: (the detections received on ``detections_topic``, a list that grows, and a
    publisher of images on ``image_topic``)."""
    from sensor_msgs.msg import Image
    from triton_ros.ros.codec.messages import DETECTIONS_TYPE

    results: list = []
    node.create_subscription(DETECTIONS_TYPE, detections_topic, results.append, 10)
    return results, node.create_publisher(Image, image_topic, 10)


def stop_binding(binding, workers) -> None:
    """Stop a Binding built by hand, unbind its sources and join its worker pool."""
    binding.stop()
    for source in binding.sources():
        binding.remove_source(source.topic)
    workers.shutdown(wait=True)


def assert_same_right_boxes(published: dict, truth, tolerance: float = 3.0) -> None:
    """``published`` (a name -> ``message_boxes(...)`` of a detections message): every entry
    holds the same boxes, classes and scores, and they are right for the scene's ``truth``."""
    (boxes, classes, scores), *others = published.values()
    for other_boxes, other_classes, other_scores in others:
        np.testing.assert_array_equal(boxes, other_boxes)
        np.testing.assert_array_equal(scores, other_scores)
        assert classes == other_classes
    assert_boxes_on_objects(boxes, classes, truth, tolerance)


def assert_boxes_on_objects(boxes, classes, truth, tolerance: float = 3.0) -> None:
    """One box per object of a synthetic scene, on it (within ``tolerance`` pixels), with the
    object's class."""
    from triton_ros.ros.tools.synthetic_cameras import CLASS_NAMES

    assert len(boxes) == len(truth.boxes), (boxes, truth.boxes)
    for box, cls in zip(truth.boxes, truth.classes):
        near = [i for i in range(len(boxes)) if np.abs(boxes[i] - box).max() <= tolerance]
        assert len(near) == 1 and classes[near[0]] == CLASS_NAMES[cls], (box, boxes)


def image_message(pixels: np.ndarray, encoding: str, frame_id: str, stamp):
    from sensor_msgs.msg import Image
    from triton_ros.ros.codec.messages import uint8_array

    msg = Image()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.height, msg.width = pixels.shape[:2]
    msg.encoding = encoding
    msg.step = pixels.shape[1] * (pixels.shape[2] if pixels.ndim == 3 else 1)
    msg.data = uint8_array(pixels.tobytes())
    return msg


class CameraRig:
    """Synthetic cameras published from the probe at ``rate``; remembers every stamp it sent."""

    def __init__(
        self, probe: Probe, specs, *, prefix: str, rate: float, topics: list[str] | None = None
    ) -> None:
        from triton_ros.ros.tools.synthetic_cameras import SyntheticScene

        self.probe = probe
        self.specs = specs
        self.topics = topics or [s.topic(prefix) for s in specs]
        self.scenes = [SyntheticScene(s, seed=i) for i, s in enumerate(specs)]
        self.publishers = [probe.image_publisher(t) for t in self.topics]
        self.sent: dict[str, dict[int, str]] = {t: {} for t in self.topics}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._period = 1.0 / rate
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            stamp = self.probe.node.get_clock().now().to_msg()
            for spec, scene, topic, pub in zip(
                self.specs, self.scenes, self.topics, self.publishers
            ):
                pub.publish(
                    image_message(
                        scene.frame(time.monotonic() - t0), spec.encoding, spec.frame_id, stamp
                    )
                )
                with self.lock:
                    self.sent[topic][stamp_ns(stamp)] = spec.frame_id
            self._stop.wait(self._period)

    def stamps(self, topic: str) -> dict[int, str]:
        with self.lock:
            return dict(self.sent[topic])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
