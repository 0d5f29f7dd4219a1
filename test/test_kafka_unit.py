"""The Kafka frontend's parts without a broker: its options (flags and ROS parameters), its
message conventions (requests, replies, errors, dead letters built and read with tritonclient's
own HTTP body functions), the per-partition ordering and commit bookkeeping, and its metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from triton_ros.core.errors import StatusCode, TritonRosError, invalid_arg
from triton_ros.core.infer_request import InferResponse
from triton_ros.frontend import options as endpoint_options
from triton_ros.frontend.http.http_codec import OutputPlan
from triton_ros.frontend.kafka import messages
from triton_ros.frontend.kafka import options as kafka_options
from triton_ros.frontend.kafka.in_flight import PartitionInFlight
from triton_ros.frontend.kafka.kafka_metrics import KafkaMetrics
from triton_ros.frontend.kafka.messages import Record
from triton_ros.server_main import build_parser

pytestmark = pytest.mark.unit


def parse(*argv: str):
    """The endpoint options of ``triton-ros-server`` with these flags."""
    args = build_parser().parse_args(["--model-repository", "unused", *argv])
    return endpoint_options.options_from_args(args)


# ------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------


def test_off_by_default_and_flags_fill_the_options():
    assert not parse().kafka.enable
    k = parse(
        "--kafka-brokers",
        "b1:9092,b2:9092",
        "--kafka-request-topics",
        "a,b",
        "--kafka-request-topics",
        "c",
        "--kafka-request-topic-pattern",
        "robots\\..*",
        "--kafka-reply-topic",
        "replies",
        "--kafka-group-id",
        "fleet",
        "--kafka-consumer-config",
        "fetch.min.bytes=1",
    ).kafka
    assert k.enable and k.request_topics == ("a", "b", "c")
    assert k.subscription() == ["a", "b", "c", "^robots\\..*"]
    assert k.consumer_settings()["group.id"] == "fleet"
    assert k.consumer_settings()["fetch.min.bytes"] == "1"
    assert k.consumer_settings()["enable.auto.offset.store"] is False  # stored after replies
    assert k.producer_settings()["acks"] == "all"
    assert k.dead_letter_topic_for("a") == "a.dlq"


@pytest.mark.parametrize(
    "argv, words",
    [
        (("--kafka-brokers", "b:1"), "--kafka-request-topics"),
        (("--kafka-request-topics", "a"), "--kafka-brokers"),
        (
            ("--kafka-brokers", "b:1", "--kafka-request-topics", "bad topic"),
            "not a valid Kafka topic",
        ),
        (
            ("--kafka-brokers", "b:1", "--kafka-request-topic-pattern", "(unclosed"),
            "not a regular expression",
        ),
        (
            (
                "--kafka-brokers",
                "b:1",
                "--kafka-request-topics",
                "a",
                "--kafka-security-protocol",
                "SASL_SSL",
            ),
            "--kafka-sasl-mechanism",
        ),
        (
            (
                "--kafka-brokers",
                "b:1",
                "--kafka-request-topics",
                "a",
                "--kafka-security-protocol",
                "SASL_PLAINTEXT",
                "--kafka-sasl-mechanism",
                "PLAIN",
                "--kafka-sasl-username",
                "u",
            ),
            "password",
        ),
        (
            (
                "--kafka-brokers",
                "b:1",
                "--kafka-request-topics",
                "a",
                "--kafka-ssl-ca-location",
                "/nonexistent.pem",
            ),
            "SSL",
        ),
        (
            ("--kafka-brokers", "b:1", "--kafka-request-topics", "a", "--kafka-max-inflight", "0"),
            "--kafka-max-inflight must be a positive integer",
        ),
        (
            (
                "--kafka-brokers",
                "b:1",
                "--kafka-request-topics",
                "a",
                "--kafka-producer-config",
                "novalue",
            ),
            "KEY=VALUE",
        ),
    ],
)
def test_bad_flags_are_invalid_arg_naming_the_flag(argv, words):
    with pytest.raises(TritonRosError) as err:
        parse(*argv)
    assert err.value.code == StatusCode.INVALID_ARG
    assert words in err.value.message


def test_sasl_password_from_the_environment_and_never_in_repr(monkeypatch):
    monkeypatch.setenv(kafka_options.PASSWORD_ENV, "s3cret")
    k = parse(
        "--kafka-brokers",
        "b:1",
        "--kafka-request-topics",
        "a",
        "--kafka-security-protocol",
        "SASL_PLAINTEXT",
        "--kafka-sasl-mechanism",
        "SCRAM-SHA-256",
        "--kafka-sasl-username",
        "robot",
    ).kafka
    assert k.common_config()["sasl.password"] == "s3cret"
    assert "s3cret" not in repr(k)


def test_ros_parameters_map_onto_the_same_options():
    names = [s.name for s in endpoint_options.parameters() if s.name.startswith("kafka.")]
    assert "kafka.brokers" in names and "kafka.request_topics" in names
    assert len(names) == len(set(names))
    k = kafka_options.options_from_parameters(
        {"kafka.brokers": "b:1", "kafka.request_topics": ["a", "b"], "kafka.max_inflight": 7}
    )
    assert k.request_topics == ("a", "b") and k.max_inflight == 7


# ------------------------------------------------------------------------------------------
# Messages
# ------------------------------------------------------------------------------------------


def request_body(binary: bool):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(name, [1, 16], "INT32")
        i.set_data_from_numpy(a, binary_data=binary)
        inputs.append(i)
    return httpclient.InferenceServerClient.generate_request_body(inputs, request_id="r1")


@pytest.mark.parametrize("binary", [False, True])
def test_a_request_is_read_with_the_http_codec(binary):
    body, json_size = request_body(binary)
    headers = [("Model-Name", b"simple"), ("model-version", b"1")]
    if json_size is not None:
        headers.append(("Inference-Header-Content-Length", str(json_size).encode()))
    request, plan = messages.decode_request(body, headers)
    assert (request.model_name, request.model_version, request.id) == ("simple", 1, "r1")
    np.testing.assert_array_equal(request.inputs["INPUT1"], np.arange(16).reshape(1, 16))


def test_the_model_may_be_named_by_underscore_headers():
    body = json.dumps(
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.5]}]}
    ).encode()
    request, _ = messages.decode_request(body, [("MODEL_NAME", b"simple"), ("model_version", b"3")])
    assert (request.model_name, request.model_version) == ("simple", 3)


def test_the_model_may_be_named_in_the_json():
    body = json.dumps(
        {
            "model_name": "simple",
            "model_version": 2,
            "inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.5]}],
        }
    ).encode()
    request, _ = messages.decode_request(body, [])
    assert (request.model_name, request.model_version) == ("simple", 2)


@pytest.mark.parametrize(
    "value, headers, words",
    [
        (b"", [], "no value"),
        (b"{not json", [("model-name", b"m")], "failed to parse"),
        (b"[1, 2]", [("model-name", b"m")], "must be an object"),
        (b'{"inputs": []}', [], "no model named"),
        (b'{"model_name": "a", "inputs": []}', [("model-name", b"b")], "differ"),
        (b'{"inputs": []}', [("model-name", b"m"), ("model-version", b"x")], "model version"),
        (b'{"inputs": []}', [("model-name", b"\xff")], "not UTF-8"),
        (
            b'{"inputs": []}',
            [("model-name", b"m"), ("inference-header-content-length", b"99")],
            "inference header size",
        ),
        (
            b'{"inputs": [{"name": "X", "datatype": "FP32", "shape": [2], "data": [1]}]}',
            [("model-name", b"m")],
            "shape does not match",
        ),
    ],
)
def test_malformed_requests_are_invalid_arg(value, headers, words):
    with pytest.raises(TritonRosError) as err:
        messages.decode_request(value, headers)
    assert err.value.code == StatusCode.INVALID_ARG
    assert words in err.value.message


def test_routing_reply_topic_and_correlation_aliases():
    r = messages.read_routing(
        [("kafka_correlationId", b"\x01\x02"), ("kafka_replyTopic", b"answers")], b"k", "default"
    )
    assert r.reply_topic == "answers" and r.key == b"k"
    assert ("correlation-id", b"\x01\x02") in r.correlation
    assert messages.read_routing([], None, "default").reply_topic == "default"
    with pytest.raises(TritonRosError):
        messages.read_routing([("reply-topic", b"no spaces allowed")], None, "")


def test_reply_error_and_dead_letter_records():
    routing = messages.Routing("replies", [("correlation-id", b"c1")], b"robot1")
    response = InferResponse("simple", 1, "r1", {"OUTPUT0": np.arange(4, dtype=np.float16)})
    plan = OutputPlan(default_binary=True)
    record = messages.reply(routing, response, plan)
    h = messages.header_dict(record.headers)
    assert (record.topic, record.key, record.kind) == ("replies", b"robot1", "reply")
    assert h["correlation-id"] == "c1" and h["triton-status"] == "OK"
    result = httpclient.InferenceServerClient.parse_response_body(
        record.value, header_length=int(h["inference-header-content-length"])
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(4, dtype=np.float16))

    err = messages.error_reply(routing, invalid_arg("bad"), "simple", 1)
    assert json.loads(err.value) == {"error": "bad"}
    assert messages.header_dict(err.headers)["triton-status"] == "INVALID_ARG"

    record = messages.read_record(
        FakeMessage(b"k", b"raw", [("x", b"1"), ("n", None)]), "req", 3, 42
    )
    dlq = messages.dead_letter("req.dlq", record, messages.MALFORMED, invalid_arg("why"))
    h = messages.header_dict(dlq.headers)
    assert (dlq.value, dlq.key, dlq.kind) == (b"raw", b"k", "dead_letter")
    assert dlq.headers[:2] == [("x", b"1"), ("n", None)]  # unchanged: null stays null
    assert h["triton-dlq-reason"] == "malformed"
    assert (h["triton-error-code"], h["triton-error-message"]) == ("INVALID_ARG", "why")
    assert (h["triton-source-topic"], h["triton-source-partition"], h["triton-source-offset"]) == (
        "req",
        "3",
        "42",
    )
    bare = messages.dead_letter(
        "req.dlq", record, messages.MALFORMED, invalid_arg("why"), bare=True
    )
    assert (bare.value, bare.key, bare.bare) == (None, b"k", True)
    assert [n for n, _ in bare.headers] == [n for n, _ in dlq.headers[2:]]


# ------------------------------------------------------------------------------------------
# Reading a consumed record: never raises, whatever the record holds
# ------------------------------------------------------------------------------------------


class FakeMessage:
    """confluent-kafka's Message as far as ``read_record`` reads it; ``headers`` may be an
    exception to raise, or a callable."""

    def __init__(self, key, value, headers) -> None:
        self._key, self._value, self._headers = key, value, headers

    def key(self):
        return self._key

    def value(self):
        return self._value

    def headers(self):
        if isinstance(self._headers, BaseException):
            raise self._headers
        return self._headers() if callable(self._headers) else self._headers


def header_pair_without_a_name(value: bytes) -> tuple:
    """A (name, value) tuple whose name slot is empty (NULL), as confluent-kafka builds it for
    a header name that is not UTF-8 (reading the slot would crash the interpreter)."""
    import ctypes

    new = ctypes.pythonapi.PyTuple_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_ssize_t]
    pair = new(2)  # both slots empty
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))  # the slot's own reference
    slot = id(pair) + tuple.__basicsize__ + tuple.__itemsize__  # PyTuple_SET_ITEM(pair, 1)
    ctypes.c_void_p.from_address(slot).value = id(value)
    return pair


def unicode_error_chain() -> SystemError:
    """What confluent-kafka's headers() raises for two header names that are not UTF-8."""
    try:
        try:
            b"\xff".decode()
        except UnicodeDecodeError:  # the chain is the point: __context__, as the library sets
            raise SystemError(  # noqa: B904
                "<class 'UnicodeDecodeError'> returned a result with an exception set"
            )
    except SystemError:
        try:
            raise SystemError("<method 'headers' ...> returned a result with an exception set")
        except SystemError as exc:
            return exc


