"""The bindings' results mirrored to Kafka topics (``<binding>.kafka_mirror_topic``), keyed by
robot and camera, for a fleet's analytics.

Every result a mirrored binding publishes on ROS is handed to :meth:`KafkaMirror.offer` by the
worker that published it. ``offer`` only appends it to a bounded queue and returns: it never
blocks, never raises, and does no conversion on the frame's path. One thread of the mirror
writes each result as JSON (:func:`record_value`) and hands it to the binding's
:class:`~triton_ros.frontend.kafka.result_sink.KafkaResultSink` (librdkafka's producer, with
its own bounded queue and delivery thread; the brokers, TLS and SASL settings are the node's
``kafka.*``).

A result that cannot go on is dropped and counted by reason (:data:`DROP_REASONS`):

- ``dropped_backlog``: the mirror's queue for the binding holds ``kafka_mirror_max_queued``
  results already (the thread cannot keep up), or the mirror has stopped;
- ``dropped_encode``: the result could not be written as a record;
- ``dropped_queue_full``: the Kafka client's queue is full (``kafka_mirror_max_queued``): the
  brokers are away or slower than the results;
- ``dropped_refused``: the Kafka client refused the record at once (e.g. larger than its
  ``message.max.bytes``);
- ``failed_delivery``: the brokers did not acknowledge it within ``kafka_mirror_timeout_ms``,
  or refused it, or it was still queued when the node stopped.

Each is logged at once and then at most once a period per kind (the mirror's own through
:class:`~triton_ros.ros.monitoring.failures.FailureLog`, the Kafka client's by the sink's
throttled log), and shown on ``/diagnostics`` (:mod:`.diagnostics`) and the metrics endpoint
(:mod:`.mirror_metrics`). A broker that goes away costs the cameras nothing: their frames are
published on ROS as before, while the mirror counts what it could not deliver.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterable

from ...frontend.kafka.options import KafkaOptions
from ..monitoring.failures import FailureLog
from .config import MirrorConfig, MirroredBinding
from .message_json import message_to_dict, type_name

DROP_REASONS = (
    "dropped_backlog",
    "dropped_encode",
    "dropped_queue_full",
    "dropped_refused",
    "failed_delivery",
)
CLOSE_TIMEOUT_S = 5.0  # at most this long at shutdown for queued results to go


def record_key(config: MirrorConfig, binding: MirroredBinding, topic: str) -> str:
    """The record key of results of input ``topic``: the key template, fields as in
    output_topic_template, without the leading '/' (``robot1/camera_front``)."""
    namespace, _, basename = topic.rpartition("/")
    return config.key_template.format(
        namespace=namespace,
        topic=topic,
        basename=basename,
        output_name=binding.output_name,
        binding=binding.name,
        model=binding.model,
    ).lstrip("/")


def record_value(
    msg: Any,
    *,
    key: str,
    node: str,
    binding: str,
    model: str,
    version: Any,
    source_topic: str,
    topic: str,
) -> dict[str, Any]:
    """What a mirrored record's value holds (as JSON): where the result comes from, and the
    result message itself, field for field (``message``, with its header's stamp and
    frame_id)."""
    return {
        "key": key,
        "node": node,
        "binding": binding,
        "model": model,
        "model_version": str(version),
        "source_topic": source_topic,
        "topic": topic,
        "type": type_name(msg),
        "message": message_to_dict(msg),
    }


@dataclass(frozen=True)
class MirrorFigures:
    """One binding's mirror, as the diagnostics read it once a period (totals since start)."""

    binding: str
    topic: str
    key_template: str
    brokers: str
    offered: int  # results the binding handed over
    delivered: int  # acknowledged by the brokers
    pending: int  # in the mirror's queue or the Kafka client's
    drops: dict[str, int]  # by DROP_REASONS
    client_errors: int  # the Kafka client's errors (brokers down...)
    last_error: str  # the mirror's own latest drop
    kafka_error: str  # the Kafka client's latest drop, failure or error
    running: bool  # the mirror's thread is alive


