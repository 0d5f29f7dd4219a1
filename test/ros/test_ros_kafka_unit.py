"""The node's Kafka parts without a broker: the kafka.* and kafka_mirror_* parameters, a result
message as JSON, record keys, the mirror's queue (never blocking, drops counted by reason) and
its /diagnostics figures. The same against a real broker and node: test_ros_kafka.py."""

from __future__ import annotations

import base64
import json
import math
import threading
import time

import numpy as np
import pytest

from processes import wait_until

from triton_ros.core.errors import TritonRosError
from triton_ros.frontend.kafka.options import KafkaOptions, options_from_parameters
from triton_ros.frontend.options import options_from_parameters as endpoint_options
from triton_ros.ros.mirror.config import MirrorConfig, check_kafka_use
from triton_ros.ros.mirror.diagnostics import MirrorReporter, mirror_statuses
from triton_ros.ros.mirror.kafka_mirror import KafkaMirror, record_key, record_value
from triton_ros.ros.mirror.message_json import message_to_dict, type_name
from triton_ros.ros.mirror.mirror_metrics import mirror_families
from triton_ros.ros.parameters import BINDING_PARAMS, NODE_PARAMS, binding_config

pytestmark = pytest.mark.unit


def binding(name="cams", **extra):
    raw = {s.name: s.default for s in BINDING_PARAMS}
    raw.update(model="color_detector", topics=["/robot1/camera_front/image_raw"], **extra)
    return binding_config(name, raw)


# ------------------------------------------------------------------------------------------
# Parameters
# ------------------------------------------------------------------------------------------


def kafka_options(values):
    """The node's reading of its kafka.* parameters: brokers alone are a connection."""
    return options_from_parameters(values, require_topics=False)


def frontend_options(kafka):
    """What the node's Kafka frontend runs with."""
    return endpoint_options({}, 30.0, kafka).kafka


def node_values(**kafka):
    values = {s.name: s.default for s in NODE_PARAMS}
    values.update({f"kafka.{k}": v for k, v in kafka.items()})
    return values


def test_kafka_parameters_are_the_frontends_flags_and_errors_name_the_parameter():
    names = {s.name for s in NODE_PARAMS}
    assert {
        "kafka.brokers",
        "kafka.request_topics",
        "kafka.security_protocol",
        "kafka.max_inflight_per_partition",
        "kafka.producer_config",
    } <= names
    assert not kafka_options(node_values()).enable  # off by default
    with pytest.raises(TritonRosError) as info:
        kafka_options(node_values(brokers="b:9092", security_protocol="TLS"))
    assert info.value.message.startswith("parameter 'kafka.security_protocol' must be one of")
    assert "--kafka" not in info.value.message
    with pytest.raises(
        TritonRosError,
        match=r"'kafka.max_inflight_per_partition' must be a "
        r"positive integer",
    ):
        kafka_options(node_values(brokers="b:9092", max_inflight_per_partition=0))
    with pytest.raises(TritonRosError, match=r"'kafka.consumer_config' expects KEY=VALUE"):
        kafka_options(node_values(brokers="b:9092", consumer_config=["novalue"]))

    # brokers and topics: the frontend runs; brokers alone: a connection for the mirrors
    served = kafka_options(node_values(brokers="b:9092", request_topics=["req"]))
    assert frontend_options(served) == served and frontend_options(served).enable
    connection = kafka_options(node_values(brokers="b:9092"))
    assert connection.brokers == "b:9092" and not frontend_options(connection).enable
    with pytest.raises(TritonRosError, match="'kafka.brokers' is set but nothing uses it"):
        check_kafka_use(connection, [])
    check_kafka_use(connection, ["cams"])
    check_kafka_use(served, [])
    with pytest.raises(
        TritonRosError,
        match=r"'cams.kafka_mirror_topic' needs the brokers in "
        r"parameter 'kafka.brokers'",
    ):
        check_kafka_use(KafkaOptions(), ["cams"])


