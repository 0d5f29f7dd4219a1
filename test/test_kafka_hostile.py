"""The Kafka frontend as outsiders use it, against the real broker (Tansu, test/kafka_broker.py)
and a real ``triton-ros-server``, with kafka-python (a client other than the server's
confluent-kafka):

- hostile records, written byte for byte (header names that are not UTF-8, null header values,
  a header repeated 10000 times, a 1 MB header...): each one is dead-lettered (or answered),
  and the next good request of the same key on the same partition is answered within seconds,
  also after the server is restarted (SIGINT, which must not hang), without the hostile record
  being consumed again;
- request topics created after the server joined its group, named or matching the pattern,
  created and written by kafka-python: read within seconds with the default settings;
- the client example of docs/kafka.md, run as written.

One broker and one server for the module (``--dist loadfile`` keeps a module on one worker).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
from markdown_it import MarkdownIt

from kafka_broker import TEST_FETCH_WAIT_MS, TEST_SESSION_TIMEOUT_MS, KafkaBroker, RawRecordProducer
from processes import ROOT, wait_until
from prometheus_text import scrape
from server_process import ServerProcess, copy_models

pytestmark = [
    pytest.mark.integration,
    # kafka-python 3.0 reads its protocol schemas with importlib.resources' old API
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated"),
]

TOPIC = "hostile"  # the request topic of the hostile records, 2 partitions
PARTITION = 1  # the partition they are written to
REPLIES = "hostile-replies"  # the server's default reply topic
ANSWER_S = 10.0  # "within seconds": a good request after a hostile one
LATE_S = 20.0  # a request on a topic created after the server joined
STOP_S = 15.0  # SIGINT to exit (the exit timeout is 30 s)


# ------------------------------------------------------------------------------------------
# Broker, server, readers
# ------------------------------------------------------------------------------------------


class Reader:
    """Every record of a topic's partitions from the beginning, read by kafka-python's consumer
    in a thread: (partition, offset, key, value, headers as a list, when it was read)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 1) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.records: list[tuple] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            fetch_max_wait_ms=TEST_FETCH_WAIT_MS,
            max_partition_fetch_bytes=8 << 20,
            enable_auto_commit=False,
        )
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        self._consumer.assign(tps)
        self._consumer.seek_to_beginning(*tps)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for records in self._consumer.poll(timeout_ms=100).values():
                with self._lock:
                    self.records.extend(
                        (r.partition, r.offset, r.key, r.value, list(r.headers), time.monotonic())
                        for r in records
                    )
        self._consumer.close()

    def matching(self, **headers: bytes) -> list[tuple]:
        with self._lock:
            return [
                r
                for r in self.records
                if all((name, value) in r[4] for name, value in headers.items())
            ]

    def wait_for(self, what: str, timeout: float = ANSWER_S, **headers: bytes) -> tuple:
        """The first record with these headers (underscores in names read as dashes)."""
        wanted = {name.replace("_", "-"): value for name, value in headers.items()}
        return wait_until(lambda: next(iter(self.matching(**wanted)), None), timeout, what)[0:6]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class Site:
    broker: KafkaBroker
    args: list[str]
    server: ServerProcess
    producer: RawRecordProducer
    replies: Reader
    dead: Reader

    def start(self) -> None:
        self.server = ServerProcess(*self.args)
        self.server.wait_live()
        wait_until(
            lambda: f"{TOPIC}[{PARTITION}]" in (assignment(self.server) or ""),
            60,
            "the server's partitions",
        )


def assignment(server: ServerProcess) -> str | None:
    found = re.findall(r"Kafka partitions assigned: (.*)$", server.log(), re.M)
    return found[-1] if found else None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    broker = KafkaBroker().start()
    repo = copy_models(tmp_path_factory.mktemp("hostile_models"), "simple")
    for topic, partitions in (
        (TOPIC, 2),
        (f"{TOPIC}.dlq", 1),
        (REPLIES, 1),
        ("inference-requests", 1),
        ("replies-7", 1),
    ):
        broker.create_topic(topic, partitions)
    # default settings but the test broker's timings (docs/kafka.md, "Tests and the test broker")
    args = [
        "--model-repository",
        str(repo),
        "--id",
        "hostile",
        "--kafka-brokers",
        broker.bootstrap,
        "--kafka-group-id",
        "hostile",
        "--kafka-request-topics",
        f"{TOPIC},inference-requests,late-named",
        "--kafka-request-topic-pattern",
        r"late-pattern\..*",
        "--kafka-reply-topic",
        REPLIES,
        "--kafka-session-timeout-ms",
        str(TEST_SESSION_TIMEOUT_MS),
        "--kafka-fetch-wait-max-ms",
        str(TEST_FETCH_WAIT_MS),
    ]
    s = Site(
        broker,
        args,
        None,
        RawRecordProducer(broker.bootstrap),
        Reader(broker.bootstrap, REPLIES),
        Reader(broker.bootstrap, f"{TOPIC}.dlq"),
    )
    try:
        s.start()
        yield s
        s.server.stop_and_check()
    finally:
        s.server.stop()
        s.replies.close()
        s.dead.close()
        s.producer.close()
        broker.stop()


