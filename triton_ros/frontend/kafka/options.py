"""Typed settings of the Kafka frontend, declared once for the server's flags and the ROS node's
parameters.

:data:`SETTINGS` lists each setting once: its field of :class:`KafkaOptions`, its flag in
tritonserver's style (``--kafka-brokers``, ``--kafka-request-topics``...), its ROS parameter
(``kafka.brokers``, ``kafka.request_topics``...), kind, default and help. ``triton-ros-server``
adds the flags with :func:`add_arguments` and reads them with :func:`options_from_args`; the ROS
node can declare :data:`KAFKA_PARAMS` (the format of ``ros/endpoint_parameters.ENDPOINT_PARAMS``) and turn
the values into the same object with :func:`options_from_parameters`. Parse, normalize,
validate: a bad value is INVALID_ARG naming the flag; an unknown librdkafka property given with
``--kafka-consumer-config``/``--kafka-producer-config`` is refused by librdkafka when the
frontend starts.

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
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ...core.errors import invalid_arg

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
OFFSET_RESETS = ("earliest", "latest")
PASSWORD_ENV = "TRITON_ROS_KAFKA_SASL_PASSWORD"
MIB = 1 << 20
# A Kafka topic name: at most 249 characters of [a-zA-Z0-9._-] (Kafka's Topic.validate).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class KafkaOptions:
    """Everything the Kafka frontend needs; ``enable`` when brokers are given."""

    brokers: str = ""
    request_topics: tuple[str, ...] = ()
    request_topic_pattern: str = ""
    reply_topic: str = ""
    dead_letter_topic: str = "{topic}.dlq"
    group_id: str = "triton"
    client_id: str = "triton-ros"
    auto_offset_reset: str = "earliest"
    security_protocol: str = "PLAINTEXT"
    ssl_ca_location: str = ""
    ssl_certificate_location: str = ""
    ssl_key_location: str = ""
    ssl_key_password: str = field(default="", repr=False)
    ssl_endpoint_identification: bool = True
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    max_inflight_per_partition: int = 16
    max_inflight: int = 256
    max_message_size: int = 64 * MIB
    session_timeout_ms: int = 10_000
    fetch_wait_max_ms: int = 20
    linger_ms: int = 1
    consumer_config: tuple[tuple[str, str], ...] = ()
    producer_config: tuple[tuple[str, str], ...] = ()

    @property
    def enable(self) -> bool:
        return bool(self.brokers)

    def validate(self) -> "KafkaOptions":
        """Check every setting; INVALID_ARG names the flag."""
        if not self.enable:
            if self.request_topics or self.request_topic_pattern:
                raise invalid_arg("--kafka-request-topics/--kafka-request-topic-pattern need "
                                  "--kafka-brokers")
            return self
        if not self.request_topics and not self.request_topic_pattern:
            raise invalid_arg("--kafka-brokers needs --kafka-request-topics or "
                              "--kafka-request-topic-pattern")
        for topic in self.request_topics:
            check_topic(topic, "--kafka-request-topics")
        if self.request_topic_pattern:
            try:
                re.compile(self.request_topic_pattern)
            except re.error as exc:
                raise invalid_arg(f"--kafka-request-topic-pattern is not a regular expression: "
                                  f"{exc}") from None
        if self.reply_topic:
            check_topic(self.reply_topic, "--kafka-reply-topic")
        check_topic(self.dead_letter_topic.replace("{topic}", "t"), "--kafka-dead-letter-topic")
        if not self.group_id:
            raise invalid_arg("--kafka-group-id must not be empty")
        for value, choices, flag in (
                (self.security_protocol, SECURITY_PROTOCOLS, "--kafka-security-protocol"),
                (self.auto_offset_reset, OFFSET_RESETS, "--kafka-auto-offset-reset")):
            if value not in choices:
                raise invalid_arg(f"{flag} must be one of {', '.join(choices)}, got '{value}'")
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise invalid_arg(f"--kafka-security-protocol {self.security_protocol} needs "
                                  f"--kafka-sasl-mechanism ({', '.join(SASL_MECHANISMS)})")
            if not self.sasl_username or not self.sasl_password:
                raise invalid_arg(f"--kafka-sasl-mechanism {self.sasl_mechanism} needs "
                                  f"--kafka-sasl-username and a password (--kafka-sasl-password "
                                  f"or ${PASSWORD_ENV})")
        elif self.sasl_mechanism:
            raise invalid_arg("--kafka-sasl-mechanism needs --kafka-security-protocol "
                              "SASL_PLAINTEXT or SASL_SSL")
        if not self.security_protocol.endswith("SSL") and (
                self.ssl_ca_location or self.ssl_certificate_location or self.ssl_key_location):
            raise invalid_arg("--kafka-ssl-* files need --kafka-security-protocol SSL or "
                              "SASL_SSL")
        for path, flag in ((self.ssl_ca_location, "--kafka-ssl-ca-location"),
                           (self.ssl_certificate_location, "--kafka-ssl-certificate-location"),
                           (self.ssl_key_location, "--kafka-ssl-key-location")):
            if path and not os.path.isfile(path):
                raise invalid_arg(f"{flag}: no file '{path}'")
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise invalid_arg("--kafka-ssl-certificate-location and --kafka-ssl-key-location go "
                              "together")
        for value, flag in ((self.max_inflight_per_partition, "--kafka-max-inflight-per-partition"),
                            (self.max_inflight, "--kafka-max-inflight"),
                            (self.max_message_size, "--kafka-max-message-size"),
                            (self.session_timeout_ms, "--kafka-session-timeout-ms")):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise invalid_arg(f"{flag} must be a positive integer, got {value!r}")
        for value, flag in ((self.fetch_wait_max_ms, "--kafka-fetch-wait-max-ms"),
                            (self.linger_ms, "--kafka-linger-ms")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid_arg(f"{flag} must be a non-negative integer, got {value!r}")
        if self.max_message_size > 1_000_000_000:      # librdkafka's message.max.bytes limit
            raise invalid_arg("--kafka-max-message-size must be at most 1000000000 bytes")
        return self

    # ---------------------------------------------------------------- librdkafka settings
    def common_config(self) -> dict[str, Any]:
        """Connection and security properties shared by the consumer and the producers."""
        config: dict[str, Any] = {"bootstrap.servers": self.brokers, "client.id": self.client_id,
                                  "security.protocol": self.security_protocol}
        for key, value in (("ssl.ca.location", self.ssl_ca_location),
                           ("ssl.certificate.location", self.ssl_certificate_location),
                           ("ssl.key.location", self.ssl_key_location),
                           ("ssl.key.password", self.ssl_key_password),
                           ("sasl.mechanism", self.sasl_mechanism),
                           ("sasl.username", self.sasl_username),
                           ("sasl.password", self.sasl_password)):
            if value:
                config[key] = value
        if self.security_protocol.endswith("SSL"):
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_endpoint_identification else "none")
        return config

    def consumer_settings(self) -> dict[str, Any]:
        """At-least-once: offsets are stored by the frontend once a message's reply is
        acknowledged (``enable.auto.offset.store`` false) and committed from there every
        second and when partitions are revoked; the local prefetch queue is bounded."""
        config = self.common_config()
        config.update({
            "group.id": self.group_id,
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 1000,
            "auto.offset.reset": self.auto_offset_reset,
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": max(100, min(3000, self.session_timeout_ms // 3)),
            "fetch.wait.max.ms": self.fetch_wait_max_ms,
            "fetch.message.max.bytes": min(self.max_message_size, 16 * MIB),
            "queued.max.messages.kbytes": 16 * 1024,
            "queued.min.messages": 1000,
            "statistics.interval.ms": 2000,       # consumer lag, for the metrics
        })
        config.update(dict(self.consumer_config))
        return config

    def producer_settings(self) -> dict[str, Any]:
        """Replies and dead letters: acknowledged by every in-sync replica, retried until
        delivered, one produce request in flight per broker connection so that their order per
        partition survives retries. Not librdkafka's idempotent producer: it stops delivering
        for good when a broker loses its producer state (seen with a broker restarted on memory
        storage); a retry may then duplicate a reply, which at-least-once allows."""
        config = self.common_config()
        config.update({
            "acks": "all",
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
            "linger.ms": self.linger_ms,
            "message.max.bytes": max(self.max_message_size + 64 * 1024, 1_000_000),
            "message.timeout.ms": 0,           # retried until delivered: at-least-once
        })
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
        raise invalid_arg(f"{flag}: '{topic}' is not a valid Kafka topic name (1-249 of "
                          f"[a-zA-Z0-9._-])")


# ------------------------------------------------------------------------------------------
# Every setting once: field, flag, ROS parameter, kind, help
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    field: str
    kind: str              # str, int, bool, str_list, key_values (as ros/parameters.py kinds)
    help: str
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--kafka-" + self.field.replace("_", "-")

    @property
    def parameter(self) -> str:
        return "kafka." + self.field


SETTINGS: tuple[Setting, ...] = (
    Setting("brokers", "str", "Kafka bootstrap servers, host:port[,host:port...]; empty: the "
                              "Kafka frontend is off (default)"),
    Setting("request_topics", "str_list", "topics to consume inference requests from "
                                          "(comma-separated or repeated)"),
    Setting("request_topic_pattern", "str", "a regular expression: consume every topic whose "
                                            "name matches, also topics created later"),
    Setting("reply_topic", "str", "topic for replies to requests without a reply-topic header "
                                  "(default: none, such requests go to the dead-letter topic)"),
    Setting("dead_letter_topic", "str", "topic for messages that cannot be read; {topic} is the "
                                        "request's topic (default {topic}.dlq)"),
    Setting("group_id", "str", "consumer group: servers with the same group share the request "
                               "topics' partitions (default triton)"),
    Setting("client_id", "str", "Kafka client id (default triton-ros)"),
    Setting("auto_offset_reset", "str", "where a new group starts: earliest (default: no "
                                        "request lost) or latest", OFFSET_RESETS),
    Setting("security_protocol", "str", "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL",
            SECURITY_PROTOCOLS),
    Setting("ssl_ca_location", "str", "PEM file of the CA certificates that sign the brokers'"),
    Setting("ssl_certificate_location", "str", "PEM client certificate (mutual TLS)"),
    Setting("ssl_key_location", "str", "PEM client key (mutual TLS)"),
    Setting("ssl_key_password", "str", "password of the client key"),
    Setting("ssl_endpoint_identification", "bool", "check the broker's certificate names its "
                                                   "host (default true)"),
    Setting("sasl_mechanism", "str", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", SASL_MECHANISMS),
    Setting("sasl_username", "str", "SASL user name"),
    Setting("sasl_password", "str", f"SASL password (default ${PASSWORD_ENV})"),
    Setting("max_inflight_per_partition", "int", "requests of one partition in the server at "
                                                 "once; more pause that partition's fetching "
                                                 "(default 16)"),
    Setting("max_inflight", "int", "requests from Kafka in the server at once; more pause every "
                                   "partition (default 256)"),
    Setting("max_message_size", "int", "largest request and reply message, bytes; a larger "
                                       "request goes to the dead-letter topic (default 64 MiB)"),
    Setting("session_timeout_ms", "int", "consumer group session timeout: a server silent this "
                                         "long loses its partitions to the others "
                                         "(default 10000)"),
    Setting("fetch_wait_max_ms", "int", "longest a broker may hold a fetch that finds no data "
                                        "(default 20; Kafka answers as soon as data arrives, "
                                        "brokers that do not answer at this period)"),
    Setting("linger_ms", "int", "how long replies may wait to be sent in a batch (default 1)"),
    Setting("consumer_config", "key_values", "further librdkafka consumer property, KEY=VALUE "
                                             "(repeatable)"),
    Setting("producer_config", "key_values", "further librdkafka producer property, KEY=VALUE "
                                             "(repeatable)"),
)

_DEFAULTS = KafkaOptions()

# ROS parameters in the format of ros/endpoint_parameters.ENDPOINT_PARAMS: (name, default, kind, help).
KAFKA_PARAMS: tuple[tuple[str, Any, str, str], ...] = tuple(
    (s.parameter,
     list(getattr(_DEFAULTS, s.field)) if s.kind in ("str_list", "key_values")
     else getattr(_DEFAULTS, s.field),
     "str_list" if s.kind == "key_values" else s.kind, s.help[0].upper() + s.help[1:] + ".")
    for s in SETTINGS)


def add_arguments(p: argparse.ArgumentParser, parse_bool) -> None:
    """The ``--kafka-*`` flags of ``triton-ros-server``."""
    group = p.add_argument_group("Kafka frontend (off unless --kafka-brokers is given)")
    for s in SETTINGS:
        default = getattr(_DEFAULTS, s.field)
        if s.kind in ("str_list", "key_values"):
            group.add_argument(s.flag, action="append", default=[],
                               metavar="KEY=VALUE" if s.kind == "key_values" else "TOPIC",
                               help=s.help)
        elif s.kind == "bool":
            group.add_argument(s.flag, type=parse_bool, default=default, metavar="BOOL",
                               help=s.help)
        elif s.kind == "int":
            group.add_argument(s.flag, type=int, default=default, help=s.help)
        else:
            group.add_argument(s.flag, default=default, help=s.help,
                               **({"choices": s.choices} if s.choices else {}))


def options_from_args(args: argparse.Namespace) -> KafkaOptions:
    """KafkaOptions from parsed flags; INVALID_ARG for inconsistent ones."""
    return options_from_values({s.field: getattr(args, "kafka_" + s.field) for s in SETTINGS})


def options_from_parameters(values: Mapping[str, Any]) -> KafkaOptions:
    """KafkaOptions from the ROS node's ``kafka.*`` parameter values (by parameter name)."""
    return options_from_values({s.field: values.get(s.parameter) for s in SETTINGS})


def options_from_values(values: Mapping[str, Any]) -> KafkaOptions:
    """Normalize raw values by field (None: the default) and validate."""
    kwargs: dict[str, Any] = {}
    for s in SETTINGS:
        value = values.get(s.field)
        if value is None:
            continue
        if s.kind == "str_list":
            value = tuple(t.strip() for item in value for t in str(item).split(",") if t.strip())
        elif s.kind == "key_values":
            value = tuple(_key_value(str(item), s.flag) for item in value)
        elif s.kind == "str":
            value = str(value).strip()
        kwargs[s.field] = value
    if not kwargs.get("sasl_password"):
        kwargs["sasl_password"] = os.environ.get(PASSWORD_ENV, "")
    return KafkaOptions(**kwargs).validate()


def _key_value(text: str, flag: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise invalid_arg(f"{flag} expects KEY=VALUE (a librdkafka property), got '{text}'")
    return key.strip(), value.strip()


assert {f.name for f in fields(KafkaOptions)} == {s.field for s in SETTINGS}
