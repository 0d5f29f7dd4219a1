"""A binding's Kafka result mirror: its settings (``<binding>.kafka_mirror_*``), and the rule
that the node's brokers (``kafka.*``) serve the Kafka frontend, a mirror, or both.

Each binding with a ``kafka_mirror_topic`` produces its results there, over the brokers, TLS
and SASL settings of the node's ``kafka.*`` parameters (the Kafka frontend's own settings,
``triton_ros/frontend/kafka/options.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from ...core.errors import invalid_arg
from ...frontend.kafka.options import KafkaOptions, check_topic
from ...settings import build, parameter_namer, setting


@dataclass(frozen=True)
class MirrorConfig:
    """Where and how a binding's results are mirrored to Kafka; each field is a setting, the
    binding's parameter ``kafka_mirror_*``."""

    topic: str = setting(
        "",
        "Kafka topic that receives a copy of every result this binding publishes, as JSON "
        "(the message's fields, with its header stamp and frame_id; docs/kafka.md), over "
        "the brokers of kafka.brokers; empty: no mirror. Never delays a frame: results the "
        "brokers cannot take in time are dropped and counted on /diagnostics.",
        name="kafka_mirror_topic",
    )
    key_template: str = setting(
        "{namespace}",
        "Key of each mirrored result, with the fields of output_topic_template "
        "({namespace}, {topic}, {basename}, {output_name}, {binding}, {model}) "
        "and the leading '/' removed: /robot1/camera_front/image_raw is "
        "robot1/camera_front. One key goes to one partition, in order.",
        name="kafka_mirror_key",
    )
    max_queued: int = setting(
        1000,
        "Results of this binding waiting for Kafka (in the mirror's queue, and again in "
        "the Kafka client's); more are dropped and counted (dropped_backlog, "
        "dropped_queue_full).",
        name="kafka_mirror_max_queued",
        low=1,
    )
    timeout_ms: int = setting(
        30000,
        "A mirrored result the brokers have not acknowledged within this is given up "
        "and counted (failed_delivery), milliseconds.",
        name="kafka_mirror_timeout_ms",
        low=1,
    )


class MirroredBinding(Protocol):
    """What a mirror reads of its binding."""

    name: str
    model: str
    output_name: str
    kafka_mirror: MirrorConfig | None


def mirror_config(values: Mapping[str, Any], binding: str) -> MirrorConfig | None:
    """A binding's mirror from its parameter values (relative names; the key's template fields
    are checked with output_topic_template's); None without a topic."""
    name = parameter_namer(MirrorConfig, f"{binding}.")
    topic = str(values.get("kafka_mirror_topic", "")).strip()
    if not topic:
        return None
    config = build(MirrorConfig, values, name, topic=topic)
    check_topic(topic, name("topic"))
    if not config.key_template.strip("/"):
        raise invalid_arg(f"{name('key_template')} must not be empty")
    return config


def check_kafka_use(kafka: KafkaOptions, mirrored: list[str]) -> None:
    """Brokers must serve the frontend or a mirror; a mirror needs brokers. ``mirrored``: the
    bindings with a mirror."""
    if mirrored and not kafka.enable:
        raise invalid_arg(
            f"parameter '{mirrored[0]}.kafka_mirror_topic' needs the brokers in "
            f"parameter 'kafka.brokers'"
        )
    if kafka.enable and not kafka.subscription() and not mirrored:
        raise invalid_arg(
            "parameter 'kafka.brokers' is set but nothing uses it: give "
            "kafka.request_topics or kafka.request_topic_pattern (the Kafka "
            "frontend), or a binding's kafka_mirror_topic"
        )
