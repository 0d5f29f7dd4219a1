"""Docs cannot drift: every whole params file of the docs (README.md and docs/**/*.md, as
collected by docs_snippets: the ones not marked ``no-start``, ``fragment`` or ``not-params``)
and every YAML file of config/ is a params file that the inference node starts with, verbatim,
and every binding it declares publishes. (test_docs_params.py checks every snippet, marked or
not, with rcl's parser and the node's declarations.)

For each snippet, the node runs in its own process with the snippet as its ``--params-file``
(only the ports are overridden on the command line, so that concurrent nodes never collide).
Frames are published on each binding's topics (a topic pattern gets a concrete name that
matches it), and a result must come back on the output topic the node logs for it, with the
frame's header (a ``pointcloud`` binding gets a small PointCloud2). A synchronized binding
(``inputs``) gets a namespace, and every input's topic
in it a message of the same stamp: an rgb8 image, a 16UC1 depth image (``input_kinds``: depth)
or a CameraInfo (a ``camera_info`` kind, or a topic named so).
"""

from __future__ import annotations

import re
import signal

import numpy as np
import pytest
import yaml

from docs_snippets import collect
from triton_ros.ros.codec.registry import base_topic
from ros_env import ROOT, TOKEN
from ros_probe import NodeProcess, image_message, wait_until

pytestmark = pytest.mark.system


def snippets() -> list[tuple[str, str]]:
    found = [(s.where, s.text) for s in collect().params if s.kind == "params"]
    for path in sorted((ROOT / "config").rglob("*.y*ml")):
        found.append((str(path.relative_to(ROOT)), path.read_text()))
    return found


SNIPPETS = snippets()


def test_the_docs_and_config_have_yaml_snippets():
    where = [w for w, _ in SNIPPETS]
    assert any(w.startswith("docs/node.md") for w in where)
    assert "config/inference.yaml" in where


def instantiate(pattern: str) -> str:
    """A topic name matching a binding's glob pattern."""
    name = pattern.replace("**", "deep/er").replace("*", "1").replace("?", "x")
    return re.sub(r"\[([^\]]+)\]", lambda m: m.group(1)[0], name)


def node_parameters(doc: dict) -> dict:
    entries = [
        v["ros__parameters"] for v in doc.values() if isinstance(v, dict) and "ros__parameters" in v
    ]
    assert len(entries) == 1, "a params file for one node (e.g. '/**: ros__parameters:')"
    return entries[0]


