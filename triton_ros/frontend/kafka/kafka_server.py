"""The Kafka frontend: inference requests consumed from Kafka topics, served by the same core as
the gRPC and HTTP endpoints (the same models, the same dynamic batchers), replies produced to a
reply topic. The transport only converts and delegates: a record is read by ``messages`` (the
HTTP codec's KServe v2 JSON and binary tensors), queued with ``InferenceServer.infer`` and its
response written back by the same codec.

Client library: confluent-kafka (librdkafka), faster than aiokafka for this frontend's pattern.
Threads: one consumer thread (fetch, decode, submit, flow control,
offsets, rebalances), one producer thread (delivery reports), the core's own threads (the
responses, encoded where they complete; large ones on a small encoder pool).

Semantics (docs/kafka.md):

- at-least-once: a record's offset is stored for commit only once its reply (or error reply, or
  dead letter) is acknowledged by the broker (``acks=all``); librdkafka commits stored offsets
  every second, when partitions are revoked and at shutdown. A server that dies leaves its
  unacknowledged records to the group's next owner of the partition, which answers them again;
- order per partition key: replies are produced in the order the requests were consumed, per
  partition (``in_flight``), keyed by the request's key, one produce request in flight per
  broker connection (their order survives retries);
- bounded in flight: at most ``max_inflight_per_partition`` records of a partition and
  ``max_inflight`` in all between fetch and acknowledgement; a record past a partition's bound
  pauses the partition and is fetched again once half has drained (seek), the total bound
  pauses every partition. A request a model's full queue refused (``max_queue_size``:
  ``QueueFullError``) is sent again after a backoff, or as soon as another one completes,
  keeping its slot meanwhile: a partition feeding a full model fills its bound and pauses
  instead of failing requests. librdkafka's own prefetch queue is bounded too (16 MiB);
- answer or dead letter, always: a record is read in one guarded step (``messages.read_record``)
  before it joins its partition's in-flight line, and from there every path ends in a reply, an
  error reply or a dead letter, whatever the record holds. A record that cannot be read goes to
  the dead-letter topic with the reason in its headers, an error reply goes to its reply topic
  when that is known, and the partition moves on; the log gets one line (throttled), never a
  traceback;
- a broker lost is logged (throttled) and counted; librdkafka reconnects and retries, replies
  wait in its queue until delivered; nothing stops the server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ...core.errors import QueueFullError, TritonRosError, as_triton_error, invalid_arg
from ...core.server import InferenceServer
from ..http import http_codec
from . import messages
from .in_flight import Entry, PartitionInFlight
from .kafka_metrics import KafkaMetrics
from .messages import Incoming, Record
from .options import KafkaOptions

_log = logging.getLogger("triton_ros.kafka")

LOG_EVERY_S = 10.0  # one log line per kind of failure every 10 s at most
RETRY_BACKOFF_S = (0.005, 0.1)  # a refused request is sent again after 5 ms, doubling to 0.1 s,
# or as soon as another request of this frontend completes
CONSUME_BATCH = 100


class ThrottledLog:
    """A warning per kind at most every ``every_s``, with the count suppressed meanwhile."""

    def __init__(self, logger: logging.Logger, every_s: float = LOG_EVERY_S) -> None:
        self._logger = logger
        self._every_s = every_s
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}

    def warning(self, kind: str, text: str, *args: Any) -> None:
        now = time.monotonic()
        with self._lock:
            logged, suppressed = self._last.get(kind, (-1e18, 0))
            if now - logged < self._every_s:
                self._last[kind] = (logged, suppressed + 1)
                return
            self._last[kind] = (now, 0)
        if suppressed:
            text += f" [{suppressed} more like this in the last {now - logged:.0f} s]"
        self._logger.warning(text, *args)


class LibrdkafkaLog:
    """librdkafka's own log lines (``logger`` property: ``log(level, fmt, facility, client,
    text)``) into this process's log, warnings throttled per facility, never to stderr."""

    def __init__(self, throttled: ThrottledLog) -> None:
        self._throttled = throttled

    def log(self, level: int, fmt: str, *args: Any) -> None:
        if level >= logging.WARNING:
            self._throttled.warning(
                f"librdkafka:{args[0] if args else ''}", "Kafka client: " + fmt, *args
            )
        elif _log.isEnabledFor(logging.DEBUG):
            _log.debug("Kafka client: " + fmt, *args)


