"""A sink that mirrors results to a Kafka topic, keyed (for example by ``robot/camera``), for a
fleet's analytics: the ROS node can hand it each binding's results.

:meth:`KafkaResultSink.publish` never blocks the caller (a camera callback): the record goes to
librdkafka's queue, bounded by ``max_queued`` records; when the queue is full (the brokers are
away or slower than the results) the record is dropped and counted. Delivery reports are served
by a thread of the sink's own; a record not delivered within ``delivery_timeout_ms`` (librdkafka
retries until then) is counted as failed. Every drop and failure is logged (throttled) and in
:attr:`stats` (:meth:`snapshot`), with librdkafka's client errors (brokers down) and the latest
error's text. Records with one key go to one partition, in order. Connection and security
settings are the frontend's (:class:`~.options.KafkaOptions`: brokers, TLS, SASL).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ...core.errors import invalid_arg
from .kafka_server import LibrdkafkaLog, ThrottledLog
from .options import KafkaOptions, check_topic

_log = logging.getLogger("triton_ros.kafka.sink")


@dataclass
class SinkStats:
    published: int = 0  # handed to the producer
    delivered: int = 0  # acknowledged by the broker
    dropped: int = 0  # refused at once: the local queue was full, or too large
    failed: int = 0  # not delivered within the delivery timeout, or refused
    queue_full: int = 0  # of ``dropped``: the local queue was full (brokers away or slow)
    client_errors: int = 0  # librdkafka's client errors (a broker down, all brokers down...)
    last_error: str = ""  # the latest drop, failure or client error, as librdkafka says it


class KafkaResultSink:
    """Produces keyed records to one topic; ``close()`` flushes what is queued."""

    def __init__(
        self,
        options: KafkaOptions,
        topic: str,
        *,
        max_queued: int = 10_000,
        delivery_timeout_ms: int = 30_000,
        acks: str = "1",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        from confluent_kafka import KafkaException, Producer

        if not options.brokers:
            raise invalid_arg("the Kafka result sink needs brokers")
        check_topic(topic, "result sink topic")
        self.topic = topic
        self.stats = SinkStats()
        self._lock = threading.Lock()
        self._log = ThrottledLog(_log)
        settings = {
            **options.common_config(),
            "acks": acks,
            "linger.ms": 5,
            "queue.buffering.max.messages": max_queued,
            "message.timeout.ms": delivery_timeout_ms,
            "error_cb": self._client_error,
            "logger": LibrdkafkaLog(self._log),
            "log.connection.close": False,
            **(config or {}),
        }
        try:
            self._producer = Producer(settings)
        except KafkaException as exc:
            raise invalid_arg(
                f"Kafka result sink configuration: {exc.args[0] if exc.args else exc}"
            ) from None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="kafka-sink")
        self._thread.start()

    def publish(
        self,
        key: str | bytes,
        value: bytes | str | Mapping | list,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> bool:
        """Queue one record (a mapping or list is sent as JSON); False when it was dropped."""
        from confluent_kafka import KafkaException

        if isinstance(value, (Mapping, list)):
            value = json.dumps(value, separators=(",", ":")).encode()
        elif isinstance(value, str):
            value = value.encode()
        key = key.encode() if isinstance(key, str) else key
        header_list = [
            (k, v.encode() if isinstance(v, str) else v) for k, v in (headers or {}).items()
        ]
        try:
            self._producer.produce(
                self.topic, value, key=key, headers=header_list, on_delivery=self._delivered
            )
        except (BufferError, KafkaException) as exc:
            full = isinstance(exc, BufferError)
            why = "its queue is full" if full else _error_text(exc.args[0] if exc.args else exc)
            with self._lock:
                self.stats.dropped += 1
                self.stats.queue_full += full
                self.stats.last_error = f"dropped: {why}"
            self._log.warning(
                "dropped", "Kafka result sink dropped a result for %s: %s", self.topic, why
            )
            return False
        with self._lock:
            self.stats.published += 1
        return True

    def snapshot(self) -> SinkStats:
        """A consistent copy of :attr:`stats`."""
        with self._lock:
            return replace(self.stats)

    def flush(self, timeout: float = 10.0) -> int:
        """Wait for queued records; the number still not delivered."""
        return self._producer.flush(timeout)

    def close(self, timeout: float = 10.0) -> None:
        left = self.flush(timeout)
        if left:
            with self._lock:
                self.stats.failed += left
            _log.warning(
                "Kafka result sink closed with %d results not delivered to %s", left, self.topic
            )
        self._closed.set()
        self._thread.join(2.0)

    def _delivered(self, err, msg) -> None:
        with self._lock:
            if err is None:
                self.stats.delivered += 1
                return
            self.stats.failed += 1
            self.stats.last_error = f"not delivered: {_error_text(err)}"
        self._log.warning(
            "failed",
            "Kafka result sink: a result for %s was not delivered: %s",
            self.topic,
            _error_text(err),
        )

    def _client_error(self, error) -> None:
        with self._lock:
            self.stats.client_errors += 1
            self.stats.last_error = f"client error: {_error_text(error)}"
        self._log.warning(
            f"client:{error.name() if hasattr(error, 'name') else error}",
            "Kafka result sink client error (retrying): %s",
            _error_text(error),
        )

    def _poll(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(0.1)
            except Exception as exc:  # a callback's fault: logged, the sink goes on
                self._log.warning("poll", "Kafka result sink: %s: %s", type(exc).__name__, exc)


def _error_text(error) -> str:
    """A KafkaError's text (``str()``), or whatever else was raised, as text."""
    return error.str() if hasattr(error, "str") else str(error)
