"""Typed settings of the Kafka frontend, declared once for the server's flags and the ROS node's
parameters.

Each field of :class:`KafkaOptions` is a setting (``triton_ros/settings.py``): its flag in
tritonserver's style (``--kafka-brokers``, ``--kafka-request-topics``...) and its ROS parameter
(``kafka.brokers``, ``kafka.request_topics``...) come from it. ``triton-ros-server`` adds the
flags with :func:`add_arguments` and reads them with :func:`options_from_args`; the ROS node
declares the same settings and reads them with :func:`options_from_parameters`. Parse,
normalize, validate: a bad value is INVALID_ARG naming the flag (the parameter, for the node's
values); an unknown librdkafka property given with ``--kafka-consumer-config`` or
``--kafka-producer-config`` is refused by librdkafka when the frontend starts.

The frontend is off unless brokers are given (``--kafka-brokers``). Security follows librdkafka's
names: ``--kafka-security-protocol`` PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, TLS files
(``--kafka-ssl-ca-location``, ``--kafka-ssl-certificate-location``, ``--kafka-ssl-key-location``)
and SASL PLAIN or SCRAM credentials (the password may come from ``$TRITON_ROS_KAFKA_SASL_PASSWORD``
instead of the command line).
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ...core.errors import invalid_arg
from ...settings import (
    STR,
    Namer,
    add_flags,
    build,
    check_settings,
    flag_namer,
    flag_values,
    parameter_namer,
    setting,
    settings_of,
    under,
)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
OFFSET_RESETS = ("earliest", "latest")
PASSWORD_ENV = "TRITON_ROS_KAFKA_SASL_PASSWORD"
FLAG_PREFIX, PARAMETER_PREFIX = "--kafka-", "kafka."
MIB = 1 << 20
# A Kafka topic name: at most 249 characters of [a-zA-Z0-9._-] (Kafka's Topic.validate).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class KafkaOptions:
    """Everything the Kafka frontend needs; ``enable`` when brokers are given. Each field is a
    setting: flag ``--kafka-<name>``, ROS parameter ``kafka.<name>``."""

    brokers: str = setting(
        "", "Kafka bootstrap servers, host:port[,host:port...]; empty: Kafka is off (default)."
    )
    request_topics: tuple[str, ...] = setting(
        [],
        "Topics to consume inference requests from (comma-separated or repeated).",
        metavar="TOPIC",
    )
    request_topic_pattern: str = setting(
        "",
        "A regular expression: consume every topic whose name matches, also topics created later.",
    )
    reply_topic: str = setting(
        "",
        "Topic for replies to requests without a reply-topic header (default: none, such "
        "requests go to the dead-letter topic).",
    )
    dead_letter_topic: str = setting(
        "{topic}.dlq",
        "Topic for messages that cannot be read; {topic} is the request's topic "
        "(default {topic}.dlq).",
    )
    group_id: str = setting(
        "triton",
        "Consumer group: servers with the same group share the "
        "request topics' partitions (default triton).",
    )
    client_id: str = setting("triton-ros", "Kafka client id (default triton-ros).")
    auto_offset_reset: str = setting(
        "earliest",
        "Where a new group starts: earliest (default: no request lost) or latest.",
        choices=OFFSET_RESETS,
    )
    security_protocol: str = setting(
        "PLAINTEXT",
        "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.",
        choices=SECURITY_PROTOCOLS,
    )
    ssl_ca_location: str = setting("", "PEM file of the CA certificates that sign the brokers'.")
    ssl_certificate_location: str = setting("", "PEM client certificate (mutual TLS).")
    ssl_key_location: str = setting("", "PEM client key (mutual TLS).")
    ssl_key_password: str = setting("", "Password of the client key.", secret=True)
    ssl_endpoint_identification: bool = setting(
        True, "Check the broker's certificate names its host (default true)."
    )
    sasl_mechanism: str = setting("", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")
    sasl_username: str = setting("", "SASL user name.")
    sasl_password: str = setting("", f"SASL password (default ${PASSWORD_ENV}).", secret=True)
    max_inflight_per_partition: int = setting(
        16,
        "Requests of one partition in the server at once; more pause that partition's "
        "fetching (default 16).",
        low=1,
    )
    max_inflight: int = setting(
        256,
        "Requests from Kafka in the server at once; more pause every partition (default 256).",
        low=1,
    )
    max_message_size: int = setting(
        64 * MIB,
        "Largest request and reply message, bytes; a larger request goes to the "
        "dead-letter topic (default 64 MiB).",
        low=1,
        high=1_000_000_000,
    )  # librdkafka's message.max.bytes limit
    session_timeout_ms: int = setting(
        10_000,
        "Consumer group session timeout: a server silent this long loses its "
        "partitions to the others (default 10000).",
        low=1,
    )
    fetch_wait_max_ms: int = setting(
        20,
        "Longest a broker may hold a fetch that finds no data (default 20; Kafka answers as "
        "soon as data arrives, brokers that do not answer at this period).",
        low=0,
    )
    metadata_refresh_interval_ms: int = setting(
        2000,
        "How often the request topics are looked up, ms: a topic created later (named, "
        "or matching the pattern) is consumed this soon, plus a rebalance (default 2000; "
        "librdkafka's own is 300000).",
        low=1,
        high=3_600_000,
    )  # librdkafka's range
    linger_ms: int = setting(
        1, "How long replies may wait to be sent in a batch (default 1).", low=0
    )
    consumer_config: tuple[tuple[str, str], ...] = setting(
        [], "Further librdkafka consumer property, KEY=VALUE (repeatable)."
    )
    producer_config: tuple[tuple[str, str], ...] = setting(
        [], "Further librdkafka producer property, KEY=VALUE (repeatable)."
    )

    @property
    def enable(self) -> bool:
        return bool(self.brokers)

    def validate(self, name: Namer | None = None, *, require_topics: bool = True) -> "KafkaOptions":
        """Check every setting; INVALID_ARG names it through ``name`` (the flags by default).
        ``require_topics`` false: brokers without request topics are a connection only (the
        ROS node's result mirrors use one)."""
        name = name or flag_namer(KafkaOptions, FLAG_PREFIX)
        check_settings(self, name)
        if not self.enable:
            if self.request_topics or self.request_topic_pattern:
                raise invalid_arg(
                    f"{name('request_topics')}/{name('request_topic_pattern')} "
                    f"need {name('brokers')}"
                )
            return self
        if require_topics and not self.request_topics and not self.request_topic_pattern:
            raise invalid_arg(
                f"{name('brokers')} needs {name('request_topics')} or "
                f"{name('request_topic_pattern')}"
            )
        for topic in self.request_topics:
            check_topic(topic, name("request_topics"))
        if self.request_topic_pattern:
            try:
                re.compile(self.request_topic_pattern)
            except re.error as exc:
                raise invalid_arg(
                    f"{name('request_topic_pattern')} is not a regular expression: {exc}"
                ) from None
        if self.reply_topic:
            check_topic(self.reply_topic, name("reply_topic"))
        check_topic(self.dead_letter_topic.replace("{topic}", "t"), name("dead_letter_topic"))
        if not self.group_id:
            raise invalid_arg(f"{name('group_id')} must not be empty")
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise invalid_arg(
                    f"{name('security_protocol')} {self.security_protocol} needs "
                    f"{name('sasl_mechanism')} ({', '.join(SASL_MECHANISMS)})"
                )
            if not self.sasl_username or not self.sasl_password:
                raise invalid_arg(
                    f"{name('sasl_mechanism')} {self.sasl_mechanism} needs "
                    f"{name('sasl_username')} and a password "
                    f"({name('sasl_password')} or ${PASSWORD_ENV})"
                )
        elif self.sasl_mechanism:
            raise invalid_arg(
                f"{name('sasl_mechanism')} needs {name('security_protocol')} "
                f"SASL_PLAINTEXT or SASL_SSL"
            )
        ssl_files = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")
        if not self.security_protocol.endswith("SSL") and any(getattr(self, f) for f in ssl_files):
            raise invalid_arg(
                f"the SSL files ({', '.join(name(f) for f in ssl_files)}) need "
                f"{name('security_protocol')} SSL or SASL_SSL"
            )
        for f in ssl_files:
            path = getattr(self, f)
            if path and not os.path.isfile(path):
                raise invalid_arg(f"{name(f)}: no file '{path}'")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise invalid_arg(
                f"{name('ssl_certificate_location')} and {name('ssl_key_location')} go together"
            )
        return self

    # ---------------------------------------------------------------- librdkafka settings
    def common_config(self) -> dict[str, Any]:
        """Connection and security properties shared by the consumer and the producers."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.brokers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
        }
        for key, value in (
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
            ("ssl.key.password", self.ssl_key_password),
            ("sasl.mechanism", self.sasl_mechanism),
            ("sasl.username", self.sasl_username),
            ("sasl.password", self.sasl_password),
        ):
            if value:
                config[key] = value
        if self.security_protocol.endswith("SSL"):
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none"
            )
        return config

    def consumer_settings(self) -> dict[str, Any]:
        """At-least-once: offsets are stored by the frontend once a message's reply is
        acknowledged (``enable.auto.offset.store`` false) and committed from there every
        second and when partitions are revoked; the local prefetch queue is bounded. Topics
        are looked up every ``metadata_refresh_interval_ms``, so that a request topic created
        later (named, or matching the pattern) is consumed within seconds."""
        config = self.common_config()
        config.update(
            {
                "group.id": self.group_id,
                "enable.auto.commit": True,
                "enable.auto.offset.store": False,
                "auto.commit.interval.ms": 1000,
                "auto.offset.reset": self.auto_offset_reset,
                "session.timeout.ms": self.session_timeout_ms,
                "heartbeat.interval.ms": max(100, min(3000, self.session_timeout_ms // 3)),
                "fetch.wait.max.ms": self.fetch_wait_max_ms,
                "topic.metadata.refresh.interval.ms": self.metadata_refresh_interval_ms,
                "fetch.message.max.bytes": min(self.max_message_size, 16 * MIB),
                "queued.max.messages.kbytes": 16 * 1024,
                "queued.min.messages": 1000,
                "statistics.interval.ms": 2000,  # consumer lag, for the metrics
            }
        )
        config.update(dict(self.consumer_config))
        return config

    def producer_settings(self) -> dict[str, Any]:
        """Replies and dead letters: acknowledged by every in-sync replica, retried until
        delivered, one produce request in flight per broker connection so that their order per
        partition survives retries. Not librdkafka's idempotent producer: it stops delivering
        for good when a broker loses its producer state (seen with a broker restarted on memory
        storage); a retry may then duplicate a reply, which at-least-once allows."""
        config = self.common_config()
        config.update(
            {
                "acks": "all",
                "enable.idempotence": False,
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": self.linger_ms,
                "message.max.bytes": max(self.max_message_size + 64 * 1024, 1_000_000),
                "message.timeout.ms": 0,  # retried until delivered: at-least-once
            }
        )
        config.update(dict(self.producer_config))
        return config

    def subscription(self) -> list[str]:
        """Topic names and the pattern (librdkafka takes a regular expression as '^...')."""
        topics = list(self.request_topics)
        if self.request_topic_pattern:
            pattern = self.request_topic_pattern
            topics.append(pattern if pattern.startswith("^") else "^" + pattern)
        return topics

    def dead_letter_topic_for(self, topic: str) -> str:
        return self.dead_letter_topic.replace("{topic}", topic)


def check_topic(topic: str, flag: str) -> None:
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise invalid_arg(
            f"{flag}: '{topic}' is not a valid Kafka topic name (1-249 of [a-zA-Z0-9._-])"
        )


# ------------------------------------------------------------------------------------------
# From flags and from ROS parameters
# ------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--kafka-*`` flags of ``triton-ros-server``."""
    add_flags(
        parser.add_argument_group("Kafka frontend (off unless --kafka-brokers is given)"),
        KafkaOptions,
        FLAG_PREFIX,
    )


def options_from_args(args: argparse.Namespace) -> KafkaOptions:
    """KafkaOptions from parsed flags; INVALID_ARG names the flag."""
    return options_from_values(
        flag_values(args, KafkaOptions, FLAG_PREFIX), flag_namer(KafkaOptions, FLAG_PREFIX)
    )


def options_from_parameters(
    values: Mapping[str, Any], *, require_topics: bool = True
) -> KafkaOptions:
    """KafkaOptions from the ROS node's ``kafka.*`` parameter values (by full name);
    INVALID_ARG names the parameter."""
    return options_from_values(
        under(values, PARAMETER_PREFIX),
        parameter_namer(KafkaOptions, PARAMETER_PREFIX),
        require_topics=require_topics,
    )


def options_from_values(
    values: Mapping[str, Any], name: Namer, *, require_topics: bool = True
) -> KafkaOptions:
    """Parse (by parameter name, relative), normalize (topic lists split at commas, strings
    stripped, the SASL password from the environment when not given), validate."""
    options = build(KafkaOptions, values, name)
    strings = {
        s.field: getattr(options, s.field).strip()
        for s in settings_of(KafkaOptions)
        if s.kind == STR
    }
    topics = tuple(
        t.strip() for item in options.request_topics for t in item.split(",") if t.strip()
    )
    options = replace(options, request_topics=topics, **strings)
    if not options.sasl_password:
        options = replace(options, sasl_password=os.environ.get(PASSWORD_ENV, ""))
    return options.validate(name, require_topics=require_topics)
