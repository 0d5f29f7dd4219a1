"""The Kafka frontend against a real Kafka-protocol broker (Tansu, test/kafka_broker.py) and real
``triton-ros-server`` processes: requests produced and replies consumed by client libraries, the
server's own (confluent-kafka) and another (aiokafka), tensors checked against the values sent.

Covered: one message of every tensor type, JSON and binary; a flood of malformed messages (all
to the dead-letter topic, valid ones still answered, no traceback); order per key with the
in-flight bound and a full model queue retried; two servers sharing a group's partitions, one
killed mid-stream (every request answered at least once, the rest taken over); the broker
restarted (the server reconnects and serves new requests); the result sink.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import threading
import time
import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from onnx import helper

from kafka_broker import (
    TEST_FETCH_WAIT_MS,
    TEST_SESSION_TIMEOUT_MS,
    KafkaBroker,
    aiokafka_clients,
    read_records,
)
from model_factory import ONNX_TYPES, save, slow_graph
from processes import wait_until
from server_process import ServerProcess, copy_models
from prometheus_text import scrape

pytestmark = pytest.mark.integration

TYPES = (
    "BOOL",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
)
FETCH_WAIT_MS = TEST_FETCH_WAIT_MS  # Tansu holds an empty fetch this long (kafka_broker.py)


# ------------------------------------------------------------------------------------------
# Models, broker, servers
# ------------------------------------------------------------------------------------------


def write_identity_all(repo) -> None:
    """``identity_all``: OUTPUT_<T> = INPUT_<T> for every Triton datatype, shape [2, 3]."""
    nodes, inputs, outputs, config = (
        [],
        [],
        [],
        ['name: "identity_all"', 'backend: "onnxruntime"', "max_batch_size: 0"],
    )
    for t in TYPES:
        nodes.append(helper.make_node("Identity", [f"INPUT_{t}"], [f"OUTPUT_{t}"]))
        inputs.append(helper.make_tensor_value_info(f"INPUT_{t}", ONNX_TYPES[t], [2, 3]))
        outputs.append(helper.make_tensor_value_info(f"OUTPUT_{t}", ONNX_TYPES[t], [2, 3]))
        dtype = "STRING" if t == "BYTES" else t
        config.append(f'input {{ name: "INPUT_{t}" data_type: TYPE_{dtype} dims: [2, 3] }}')
        config.append(f'output {{ name: "OUTPUT_{t}" data_type: TYPE_{dtype} dims: [2, 3] }}')
    save(
        helper.make_graph(nodes, "identity_all", inputs, outputs),
        repo / "identity_all" / "1" / "model.onnx",
    )
    (repo / "identity_all" / "config.pbtxt").write_text("\n".join(config) + "\n")


def write_queued(repo) -> None:
    """``queued``: OUTPUT0 = INPUT0 (FP32 [1]), a few ms a request, one at a time, and a queue
    of at most 2 requests (more are refused with UNAVAILABLE: the Kafka frontend retries)."""
    save(slow_graph(size=192, repeats=1), repo / "queued" / "1" / "model.onnx")
    (repo / "queued" / "config.pbtxt").write_text("""
name: "queued"
backend: "onnxruntime"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
dynamic_batching { default_queue_policy { max_queue_size: 2 } }
""")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = copy_models(tmp_path_factory.mktemp("kafka_models"), "simple")
    write_identity_all(path)
    write_queued(path)
    return path


@pytest.fixture(scope="module")
def broker():
    b = KafkaBroker().start()
    yield b
    b.stop()


def kafka_args(broker: KafkaBroker, repo, topics: str, group: str, *extra: str) -> list[str]:
    return [
        "--model-repository",
        str(repo),
        "--kafka-brokers",
        broker.bootstrap,
        "--kafka-request-topics",
        topics,
        "--kafka-group-id",
        group,
        "--kafka-session-timeout-ms",
        str(TEST_SESSION_TIMEOUT_MS),
        "--kafka-fetch-wait-max-ms",
        str(FETCH_WAIT_MS),
        *extra,
    ]


_ASSIGNED = re.compile(r"Kafka partitions assigned: (.*)$", re.M)


def assignment(server: ServerProcess) -> set[str] | None:
    """The partitions of the server's latest assignment (None: none yet)."""
    found = _ASSIGNED.findall(server.log())
    if not found:
        return None
    return set() if found[-1] == "none" else set(found[-1].split(", "))