@pytest.mark.parametrize(
    "message, words",
    [
        (FakeMessage(b"k", b"v", unicode_error_chain()), "header name is not UTF-8"),
        (
            FakeMessage(b"k", b"v", lambda: [("ok", b"1"), header_pair_without_a_name(b"x")]),
            "header name is not UTF-8",
        ),
        (FakeMessage(b"k", b"v", SystemError("something else")), "SystemError: something else"),
        (FakeMessage(b"k", b"v", RuntimeError("boom")), "RuntimeError: boom"),
        (FakeMessage(b"k", b"v", [("a", 1)]), "headers cannot be read"),
        (FakeMessage(b"k", b"v", ("not", "a list")), "headers cannot be read"),
        (FakeMessage(b"k", "text", []), "value cannot be read"),
        (
            FakeMessage(b"k", b"v", [("x", b"y")] * (messages.MAX_HEADERS + 1)),
            f"{messages.MAX_HEADERS + 1} headers",
        ),
        (FakeMessage(b"k", b"v", [("x", b"y" * messages.MAX_HEADER_BYTES)]), "bytes, more than"),
    ],
)
def test_a_record_that_cannot_be_read_is_a_problem_never_an_exception(message, words):
    record = messages.read_record(message, "req", 0, 7)
    assert record.problem is not None and record.problem.code == StatusCode.INVALID_ARG
    assert words in record.problem.message
    assert (record.key, record.offset) == (b"k", 7)