def request_body(i: int) -> bytes:
    """A JSON request for ``simple``: INPUT0 = i..i+15, INPUT1 = 3."""
    return json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "INT32",
                    "shape": [1, 16],
                    "data": list(range(i, i + 16)),
                },
                {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [3] * 16},
            ]
        }
    ).encode()


def check_answer(value: bytes, headers: list, i: int) -> None:
    assert ("triton-status", b"OK") in headers, value
    outputs = {o["name"]: o["data"] for o in json.loads(value)["outputs"]}
    assert outputs["OUTPUT0"] == list(range(i + 3, i + 19))
    assert outputs["OUTPUT1"] == list(range(i - 3, i + 13))


def good_request(site: Site, key: bytes, partition: int, name: str, i: int) -> float:
    """Write a good request (with a null and a binary header the server does not read: both
    allowed) and wait for its answer; the seconds it took."""
    start = time.monotonic()
    site.producer.send(
        TOPIC,
        partition,
        key,
        request_body(i),
        [
            ("model-name", b"simple"),
            ("correlation-id", name.encode()),
            ("x-trace", None),
            ("x-binary", b"\xff\xfe\x00"),
        ],
    )
    _, _, reply_key, value, headers, at = site.replies.wait_for(
        f"the answer to {name}", correlation_id=name.encode()
    )
    assert reply_key == key
    check_answer(value, headers, i)
    return at - start


# ------------------------------------------------------------------------------------------
# Hostile records
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    headers: list  # beside model-name and correlation-id, unless given here
    words: str  # in the dead letter's triton-error-message
    readable: bool = True  # its headers can be read: the dead letter keeps them
    error_reply: bool = True  # an error reply goes to the reply topic too


HOSTILE = {
    "a header name that is not UTF-8": Hostile(
        [(b"x-\xff\xfe-key", b"v")], "header name is not UTF-8", readable=False, error_reply=False
    ),
    "two header names that are not UTF-8": Hostile(
        [(b"\xff", None), (b"ok", b"1"), (b"\xfe\xfe", b"x")],
        "header name is not UTF-8",
        readable=False,
        error_reply=False,
    ),
    "a header value that is not UTF-8": Hostile(
        [("x-binary", b"\xff\xfe"), ("model-name", b"\xff\xfe-model")],
        "'model-name' header is not UTF-8",
    ),
    "null header values": Hostile(
        [("x-trace", None), ("model-name", None)], "'model-name' header is null"
    ),
    "a header repeated 10000 times": Hostile(
        [("x-junk", b"v")] * 10000, "10002 headers, more than the 100"
    ),
    "a 1 MB header": Hostile([("x-junk", b"j" * (1 << 20))], "bytes, more than the 65536"),
    "a reply topic given twice, differently": Hostile(
        [("reply-topic", REPLIES.encode()), ("Reply-Topic", b"elsewhere")],
        "given 2 times with different values",
        error_reply=False,
    ),
}


def hostile_headers(case: Hostile, name: str) -> list:
    headers = list(case.headers)
    if not any(n == "model-name" for n, _ in headers):
        headers.append(("model-name", b"simple"))
    return headers + [("correlation-id", f"bad:{name}".encode())]


def write_hostile(site: Site, name: str, key: bytes, partition: int) -> tuple[int, list]:
    headers = hostile_headers(HOSTILE[name], name)
    offset = site.producer.send(TOPIC, partition, key, request_body(0), headers)
    return offset, headers


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_record_is_dead_lettered_and_its_partition_moves_on(site, name):
    case = HOSTILE[name]
    key = f"robot/{name}".encode()
    offset, headers = write_hostile(site, name, key, PARTITION)
    took = good_request(site, key, PARTITION, f"good after {name}", 1)

    _, _, dl_key, dl_value, dl_headers, _ = site.dead.wait_for(
        "the dead letter",
        triton_source_offset=str(offset).encode(),
        triton_source_partition=str(PARTITION).encode(),
    )
    assert (dl_key, dl_value) == (key, request_body(0))  # unchanged
    ours = dict(h for h in dl_headers if h[0].startswith("triton-"))
    assert ours["triton-dlq-reason"] == b"malformed"
    assert ours["triton-error-code"] == b"INVALID_ARG"
    assert case.words in ours["triton-error-message"].decode(), ours
    assert ours["triton-source-topic"] == TOPIC.encode()
    theirs = [h for h in dl_headers if not h[0].startswith("triton-")]
    if case.readable:  # as written, null values and repeats included
        assert theirs == [(n if isinstance(n, str) else n.decode(), v) for n, v in headers]
    else:  # unreadable names: none of its headers
        assert theirs == []
    errors = site.replies.matching(**{"correlation-id": f"bad:{name}".encode()})
    if case.error_reply:
        [(_, _, _, value, reply_headers, _)] = wait_until(
            lambda: site.replies.matching(**{"correlation-id": f"bad:{name}".encode()}),
            ANSWER_S,
            "the error reply",
        )
        assert ("triton-status", b"INVALID_ARG") in reply_headers
        assert case.words in json.loads(value)["error"]
    else:
        assert errors == []
    assert took < ANSWER_S
    log = site.server.log()
    assert site.server.proc.poll() is None, log[-3000:]
    assert "Traceback" not in log and "consumer loop error" not in log, log[-3000:]