class _BindingMirror:
    """What the mirror keeps of one binding."""

    def __init__(self, binding: MirroredBinding) -> None:
        self.binding = binding
        self.config: MirrorConfig = binding.kafka_mirror
        self.sink = None
        self.offered = 0
        self.queued = 0  # in the mirror's queue now
        self.dropped_backlog = 0
        self.dropped_encode = 0
        self.last_error = ""
        self.keys: dict[str, str] = {}

    def key(self, topic: str) -> str:
        key = self.keys.get(topic)
        if key is None:
            key = self.keys[topic] = record_key(self.config, self.binding, topic)
        return key


def _result_sink(options: KafkaOptions, config: MirrorConfig):
    from ...frontend.kafka.result_sink import KafkaResultSink

    return KafkaResultSink(
        options,
        config.topic,
        max_queued=config.max_queued,
        delivery_timeout_ms=config.timeout_ms,
        config=dict(options.producer_config),
    )


class KafkaMirror:
    """The node's Kafka mirrors: one sink per mirrored binding, one thread writing records."""

    def __init__(
        self,
        options: KafkaOptions,
        bindings: Iterable[MirroredBinding],
        *,
        node_name: str,
        logger,
        sink_factory: Callable[[KafkaOptions, MirrorConfig], Any] = _result_sink,
    ) -> None:
        self._options = options
        self._node_name = node_name
        self._log = logger
        self._sink_factory = sink_factory
        self._mirrors = {b.name: _BindingMirror(b) for b in bindings if b.kafka_mirror is not None}
        self._queue: deque = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._thread: threading.Thread | None = None
        self.failures = FailureLog(logger)

    def __bool__(self) -> bool:
        return bool(self._mirrors)

    def for_binding(self, name: str) -> Callable[[Any, Any, str, Any], None] | None:
        """The ``mirror`` callback of binding ``name`` (None: it is not mirrored)."""
        mirror = self._mirrors.get(name)
        return None if mirror is None else partial(self.offer, mirror)

    def start(self) -> None:
        """Create the sinks (the Kafka client connects in the background) and the thread."""
        for mirror in self._mirrors.values():
            mirror.sink = self._sink_factory(self._options, mirror.config)
            self._log.info(
                f"binding '{mirror.binding.name}': results mirrored to Kafka topic "
                f"'{mirror.config.topic}' at {self._options.brokers} (key "
                f"'{mirror.config.key_template}')"
            )
        self._thread = threading.Thread(target=self._run, daemon=True, name="kafka-mirror")
        self._thread.start()

    # ---------------------------------------------------------------- the frame's path
    def offer(self, mirror: _BindingMirror, source, msg, model: str, version: Any) -> None:
        """Queue a published result (``source``: its input's topic and output topic); never
        blocks, never raises."""
        try:
            with self._cond:
                mirror.offered += 1
                stopped = self._closing or self._thread is None
                full = stopped or mirror.queued >= mirror.config.max_queued
                if full:
                    mirror.dropped_backlog += 1
                else:
                    mirror.queued += 1
                    self._queue.append(
                        (mirror, source.topic, source.output_topic, msg, model, version)
                    )
                    self._cond.notify()
            if full:
                why = (
                    "the mirror has stopped"
                    if stopped
                    else f"{mirror.config.max_queued} results are waiting already "
                    f"(kafka_mirror_max_queued)"
                )
                self._drop(
                    mirror, "dropped_backlog", f"a result of {source.topic} was not mirrored: {why}"
                )
        except Exception as exc:  # a defect of ours must not reach the frame
            try:
                with self._cond:
                    mirror.dropped_backlog += 1
                self._drop(
                    mirror,
                    "dropped_backlog",
                    f"queueing a result failed: {type(exc).__name__}: {exc}",
                )
            except Exception:  # nothing may reach the frame's path
                pass

    # ---------------------------------------------------------------- the mirror's thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return  # closing, and every result handed on
                mirror, source_topic, output_topic, msg, model, version = self._queue.popleft()
            try:
                self._send(mirror, source_topic, output_topic, msg, model, version)
            except Exception as exc:  # this result's fault, or ours: count, go on
                with self._cond:
                    mirror.dropped_encode += 1
                self._drop(
                    mirror,
                    "dropped_encode",
                    f"a result of {source_topic} could not be written as a Kafka "
                    f"record: {type(exc).__name__}: {exc}",
                )
            finally:
                with self._cond:
                    mirror.queued -= 1

    def _send(
        self,
        mirror: _BindingMirror,
        source_topic: str,
        output_topic: str,
        msg,
        model: str,
        version: Any,
    ) -> None:
        key = mirror.key(source_topic)
        value = json.dumps(
            record_value(
                msg,
                key=key,
                node=self._node_name,
                binding=mirror.binding.name,
                model=model,
                version=version,
                source_topic=source_topic,
                topic=output_topic,
            ),
            separators=(",", ":"),
            allow_nan=False,
        ).encode()
        # False: dropped by the sink, which counts and logs why (queue full, refused). The
        # record's timestamp is the time it is produced: the header stamp (the robot's clock,
        # or simulated time) is in the value, where a broker's timestamp limits and time-based
        # retention cannot trip over it.
        mirror.sink.publish(
            key, value, headers={"content-type": "application/json", "ros-type": type_name(msg)}
        )

    def _drop(self, mirror: _BindingMirror, reason: str, text: str) -> None:
        """Log a drop (counted by the caller), throttled per reason and binding."""
        name = mirror.binding.name
        mirror.last_error = text
        try:
            self.failures.report(
                f"{reason}:{name}",
                reason,
                f"binding '{name}': Kafka mirror to '{mirror.config.topic}': "
                f"{text} (counted as {reason} in /diagnostics)",
                level="warn",
            )
        except Exception:  # the count is kept; the log line is best effort
            pass

    # ---------------------------------------------------------------- figures, stop
    def figures(self) -> list[MirrorFigures]:
        out = []
        running = self._thread is not None and self._thread.is_alive()
        for mirror in self._mirrors.values():
            stats = mirror.sink.snapshot() if mirror.sink is not None else None
            with self._cond:
                offered, queued = mirror.offered, mirror.queued
                backlog, encode, last = (
                    mirror.dropped_backlog,
                    mirror.dropped_encode,
                    mirror.last_error,
                )
            drops = {
                "dropped_backlog": backlog,
                "dropped_encode": encode,
                "dropped_queue_full": stats.queue_full if stats else 0,
                "dropped_refused": stats.dropped - stats.queue_full if stats else 0,
                "failed_delivery": stats.failed if stats else 0,
            }
            in_client = (stats.published - stats.delivered - stats.failed) if stats else 0
            out.append(
                MirrorFigures(
                    mirror.binding.name,
                    mirror.config.topic,
                    mirror.config.key_template,
                    self._options.brokers,
                    offered,
                    stats.delivered if stats else 0,
                    queued + max(0, in_client),
                    drops,
                    stats.client_errors if stats else 0,
                    last,
                    stats.last_error if stats else "",
                    running or self._closing,
                )
            )
        return out

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Hand on what is queued and wait up to ``timeout`` for the brokers to take it; what
        they have not is counted (failed_delivery) and logged."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        for mirror in self._mirrors.values():
            if mirror.sink is None:
                continue
            try:
                mirror.sink.close(timeout=max(0.1, deadline - time.monotonic()))
            except Exception as exc:  # shutting down: report, carry on
                self._log.error(
                    f"binding '{mirror.binding.name}': closing its Kafka mirror "
                    f"failed: {type(exc).__name__}: {exc}"
                )