def wait_assigned(*servers: ServerProcess, partitions: int, timeout: float = 30.0) -> None:
    """Until the servers' latest assignments split ``partitions`` partitions between them."""

    def split() -> bool:
        sets = [assignment(s) for s in servers]
        return (
            all(s is not None for s in sets)
            and sum(len(s) for s in sets) == partitions
            and len(set().union(*sets)) == partitions
            and all(sets)
        )

    try:
        wait_until(
            split, timeout, f"{partitions} partitions split between the servers", interval=0.1
        )
    except AssertionError as exc:
        raise TimeoutError(
            f"{exc}: assignments {[assignment(s) for s in servers]}:\n"
            + "\n".join(s.log()[-2000:] for s in servers)
        ) from None


def metric(server: ServerProcess, name: str, **labels) -> float:
    """The sum of a family's samples that match ``labels`` (0 when none)."""
    family = scrape(server.metrics_url).get(name)
    if family is None:
        return 0.0
    return sum(
        v
        for key, v in family.samples.items()
        if all(dict(key).get(k) == w for k, w in labels.items())
    )


@pytest.fixture(scope="module")
def server(broker, repo):
    """One server consuming ``requests`` (2 partitions), no default reply topic, at most 4
    requests of a partition in flight."""
    broker.create_topic("requests", 2)
    s = ServerProcess(
        *kafka_args(
            broker,
            repo,
            "requests",
            "shared",
            "--id",
            "shared",
            "--kafka-max-inflight-per-partition",
            "4",
        )
    )
    s.wait_live()
    wait_assigned(s, partitions=2)
    yield s
    rc = s.stop()
    assert rc == 0, s.log()
    assert "Traceback" not in s.log(), s.log()


# ------------------------------------------------------------------------------------------
# Clients (confluent-kafka here; aiokafka where marked)
# ------------------------------------------------------------------------------------------


def request(
    inputs: dict[str, tuple[str, np.ndarray]],
    *,
    model: str,
    binary: bool | set,
    correlation: str,
    reply_topic: str | None,
    outputs: list[str] | None = None,
    binary_outputs: bool | set = False,
) -> tuple[bytes, list]:
    """A request record's value and headers, built by tritonclient's own HTTP body writer;
    ``binary`` and ``binary_outputs``: all tensors, or those named, in binary."""
    infer_inputs = []
    for name, (datatype, array) in inputs.items():
        i = httpclient.InferInput(name, list(array.shape), datatype)
        i.set_data_from_numpy(
            array, binary_data=binary if isinstance(binary, bool) else name in binary
        )
        infer_inputs.append(i)
    infer_outputs = None
    if outputs is not None:
        infer_outputs = [
            httpclient.InferRequestedOutput(
                o,
                binary_data=binary_outputs
                if isinstance(binary_outputs, bool)
                else o in binary_outputs,
            )
            for o in outputs
        ]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        infer_inputs, outputs=infer_outputs, request_id=correlation
    )
    headers = [("model-name", model.encode()), ("correlation-id", correlation.encode())]
    if reply_topic:
        headers.append(("reply-topic", reply_topic.encode()))
    if json_size is not None:
        headers.append(("inference-header-content-length", str(json_size).encode()))
    return body, headers


def parse_reply(value: bytes, headers: dict[str, bytes]):
    length = headers.get("inference-header-content-length")
    return httpclient.InferenceServerClient.parse_response_body(
        value, header_length=int(length) if length else None
    )


