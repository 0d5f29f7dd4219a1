"""The Kafka frontend's Prometheus metrics, added to the server's metrics endpoint through the
core's registry of metric sources (``core/metric_family.MetricSources``):

- ``nv_kafka_messages_received{topic}`` (counter): request records consumed;
- ``nv_kafka_messages_produced{topic, kind}`` (counter): records the broker acknowledged, by
  kind (reply, error, dead_letter);
- ``nv_kafka_messages_failed{topic, reason}`` (counter, the request's topic): Triton's status of
  an error reply (INVALID_ARG, NOT_FOUND, UNAVAILABLE, INTERNAL...), why a record went to the
  dead-letter topic (malformed, too_large, no_reply_topic), or ``undeliverable``;
- ``nv_kafka_requests_retried{topic}`` (counter): requests sent again after a full model queue;
- ``nv_kafka_consumer_lag{topic, partition}`` (gauge): records behind the partition's end, from
  librdkafka's statistics (every 2 s);
- ``nv_kafka_in_flight`` (gauge): requests consumed and not yet acknowledged;
- ``nv_kafka_paused_partitions`` (gauge): partitions paused by backpressure;
- ``nv_kafka_client_errors{error}`` (counter): errors the Kafka client reported (a broker down,
  all brokers down, authentication...).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict

from ...core.metric_family import COUNTER, GAUGE, Family

_HELP = {
    "nv_kafka_messages_received": (
        COUNTER,
        "Number of inference request messages consumed from Kafka, per topic",
    ),
    "nv_kafka_messages_produced": (
        COUNTER,
        "Number of messages the Kafka frontend produced and "
        "the broker acknowledged, per topic and kind",
    ),
    "nv_kafka_messages_failed": (
        COUNTER,
        "Number of Kafka request messages not served, per request topic and reason",
    ),
    "nv_kafka_requests_retried": (
        COUNTER,
        "Number of Kafka requests sent to the model again because its queue was full",
    ),
    "nv_kafka_consumer_lag": (
        GAUGE,
        "Kafka consumer lag: messages behind the end of the partition",
    ),
    "nv_kafka_in_flight": (GAUGE, "Kafka requests consumed and not yet answered and acknowledged"),
    "nv_kafka_paused_partitions": (
        GAUGE,
        "Kafka partitions whose fetching is paused (backpressure)",
    ),
    "nv_kafka_client_errors": (
        COUNTER,
        "Number of errors the Kafka client reported (broker "
        "connection lost, all brokers down, authentication...)",
    ),
}


class KafkaMetrics:
    """Counters and gauges of one Kafka frontend; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
        self._lag: dict[tuple[str, int], int] = {}
        self.in_flight = 0
        self.paused = 0

    def count(self, family: str, *labels: str, n: int = 1) -> None:
        with self._lock:
            self._counters[family][labels] += n

    def received(self, topic: str) -> None:
        self.count("nv_kafka_messages_received", topic)

    def produced(self, topic: str, kind: str) -> None:
        self.count("nv_kafka_messages_produced", topic, kind)

    def failed(self, topic: str, reason: str) -> None:
        self.count("nv_kafka_messages_failed", topic, reason)

    def value(self, family: str, *labels: str) -> int:
        with self._lock:
            return self._counters[family].get(labels, 0)

    def total(self, family: str) -> int:
        with self._lock:
            return sum(self._counters[family].values())

    def set_lag_from_statistics(self, stats_json: str, assigned: set[tuple[str, int]]) -> None:
        """Consumer lag per assigned partition from librdkafka's statistics JSON."""
        try:
            stats = json.loads(stats_json)
        except ValueError:
            return
        lag: dict[tuple[str, int], int] = {}
        for topic, t in (stats.get("topics") or {}).items():
            for part, p in (t.get("partitions") or {}).items():
                key = (topic, int(part)) if part.lstrip("-").isdigit() else None
                if key is None or key not in assigned:
                    continue
                value = p.get("consumer_lag", -1)
                if isinstance(value, int) and value >= 0:
                    lag[key] = value
        with self._lock:
            self._lag = lag

    def clear_lag(self) -> None:
        with self._lock:
            self._lag = {}

    def families(self) -> list[Family]:
        labels_of = {
            "nv_kafka_messages_received": ("topic",),
            "nv_kafka_messages_produced": ("topic", "kind"),
            "nv_kafka_messages_failed": ("topic", "reason"),
            "nv_kafka_requests_retried": ("topic",),
            "nv_kafka_client_errors": ("error",),
        }
        out = []
        with self._lock:
            for name, names in labels_of.items():
                family = Family(name, *_HELP[name])
                for labels, value in sorted(self._counters[name].items()):
                    family.add(dict(zip(names, labels)), value)
                out.append(family)
            lag = Family("nv_kafka_consumer_lag", *_HELP["nv_kafka_consumer_lag"])
            for (topic, partition), value in sorted(self._lag.items()):
                lag.add({"topic": topic, "partition": str(partition)}, value)
            out.append(lag)
            for name, value in (
                ("nv_kafka_in_flight", self.in_flight),
                ("nv_kafka_paused_partitions", self.paused),
            ):
                family = Family(name, *_HELP[name])
                family.add({}, value)
                out.append(family)
        return out