def test_mirror_parameters_of_a_binding():
    assert binding().kafka_mirror is None  # off by default
    cfg = binding(
        kafka_mirror_topic="fleet.results", kafka_mirror_max_queued=5, kafka_mirror_timeout_ms=700
    ).kafka_mirror
    assert cfg == MirrorConfig("fleet.results", "{namespace}", 5, 700)
    with pytest.raises(
        TritonRosError,
        match=r"'cams.kafka_mirror_topic': 'fleet/results' is "
        r"not a valid Kafka topic name",
    ):
        binding(kafka_mirror_topic="fleet/results")
    with pytest.raises(
        TritonRosError,
        match=r"'cams.kafka_mirror_key': unknown field\(s\) "
        r"\{robot\}",
    ):
        binding(kafka_mirror_topic="r", kafka_mirror_key="{robot}")
    with pytest.raises(TritonRosError, match=r"'cams.kafka_mirror_max_queued' must be a positive"):
        binding(kafka_mirror_topic="r", kafka_mirror_max_queued=0)


# ------------------------------------------------------------------------------------------
# A result as JSON, its key
# ------------------------------------------------------------------------------------------


def test_a_result_message_as_json_keeps_its_fields_stamp_and_frame_id():
    from triton_ros.ros.codec.messages import DETECTION_RESULT_TYPE, DETECTION_TYPE, DETECTIONS_TYPE
    from triton_ros_interfaces.msg import Tensor, TensorList

    msg = DETECTIONS_TYPE()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1700000000, 123456789
    msg.header.frame_id = "robot1/camera_front_optical_frame"
    for i, (cx, _score) in enumerate(((10.5, 0.9), (200.25, float("nan")))):
        det = DETECTION_TYPE()
        det.id = str(i)
        det.bbox.center.position.x, det.bbox.center.position.y = cx, 20.0
        det.bbox.size_x, det.bbox.size_y = 4.0, 8.0
        msg.detections.append(det)
    result = DETECTION_RESULT_TYPE()
    result.hypothesis.class_id, result.hypothesis.score = "cup", 0.9
    msg.detections[0].results.append(result)
    out = json.loads(json.dumps(message_to_dict(msg), allow_nan=False))
    assert out["header"] == {
        "stamp": {"sec": 1700000000, "nanosec": 123456789},
        "frame_id": "robot1/camera_front_optical_frame",
    }
    assert [d["bbox"]["center"]["position"]["x"] for d in out["detections"]] == [10.5, 200.25]
    assert out["detections"][0]["results"][0]["hypothesis"] == {"class_id": "cup", "score": 0.9}
    assert type_name(msg).endswith(("/msg/Detections", "/msg/Detection2DArray"))

    data = np.array([[1.5, math.inf]], np.float32)
    tensors = TensorList(header=msg.header, model_name="m", model_version=3)
    tensors.tensors.append(Tensor(name="y", datatype="FP32", shape=[1, 2], data=data.tobytes()))
    out = json.loads(json.dumps(message_to_dict(tensors), allow_nan=False))
    tensor = out["tensors"][0]
    assert tensor["shape"] == [1, 2] and tensor["datatype"] == "FP32"
    assert np.array_equal(np.frombuffer(base64.b64decode(tensor["data"]), np.float32), data[0])


def test_record_keys_are_robot_and_camera():
    cams = binding(kafka_mirror_topic="r")
    assert (
        record_key(cams.kafka_mirror, cams, "/robot1/camera_front/image_raw")
        == "robot1/camera_front"
    )
    other = MirrorConfig("r", "{binding}:{basename}")
    assert record_key(other, cams, "/robot1/camera_front/image_raw") == "cams:image_raw"


# ------------------------------------------------------------------------------------------
# The mirror: never blocks, drops counted by reason
# ------------------------------------------------------------------------------------------


class Log:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, text):
        self.lines.append(text)

    warning = error = info


class SlowSink:
    """A sink whose publish waits until released (brokers slower than the results)."""

    def __init__(self):
        self.release = threading.Event()
        self.records: list[tuple] = []

    def publish(self, key, value, headers=None):
        self.release.wait(10)
        self.records.append((key, json.loads(value), headers))
        return True

    def snapshot(self):
        from triton_ros.frontend.kafka.result_sink import SinkStats

        return SinkStats(published=len(self.records), delivered=len(self.records))

    def close(self, timeout):
        self.release.set()


