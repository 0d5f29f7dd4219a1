"""The node and Kafka, against a real Kafka-protocol broker (Tansu, test/kafka_broker.py) and a
real node process, read with aiokafka (not the node's confluent-kafka):

- a binding's results mirrored to a topic: one record per published result, keyed by robot and
  camera, in order per key, the same boxes, stamp and frame_id as on ROS; then the broker
  stopped mid-run: frames are still published on ROS, and the mirror's drops are counted on
  /diagnostics and logged, throttled;
- a Kafka request served by the node's embedded frontend, batched with a camera's frames by the
  model's dynamic batcher (the model statistics count batches of two: one frame, one request).
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import numpy as np
import pytest

from prometheus_text import scrape
from kafka_broker import (
    TEST_FETCH_WAIT_MS,
    TEST_SESSION_TIMEOUT_MS,
    KafkaBroker,
    aiokafka_clients,
    read_records,
)
from ros_env import TOKEN
from ros_probe import ROOT, TIMEOUT, assert_boxes_on_objects, stamp_ns, wait_until
from server_process import copy_models

pytestmark = pytest.mark.system

NS = f"/k{TOKEN}"


@pytest.fixture
def broker():
    b = KafkaBroker().start()
    yield b
    b.stop()


def camera_specs(*names: str):
    from triton_ros.ros.tools.synthetic_cameras import parse_camera

    return [parse_camera(n) for n in names]


def json_boxes(message: dict):
    """Boxes xyxy [M, 4], class ids and scores of a mirrored detections message (the same
    reading as detection_metrics.message_boxes of the ROS message)."""
    boxes, classes, scores = [], [], []
    for d in message["detections"]:
        c, sx, sy = d["bbox"]["center"]["position"], d["bbox"]["size_x"], d["bbox"]["size_y"]
        boxes.append((c["x"] - sx / 2, c["y"] - sy / 2, c["x"] + sx / 2, c["y"] + sy / 2))
        best = max(d["results"], key=lambda r: r["hypothesis"]["score"])
        classes.append(best["hypothesis"]["class_id"])
        scores.append(best["hypothesis"]["score"])
    return np.array(boxes, np.float64).reshape(-1, 4), classes, np.array(scores, np.float64)


def mirror_status(diagnostics, binding: str):
    """The latest /diagnostics status of a binding's Kafka mirror, as (level, message, values)."""
    for array in reversed(diagnostics.messages()):
        for status in array.status:
            if status.name.endswith(f": kafka mirror {binding}"):
                return (
                    status.level[0] if isinstance(status.level, bytes) else status.level,
                    status.message,
                    {kv.key: kv.value for kv in status.values},
                )
    return None