@pytest.mark.parametrize("where,text", SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_the_node_starts_with_the_snippet_and_every_binding_publishes(where, text, tmp_path, probe):
    from triton_ros_interfaces.msg import TensorList

    from triton_ros.ros.codec.messages import (
        CLASSIFICATION_TYPE,
        DETECTIONS3D_TYPE,
        DETECTIONS_TYPE,
    )

    params = node_parameters(yaml.safe_load(text))
    params_file = tmp_path / "snippet.yaml"
    params_file.write_text(text)  # verbatim
    node = NodeProcess(None, tmp_path, name=f"docs_node_{TOKEN}", params_file=params_file)
    try:
        node.wait_ready(probe, timeout=120)
        from sensor_msgs.msg import Image

        types = {
            "detections": DETECTIONS_TYPE,
            "classification": CLASSIFICATION_TYPE,
            "tensors": TensorList,
            "segmentation": Image,
            "detections3d": DETECTIONS3D_TYPE,
        }
        bindings = params.get("bindings", [])
        if isinstance(bindings, str):
            bindings = [bindings]
        assert bindings, f"{where} declares no binding"
        inputs: dict[str, tuple[str, str]] = {}  # input topic -> (binding, format)
        for name in bindings:
            settings = params.get(name, {})
            topics = settings.get("topics", [])
            patterns = settings.get("topic_patterns", [])
            topics = [topics] if isinstance(topics, str) else list(topics)
            patterns = [patterns] if isinstance(patterns, str) else list(patterns)
            found = [instantiate(p) for p in patterns]
            # a pattern binds each camera once: image_transport's .../compressed of a camera
            # whose raw topic is found too is not bound (docs/sensors.md, "One topic per camera")
            found = [t for t in found if base_topic(t) == t or base_topic(t) not in found]
            for t in topics + found:
                inputs[t] = (name, settings.get("format", "detections"))

        publishers = {
            t: SyncedPublisher(probe, params[inputs[t][0]], t)
            if params[inputs[t][0]].get("inputs")
            else CloudPublisher(probe, t)
            if params[inputs[t][0]].get("input_kind") == "pointcloud"
            else probe.image_publisher(t)
            for t in inputs
        }
        pixels = np.full((480, 640, 3), 90, np.uint8)
        recorders: dict[str, object] = {}

        def every_binding_published() -> bool:
            log = node.log()
            for t, (name, fmt) in inputs.items():
                match = re.search(
                    rf"binding '{name}': (?:bound|found) {re.escape(t)} -> (\S+)", log
                )
                if match and t not in recorders:
                    recorders[t] = probe.subscribe(types[fmt], match.group(1))
                stamp = probe.node.get_clock().now().to_msg()
                publishers[t].publish(image_message(pixels, "rgb8", f"docs_{TOKEN}", stamp))
            return len(recorders) == len(inputs) and all(
                any(m.header.frame_id == f"docs_{TOKEN}" for m in rec.messages())
                for rec in recorders.values()
            )

        try:
            wait_until(
                every_binding_published, what=f"a result of every binding of {where}", interval=0.3
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{node.log()}") from None
        log = node.log()
        assert "[ERROR]" not in log, log
        # the ports given with -p took precedence over the snippet's
        assert re.search(rf"serving .*gRPC.* at 127\.0\.0\.1:{node.grpc_port}\b", log), log
    finally:
        node.stop_and_check(signal.SIGINT)


class SyncedPublisher:
    """Every input topic of a synchronized binding's namespace, published with one stamp."""

    def __init__(self, probe, settings: dict, namespace: str) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CameraInfo, Image

        kinds = settings.get("input_kinds") or {}
        self.publishers = []
        for name, relative in settings["inputs"].items():
            kind = kinds.get(name) or ("camera_info" if "camera_info" in relative else "image")
            msg_type = CameraInfo if kind == "camera_info" else Image
            self.publishers.append(
                (
                    kind,
                    probe.node.create_publisher(
                        msg_type, f"{namespace}/{relative}", qos_profile_sensor_data
                    ),
                )
            )

    def publish(self, colour) -> None:
        from sensor_msgs.msg import CameraInfo

        from triton_ros.ros.codec.messages import uint8_array

        for kind, publisher in self.publishers:
            if kind == "camera_info":
                h, w = colour.height, colour.width
                msg = CameraInfo(
                    header=colour.header,
                    width=w,
                    height=h,
                    k=[0.9 * w, 0.0, w / 2, 0.0, 0.9 * w, h / 2, 0.0, 0.0, 1.0],
                )
            elif kind == "depth":
                msg = image_message(
                    np.zeros((colour.height, colour.width), np.uint8),
                    "mono8",
                    colour.header.frame_id,
                    colour.header.stamp,
                )
                msg.encoding, msg.step = "16UC1", colour.width * 2
                msg.data = uint8_array(
                    np.full((colour.height, colour.width), 1500, np.uint16).tobytes()
                )
            else:
                msg = colour
            publisher.publish(msg)


class CloudPublisher:
    """A point cloud topic: a few points, x, y, z, intensity FLOAT32, with the image's header."""

    def __init__(self, probe, topic: str) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2

        self.publisher = probe.node.create_publisher(PointCloud2, topic, qos_profile_sensor_data)

    def publish(self, colour) -> None:
        from sensor_msgs.msg import PointCloud2, PointField

        from triton_ros.ros.codec.messages import uint8_array

        points = np.array([[5.0, 0.0, -1.0, 10.0], [5.1, 0.0, 0.0, 10.0]], "<f4")
        msg = PointCloud2(
            header=colour.header, height=1, width=2, point_step=16, row_step=32, is_dense=True
        )
        msg.fields = [
            PointField(name=n, offset=4 * i, datatype=7, count=1)
            for i, n in enumerate(("x", "y", "z", "intensity"))
        ]
        msg.data = uint8_array(points.tobytes())
        self.publisher.publish(msg)