class Collector:
    """Every record of a topic's partitions, from the beginning, collected by a thread."""

    def __init__(self, broker: KafkaBroker, topic: str, partitions: int = 1) -> None:
        # (key, value, headers, the record's CreateTime in seconds since the epoch)
        self.records: list[tuple[bytes | None, bytes, dict[str, bytes], float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"collector-{uuid.uuid4()}",
                "fetch.wait.max.ms": FETCH_WAIT_MS,
                "enable.auto.commit": False,
            }
        )
        self._consumer.assign(
            [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = self._consumer.poll(0.1)
            if m is None or m.error() is not None:
                continue
            with self._lock:  # the record's CreateTime: when its producer made it
                self.records.append(
                    (m.key(), m.value(), dict(m.headers() or []), m.timestamp()[1] / 1000.0)
                )
        self._consumer.close()

    def wait(self, n: int, timeout: float = 30.0) -> list:
        """The records received, once there are ``n`` of them or ``timeout`` has passed (the
        caller checks what came)."""

        def enough() -> bool:
            with self._lock:
                return len(self.records) >= n

        try:
            wait_until(enough, timeout, f"{n} records", interval=0.02)
        except AssertionError:
            pass
        with self._lock:
            return list(self.records)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


def producer(broker: KafkaBroker) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})


def add_sub_inputs(i: int) -> dict:
    a = np.arange(16, dtype=np.int32).reshape(1, 16) + i
    b = np.full((1, 16), 3, dtype=np.int32)
    return {"INPUT0": ("INT32", a), "INPUT1": ("INT32", b)}


def check_add_sub(value: bytes, headers: dict, i: int) -> None:
    assert headers["triton-status"] == b"OK", value
    result = parse_reply(value, headers)
    a = np.arange(16, dtype=np.int32).reshape(1, 16) + i
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 3)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 3)


# ------------------------------------------------------------------------------------------
# Every tensor type (aiokafka as the client)
# ------------------------------------------------------------------------------------------


def every_type_values() -> dict[str, np.ndarray]:
    def ints(dtype):
        info = np.iinfo(dtype)
        return np.array([[info.min, info.max, 0], [1, info.max - 1, info.min + 1]], dtype=dtype)

    return {
        "BOOL": np.array([[True, False, True], [False, False, True]]),
        **{
            t: ints(np.dtype(t.lower()))
            for t in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
        },
        "FP16": np.array([[1.5, -2.25, 65504], [6.1e-05, np.inf, np.nan]], dtype=np.float16),
        "FP32": np.array(
            [[1.5, -2.25, 3.4028235e38], [1.4e-45, -0.0, 123456.79]], dtype=np.float32
        ),
        "FP64": np.array([[1.7976931348623157e308, 5e-324, -1.0], [np.pi, 0.1, -1e-300]]),
        "BYTES": np.array(
            [
                [b"", b"hello", "\u00fcnic\u00f8de".encode()],
                [b"x" * 300, b"a b", "nul\x00 tab\t \u20ac".encode()],
            ],
            dtype=np.object_,
        ),  # UTF-8: what ONNX string tensors hold
    }


def test_one_message_of_every_tensor_type(broker, server):
    """Two messages with a tensor of each of the thirteen types, one JSON (FP16, which JSON
    cannot carry, in binary after the JSON; BYTES as UTF-8 text) and one binary (inputs and
    outputs), produced and consumed with aiokafka, decoded with tritonclient, compared with the
    values sent."""

    values = every_type_values()
    json_values = values
    broker.create_topic("types-replies", 1)
    sent = {
        "json": request(
            {f"INPUT_{t}": (t, v) for t, v in json_values.items()},
            model="identity_all",
            binary={"INPUT_FP16"},
            correlation="json",
            reply_topic="types-replies",
            outputs=[f"OUTPUT_{t}" for t in json_values],
            binary_outputs={"OUTPUT_FP16"},
        ),
        "binary": request(
            {f"INPUT_{t}": (t, v) for t, v in values.items()},
            model="identity_all",
            binary=True,
            correlation="binary",
            reply_topic="types-replies",
            outputs=[f"OUTPUT_{t}" for t in values],
            binary_outputs=True,
        ),
    }

    async def exchange():
        async with aiokafka_clients(broker.bootstrap, "types-replies") as (producer, consumer):
            for name, (value, headers) in sent.items():
                await producer.send_and_wait("requests", value, key=name.encode(), headers=headers)
            got = {}
            deadline = time.monotonic() + 30
            while len(got) < len(sent) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for r in records:
                        headers = dict(r.headers)
                        got[headers["correlation-id"].decode()] = (r.key, r.value, headers)
            return got

    got = asyncio.run(exchange())
    assert set(got) == {"json", "binary"}
    for name, expected in (("json", json_values), ("binary", values)):
        key, value, headers = got[name]
        assert key == name.encode()  # replies keyed as the request
        assert headers["triton-status"] == b"OK", value
        assert headers["model-name"] == b"identity_all"
        assert headers["triton-server-id"] == b"shared"
        result = parse_reply(value, headers)
        for t, array in expected.items():
            out = result.as_numpy(f"OUTPUT_{t}")
            assert out.shape == (2, 3), t
            if t == "BYTES":
                # tritonclient gives JSON BYTES as str, binary ones as bytes
                assert [x.encode() if isinstance(x, str) else bytes(x) for x in out.ravel()] == [
                    bytes(x) for x in array.ravel()
                ]
            else:
                assert out.dtype == array.dtype, t
                np.testing.assert_array_equal(out, array, err_msg=t)