def test_results_mirrored_keyed_by_camera_and_a_broker_lost(broker, start_node, probe):
    from diagnostic_msgs.msg import DiagnosticArray
    from triton_ros.ros.codec.messages import DETECTIONS_TYPE
    from triton_ros.ros.tools.detection_metrics import message_boxes

    topic = f"mirror-{TOKEN}"
    broker.create_topic(topic, 2)
    specs = camera_specs("r1/front:320x240", "r2/left:320x240:bgr8")
    node = start_node(
        {
            "model_repository": str(ROOT / "model_repository"),
            "startup_models": ["color_detector"],
            "diagnostics_period_s": 0.5,
            "exit_timeout_secs": 2.0,
            "kafka": {"brokers": broker.bootstrap},
            "bindings": ["cams"],
            "cams": {
                "model": "color_detector",
                "topics": [s.topic(NS) for s in specs],
                "score_threshold": 0.5,
                "max_age_ms": 0,
                "kafka_mirror_topic": topic,
                "kafka_mirror_max_queued": 10,
                "kafka_mirror_timeout_ms": 2000,
            },
        }
    )
    node.wait_ready(probe)
    results = {
        s.topic(NS): probe.subscribe(DETECTIONS_TYPE, s.topic(NS).rsplit("/", 1)[0] + "/detections")
        for s in specs
    }
    diagnostics = probe.subscribe(DiagnosticArray, "/diagnostics")
    probe.cameras(specs, prefix=NS, rate=10)
    for rec in results.values():
        rec.wait_for(8, what=f"detections; node log:\n{node.log()[-3000:]}")

    # -- every published result is on Kafka, keyed by its camera, with the same contents
    published = {
        t: {(m.header.frame_id, stamp_ns(m.header.stamp)): m for m in rec.messages()[:8]}
        for t, rec in results.items()
    }
    wanted = {k for by_frame in published.values() for k in by_frame}

    def frame_of(record):
        header = json.loads(record.value)["message"]["header"]
        return header["frame_id"], header["stamp"]["sec"] * 1_000_000_000 + header["stamp"][
            "nanosec"
        ]

    records = read_records(
        broker.bootstrap, topic, 2, lambda out: wanted <= {frame_of(r) for r in out}, TIMEOUT
    )
    by_frame = {frame_of(r): r for r in records}
    assert wanted <= set(by_frame), f"{len(records)} records; node log:\n{node.log()[-3000:]}"
    for spec in specs:
        source = spec.topic(NS)
        key = source.rsplit("/", 1)[0].lstrip("/")  # k<token>/r1/front
        mine = [r for r in records if r.key == key.encode()]
        assert len({r.partition for r in mine}) == 1  # one key, one partition
        stamps = [frame_of(r)[1] for r in mine]
        assert stamps == sorted(stamps)  # in order per key
        for frame, msg in published[source].items():
            record = by_frame[frame]
            assert record.key == key.encode()
            value = json.loads(record.value)
            assert (value["binding"], value["model"], value["source_topic"], value["topic"]) == (
                "cams",
                "color_detector",
                source,
                source.rsplit("/", 1)[0] + "/detections",
            )
            assert value["type"] == f"{type(msg).__module__.split('.')[0]}/msg/{type(msg).__name__}"
            # produced after the frame was stamped (the stamp itself is in the value)
            assert 0 <= record.timestamp - frame[1] // 1_000_000 < TIMEOUT * 1000
            assert dict(record.headers)["content-type"] == b"application/json"
            boxes, classes, scores = json_boxes(value["message"])
            ros_boxes, ros_classes, ros_scores = message_boxes(msg)
            np.testing.assert_array_equal(boxes, ros_boxes)
            np.testing.assert_array_equal(scores, ros_scores)
            assert classes == ros_classes and len(boxes) >= 1
    level, _, values = wait_until(
        lambda: (s := mirror_status(diagnostics, "cams")) and int(s[2]["delivered"]) >= 16 and s,
        what="the mirror's deliveries on /diagnostics",
    )
    assert level == 0 and int(values["dropped"]) == 0, values

    # -- the broker goes away: frames keep being published, the mirror counts its drops
    broker.kill()
    lost_at = {t: rec.count() for t, rec in results.items()}
    status = wait_until(
        lambda: (s := mirror_status(diagnostics, "cams")) and int(s[2]["dropped"]) > 0 and s,
        what=f"mirror drops on /diagnostics; node log:\n{node.log()[-3000:]}",
    )
    level, message, values = status
    assert level == 1 and "not mirrored" in message, status
    assert int(values["dropped_queue_full"]) + int(values["failed_delivery"]) > 0, values
    for t, rec in results.items():
        rec.wait_for(lost_at[t] + 20, what="detections published with the broker away")
    binding = wait_until(lambda: _binding_values(diagnostics, "cams"), what="binding status")
    assert int(binding["published"]) > sum(lost_at.values()), binding
    metrics = scrape(f"http://127.0.0.1:{node.port('Metrics Service')}/metrics")
    outcomes = metrics["nv_kafka_mirror_results"].by("outcome", binding="cams")
    assert outcomes["delivered"] >= 16, outcomes
    assert outcomes["dropped_queue_full"] + outcomes["failed_delivery"] > 0, outcomes
    log = node.log()
    assert "Kafka result sink dropped a result" in log
    assert log.count("Kafka result sink dropped a result") <= 5, log  # throttled
    assert "Traceback" not in log


def _binding_values(diagnostics, binding: str):
    for array in reversed(diagnostics.messages()):
        for status in array.status:
            if status.name.endswith(f": binding {binding}"):
                return {kv.key: kv.value for kv in status.values}
    return None


