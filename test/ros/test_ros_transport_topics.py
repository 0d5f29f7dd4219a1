"""A camera driver publishes one camera on several image_transport topics (``image_raw`` and
``image_raw/compressed``); a binding whose patterns match both reads each camera once: the topic
bound first, or the raw one when both appear in the same graph. Topics named in ``topics`` are
the user's choice and always bound. Real rclpy node in this process, the binding's own
discover() fed the graph as ``Node.get_topic_names_and_types()`` gives it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from ros_env import ROOT, TOKEN
from ros_probe import bundled_core

pytestmark = pytest.mark.integration

NS = f"/tt{TOKEN}"
IMAGE, COMPRESSED = "sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"


class Logger:
    def __init__(self, inner) -> None:
        self.inner, self.lines = inner, []

    def __getattr__(self, name):
        def log(text, *args, **kwargs):
            self.lines.append(text)
            return getattr(self.inner, name)(text, *args, **kwargs)

        return log


def test_a_pattern_binds_each_camera_once(spinning_node):
    from triton_ros.ros.binding.binding import Binding
    from triton_ros.ros.parameters import declare_and_read
    from triton_ros.ros.targets.local import LocalModelTarget

    node = spinning_node(
        f"transport_topics_{TOKEN}",
        {
            "bindings": ["cams"],
            "cams.model": "color_detector",
            "cams.topic_patterns": [f"{NS}/*/image_raw", f"{NS}/*/image_raw/compressed"],
            "cams.topics": [f"{NS}/named/image_raw", f"{NS}/named/image_raw/compressed"],
            "cams.output_topic_template": "{camera}/{output_name}",
        },
    )
    config = declare_and_read(node, bundled_repository=ROOT / "model_repository")
    core = bundled_core("color_detector")
    workers = ThreadPoolExecutor(1)
    binding = Binding(
        config.bindings[0],
        node=node,
        target=LocalModelTarget(core, "color_detector"),
        workers=workers,
        callback_group=None,
    )
    logger = Logger(binding._log)
    binding._log = logger
    try:
        binding.start()
        named = {f"{NS}/named/image_raw", f"{NS}/named/image_raw/compressed"}
        assert {s.topic for s in binding.sources()} == named  # named topics: both, as asked

        # both of camera a at once: the raw one; b only compressed: that one
        graph = [
            (f"{NS}/a/image_raw", [IMAGE]),
            (f"{NS}/a/image_raw/compressed", [COMPRESSED]),
            (f"{NS}/b/image_raw/compressed", [COMPRESSED]),
        ]
        binding.discover(graph, lambda topic: 1)
        bound = {s.topic for s in binding.sources()} - named
        assert bound == {f"{NS}/a/image_raw", f"{NS}/b/image_raw/compressed"}
        kinds = {s.topic: s.kind.name for s in binding.sources()}
        assert kinds[f"{NS}/b/image_raw/compressed"] == "compressed"
        # b's raw topic appears later: b stays on the compressed one it was bound with
        graph.append((f"{NS}/b/image_raw", [IMAGE]))
        binding.discover(graph, lambda topic: 1)
        binding.discover(graph, lambda topic: 1)
        bound = {s.topic for s in binding.sources()} - named
        assert bound == {f"{NS}/a/image_raw", f"{NS}/b/image_raw/compressed"}
        # each skipped topic is logged once, naming the topic its camera is read through
        skipped = [line for line in logger.lines if "not bound" in line]
        assert len(skipped) == 2, skipped
        assert any(
            f"{NS}/a/image_raw/compressed not bound" in line
            and f"read through {NS}/a/image_raw " in line
            for line in skipped
        ), skipped
        assert any(
            f"{NS}/b/image_raw not bound" in line
            and f"read through {NS}/b/image_raw/compressed " in line
            for line in skipped
        ), skipped
        # both results go to the camera's own detections topic
        outputs = {s.topic: s.output_topic for s in binding.sources()}
        assert outputs[f"{NS}/b/image_raw/compressed"] == f"{NS}/b/detections"
        assert outputs[f"{NS}/a/image_raw"] == f"{NS}/a/detections"
    finally:
        binding.stop()
        for source in binding.sources():
            binding.remove_source(source.topic)
        workers.shutdown()
        core.stop()
