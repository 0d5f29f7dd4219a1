"""ROS frames traced (issue 34, item 2): a node with ``trace.*`` parameters writes, per camera
frame served by its embedded core, a trace in Triton's JSON format with the frame's receipt, the
core's request activities and the publication, in order; one trace per published frame.

A node process (its parameters from a params file, read by rcl's parser) and a camera published
from this process; the trace file is read after the node stopped (SIGINT), which closes it.
"""

from __future__ import annotations

import json
import signal
import time

import pytest

from ros_env import TOKEN
from ros_models import make_repository
from ros_probe import NodeProcess, Probe, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.synthetic_cameras import parse_camera

pytestmark = pytest.mark.system

NS = f"/t{TOKEN}"
CAMERA = parse_camera("robot/camera:320x240:rgb8")
ORDER = (
    "ROS_FRAME_RECEIVED",
    "ROS_PREPROCESS_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "ROS_PUBLISH_START",
    "ROS_PUBLISH_END",
)


def test_frames_of_a_binding_are_traced_in_triton_format(tmp_path):
    from diagnostic_msgs.msg import DiagnosticArray

    repo = make_repository(tmp_path / "models")
    trace_file = tmp_path / "frames.json"
    params = {
        "model_repository": str(repo),
        "startup_models": ["detector"],
        "diagnostics_period_s": 0.5,
        "grpc.enable": False,
        "http.enable": False,
        "trace.file": str(trace_file),
        "trace.level": ["TIMESTAMPS"],
        "trace.rate": 1,
        "bindings": ["cam"],
        "cam": {
            "model": "detector",
            "topics": [CAMERA.topic(NS)],
            "max_age_ms": 0,
            "score_threshold": 0.0,
            "top_k": 5,
            "output_topic_template": "{namespace}/detections",
        },
    }
    probe = Probe(f"probe_{TOKEN}_trace")
    node = NodeProcess(params, tmp_path, name=f"trace_node_{TOKEN}")
    try:
        diagnostics = probe.subscribe(DiagnosticArray, "/diagnostics", qos=100)
        node.wait_ready(probe)
        rec = probe.subscribe(DETECTIONS_TYPE, f"{NS}/{CAMERA.robot}/{CAMERA.camera}/detections")
        rig = probe.cameras([CAMERA], prefix=NS, rate=20.0)
        try:
            rec.wait_for(15, what="detections")
        finally:
            rig.stop()
        sent = len(rig.stamps(CAMERA.topic(NS)))
        name = f"/{node.name}: binding cam"

        def settled():
            """The binding's totals once every frame it received is accounted for: the last
            two statuses agree, nothing in flight (best-effort delivery may lose some of the
            frames sent on a loaded host)."""
            mine = [
                {kv.key: kv.value for kv in st.values}
                for msg, _ in diagnostics.items
                for st in msg.status
                if st.name == name
            ]
            if len(mine) < 2:
                return None
            last, before = mine[-1], mine[-2]
            return (
                last["in_flight"] == "0"
                and last["received"] == before["received"]
                and 0 < int(last["received"]) <= sent
                and last
            )

        values = wait_until(
            settled, 15, f"the frames received of {sent} accounted for in /diagnostics"
        )
        published = int(values["published"])
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)

    entries = json.loads(trace_file.read_text())
    heads = {e["id"]: e for e in entries if "model_name" in e}
    stamps: dict[int, dict[str, int]] = {}
    for e in entries:
        if "timestamps" in e:
            stamps.setdefault(e["id"], {}).update(
                {t["name"]: int(t["ns"]) for t in e["timestamps"]}
            )
    assert all(h["model_name"] == "detector" and h["model_version"] == 1 for h in heads.values()), (
        heads
    )
    frames = [s for s in stamps.values() if "ROS_PUBLISH_END" in s]
    # rate 1: every frame traced; every published frame has its publication in its trace
    assert len(frames) == published, (len(frames), published, len(stamps))
    print(
        f"sent {sent}, published {published}, traces {len(stamps)}, with publication {len(frames)}"
    )
    assert published >= 15
    for s in frames:
        assert tuple(n for n in ORDER if n in s) == ORDER, s
        ns = [s[n] for n in ORDER]
        assert ns == sorted(ns), s
        # the frame's own milliseconds: receipt to publication, within reason
        assert 0 < s["ROS_PUBLISH_END"] - s["ROS_FRAME_RECEIVED"] < 5e9, s
    assert abs(time.monotonic_ns() - frames[-1]["ROS_PUBLISH_END"]) < 600e9