def test_a_kafka_request_batched_with_camera_frames(broker, start_node, probe, tmp_path):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from triton_ros.ros.codec.messages import DETECTIONS_TYPE
    from triton_ros.ros.tools.synthetic_cameras import CLASS_NAMES, SyntheticScene

    # color_detector, whose batcher waits up to 300 ms for a second request: the camera (one
    # frame in the model at a time) and the Kafka client (one request at a time) each bring one
    repo = copy_models(tmp_path / "models", "color_detector")
    config = repo / "color_detector" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "max_queue_delay_microseconds: 0",
            "max_queue_delay_microseconds: 300000\n  preferred_batch_size: [ 2 ]",
        )
    )
    requests, replies = f"requests-{TOKEN}", f"replies-{TOKEN}"
    broker.create_topic(requests, 1)
    broker.create_topic(replies, 1)
    (spec,) = camera_specs("r1/front:320x240")
    node = start_node(
        {
            "model_repository": str(repo),
            "startup_models": ["color_detector"],
            "kafka": {
                "brokers": broker.bootstrap,
                "request_topics": [requests],
                "reply_topic": replies,
                "group_id": f"node-{TOKEN}",
                "session_timeout_ms": TEST_SESSION_TIMEOUT_MS,
                "fetch_wait_max_ms": TEST_FETCH_WAIT_MS,
            },
            "bindings": ["cams"],
            "cams": {
                "model": "color_detector",
                "topics": [spec.topic(NS)],
                "max_age_ms": 0,
                "score_threshold": 0.5,
            },
        }
    )
    node.wait_ready(probe)
    wait_until(
        lambda: re.search(r"Kafka partitions assigned: \S", node.log()),
        what=f"the frontend's partitions; node log:\n{node.log()[-3000:]}",
    )
    assert "serving Kafka frontend" in node.log()
    detections = probe.subscribe(DETECTIONS_TYPE, spec.topic(NS).rsplit("/", 1)[0] + "/detections")
    probe.cameras([spec], prefix=NS, rate=8)
    detections.wait_for(3, what="camera detections")

    # Kafka requests: a synthetic 256x256 frame each, NCHW in [0, 1], binary tensors
    scene = SyntheticScene(camera_specs("kafka/cam:256x256")[0], seed=7)
    n = 6

    async def exchange():
        async with aiokafka_clients(broker.bootstrap, replies) as (producer, consumer):
            out = []
            for i in range(n):  # one at a time: each waits for its reply
                rgb, truth = scene.render(i * 0.3)
                x = httpclient.InferInput("images", [1, 3, 256, 256], "FP32")
                x.set_data_from_numpy(
                    (rgb.transpose(2, 0, 1)[None] / 255.0).astype(np.float32), binary_data=True
                )
                body, json_size = httpclient.InferenceServerClient.generate_request_body([x])
                await producer.send_and_wait(
                    requests,
                    body,
                    key=b"fleet/job",
                    headers=[
                        ("model-name", b"color_detector"),
                        ("correlation-id", str(i).encode()),
                        ("inference-header-content-length", str(json_size).encode()),
                    ],
                )
                deadline = time.monotonic() + TIMEOUT
                reply = None
                while reply is None and time.monotonic() < deadline:
                    for records in (await consumer.getmany(timeout_ms=300)).values():
                        for r in records:
                            if dict(r.headers).get("correlation-id") == str(i).encode():
                                reply = r
                assert reply is not None, f"no reply to request {i}"
                out.append((reply, truth))
            return out

    answered = asyncio.run(exchange())
    for reply, truth in answered:
        headers = dict(reply.headers)
        assert headers["triton-status"] == b"OK", (headers, reply.value[:300])
        length = headers.get("inference-header-content-length")
        result = httpclient.InferenceServerClient.parse_response_body(
            reply.value, header_length=int(length) if length else None
        )
        rows = result.as_numpy("detections")[0]
        found = rows[rows[:, 4] > 0.5]
        assert_boxes_on_objects(found[:, :4], [CLASS_NAMES[int(c)] for c in found[:, 5]], truth)

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{node.grpc_port}")
    stats = client.get_inference_statistics("color_detector").model_stats[0]
    batches = {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
    frames = sum(1 for _ in detections.messages())
    # Only one camera frame and one Kafka request are ever in the model at once: a batch of two
    # is a frame and a request together (here all six requests shared one, unloaded machine).
    assert batches.get(2, 0) >= n // 2, (batches, stats.inference_count, frames)
    assert sum(size * count for size, count in batches.items()) == stats.inference_count
    assert stats.inference_count >= n + 3
