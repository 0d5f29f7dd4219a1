"""The Kafka mirrors on the node's Prometheus metrics endpoint, beside the Kafka frontend's
``nv_kafka_*`` families (added through the core's registry of metric sources):

- ``nv_kafka_mirror_results{binding, topic, outcome}`` (counter): results the binding handed to
  its mirror, by outcome: ``delivered`` (acknowledged by the brokers) or a drop reason
  (``dropped_backlog``, ``dropped_encode``, ``dropped_queue_full``, ``dropped_refused``,
  ``failed_delivery``);
- ``nv_kafka_mirror_pending{binding, topic}`` (gauge): results waiting for the brokers;
- ``nv_kafka_mirror_client_errors{binding, topic}`` (counter): errors the mirror's Kafka client
  reported (a broker down, all brokers down...).
"""

from __future__ import annotations

from ...core.metric_family import COUNTER, GAUGE, Family
from .kafka_mirror import DROP_REASONS, MirrorFigures


def mirror_families(mirrors: list[MirrorFigures]) -> list[Family]:
    results = Family(
        "nv_kafka_mirror_results",
        COUNTER,
        "Number of a binding's results mirrored to Kafka, by outcome: delivered, or why not",
    )
    pending = Family(
        "nv_kafka_mirror_pending", GAUGE, "Results of a binding waiting to be delivered to Kafka"
    )
    errors = Family(
        "nv_kafka_mirror_client_errors",
        COUNTER,
        "Number of errors the Kafka mirror's client reported (brokers down...)",
    )
    for f in mirrors:
        labels = {"binding": f.binding, "topic": f.topic}
        results.add({**labels, "outcome": "delivered"}, f.delivered)
        for reason in DROP_REASONS:
            results.add({**labels, "outcome": reason}, f.drops[reason])
        pending.add(labels, f.pending)
        errors.add(labels, f.client_errors)
    return [results, pending, errors]