def test_a_record_is_read_into_plain_data_with_its_size():
    headers = [("model-name", b"simple"), ("x-trace", None), ("x-bin", b"\xff\xfe")]
    record = messages.read_record(FakeMessage(b"key", b"value", headers), "req", 1, 3)
    assert record.problem is None and record.headers == headers
    assert record.size == 3 + 5 + sum(len(n) + len(v or b"") for n, v in headers)
    assert messages.read_record(FakeMessage(None, None, None), "t", 0, 0).headers == []


@pytest.mark.parametrize(
    "headers, words",
    [
        ([("model-name", None)], "'model-name' header is null"),
        ([("model-name", b"simple"), ("model_name", b"other")], "different values"),
        ([("reply-topic", b"a"), ("reply-topic", b"b"), ("model-name", b"m")], "different values"),
        ([("model-name", b"m"), ("inference-header-content-length", None)], "is null"),
    ],
)
def test_a_header_the_server_reads_must_be_given_once_and_not_null(headers, words):
    value = b'{"inputs": []}'
    with pytest.raises(TritonRosError) as err:
        messages.read_routing(headers, None, "r")
        messages.decode_request(value, headers)
    assert words in err.value.message


def test_repeated_same_headers_are_read_and_correlation_ids_echoed_once_as_received():
    headers = (
        [("model-name", b"simple")] * 3
        + [("correlation-id", b"\xff\x00")] * 50
        + [("kafka_correlationId", None)]
    )
    routing = messages.read_routing(headers, b"k", "replies")
    assert routing.correlation == [("correlation-id", b"\xff\x00"), ("kafka_correlationId", None)]
    body = json.dumps(
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    ).encode()
    assert messages.decode_request(body, headers)[0].model_name == "simple"