class Source:
    topic = "/robot1/camera_front/image_raw"
    output_topic = "/robot1/camera_front/detections"


def test_the_mirror_never_blocks_and_counts_what_it_drops():
    from triton_ros.ros.codec.messages import DETECTIONS_TYPE

    cams = binding(kafka_mirror_topic="r", kafka_mirror_max_queued=3)
    sink = SlowSink()
    log = Log()
    mirror = KafkaMirror(
        KafkaOptions(brokers="b:9092"),
        [cams, binding("plain")],
        node_name="/node",
        logger=log,
        sink_factory=lambda o, c: sink,
    )
    assert mirror.for_binding("plain") is None
    offer = mirror.for_binding("cams")
    mirror.start()
    msg = DETECTIONS_TYPE()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 500_000_000
    t0 = time.monotonic()
    for _ in range(10):
        offer(Source(), msg, "color_detector", 1)
    assert time.monotonic() - t0 < 0.5  # the sink waits; the frames do not
    (fig,) = mirror.figures()
    # three taken (the one in the sink's hands counts), seven dropped
    assert fig.offered == 10 and fig.drops["dropped_backlog"] == 7 and fig.pending == 3, fig
    assert sum(1 for line in log.lines if "dropped_backlog" in line) == 1  # throttled
    sink.release.set()
    wait_until(
        lambda: not mirror.figures()[0].pending, 10, "the mirror's queue drained", interval=0.01
    )
    offer(Source(), object(), "color_detector", 1)  # no JSON form: dropped_encode
    mirror.close(timeout=5)
    (fig,) = mirror.figures()
    assert fig.drops["dropped_encode"] == 1 and fig.delivered == 3 and fig.pending == 0, fig
    key, value, headers = sink.records[0]
    assert key == "robot1/camera_front"
    assert headers["content-type"] == "application/json"
    assert value == record_value(
        msg,
        key=key,
        node="/node",
        binding="cams",
        model="color_detector",
        version=1,
        source_topic=Source.topic,
        topic=Source.output_topic,
    )
    assert value["message"]["header"]["stamp"] == {"sec": 12, "nanosec": 500_000_000}
    offer(Source(), msg, "color_detector", 1)  # after close: dropped, never raises
    assert mirror.figures()[0].drops["dropped_backlog"] == 8
    assert any("dropped_encode" in line and "could not be written" in line for line in log.lines)


def test_mirror_diagnostics_levels():
    from triton_ros.ros.mirror.kafka_mirror import DROP_REASONS, MirrorFigures

    def figures(offered, delivered, queue_full=0, client_errors=0, running=True):
        drops = dict.fromkeys(DROP_REASONS, 0)
        drops["dropped_queue_full"] = queue_full
        return MirrorFigures(
            "cams",
            "r",
            "{namespace}",
            "b:9092",
            offered,
            delivered,
            0,
            drops,
            client_errors,
            "",
            "Connect to b:9092 failed",
            running,
        )

    reporter = MirrorReporter()
    reporter.report([figures(0, 0)], 1_000_000_000)
    (ok,) = reporter.report([figures(10, 10)], 2_000_000_000)
    assert ok.level == 0 and ok.delivered_rate == 10.0
    (warn,) = reporter.report([figures(20, 12, queue_full=8, client_errors=2)], 3_000_000_000)
    assert warn.level == 1 and "8 results not mirrored" in warn.message
    assert "dropped_queue_full 8" in warn.message and "Connect to b:9092" in warn.message
    (status,) = mirror_statuses("/node", [warn])
    values = {kv.key: kv.value for kv in status.values}
    assert status.name == "/node: kafka mirror cams"
    assert values["dropped_queue_full"] == "8" and values["dropped"] == "8"
    (down,) = reporter.report([figures(20, 12, queue_full=8, running=False)], 4_000_000_000)
    assert down.level == 2

    results, pending, errors = mirror_families([warn.figures])
    assert (
        {"binding": "cams", "topic": "r", "outcome": "dropped_queue_full"},
        8,
    ) in results.samples
    assert ({"binding": "cams", "topic": "r", "outcome": "delivered"}, 12) in results.samples
    assert errors.samples == [({"binding": "cams", "topic": "r"}, 2)]