def test_after_hostile_records_a_restart_serves_their_partitions_at_once(site):
    """Every hostile record on both partitions, then SIGINT (it must not hang) and a new server:
    the good requests that follow are answered within seconds, and no hostile record is
    consumed again (their offsets were committed)."""
    sent = []
    for partition in (0, 1):
        for name in HOSTILE:
            key = f"restart/{partition}".encode()
            sent.append((partition, write_hostile(site, name, key, partition)[0]))
    for partition, offset in sent:
        site.dead.wait_for(
            "the dead letter",
            triton_source_offset=str(offset).encode(),
            triton_source_partition=str(partition).encode(),
        )
    for partition in (0, 1):  # answered: every record before it has been dead-lettered
        good_request(
            site, f"restart/{partition}".encode(), partition, f"before restart {partition}", 2
        )

    start = time.monotonic()
    site.server.stop_and_check()
    stopped_in = time.monotonic() - start
    assert stopped_in < STOP_S, f"SIGINT took {stopped_in:.1f} s"
    site.start()
    for partition in (0, 1):
        took = good_request(
            site, f"restart/{partition}".encode(), partition, f"after restart {partition}", 3
        )
        assert took < ANSWER_S
    received = scrape(site.server.metrics_url)["nv_kafka_messages_received"]
    assert received.by("topic").get(TOPIC) == 2  # only the two good requests
    for partition, offset in sent:  # each dead-lettered once
        assert (
            len(
                site.dead.matching(
                    **{
                        "triton-source-offset": str(offset).encode(),
                        "triton-source-partition": str(partition).encode(),
                    }
                )
            )
            == 1
        )


# ------------------------------------------------------------------------------------------
# Request topics created after the server joined its group
# ------------------------------------------------------------------------------------------


def create_late_topic_and_request(site: Site, topic: str) -> float:
    """Create ``topic`` and write a request to it with kafka-python (admin client, producer);
    the seconds until it is answered."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    assert assignment(site.server) and topic not in assignment(site.server)
    admin = KafkaAdminClient(bootstrap_servers=site.broker.bootstrap)
    producer = KafkaProducer(bootstrap_servers=site.broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        start = time.monotonic()
        producer.send(
            topic,
            request_body(5),
            key=b"late",
            headers=[("model-name", b"simple"), ("correlation-id", topic.encode())],
        ).get(timeout=10)
    finally:
        producer.close()
        admin.close()
    _, _, _, value, headers, at = site.replies.wait_for(
        f"the answer on {topic}", LATE_S * 2, correlation_id=topic.encode()
    )
    check_answer(value, headers, 5)
    return at - start


def test_a_named_request_topic_created_later_is_read_within_seconds(site):
    took = create_late_topic_and_request(site, "late-named")
    assert took < LATE_S, f"answered after {took:.1f} s"


def test_a_topic_matching_the_pattern_created_later_is_read_within_seconds(site):
    took = create_late_topic_and_request(site, "late-pattern.robots")
    assert took < LATE_S, f"answered after {took:.1f} s"


# ------------------------------------------------------------------------------------------
# The client example of docs/kafka.md
# ------------------------------------------------------------------------------------------


def docs_client_example() -> str:
    """The Python block under "### A client" in docs/kafka.md."""
    tokens = MarkdownIt().parse((ROOT / "docs" / "kafka.md").read_text())
    heading = next(
        i
        for i, t in enumerate(tokens)
        if t.type == "inline" and t.content == "A client" and tokens[i - 1].tag == "h3"
    )
    return next(t.content for t in tokens[heading:] if t.type == "fence" and t.info == "python")


def test_the_client_example_of_the_docs_runs_as_written(site):
    result = subprocess.run(
        [sys.executable, "-c", docs_client_example()],
        env={**os.environ, "KAFKA_BROKERS": site.broker.bootstrap},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    expected = np.arange(16, dtype=np.int32).reshape(1, 16) + 1  # INPUT0 + INPUT1
    assert result.stdout.strip() == str(expected), result.stdout