# ------------------------------------------------------------------------------------------
# Ordering and commits per partition
# ------------------------------------------------------------------------------------------


def test_replies_go_out_in_offset_order_and_commits_wait_for_acknowledgements():
    produced = []
    tracker = PartitionInFlight("t", 0, lambda entry, record: produced.append((entry, record)))
    entries = [tracker.add(offset) for offset in range(10, 14)]
    rec = [Record("r", str(i).encode(), None, []) for i in range(4)]
    tracker.ready(entries[2], [rec[2]])  # finished first, waits for 10 and 11
    tracker.ready(entries[1], [rec[1]])
    assert produced == [] and len(tracker) == 4
    tracker.ready(entries[0], [rec[0]])
    assert [r.value for _, r in produced] == [b"0", b"1", b"2"]
    assert tracker.committable is None
    assert tracker.delivered(entries[1])
    assert tracker.committable is None  # 10 not acknowledged yet
    tracker.delivered(entries[0])
    assert tracker.committable == 12  # 10 and 11 acknowledged
    tracker.ready(entries[3], [rec[3], Record("dlq", b"x", None, [])])
    assert tracker.delivered(entries[2])
    assert tracker.committable == 13
    assert not tracker.delivered(entries[3])  # one of its two records
    assert tracker.delivered(entries[3]) and tracker.committable == 14
    assert len(tracker) == 0 and tracker.wait_drained(0)


def test_a_forgotten_entry_lets_later_replies_out_but_is_never_committed_past():
    produced = []
    tracker = PartitionInFlight("t", 0, lambda entry, record: produced.append(record))
    zero, first, second = tracker.add(0), tracker.add(1), tracker.add(2)
    tracker.ready(zero, [Record("r", b"a", None, [])])
    tracker.ready(second, [Record("r", b"c", None, [])])
    tracker.delivered(zero)
    assert tracker.committable == 1
    tracker.forget(first)  # never answered here: offset 1 stays uncommitted
    assert [r.value for r in produced] == [b"a", b"c"]
    tracker.delivered(second)
    assert tracker.committable == 1 and len(tracker) == 0


# ------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------


def test_metrics_families_and_lag_from_librdkafka_statistics():
    m = KafkaMetrics()
    m.received("req")
    m.failed("req", "malformed")
    m.produced("req.dlq", "dead_letter")
    stats = {
        "topics": {
            "req": {
                "partitions": {
                    "0": {"consumer_lag": 5},
                    "-1": {"consumer_lag": -1},
                    "1": {"consumer_lag": 2},
                }
            }
        }
    }
    m.set_lag_from_statistics(json.dumps(stats), {("req", 0)})
    families = {f.name: f for f in m.families()}
    assert families["nv_kafka_messages_failed"].samples == [
        ({"topic": "req", "reason": "malformed"}, 1)
    ]
    assert families["nv_kafka_consumer_lag"].samples == [({"topic": "req", "partition": "0"}, 5)]
    assert families["nv_kafka_messages_produced"].samples == [
        ({"topic": "req.dlq", "kind": "dead_letter"}, 1)
    ]