# ------------------------------------------------------------------------------------------
# A flood of malformed messages
# ------------------------------------------------------------------------------------------


def malformed_records(reply_topic: str) -> list[tuple[str, bytes | None, list]]:
    """(what, value, headers) of records that cannot be read, each with a correlation id."""
    good_json = json.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
            ]
        }
    ).encode()
    with_reply = [("reply-topic", reply_topic.encode())]
    model = [("model-name", b"simple")]
    return [
        ("not json", b"{not json", with_reply + model),
        ("json array", b"[1, 2, 3]", with_reply + model),
        ("inputs not a list", b'{"inputs": 5}', with_reply + model),
        ("no model", good_json, with_reply),
        ("unknown datatype", good_json.replace(b"INT32", b"FP99"), with_reply + model),
        ("shape and data differ", good_json.replace(b"[1, 16]", b"[2, 16]"), with_reply + model),
        (
            "header length too long",
            good_json,
            with_reply + model + [("inference-header-content-length", b"99999")],
        ),
        (
            "header length not a number",
            good_json,
            with_reply + model + [("inference-header-content-length", b"12abc")],
        ),
        (
            "binary data missing",
            good_json.replace(
                b'"data": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]',
                b'"parameters": {"binary_data_size": 64}',
            ),
            with_reply + model,
        ),
        ("empty value", None, with_reply + model),
        ("random bytes", os.urandom(200), with_reply + model),
        ("deep nesting", b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}", with_reply + model),
        ("bad reply topic", good_json, [("reply-topic", b"no such topic!")] + model),
        ("no reply topic", good_json, model),
        ("model name not utf-8", good_json, with_reply + [("model-name", b"\xff\xfe")]),
    ]


