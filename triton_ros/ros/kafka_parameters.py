"""The node's Kafka parameters: the Kafka frontend and connection (``kafka.*``), and each
binding's result mirror (``<binding>.kafka_mirror_*``).

``kafka.*`` are the Kafka frontend's own settings, declared once in
:data:`triton_ros.frontend.kafka.options.SETTINGS` for ``triton-ros-server``'s ``--kafka-*``
flags and these parameters alike (:data:`KAFKA_PARAMS`); :func:`kafka_options` reads them into
the same :class:`~triton_ros.frontend.kafka.options.KafkaOptions`, with errors naming the
parameter. They serve two things:

- the Kafka frontend (requests consumed from ``kafka.request_topics`` or
  ``kafka.request_topic_pattern``, replies produced), which runs when brokers and request
  topics are given (:func:`frontend_options`);
- the result mirrors of the bindings (:data:`MIRROR_PARAMS`, :class:`MirrorConfig`): each
  binding with a ``kafka_mirror_topic`` produces its results there, over the same brokers,
  TLS and SASL settings.

Brokers that neither serves are an error (:func:`check_kafka_use`), as a mirror without brokers
is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import TritonRosError, invalid_arg
from ..frontend.kafka.options import (KAFKA_PARAMS, KafkaOptions, check_topic,
                                      options_from_parameters)

__all__ = ["KAFKA_PARAMS", "MIRROR_PARAMS", "MirrorConfig", "check_kafka_use", "frontend_options",
           "kafka_options", "mirror_config"]

# A binding's mirror, relative to "<binding>." (name, default, kind, description, as
# ENDPOINT_PARAMS); kinds as in ros/parameters.py.
MIRROR_PARAMS: tuple[tuple[str, Any, str, str], ...] = (
    ("kafka_mirror_topic", "", "str",
     "Kafka topic that receives a copy of every result this binding publishes, as JSON (the "
     "message's fields, with its header stamp and frame_id; docs/kafka.md), over the brokers "
     "of kafka.brokers; empty: no mirror. Never delays a frame: results the brokers cannot "
     "take in time are dropped and counted on /diagnostics."),
    ("kafka_mirror_key", "{namespace}", "str",
     "Key of each mirrored result, with the fields of output_topic_template ({namespace}, "
     "{topic}, {basename}, {output_name}, {binding}, {model}) and the leading '/' removed: "
     "/robot1/camera_front/image_raw is robot1/camera_front. One key goes to one partition, in "
     "order."),
    ("kafka_mirror_max_queued", 1000, "int",
     "Results of this binding waiting for Kafka (in the mirror's queue, and again in the Kafka "
     "client's); more are dropped and counted (dropped_backlog, dropped_queue_full)."),
    ("kafka_mirror_timeout_ms", 30000, "int",
     "A mirrored result the brokers have not acknowledged within this is given up and counted "
     "(failed_delivery), milliseconds."),
)


@dataclass(frozen=True)
class MirrorConfig:
    """Where and how a binding's results are mirrored to Kafka."""

    topic: str
    key_template: str = "{namespace}"
    max_queued: int = 1000
    timeout_ms: int = 30000


def kafka_options(values: dict[str, Any]) -> KafkaOptions:
    """The ``kafka.*`` parameters as KafkaOptions: the connection, and the frontend's topics when
    given. INVALID_ARG names the parameter."""
    return options_from_parameters(values, require_topics=False)


def frontend_options(kafka: KafkaOptions) -> KafkaOptions:
    """What the Kafka frontend runs with: ``kafka``, or off when no request topic is given (the
    brokers then serve only the bindings' mirrors)."""
    return kafka if kafka.enable and kafka.subscription() else KafkaOptions()


def mirror_config(binding: str, raw: dict[str, Any]) -> MirrorConfig | None:
    """A binding's mirror from its checked values (relative names; the key's template fields
    are checked with output_topic_template's); None without a topic."""
    topic = raw["kafka_mirror_topic"].strip()
    if not topic:
        return None
    try:
        check_topic(topic, f"parameter '{binding}.kafka_mirror_topic'")
    except TritonRosError as exc:
        raise invalid_arg(exc.message) from None
    if not raw["kafka_mirror_key"].strip("/"):
        raise invalid_arg(f"parameter '{binding}.kafka_mirror_key' must not be empty")
    for param, low in (("kafka_mirror_max_queued", 1), ("kafka_mirror_timeout_ms", 1)):
        if raw[param] < low:
            raise invalid_arg(f"parameter '{binding}.{param}' must be at least {low}, got "
                              f"{raw[param]}")
    return MirrorConfig(topic, raw["kafka_mirror_key"], raw["kafka_mirror_max_queued"],
                        raw["kafka_mirror_timeout_ms"])


def check_kafka_use(kafka: KafkaOptions, mirrored: list[str]) -> None:
    """Brokers must serve the frontend or a mirror; a mirror needs brokers. ``mirrored``: the
    bindings with a mirror."""
    if mirrored and not kafka.enable:
        raise invalid_arg(f"parameter '{mirrored[0]}.kafka_mirror_topic' needs the brokers in "
                          f"parameter 'kafka.brokers'")
    if kafka.enable and not kafka.subscription() and not mirrored:
        raise invalid_arg("parameter 'kafka.brokers' is set but nothing uses it: give "
                          "kafka.request_topics or kafka.request_topic_pattern (the Kafka "
                          "frontend), or a binding's kafka_mirror_topic")