class _Work:
    """What the server keeps of one record while it is in flight."""

    __slots__ = (
        "tracker",
        "topic",
        "partition",
        "routing",
        "model",
        "version",
        "attempts",
        "retry_at",
        "dead_letter",
    )

    def __init__(self, tracker: PartitionInFlight) -> None:
        self.tracker = tracker
        self.topic = tracker.topic
        self.partition = tracker.partition
        self.routing: messages.Routing | None = None
        self.model = ""
        self.version = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.dead_letter: tuple[str, TritonRosError] | None = None  # its reason and error


class _DeadLetter(Exception):
    """A record that goes to the dead-letter topic, and why."""

    def __init__(self, reason: str, error: TritonRosError) -> None:
        super().__init__(error.message)
        self.reason = reason
        self.error = error


class KafkaServer:
    """Consumes inference requests from Kafka and produces their replies; start() returns once
    the consumer is subscribed (the group assigns partitions a few seconds later)."""

    service_name = "KafkaService"

    def __init__(self, core: InferenceServer, options: KafkaOptions) -> None:
        self._core = core
        self.options = options.validate()
        self.metrics = KafkaMetrics()
        self.target = (
            f"{options.brokers} (topics {', '.join(options.subscription())}, "
            f"group {options.group_id})"
        )
        self.port = 0  # the Endpoint protocol's; no port
        self._log = ThrottledLog(_log)
        self._server_id = getattr(getattr(core, "options", None), "server_id", "")
        self._consumer = None
        self._producer = None
        self._stopping = threading.Event()
        self._producer_done = threading.Event()
        self._deadline = 0.0  # of stop()'s grace
        self._consumer_thread: threading.Thread | None = None
        self._producer_thread: threading.Thread | None = None
        self._encoder: ThreadPoolExecutor | None = None
        self._partitions: dict[tuple[str, int], PartitionInFlight] = {}
        self._assigned: set[tuple[str, int]] = set()
        self._paused: set[tuple[str, int]] = set()
        self._stored: dict[tuple[str, int], int] = {}
        self._rewound: dict[tuple[str, int], int] = {}  # sought back to this offset
        self._retries: deque[Entry] = deque()  # refused by a full queue
        self._retry_lock = threading.Lock()
        self._in_flight = 0
        self._count_lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer

        options = self.options
        try:
            logs = {
                "error_cb": self._client_error,
                "logger": LibrdkafkaLog(self._log),
                "log.connection.close": False,
            }
            self._producer = Producer({**options.producer_settings(), **logs})
            self._consumer = Consumer(
                {**options.consumer_settings(), **logs, "stats_cb": self._statistics}
            )
            self._consumer.subscribe(
                options.subscription(),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        except KafkaException as exc:
            error = exc.args[0] if exc.args else exc
            raise invalid_arg(f"Kafka client configuration: {error}") from None
        self._core.metric_sources.add("kafka", self.metrics.families)
        self._encoder = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafka-encode")
        self._producer_thread = threading.Thread(
            target=self._producer_loop, daemon=True, name="kafka-producer"
        )
        self._consumer_thread = threading.Thread(
            target=self._consumer_loop, daemon=True, name="kafka-consumer"
        )
        self._producer_thread.start()
        self._consumer_thread.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop fetching; let in-flight requests finish and their replies be acknowledged
        (within ``grace``), commit their offsets, leave the group."""
        self._deadline = time.monotonic() + grace
        self._stopping.set()
        if self._consumer_thread is not None:
            self._consumer_thread.join(grace + 10.0)
        if self._producer is not None:
            left = self._producer.flush(max(0.0, self._deadline - time.monotonic()))
            if left:
                _log.warning(
                    "Kafka frontend stopped with %d messages not acknowledged: their "
                    "requests were not committed and will be served again",
                    left,
                )
        self._producer_done.set()
        if self._producer_thread is not None:
            self._producer_thread.join(2.0)
        if self._encoder is not None:
            self._encoder.shutdown(wait=False)
        self._core.metric_sources.remove("kafka")

    # ---------------------------------------------------------------- client callbacks
    def _client_error(self, error) -> None:
        """librdkafka's errors: brokers down, authentication, ... (it reconnects itself)."""
        name = error.name() if hasattr(error, "name") else str(error)
        self.metrics.count("nv_kafka_client_errors", name)
        text = error.str() if hasattr(error, "str") else str(error)
        if getattr(error, "fatal", lambda: False)():
            _log.error(
                "Kafka client fatal error (the Kafka frontend stops serving until the "
                "server restarts; gRPC, HTTP and ROS go on): %s",
                text,
            )
            return
        self._log.warning(f"client:{name}", "Kafka client error (retrying): %s", text)

    def _statistics(self, stats_json: str) -> None:
        self.metrics.set_lag_from_statistics(stats_json, set(self._assigned))

    def _on_assign(self, consumer, partitions) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._assigned.add(key)
            self._partitions[key] = PartitionInFlight(tp.topic, tp.partition, self._produce)
            self._stored.pop(key, None)
            self._rewound.pop(key, None)
        _log.info(
            "Kafka partitions assigned: %s",
            ", ".join(f"{tp.topic}[{tp.partition}]" for tp in partitions) or "none",
        )

    def _on_revoke(self, consumer, partitions) -> None:
        """Let the revoked partitions' requests finish (briefly), commit them, let go."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._drop_retries(keys)
        deadline = time.monotonic() + min(10.0, self.options.session_timeout_ms / 2000)
        for key in keys:
            tracker = self._partitions.get(key)
            if tracker is not None:
                tracker.wait_drained(max(0.0, deadline - time.monotonic()))
        self._store_offsets(commit_keys=keys)
        self._release(keys)

    def _on_lost(self, consumer, partitions) -> None:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._drop_retries(keys)
        self._release(keys)
        self._log.warning(
            "lost",
            "Kafka partitions lost (session timed out): %s; their "
            "uncommitted requests will be served again by their next "
            "owner",
            ", ".join(f"{t}[{p}]" for t, p in keys),
        )

    def _release(self, keys) -> None:
        for key in keys:
            tracker = self._partitions.pop(key, None)
            if tracker is not None:
                tracker.revoked = True
            self._assigned.discard(key)
            self._paused.discard(key)
            self._stored.pop(key, None)
            self._rewound.pop(key, None)
        self.metrics.paused = len(self._paused)

    # ---------------------------------------------------------------- consumer thread
    def _consumer_loop(self) -> None:
        consumer = self._consumer
        try:
            while not self._stopping.is_set():
                try:
                    self._flow_control()
                    self._store_offsets()
                    room = max(1, min(CONSUME_BATCH, self.options.max_inflight - self._in_flight))
                    # poll() returns at the first record; consume() would wait for a full batch
                    first = consumer.poll(0.005 if self._retries else 0.05)
                    if first is None:
                        continue
                    self._receive(first)
                    if room > 1:
                        for message in consumer.consume(num_messages=room - 1, timeout=0):
                            self._receive(message)
                except Exception as exc:  # never let the consumer thread die quietly
                    self._log.warning(
                        "consumer-loop",
                        "Kafka consumer loop error (continuing): %s: %s",
                        type(exc).__name__,
                        exc,
                    )
                    time.sleep(0.1)
            self._drain()
        except Exception as exc:
            _log.warning("Kafka consumer stopped with an error: %s: %s", type(exc).__name__, exc)
        finally:
            try:
                consumer.close()  # commits the stored offsets, leaves the group
            except Exception as exc:
                _log.warning("closing the Kafka consumer failed: %s", exc)

    def _drain(self) -> None:
        """At stop: wait (within the grace) for the in-flight requests, store their offsets."""
        deadline = self._deadline
        with self._retry_lock:
            retries = list(self._retries)
            self._retries.clear()
        for entry in retries:  # not sent again: left for the next owner
            entry.data.tracker.forget(entry)
            self._finished(entry)
        for tracker in list(self._partitions.values()):
            tracker.wait_drained(max(0.0, deadline - time.monotonic()))
        self._store_offsets(commit_keys=list(self._partitions))

    def _receive(self, message) -> None:
        error = message.error()
        if error is not None:
            from confluent_kafka import KafkaError

            name = error.name() if hasattr(error, "name") else str(error)
            if name != "_PARTITION_EOF":
                self.metrics.count("nv_kafka_client_errors", name)
                hint = ""
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    hint = (
                        f" (consumed once it exists: the topics are looked up every "
                        f"{self.options.metadata_refresh_interval_ms} ms)"
                    )
                self._log.warning(f"consume:{name}", "Kafka consumer: %s%s", error.str(), hint)
            return
        key = (message.topic(), message.partition())
        tracker = self._partitions.get(key)
        if tracker is None:  # a record of a partition no longer ours
            return
        offset = message.offset()
        rewound = self._rewound.get(key)
        if rewound is not None:
            if offset > rewound:  # fetched before the seek: fetched again later
                return
            del self._rewound[key]
        if len(tracker) >= self.options.max_inflight_per_partition:
            self._rewind(key, offset)
            return
        self.metrics.received(key[0])
        record = messages.read_record(message, key[0], key[1], offset)  # never raises
        entry = tracker.add(offset, record)
        entry.data = _Work(tracker)
        with self._count_lock:
            self._in_flight += 1
            self.metrics.in_flight = self._in_flight
        self._submit(entry)

    def _rewind(self, key: tuple[str, int], offset: int) -> None:
        """A record beyond the partition's in-flight bound (one consume call may bring several
        of a partition): pause the partition and fetch again from this record when resumed."""
        from confluent_kafka import TopicPartition

        tp = TopicPartition(key[0], key[1], offset)
        if key not in self._paused:
            self._consumer.pause([tp])
            self._paused.add(key)
            self.metrics.paused = len(self._paused)
        self._consumer.seek(tp)
        self._rewound[key] = offset

    def _submit(self, entry: Entry) -> None:
        """Queue the record's request in the core, or send the record to the dead-letter topic;
        never raises: every path ends in the entry's answer or dead letter, once."""
        work: _Work = entry.data
        try:
            request, plan = self._request(entry)
        except _DeadLetter as dead:
            self._dead_letter(entry, dead.reason, dead.error)
            return
        except Exception as exc:  # a fault of reading this record: its problem only
            self._dead_letter(entry, messages.MALFORMED, messages.unreadable(exc))
            return
        try:
            work.attempts += 1
            future = self._core.infer(request)
        except Exception as exc:  # the core's contract is to fail the future instead
            self._answer(entry, self._error(work, as_triton_error(exc)))
            return
        future.add_done_callback(lambda f: self._on_response(entry, plan, f))

    def _request(self, entry: Entry) -> tuple[Any, http_codec.OutputPlan]:
        """The record's request and output plan; _DeadLetter when it cannot be served."""
        work: _Work = entry.data
        record: Incoming = entry.message
        if record.problem is not None:
            if record.headers is not None:  # readable: its error reply can still go out
                try:
                    work.routing = messages.read_routing(
                        record.headers, record.key, self.options.reply_topic
                    )
                except TritonRosError:
                    pass
            raise _DeadLetter(messages.MALFORMED, record.problem)
        try:
            work.routing = messages.read_routing(
                record.headers, record.key, self.options.reply_topic
            )
        except TritonRosError as exc:
            raise _DeadLetter(messages.MALFORMED, exc) from None
        if record.size > self.options.max_message_size:
            raise _DeadLetter(
                messages.TOO_LARGE,
                invalid_arg(
                    f"message of {record.size} bytes (key, value and headers) exceeds "
                    f"--kafka-max-message-size ({self.options.max_message_size})"
                ),
            )
        try:
            request, plan = messages.decode_request(record.value, record.headers)
        except TritonRosError as exc:
            raise _DeadLetter(messages.MALFORMED, exc) from None
        work.model, work.version = request.model_name, request.model_version
        if not work.routing.reply_topic:
            raise _DeadLetter(
                messages.NO_REPLY_TOPIC,
                invalid_arg(
                    "no reply topic: set the 'reply-topic' header or the server's "
                    "--kafka-reply-topic"
                ),
            )
        return request, plan

    # ---------------------------------------------------------------- responses (any thread)
    def _on_response(self, entry: Entry, plan: http_codec.OutputPlan, future: Future) -> None:
        work: _Work = entry.data
        try:
            exc = future.exception()
            if isinstance(exc, QueueFullError) and not self._stopping.is_set():
                self.metrics.count("nv_kafka_requests_retried", work.topic)
                work.retry_at = time.monotonic() + min(
                    RETRY_BACKOFF_S[1], RETRY_BACKOFF_S[0] * 2 ** min(work.attempts - 1, 10)
                )
                with self._retry_lock:
                    self._retries.append(entry)
                return
            if self._retries:  # a request left a queue: try the refused now
                with self._retry_lock:
                    for waiting in self._retries:
                        waiting.data.retry_at = 0.0
            if exc is not None:
                self._answer(entry, self._error(work, as_triton_error(exc)))
                return
            response = future.result()
            if http_codec.response_is_heavy(response, plan):
                self._encoder.submit(self._encode, entry, response, plan)
            else:
                self._encode(entry, response, plan)
        except Exception as exc:  # never lose a record: answer with the error
            self._answer(entry, self._error(work, as_triton_error(exc)))

    def _encode(self, entry: Entry, response, plan: http_codec.OutputPlan) -> None:
        work: _Work = entry.data
        try:
            record = messages.reply(work.routing, response, plan, self._server_id)
        except Exception as exc:  # e.g. FP16 output asked for as JSON: INVALID_ARG
            record = self._error(work, as_triton_error(exc))
        self._answer(entry, record)

    def _error(self, work: _Work, error: TritonRosError) -> Record:
        self.metrics.failed(work.topic, error.code.name)
        return messages.error_reply(work.routing, error, work.model, work.version, self._server_id)

    def _answer(self, entry: Entry, record: Record) -> None:
        entry.data.tracker.ready(entry, (record,))

    def _dead_letter(self, entry: Entry, reason: str, error: TritonRosError) -> None:
        """Send the record to the dead-letter topic, and an error reply where one can go."""
        work: _Work = entry.data
        record: Incoming = entry.message
        self.metrics.failed(work.topic, reason)
        self._log.warning(
            f"dead-letter:{work.topic}:{reason}",
            "Kafka record %s[%d]@%d sent to the dead-letter topic (%s): %s",
            work.topic,
            work.partition,
            record.offset,
            reason,
            error.message,
        )
        records = [self._dead_letter_record(entry, reason, error)]
        if work.routing is not None and work.routing.reply_topic:
            records.append(
                messages.error_reply(work.routing, error, work.model, work.version, self._server_id)
            )
        entry.data.tracker.ready(entry, records)

    def _dead_letter_record(
        self, entry: Entry, reason: str, error: TritonRosError, *, bare: bool = False
    ) -> Record:
        work: _Work = entry.data
        work.dead_letter = (reason, error)
        return messages.dead_letter(
            self.options.dead_letter_topic_for(work.topic), entry.message, reason, error, bare=bare
        )

    # ---------------------------------------------------------------- producing
    def _produce(self, entry: Entry, record: Record) -> None:
        """Hand one record to librdkafka (called in offset order under the partition's lock);
        never raises: what cannot be produced is replaced or given up, counted and logged."""
        from confluent_kafka import KafkaException

        kind = record.kind
        deadline = time.monotonic() + 30.0
        while True:
            try:
                self._producer.produce(
                    record.topic,
                    record.value,
                    key=record.key,
                    headers=record.headers,
                    on_delivery=lambda err, msg: self._delivered(entry, record, kind, err),
                )
                return
            except BufferError:  # librdkafka's queue is full: wait for deliveries
                if time.monotonic() > deadline:
                    error = "the producer's queue stayed full for 30 s"
                    break
                self._producer.poll(0.05)
            except KafkaException as exc:  # e.g. larger than message.max.bytes
                error = str(exc.args[0] if exc.args else exc)
                break
            except Exception as exc:  # e.g. a header the client cannot write
                error = f"{type(exc).__name__}: {exc}"
                break
        self._undeliverable(entry, record, kind, error)

    def _delivered(self, entry: Entry, record: Record, kind: str, err) -> None:
        if err is None:
            self.metrics.produced(record.topic, kind)
            self._finished_record(entry)
            return
        self._undeliverable(entry, record, kind, err.str() if hasattr(err, "str") else str(err))

    def _undeliverable(self, entry: Entry, record: Record, kind: str, error: str) -> None:
        """A record the broker refused for good (librdkafka retries the others until they are
        delivered): a reply goes to the dead-letter topic instead, a dead letter that carried
        the request's value and headers goes again without them; a bare one is given up."""
        work: _Work = entry.data
        self.metrics.failed(work.topic, messages.UNDELIVERABLE)
        self._log.warning(
            f"undeliverable:{record.topic}",
            "Kafka %s to topic %s not delivered: %s",
            kind.replace("_", " "),
            record.topic,
            error,
        )
        if kind != "dead_letter":
            self._produce(
                entry,
                self._dead_letter_record(
                    entry,
                    messages.UNDELIVERABLE,
                    invalid_arg(f"the {kind} to '{record.topic}' was not delivered: {error}"),
                ),
            )
            return
        if not record.bare and work.dead_letter is not None:
            reason, cause = work.dead_letter
            self._produce(
                entry,
                self._dead_letter_record(
                    entry,
                    reason,
                    TritonRosError(
                        cause.code,
                        f"{cause.message} (the dead letter with the record's value and "
                        f"headers was not delivered: {error})",
                    ),
                    bare=True,
                ),
            )
            return
        self._finished_record(entry)

    def _finished_record(self, entry: Entry) -> None:
        if entry.data.tracker.delivered(entry):
            self._finished(entry)

    def _finished(self, entry: Entry) -> None:
        with self._count_lock:
            self._in_flight -= 1
            self.metrics.in_flight = self._in_flight

    def _producer_loop(self) -> None:
        """Serves delivery reports until stop() has flushed the producer."""
        while not self._producer_done.is_set():
            try:
                self._producer.poll(0.1)
            except Exception as exc:  # a delivery callback's fault: logged, not fatal
                self._log.warning(
                    "producer-loop",
                    "Kafka producer loop error (continuing): %s: %s",
                    type(exc).__name__,
                    exc,
                )

    # ---------------------------------------------------------------- flow control, offsets
    def _flow_control(self) -> None:
        """Resubmit refused requests whose backoff has passed (they keep their partition's
        slot meanwhile, so a partition feeding a full model reaches its bound and pauses);
        pause every partition while the total in flight is at its bound; resume a partition
        once half of its bound has drained."""
        now = time.monotonic()
        due = []
        with self._retry_lock:
            while self._retries and self._retries[0].data.retry_at <= now:
                due.append(self._retries.popleft())
        for entry in due:
            self._submit(entry)
        limit, total = self.options.max_inflight_per_partition, self.options.max_inflight
        pause_all = self._in_flight >= total
        may_resume = self._in_flight <= total * 3 // 4
        to_pause, to_resume = [], []
        for key, tracker in self._partitions.items():
            if key in self._paused:
                if may_resume and len(tracker) <= limit // 2:
                    to_resume.append(key)
            elif pause_all:
                to_pause.append(key)
        from confluent_kafka import KafkaException, TopicPartition

        if to_pause:
            self._consumer.pause([TopicPartition(t, p) for t, p in to_pause])
            self._paused.update(to_pause)
        if to_resume:
            every_partition_paused = self._paused >= set(self._partitions)
            tps = [TopicPartition(t, p) for t, p in to_resume]
            self._consumer.resume(tps)
            self._paused.difference_update(to_resume)
            if every_partition_paused:
                # librdkafka's broker thread, with nothing left to fetch, notices a resume only
                # at its next wake-up, a second later; a request to it (ListOffsets) wakes it.
                try:
                    self._consumer.get_watermark_offsets(tps[0], timeout=0.5, cached=False)
                except KafkaException:
                    pass
        self.metrics.paused = len(self._paused)

    def _store_offsets(self, commit_keys=None) -> None:
        """Store the offsets whose replies are acknowledged (librdkafka commits them); commit
        ``commit_keys``' at once (revoke, stop)."""
        from confluent_kafka import KafkaException, TopicPartition

        offsets, previous = [], {}
        for key, tracker in list(self._partitions.items()):
            committable = tracker.committable
            if committable is None or tracker.revoked or self._stored.get(key) == committable:
                continue
            offsets.append(TopicPartition(key[0], key[1], committable))
            previous[key] = self._stored.get(key)
            self._stored[key] = committable
        try:
            if offsets:
                try:
                    self._consumer.store_offsets(offsets=offsets)
                except KafkaException:
                    for key, offset in previous.items():  # stored again next time
                        if offset is None:
                            self._stored.pop(key, None)
                        else:
                            self._stored[key] = offset
                    raise
            if commit_keys:
                commit = [
                    TopicPartition(t, p, self._stored[(t, p)])
                    for t, p in commit_keys
                    if (t, p) in self._stored
                ]
                if commit:
                    self._consumer.commit(offsets=commit, asynchronous=False)
        except KafkaException as exc:  # e.g. a partition revoked meanwhile
            self._log.warning(
                "offsets",
                "Kafka offsets not stored or committed: %s",
                exc.args[0] if exc.args else exc,
            )

    def _drop_retries(self, keys) -> None:
        keys = set(keys)
        with self._retry_lock:
            dropped = [e for e in self._retries if (e.data.topic, e.data.partition) in keys]
            for entry in dropped:
                self._retries.remove(entry)
        for entry in dropped:
            entry.data.tracker.forget(entry)
            self._finished(entry)