def test_a_flood_of_malformed_messages(broker, server):
    broker.create_topic("requests.dlq", 1)
    broker.create_topic("flood-replies", 1)
    replies = Collector(broker, "flood-replies")
    dead = Collector(broker, "requests.dlq")
    failed_before = metric(server, "nv_kafka_messages_failed", topic="requests")
    kinds = malformed_records("flood-replies")
    copies, valid = 12, 24
    p = producer(broker)
    expected_dlq, expected_errors, n = 0, 0, 0
    for c in range(copies):
        for _what, value, headers in kinds:
            corr = f"bad-{n}"
            n += 1
            p.produce(
                "requests",
                value,
                key=f"k{n % 5}".encode(),
                headers=headers + [("correlation-id", corr.encode())],
            )
            expected_dlq += 1
            if any(h == ("reply-topic", b"flood-replies") for h in headers):
                expected_errors += 1
        for i in range(c * valid // copies, (c + 1) * valid // copies):
            value, headers = request(
                add_sub_inputs(i),
                model="simple",
                binary=i % 2 == 0,
                correlation=f"good-{i}",
                reply_topic="flood-replies",
            )
            p.produce("requests", value, key=f"k{i % 5}".encode(), headers=headers)
        p.poll(0)
        # an unknown model is well-formed: answered NOT_FOUND, not a dead letter
        value, headers = request(
            add_sub_inputs(0),
            model="no_such_model",
            binary=False,
            correlation=f"unknown-{c}",
            reply_topic="flood-replies",
        )
        p.produce("requests", value, key=b"k0", headers=headers)
    assert p.flush(10) == 0

    got = replies.wait(valid + expected_errors + copies)
    letters = dead.wait(expected_dlq)
    replies.close()
    dead.close()
    by_corr = {}
    for _key, value, headers, _ in got:
        by_corr.setdefault(headers["correlation-id"].decode(), []).append((value, headers))
    for i in range(valid):
        [(value, headers)] = by_corr[f"good-{i}"]
        check_add_sub(value, headers, i)
    for c in range(copies):
        [(value, headers)] = by_corr[f"unknown-{c}"]
        assert headers["triton-status"] == b"NOT_FOUND" and b"no_such_model" in value
    errors = [h for k, vs in by_corr.items() if k.startswith("bad-") for _, h in vs]
    assert len(errors) == expected_errors
    assert all(h["triton-status"] == b"INVALID_ARG" for h in errors)

    assert len(letters) == expected_dlq
    reasons = {}
    for _key, _value, headers, _ in letters:
        assert headers["triton-source-topic"] == b"requests"
        assert int(headers["triton-source-offset"]) >= 0
        assert headers["triton-error-code"] == b"INVALID_ARG"
        assert headers["triton-error-message"]
        reasons[headers["triton-dlq-reason"]] = reasons.get(headers["triton-dlq-reason"], 0) + 1
    # an unreadable reply-topic header is malformed too; a request without one has no reply
    assert reasons == {b"malformed": expected_dlq - copies, b"no_reply_topic": copies}
    failed = metric(server, "nv_kafka_messages_failed", topic="requests") - failed_before
    assert failed == expected_dlq + copies  # dead letters and the unknown model's errors
    log = server.log()
    assert "Traceback" not in log
    assert log.count("sent to the dead-letter topic") <= 3 * len(kinds)  # throttled
    assert server.proc.poll() is None


# ------------------------------------------------------------------------------------------
# Order per key, bounded in flight, a full model queue
# ------------------------------------------------------------------------------------------


def test_order_per_key_with_bounded_in_flight_and_a_full_model_queue(broker, server):
    """Two keys of 40 requests each to a model that queues at most 2: the 4 per partition
    the server lets in at once overflow its queue, the refused ones are sent again (never
    answered UNAVAILABLE), each key's replies come in the order sent, and the server never
    holds more than 4 requests of a partition."""
    broker.create_topic("order-replies", 1)
    replies = Collector(broker, "order-replies")
    retried_before = metric(server, "nv_kafka_requests_retried", topic="requests")
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(metric(server, "nv_kafka_in_flight"))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    p = producer(broker)
    keys, per_key = ("robot-a/cam0", "robot-b/cam1"), 40
    for i in range(per_key):
        for k, key in enumerate(keys):
            n = k * 1000 + i
            value, headers = request(
                {"INPUT0": ("FP32", np.array([[n]], np.float32))},
                model="queued",
                binary=False,
                correlation=str(n),
                reply_topic="order-replies",
            )
            # one key a partition (as librdkafka's partitioner would, with other keys)
            p.produce("requests", value, key=key.encode(), partition=k, headers=headers)
    assert p.flush(10) == 0
    got = replies.wait(2 * per_key, timeout=60)
    stop.set()
    sampler.join()
    replies.close()
    assert len(got) == 2 * per_key
    order: dict[bytes, list[int]] = {}
    for key, value, headers, _ in got:
        assert headers["triton-status"] == b"OK", value
        n = int(headers["correlation-id"])
        assert parse_reply(value, headers).as_numpy("OUTPUT0").item() == n
        order.setdefault(key, []).append(n)
    for k, key in enumerate(keys):
        assert order[key.encode()] == [k * 1000 + i for i in range(per_key)]
    assert metric(server, "nv_kafka_requests_retried", topic="requests") > retried_before
    assert max(samples) <= 2 * 4  # 2 partitions x --kafka-max-inflight-per-partition
    # every answered request's offset is committed: the consumer lag (librdkafka's statistics,
    # from the committed offsets, every 2 s) of both partitions comes down to 0
    lags: dict = {}

    def drained() -> bool:
        family = scrape(server.metrics_url).get("nv_kafka_consumer_lag")
        lags.clear()
        lags.update(family.by("partition", topic="requests") if family else {})
        return set(lags) == {"0", "1"} and not any(lags.values())

    wait_until(drained, 15, "both partitions' consumer lag down to 0", interval=0.5)
    assert set(lags) == {"0", "1"} and not any(lags.values()), lags


# ------------------------------------------------------------------------------------------
# Two servers in one group; one killed mid-stream
# ------------------------------------------------------------------------------------------


def test_two_servers_share_partitions_and_survive_a_kill(broker, repo):
    broker.create_topic("stream", 4)
    broker.create_topic("stream-replies", 1)
    servers = [
        ServerProcess(
            *kafka_args(
                broker,
                repo,
                "stream",
                "pair",
                "--id",
                name,
                "--kafka-reply-topic",
                "stream-replies",
            )
        )
        for name in ("a", "b")
    ]
    a, b = servers
    try:
        for s in servers:
            s.wait_live()
        wait_assigned(a, b, partitions=4)
        first_a, first_b = assignment(a), assignment(b)
        replies = Collector(broker, "stream-replies")
        p = producer(broker)
        total, killed_at = 240, 80
        kill_time = None
        for i in range(total):
            value, headers = request(
                add_sub_inputs(i),
                model="simple",
                binary=i % 2 == 1,
                correlation=str(i),
                reply_topic=None,
            )
            p.produce("stream", value, key=f"robot-{i % 12}".encode(), headers=headers)
            p.poll(0)
            time.sleep(0.01)
            if i == killed_at:
                # wait until a has answered something, then kill it mid-stream
                wait_until(
                    lambda: any(
                        h.get("triton-server-id") == b"a" for _, _, h, _ in replies.wait(0, 0)
                    ),
                    20,
                    "a reply from server a",
                )
                a.proc.send_signal(signal.SIGKILL)
                a.proc.wait()
                kill_time = time.time()  # wall clock, as the records' CreateTime
        assert p.flush(10) == 0

        answered: dict[int, list] = {}

        def all_answered() -> bool:
            answered.clear()
            for _key, value, headers, at in replies.wait(0, 0):
                answered.setdefault(int(headers["correlation-id"]), []).append((value, headers, at))
            return len(answered) == total

        try:
            wait_until(all_answered, 45, "every request answered", interval=0.2)
        except AssertionError:
            pass  # the check below names the missing ones
        replies.close()
        missing = sorted(set(range(total)) - set(answered))
        assert not missing, f"not answered: {missing}\n{b.log()[-3000:]}"
        for i, got in answered.items():
            for value, headers, _at in got:
                check_add_sub(value, headers, i)
        by_server = {}
        for got in answered.values():
            for _, headers, at in got:
                by_server.setdefault(headers["triton-server-id"], []).append(at)
        assert by_server.get(b"a") and by_server.get(b"b")  # both served
        # a's replies were all produced before it was killed (some reach us after)
        assert all(at < kill_time for at in by_server[b"a"])
        assert assignment(b) == first_a | first_b  # b took a's partitions over
        duplicates = sum(len(g) - 1 for g in answered.values())
        assert duplicates < total  # at least once, not all twice
        assert metric(b, "nv_kafka_messages_received", topic="stream") > 0
    finally:
        rc = b.stop()
        a.stop()
    assert rc == 0, b.log()
    assert "Traceback" not in b.log()


# ------------------------------------------------------------------------------------------
# The broker restarted
# ------------------------------------------------------------------------------------------


def test_broker_restart(repo, tmp_path):
    """Memory storage: a restarted broker has lost every topic, message, group and offset.
    What holds: the server stays up, logs the loss (throttled) and counts it, reconnects, and
    answers the requests sent after the restart."""
    broker = KafkaBroker().start()
    server = None
    try:
        broker.create_topic("req", 1)
        broker.create_topic("rep", 1)
        server = ServerProcess(
            *kafka_args(broker, repo, "req", "restart", "--kafka-reply-topic", "rep")
        )
        server.wait_live()
        wait_assigned(server, partitions=1)
        p, replies = producer(broker), Collector(broker, "rep")
        value, headers = request(
            add_sub_inputs(1), model="simple", binary=False, correlation="before", reply_topic=None
        )
        p.produce("req", value, headers=headers)
        p.flush(10)
        [(_, v, h, _)] = replies.wait(1)
        check_add_sub(v, h, 1)
        replies.close()

        broker.kill()
        time.sleep(1.0)
        broker.start()
        broker.create_topic("req", 1)
        broker.create_topic("rep", 1)
        replies = Collector(broker, "rep")
        for i in range(5):
            value, headers = request(
                add_sub_inputs(i),
                model="simple",
                binary=False,
                correlation=f"after-{i}",
                reply_topic=None,
            )
            p.produce("req", value, headers=headers)
        assert p.flush(20) == 0
        got = replies.wait(5, timeout=45)
        replies.close()
        assert sorted(h["correlation-id"] for _, _, h, _ in got) == [
            f"after-{i}".encode() for i in range(5)
        ], server.log()[-3000:]
        for _, v, h, _ in got:
            check_add_sub(v, h, int(h["correlation-id"].decode().split("-")[1]))
        assert server.proc.poll() is None
        assert metric(server, "nv_kafka_client_errors") > 0
        log = server.log()
        assert "Traceback" not in log
        assert log.count("Kafka client") < 40  # throttled, not a line per retry
    finally:
        if server is not None:
            assert server.stop() == 0
        broker.stop()


def test_a_bad_client_property_is_refused_at_start(broker, repo):
    server = ServerProcess(
        *kafka_args(
            broker, repo, "requests", "bad", "--kafka-consumer-config", "no.such.property=1"
        )
    )
    assert server.proc.wait(60) == 1
    log = server.log()
    server.stop()
    assert "no.such.property" in log and "Traceback" not in log


# ------------------------------------------------------------------------------------------
# The result sink
# ------------------------------------------------------------------------------------------


def test_result_sink_keyed_results_and_a_missing_broker(broker):
    from triton_ros.frontend.kafka.options import KafkaOptions
    from triton_ros.frontend.kafka.result_sink import KafkaResultSink

    broker.create_topic("results", 3)
    sink = KafkaResultSink(KafkaOptions(brokers=broker.bootstrap), "results")
    sent = []
    for i in range(30):
        key = f"robot{i % 2}/cam{i % 3}"
        assert sink.publish(
            key,
            {"seq": i, "detections": [{"label": "cup", "score": 0.5}]},
            headers={"binding": "cam"},
        )
        sent.append((key, i))
    sink.close()
    assert (sink.stats.published, sink.stats.delivered, sink.stats.failed, sink.stats.dropped) == (
        30,
        30,
        0,
        0,
    )

    records = read_records(broker.bootstrap, "results", 3, lambda out: len(out) >= 30, 20)
    assert len(records) == 30
    by_key: dict[str, list[int]] = {}
    partitions: dict[str, set[int]] = {}
    for r in records:
        body = json.loads(r.value)
        assert body["detections"][0]["label"] == "cup" and dict(r.headers)["binding"] == b"cam"
        by_key.setdefault(r.key.decode(), []).append(body["seq"])
        partitions.setdefault(r.key.decode(), set()).add(r.partition)
    for key in by_key:
        assert by_key[key] == [i for k, i in sent if k == key]  # in order per key
        assert len(partitions[key]) == 1  # one partition per key

    # no broker there: publish never blocks, a full queue drops, undelivered ones are counted
    from server_process import free_port

    away = KafkaResultSink(
        KafkaOptions(brokers=f"127.0.0.1:{free_port()}"),
        "results",
        max_queued=2,
        delivery_timeout_ms=500,
    )
    t0 = time.monotonic()
    results = [away.publish("robot0/cam0", b"x") for _ in range(3)]
    assert time.monotonic() - t0 < 0.5
    assert results == [True, True, False]
    away.close(timeout=3)
    assert (away.stats.published, away.stats.dropped, away.stats.failed) == (2, 1, 2)
