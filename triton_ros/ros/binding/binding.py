"""A binding: input topics -> one model input -> one output topic per input topic.

A :class:`Binding` owns its sources (one per input topic: explicit ``topics`` bound at start,
and topics matching ``topic_patterns`` bound and unbound as the graph changes), their
subscriptions and publishers. It talks to its model only through a
:class:`~triton_ros.ros.targets.spec.ModelTarget` (the embedded core's model of any kind, or a
remote one), so ONNX, Python and ensemble models are fed and read alike, and to its messages
only through its input kind and output format (:mod:`~triton_ros.ros.codec`). Each frame goes
through:

1. the input callback (executor thread): the serialized message read without a copy of its
   pixels (the input kind's reader; typed messages with ``serialized_images`` false), checked
   (malformed inputs are counted, logged and dropped) and the source's flow control
   (:class:`~triton_ros.ros.binding.source.Source`);
2. still in the callback (node parameter ``preprocess_in_callback``, the default: the pixels
   were just copied in by this thread and are still in the CPU's cache, where a worker would
   read them cold after a hand-off: bench/DECISIONS.md, "Preprocessing in the image
   callback"), or on a worker thread:
   encoding into the model's input (for images: preprocessing) and ``target.infer``, which only
   queues - one request per frame, so the model's dynamic batcher batches frames of every
   source (and gRPC requests) together;
3. a worker thread again when the response arrives: decoding by the output format
   (detections, classification or tensors), publication with the input's header, a hand-off
   to the result mirror when the node gives one (``mirror``: it only queues, never blocks),
   then the source's next waiting frame.

How to encode and decode is resolved once per serving model version
(:class:`~triton_ros.ros.binding.plan.ModelPlan`, built from the target's
:class:`~triton_ros.ros.targets.spec.ModelSpec`), so a reloaded model with another input size is
picked up at its first frame.

No failure on a frame's path is silent: whatever goes wrong (the plan, preprocessing, inference,
decoding, publishing, or an unexpected exception anywhere) is counted by reason
(:data:`~triton_ros.ros.monitoring.counters.FAIL_REASONS`), logged at once and then throttled
with a count (:class:`~triton_ros.ros.monitoring.failures.FailureLog`), and shown on the
binding's ``/diagnostics`` status with the last error text. The line is logged (and the last
error set) before the count moves, so whoever sees a count in ``/diagnostics`` or ``~/status``
finds its cause already there. The source's in-flight slot is always released, so the next
frame runs. Stale frames are explained (age, topic, likely cause) the same way, as warnings,
just after the source counts them (it decides staleness under its lock and logs outside it).
The binding's figures go to the diagnostics reporter once a period (:meth:`Binding.figures`).

A synchronized binding (``inputs``: several topics of one source) binds source *namespaces*
instead of topics (:mod:`~triton_ros.ros.binding.sync_inputs`): each namespace's input topics are
subscribed to, read and checked as above, and matched by stamp (message_filters' ApproximateTime
policy, :mod:`~triton_ros.ros.binding.synchronizer`); each matched set is one frame of the
namespace's source from there on (flow control, one request into the batcher, one result).
Messages that found no set are counted by reason and logged (throttled) like the drops.
"""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Executor, Future
from typing import Any, Callable

from rclpy.clock import ClockType
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from ...core.errors import StatusCode, TritonRosError, as_triton_error
from ..codec.base import FrameOutputs, InputKind, MalformedInput
from ..codec.registry import (INPUT_KINDS, base_topic, input_kind, kind_for_topic, kind_for_type,
                              output_format)
from ..monitoring.diagnostics import BindingFigures, SourceFigures
from ..monitoring.executor_lag import ExecutorLag
from ..monitoring.failures import (BACKLOG_CAUSE, NO_BACKLOG, STALE_CAUSES, WAITED_CAUSE,
                                   FailureLog)
from ..monitoring.latency import LatencyWindow
from ..monitoring.counters import SourceCounters
from ..parameters import BindingConfig
from ..targets.spec import ModelSpec, ModelTarget, TargetState
from .plan import ModelPlan, build_plan, build_sync_plan
from .source import Frame, Source
from .sync_inputs import (MatchedSet, ResolvedInput, SyncGroup, candidate_namespaces,
                          resolve_inputs)
from .topic_discovery import TopicMatcher

# Inference errors that mean "the model is not serving now" (dropped_unavailable, a warning),
# not "this frame failed" (failed_inference, an error).
UNAVAILABLE_CODES = (StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND)
# A traced frame's own activities around the core's (docs/tracing.md): received by the input
# callback, preprocessed (submitted), result decoding started, message published.
TRACE_RECEIVED, TRACE_PREPROCESS_END, TRACE_PUBLISH_START, TRACE_PUBLISH_END = (
    "ROS_FRAME_RECEIVED", "ROS_PREPROCESS_END", "ROS_PUBLISH_START", "ROS_PUBLISH_END")


def stale_cause(age_ns: int, backlog_ns: int, max_age_ms: int, waited: bool) -> tuple[str, str]:
    """Why a frame went stale: (kind, the cause as told). ``waited``: it arrived fresh and aged
    in the source's slot, behind frames in the model. Else it arrived stale: if the node's own
    backlog (``backlog_ns``, how far behind its executor is: monitoring/executor_lag.py)
    explains its age (without it the frame was younger than max_age_ms), the node is behind;
    if not, it was already old when it reached the node (a publisher's clock, a bag without
    --clock). Not measured (-1): both are possible, and said so."""
    if waited:
        return "waited", WAITED_CAUSE
    if backlog_ns < 0:
        return "arrived", STALE_CAUSES + NO_BACKLOG
    reached_ns = age_ns - backlog_ns           # its age without the node's own backlog
    if reached_ns <= max_age_ms * 1_000_000:
        return "backlog", (f"{BACKLOG_CAUSE} (the node was {backlog_ns / 1e6:.0f} ms behind; "
                           f"without that the frame was {reached_ns / 1e6:.0f} ms old)")
    return "arrived", (f"it was {reached_ns / 1e9:.3f} s old even without the node's own "
                       f"backlog ({backlog_ns / 1e6:.0f} ms): {STALE_CAUSES}")


class Binding:
    """Runtime of one binding inside the node."""

    def __init__(self, config: BindingConfig, *, node, target: ModelTarget, workers: Executor,
                 callback_group, model_latency: LatencyWindow | None = None,
                 serialized_images: bool = True, preprocess_in_callback: bool = True,
                 executor_lag: ExecutorLag | None = None,
                 mirror: Callable[[Source, Any, str, Any], None] | None = None) -> None:
        self.config = config
        # How far behind the node's executor is (None: not measured): explains stale frames.
        self._lag = executor_lag
        self._node = node
        self.target = target
        self._workers = workers
        # Preprocess in the image callback: the frame was just copied in by this thread, so its
        # pixels are still in the cache (on a worker they arrive cold, after a hand-off).
        self._inline = preprocess_in_callback
        # The model's latency as this node's frames see it (request -> response), for its
        # /diagnostics record; shared by the bindings of one model.
        self._model_latency = model_latency if model_latency is not None else LatencyWindow()
        self._group = callback_group
        # Each published result is also handed to mirror(source, message, model, version)
        # (ros/mirror: a copy to Kafka); it queues and returns, and never raises.
        self._mirror = mirror
        self._log = node.get_logger()
        # The input kind of every topic, or None (input_kind auto): each topic's graph type.
        self._fixed_kind = None if config.input_kind == "auto" else input_kind(config.input_kind)
        self._output = output_format(config.format)
        ros_types = ([self._fixed_kind.ros_type] if self._fixed_kind is not None
                     else sorted({kind.ros_type for kind in INPUT_KINDS.values()}))
        self._matcher = (TopicMatcher(config.topic_patterns, ros_types)
                         if config.topic_patterns else None)
        reliability = {"best_effort": ReliabilityPolicy.BEST_EFFORT,
                       "reliable": ReliabilityPolicy.RELIABLE}
        self._input_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.input_depth,
                                     reliability=reliability[config.input_reliability])
        self._output_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.output_depth,
                                      reliability=reliability[config.output_reliability])
        self._sources: dict[str, Source] = {}
        self._sources_lock = threading.Lock()
        self.retired = SourceCounters()        # totals of unbound sources, kept for the totals
        # The plan of each input kind (its name) or, for a synchronized binding, of each set of
        # input kinds (MatchedSet.kinds), and the last failure to make one, with its spec
        self._plans: dict[Any, ModelPlan] = {}
        self._plan_errors: dict[Any, tuple[ModelSpec, TritonRosError]] = {}
        self._plan_lock = threading.Lock()
        self.failures = FailureLog(self._log)
        self._stopped = False
        self._skipped: set[str] = set()        # found topics of a camera read through another
        # Serialized subscriptions, read without a copy of the pixels (codec/serialized_image.py)
        # for each kind this binding may read; None: typed messages. A synchronized binding's
        # readers are its inputs' (add_sync_source).
        self._serialized = serialized_images
        self._readers: dict[str, Callable[[Any], Any] | None] = {} if config.synchronized else {
            kind.name: self._make_reader(kind) if serialized_images else None
            for kind in ((self._fixed_kind,) if self._fixed_kind is not None
                         else INPUT_KINDS.values())}

    # ---------------------------------------------------------------- sources
    def start(self) -> None:
        if self.config.synchronized:
            return                             # namespaces are bound as their topics appear
        graph = self._graph() if self._fixed_kind is None and self.config.topics else {}
        for topic in self.config.topics:
            types = self._publisher_types(topic, graph) if topic in graph else []
            self.add_source(topic, discovered=False, kind=self._kind_of(topic, types))

    def needs_discovery(self) -> bool:
        """Whether :meth:`discover` has work: patterns to match, namespaces whose inputs bind as
        they appear (synchronized), or topics whose type the graph decides (input_kind auto)."""
        return bool(self.config.topic_patterns) or self.config.synchronized or (
            self._fixed_kind is None and bool(self.config.topics))

    def _graph(self) -> dict[str, list[str]]:
        try:
            return dict(self._node.get_topic_names_and_types())
        except Exception as exc:               # no graph yet: the names decide until discover
            self._log.warning(f"binding '{self.config.name}': the ROS graph could not be read "
                              f"({exc}); topic types follow their names until it can")
            return {}

    def _kind_of(self, topic: str, types: list[str] | None,
                 current: InputKind | None = None) -> InputKind:
        """The kind reading ``topic``: the binding's input_kind, else the kind of a type the
        graph shows for it (``current`` while it is one of them), else the topic's name."""
        if self._fixed_kind is not None:
            return self._fixed_kind
        if types:
            if current is not None and current.ros_type in types:
                return current
            for ros_type in types:
                kind = kind_for_type(ros_type)
                if kind is not None:
                    return kind
        return current if current is not None else kind_for_topic(topic)

    def _make_reader(self, kind: InputKind) -> Callable[[Any], Any] | None:
        """The serialized-message reader of ``kind`` (None: typed messages)."""
        try:
            return kind.reader()
        except ImportError as exc:             # rosbags missing (an apt-installed ROS 2)
            self._log.warning(f"binding '{self.config.name}': serialized_images is true but "
                              f"{exc}; {kind.name} messages arrive typed (pip install rosbags, "
                              f"or set serialized_images false)")
            return None

    def _subscribe(self, source: Source, kind: InputKind) -> None:
        """Subscribe ``source`` with ``kind``'s message type (its frames carry the kind)."""
        reader = self._readers.get(kind.name)
        source.subscription = self._node.create_subscription(
            kind.message_class(), source.topic,
            lambda msg, s=source, k=kind, r=reader: self._on_input(s, msg, k, r),
            self._input_qos, callback_group=self._group, raw=reader is not None)
        source.kind = kind

    def sources(self) -> list[Source]:
        with self._sources_lock:
            return list(self._sources.values())

    def output_topic(self, topic: str) -> str:
        namespace, _, basename = topic.rpartition("/")
        if self.config.synchronized:           # topic: a source namespace, the output's home
            namespace = topic
        return self.config.output_topic_template.format(
            namespace=namespace, topic=topic, basename=basename,
            camera=base_topic(topic).rpartition("/")[0],
            output_name=self.config.output_name, binding=self.config.name,
            model=self.config.model)

    def add_source(self, topic: str, *, discovered: bool,
                   kind: InputKind | None = None) -> Source | None:
        with self._sources_lock:
            if topic in self._sources or self._stopped:
                return None
            output = self.output_topic(topic)
            if output == topic:
                self._log.error(f"binding '{self.config.name}': output topic of '{topic}' is the "
                                f"input topic itself; check output_topic_template")
                return None
            source = self._new_source(topic, output, discovered)
            self._subscribe(source, kind or self._kind_of(topic, None))
            self._sources[topic] = source
        how = "found" if discovered else "bound"
        self._log.info(f"binding '{self.config.name}': {how} {topic} -> {source.output_topic} "
                       f"(model '{self.config.model}', {source.kind.name} input)")
        return source

    def _publisher_types(self, topic: str, graph: dict[str, list[str]]) -> list[str]:
        """The message types of ``topic``'s publishers (the graph's types of the topic also
        hold this binding's own subscription's, and any other subscriber's)."""
        try:
            return sorted({info.topic_type for info in
                           self._node.get_publishers_info_by_topic(topic)})
        except Exception:                      # a node without graph queries: the topic's
            return graph.get(topic, [])

    def _follow_types(self, graph: dict[str, list[str]]) -> None:
        """input_kind auto: resubscribe a topic whose publishers' type is not the one it is
        read as (it was bound before any publisher, by its name; or its publishers changed)."""
        for source in self.sources():
            if source.topic not in graph:      # nobody publishes or subscribes but us: keep
                continue
            kind = self._kind_of(source.topic, self._publisher_types(source.topic, graph),
                                 source.kind)
            if kind is source.kind:
                continue
            old = source.kind
            with self._sources_lock:
                if self._sources.get(source.topic) is not source or self._stopped:
                    continue
                if source.subscription is not None:
                    self._node.destroy_subscription(source.subscription)
                    source.subscription = None
                try:
                    self._subscribe(source, kind)
                except Exception as exc:       # the middleware still holds the old type's
                    # topic (rclpy destroys a subscription once no executor uses it): the next
                    # discovery period tries again; frames of the topic wait until then
                    self.failures.report(f"resubscribe:{source.topic}", "resubscribe",
                                         f"binding '{self.config.name}': {source.topic} carries "
                                         f"{kind.ros_type}, but subscribing to it failed "
                                         f"({exc}); trying again", level="warn")
                    continue
            self._log.info(f"binding '{self.config.name}': {source.topic} carries "
                           f"{kind.ros_type}; read as {kind.name} (was {old.name})")

    def _new_source(self, topic: str, output: str, discovered: bool) -> Source:
        """A source's flow control and its output publishers (subscriptions are the caller's)."""
        source = Source(topic, output, max_in_flight=self.config.max_in_flight,
                        max_age_ms=self.config.max_age_ms, discovered=discovered,
                        on_stale=self._on_stale, hedge_after_ms=self._hedge_after_ms(),
                        can_hedge=getattr(self.target, "can_hedge", None))
        source.last_seen_publisher_ns = time.monotonic_ns()
        source.publisher = self._node.create_publisher(self._output.message_class(), output,
                                                       self._output_qos)
        source.output_topic = getattr(source.publisher, "topic_name", output)
        # An output format's further topics (segmentation's overlay): <output topic>/<name>
        extra = getattr(self._output, "extra_outputs", None)
        source.extra_publishers = {
            name: self._node.create_publisher(msg_type, f"{source.output_topic}/{name}",
                                              self._output_qos)
            for name, msg_type in (extra(self.config.output_settings) if extra else ())}
        return source

    def _hedge_after_ms(self) -> float:
        """When a source hedges (source.py): remote targets of two endpoints or more only."""
        remote = self.config.remote
        if remote is None or len(remote.urls) < 2:
            return 0.0
        return remote.hedge_after_fraction * remote.timeout_ms

    def remove_source(self, topic: str) -> None:
        with self._sources_lock:
            source = self._sources.pop(topic, None)
        if source is None:
            return
        group: SyncGroup | None = getattr(source, "sync", None)
        for subscription in group.subscriptions if group is not None else (source.subscription,):
            self._node.destroy_subscription(subscription)
        if group is not None:                  # messages still waiting will find no partner
            for _ in group.synchronizer.clear():
                source.count("unmatched_no_partner")
        self._node.destroy_publisher(source.publisher)
        for publisher in source.extra_publishers.values():
            self._node.destroy_publisher(publisher)
        counters, _, _ = source.snapshot()
        with self._sources_lock:
            self.retired.add(counters)
        self._log.info(f"binding '{self.config.name}': {topic} has had no publisher for "
                       f"{self.config.forget_after_s:g} s; unbound (received {counters.received}, "
                       f"published {counters.published}, dropped {counters.dropped})")

    def discover(self, topics_and_types, publisher_count: Callable[[str], int]) -> None:
        """Bind new topics matching the patterns (a synchronized binding: new namespaces whose
        inputs all appeared); unbind found topics whose robot went away; with input_kind auto,
        read each topic as the type its publishers have."""
        if self._stopped:
            return
        graph = dict(topics_and_types)
        if self.config.synchronized:
            self._discover_namespaces(graph.items())
        else:
            if self._fixed_kind is None:
                self._follow_types(graph)
            if self._matcher is None:
                return
            selected = self._matcher.select(graph.items())
            found = set(selected)
            for topic in selected:
                if topic in self._sources or self._read_elsewhere(topic, found):
                    continue
                types = self._publisher_types(topic, graph) if self._fixed_kind is None else []
                self.add_source(topic, discovered=True,
                                kind=self._kind_of(topic, types or graph[topic]))
        now = time.monotonic_ns()
        forget_ns = int(self.config.forget_after_s * 1e9)
        for source in self.sources():
            if not source.discovered:
                continue
            group: SyncGroup | None = getattr(source, "sync", None)
            topics = group.topics() if group is not None else [source.topic]
            if any(publisher_count(topic) > 0 for topic in topics):
                source.last_seen_publisher_ns = now
            elif forget_ns and now - source.last_seen_publisher_ns > forget_ns:
                self.remove_source(source.topic)

    def _read_elsewhere(self, topic: str, found: set[str]) -> bool:
        """Whether the camera of a found ``topic`` is read through another of its
        image_transport topics already (a camera driver publishes ``image_raw`` and
        ``image_raw/compressed`` alike): a pattern binds each camera once, the topic bound first,
        or the raw one when both appear together. Logged once per topic skipped."""
        base = base_topic(topic)
        if base != topic:                      # a transport subtopic: its raw topic wins
            other = base if (base in self._sources or base in found) else None
        else:
            other = next((t for t in self._sources if t != topic and base_topic(t) == topic),
                         None)
        if other is None:
            return False
        if topic not in self._skipped:
            self._skipped.add(topic)
            self._log.info(f"binding '{self.config.name}': {topic} not bound: its camera is "
                           f"read through {other} (one topic per camera)")
        return True

    def stop(self) -> None:
        """Take no new frames; frames in the model still finish and publish."""
        self._stopped = True

    # ---------------------------------------------------------------- synchronized sources
    def _discover_namespaces(self, topics_and_types) -> None:
        """Bind the namespaces (``topics``, or matching ``topic_patterns``) whose every input
        topic is in the graph."""
        graph = {name: list(types) for name, types in topics_and_types}
        fixed = set(self.config.topics)
        for namespace in sorted(candidate_namespaces(self.config, graph) | fixed):
            if namespace in self._sources:
                continue
            discovered = namespace not in fixed
            if discovered and (self._matcher is None or not self._matcher.matches(namespace)):
                continue
            inputs = resolve_inputs(namespace, self.config, graph)
            if inputs is not None:
                self.add_sync_source(namespace, inputs, discovered=discovered)

    def add_sync_source(self, namespace: str, inputs: list[ResolvedInput], *,
                        discovered: bool) -> Source | None:
        """Bind one source namespace: a subscription per input, their synchronizer, one output."""
        readers = []
        for resolved in inputs:
            reader = None
            if self._serialized:
                try:
                    reader = resolved.kind.reader()
                except ImportError as exc:     # rosbags missing: typed messages
                    self._log.warning(f"binding '{self.config.name}': {resolved.topic} is read "
                                      f"as typed messages: {exc}")
            readers.append(reader)
        with self._sources_lock:
            if namespace in self._sources or self._stopped:
                return None
            output = self.output_topic(namespace)
            if output in [i.topic for i in inputs]:
                self._log.error(f"binding '{self.config.name}': output topic of '{namespace}' "
                                f"is one of its inputs; check output_topic_template")
                return None
            source = self._new_source(namespace, output, discovered)
            group = SyncGroup(namespace, inputs, self.config, readers)
            source.sync = group
            for index, resolved in enumerate(inputs):
                group.subscriptions.append(self._node.create_subscription(
                    resolved.kind.message_class(), resolved.topic,
                    lambda msg, s=source, i=index: self._on_sync_input(s, i, msg),
                    self._input_qos, callback_group=self._group, raw=readers[index] is not None))
            self._sources[namespace] = source
        how = "found" if discovered else "bound"
        self._log.info(f"binding '{self.config.name}': {how} {namespace} -> "
                       f"{source.output_topic} (model '{self.config.model}'; inputs matched by "
                       f"stamp within {self.config.sync.slop_ms:g} ms: {group.describe()})")
        return source

    def _on_sync_input(self, source: Source, index: int, msg) -> None:
        if self._stopped:
            return
        group: SyncGroup = source.sync
        resolved = group.inputs[index]
        try:
            now = self._now_ns()
            try:
                reader = group.readers[index]
                if reader is not None:
                    msg = reader(msg)
                resolved.kind.check(msg)
            except MalformedInput as exc:
                hint = ""
                if getattr(msg, "encoding", "") in ("16UC1", "32FC1") and \
                        resolved.kind.name == "image":
                    hint = (f" (a depth image: set {self.config.name}.input_kinds."
                            f"{resolved.name}: depth)")
                self._malformed(resolved.topic, resolved.kind.name, msg, exc, hint)
                source.count_malformed()
                return
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            result = group.add(index, stamp, msg)
            for dropped in result.dropped:
                self._report_unmatched(source, group, dropped)
            for i in result.bound_violated:
                self._log.warning(
                    f"binding '{self.config.name}': messages of {group.inputs[i].topic} came "
                    f"closer together than sync_min_interval_ms "
                    f"{self.config.sync.min_interval_ms:g}; sets may not be the best (lower it)")
            for entries in result.sets:
                matched = group.matched(entries)
                self._offer(source, Frame(matched, matched.stamp_ns, now,
                                          received_mono_ns=time.monotonic_ns()), now,
                            on_workers=group.decodes)
        except Exception as exc:               # never lose a message (or the callback) silently
            self._fail(source, "failed_internal", f"handling a message of {resolved.topic}", exc)

    def _report_unmatched(self, source: Source, group: SyncGroup, dropped) -> None:
        resolved = group.inputs[dropped.index]
        stamp = dropped.entry.stamp_ns
        why = {"too_old": "it is older than messages already paired (late or out of order)",
               "no_partner": f"no message of every other input within sync_slop_ms "
                             f"{self.config.sync.slop_ms:g} (or a closer one took its partners)",
               "queue_overflow": f"the queue was full (sync_queue_size "
                                 f"{self.config.sync.queue_size}: an input is missing or late)"}
        self.failures.report(
            f"unmatched:{dropped.reason}", f"unmatched_{dropped.reason}",
            f"binding '{self.config.name}': a message of {resolved.topic} (input "
            f"{resolved.name}, stamp {stamp // 1_000_000_000}.{stamp % 1_000_000_000:09d}) found "
            f"no set: {why[dropped.reason]}; dropped (counted as unmatched_{dropped.reason} in "
            f"/diagnostics)", level="warn")
        source.count(f"unmatched_{dropped.reason}")

    def in_flight(self) -> int:
        """Frames of this binding in its model now."""
        return sum(source.snapshot()[1] for source in self.sources())

    def figures(self) -> BindingFigures:
        """This binding's figures for the diagnostics reporter. Drains the latency windows: the
        node calls it once per diagnostics period."""
        now = time.monotonic_ns()
        sources = []
        for source in self.sources():
            counters, in_flight, _ = source.snapshot()
            group: SyncGroup | None = getattr(source, "sync", None)
            sources.append(SourceFigures(source.topic, source.output_topic, counters, in_flight,
                                         source.stalled_for_ns(now), source.e2e_latency.drain(),
                                         source.infer_latency.drain(),
                                         group.unmatched_by_input() if group else ()))
        with self._sources_lock:
            retired = self.retired.copy()
        try:
            state = self.target.state()
        except Exception as exc:               # a target that cannot even say: not ready
            state = TargetState(False, "UNKNOWN", f"{type(exc).__name__}: {exc}")
        config = self.config
        return BindingFigures(
            name=config.name, model=config.model, location=self.target.location,
            max_age_ms=config.max_age_ms, inputs=config.topics + config.topic_patterns,
            sources=tuple(sources), retired=retired, last_error=self.failures.last,
            last_stale=self.failures.last_stale, model_ready=state.ready,
            model_state=state.state, model_reason=state.reason,
            sync_slop_ms=config.sync.slop_ms if config.synchronized else None)

    # ---------------------------------------------------------------- per frame
    def _now_ns(self) -> int:
        """Now on the node's clock: ROS time (the /clock topic) with use_sim_time, else the
        system clock; header stamps are compared with it."""
        return self._node.get_clock().now().nanoseconds

    def _on_input(self, source: Source, msg, kind: InputKind,
                  reader: Callable[[Any], Any] | None) -> None:
        if self._stopped:
            return
        try:
            now = self._now_ns()
            try:
                if reader is not None:
                    msg = reader(msg)
                kind.check(msg)
            except MalformedInput as exc:
                self._malformed(source.topic, kind.name, msg, exc)
                source.count_malformed()
                return
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            # Decoding kinds (compressed images) run on the workers: spread over cores.
            self._offer(source, Frame(msg, stamp, now, kind.name, time.monotonic_ns()), now,
                        on_workers=getattr(kind, "encode_on_workers", False))
        except Exception as exc:               # never lose a frame (or the callback) silently
            self._fail(source, "failed_internal", f"handling a frame of {source.topic}", exc)

    def _offer(self, source: Source, received: Frame, now: int, *,
               on_workers: bool = False) -> None:
        """Hand a received frame to the source's flow control and start it if it may: in this
        callback (preprocess_in_callback), or on a worker when ``on_workers`` (decoding)."""
        frame = source.offer(received, now)
        if frame is None:
            return
        try:
            if self._inline and not on_workers:
                self._run(source, frame)
            else:
                self._submit(self._run, source, frame)
        except Exception as exc:               # it holds an in-flight slot: hand it on
            self._fail(source, "failed_internal", f"starting a frame of {source.topic}", exc)
            self._submit(self._run, source, self._finish_source(source))

    def _malformed(self, topic: str, kind: str, msg: Any, exc: Exception,
                   hint: str = "") -> None:
        """Log a malformed message of ``topic`` (throttled per topic); the caller counts it."""
        header = getattr(msg, "header", None)     # None: the bytes did not deserialize
        which = "" if header is None else f" (frame_id '{header.frame_id}')"
        self.failures.report(
            f"malformed:{topic}", "dropped_malformed",
            f"binding '{self.config.name}': malformed {kind} on {topic}{which}: "
            f"{exc}{hint}; dropped (counted as dropped_malformed in /diagnostics)", level="warn")

    def _on_stale(self, source: Source, frame: Frame, age_ns: int, waited: bool) -> None:
        clock = self._clock_name()
        head = f"a frame of {source.topic} (frame_id '{frame.msg.header.frame_id}')"
        if age_ns < 0:                         # stamped ahead: published, but the clocks differ
            what = f"{head} was stamped {-age_ns / 1e9:.3f} s ahead of this node's {clock} clock"
            self.failures.report(
                f"ahead:{source.topic}", "stamped_ahead",
                f"binding '{self.config.name}': {what} (more than max_age_ms "
                f"{self.config.max_age_ms}); processed, but ages and latencies of this topic are "
                f"wrong. Likely cause: {STALE_CAUSES}", level="warn",
                summary=f"{what}. Likely cause: {STALE_CAUSES}")
            return
        what = f"{head} was {age_ns / 1e9:.3f} s old on this node's {clock} clock"
        backlog = self._lag.behind_ns(time.monotonic_ns()) if self._lag is not None else -1
        kind, cause = stale_cause(age_ns, backlog, self.config.max_age_ms, waited)
        self.failures.report(
            f"stale:{source.topic}:{kind}", "dropped_stale",
            f"binding '{self.config.name}': {what}, over max_age_ms {self.config.max_age_ms}; "
            f"dropped as stale. Likely cause: {cause}", level="warn",
            summary=f"{what}. Likely cause: {cause}")

    def _clock_name(self) -> str:
        try:
            clock = self._node.get_clock()
            if clock.clock_type == ClockType.ROS_TIME and clock.ros_time_is_active:
                return "ROS (/clock, use_sim_time)"
        except Exception:                      # only for the message
            pass
        return "system"

    def _submit(self, fn, source: Source, *args) -> None:
        """Run ``fn(source, *args)`` on a worker. If that is impossible (the workers are shut
        down: the node is stopping), the frame ``fn`` would carry is counted and its slot freed."""
        try:
            self._workers.submit(fn, source, *args).add_done_callback(self._job_done)
        except Exception as exc:
            if fn is self._run and (not args or args[0] is None):
                return                         # nothing holds a slot
            trace = getattr(args[-1], "trace", None) if fn is self._finish_frame else None
            if trace is not None:              # a traced frame: its trace is written all the same
                trace.release()
            if self._stopped:
                source.count("dropped_unavailable")
            else:
                self._fail(source, "failed_internal", f"queueing a frame of {source.topic}", exc)
            self._finish_quietly(source)

    def _job_done(self, job: Future) -> None:
        # Worker jobs handle their own failures; anything escaping is a defect of ours, and a
        # worker's future would swallow it: say so.
        if job.cancelled():
            return
        exc = job.exception()
        if exc is not None:
            self.failures.report("job", "failed_internal",
                                 f"binding '{self.config.name}': a worker job failed: "
                                 f"{type(exc).__name__}: {exc}")

    def _finish_quietly(self, source: Source) -> None:
        """Release the slot without starting the waiting frame (the node is stopping)."""
        nxt = self._finish_source(source)
        while nxt is not None:
            source.count("dropped_unavailable")
            nxt = self._finish_source(source)

    def _finish_source(self, source: Source) -> Frame | None:
        try:
            return source.finish(self._now_ns())
        except Exception:                      # the clock failed (shutdown): release anyway
            return source.finish(0)

    def _run(self, source: Source, frame: Frame | None) -> None:
        """Start frames of a source until one is in the model (or none waits)."""
        while frame is not None:
            try:
                frame = self._start_frame(source, frame)
            except Exception as exc:           # a defect of ours: count, log, keep serving
                self._fail(source, "failed_internal", f"starting a frame of {source.topic}", exc)
                frame = self._finish_source(source)

    def _start_frame(self, source: Source, frame: Frame) -> Frame | None:
        """Preprocess and queue one frame; return the next frame if this one ended here."""
        try:
            plan = self.plan(getattr(frame.msg, "kinds", None) or frame.kind)
        except TritonRosError as exc:
            if exc.code in UNAVAILABLE_CODES:
                self.failures.report(f"plan:{exc.code.name}", "dropped_unavailable",
                                     f"binding '{self.config.name}': {exc.message}; frames are "
                                     f"dropped until the model is ready", level="warn")
                source.count("dropped_unavailable")
            else:
                self.failures.report(f"plan:{exc.code.name}", "failed_plan",
                                     f"binding '{self.config.name}': cannot feed model "
                                     f"'{self.config.model}': {exc.message}")
                source.count("failed_plan")
            return self._finish_source(source)
        try:
            inputs, placement, placements = plan.encode_request(frame.msg)
        except MalformedInput as exc:          # found decoding (a corrupt JPEG): the sender's
            self._malformed(source.topic, frame.kind or "input", frame.msg, exc)
            source.count("dropped_malformed")
            return self._finish_source(source)
        except Exception as exc:               # a frame's fault: count it, keep serving
            self._fail(source, "failed_preprocess", f"preprocessing a frame of {source.topic}",
                       exc)
            return self._finish_source(source)
        started = time.monotonic_ns()
        future = self.target.infer(inputs, outputs=plan.output.requested,
                                   priority=self.config.priority,
                                   timeout_us=self.config.timeout_us)
        future.add_done_callback(
            lambda f: self._submit(self._finish_frame, source, frame, plan,
                                   (placement, placements), started, f))
        return None

    def _finish_frame(self, source: Source, frame: Frame, plan: ModelPlan, placement: Any,
                      started: int, future: Future) -> None:
        published = False
        trace = getattr(future, "trace", None)     # a traced frame (targets/local.py)
        try:
            published = self._complete(source, frame, plan, placement, started, future, trace)
        except Exception as exc:               # a defect of ours: count, log, keep serving
            self._fail(source, "failed_internal", f"finishing a frame of {source.topic}", exc)
        finally:
            try:
                if trace is not None:
                    self._end_trace(trace, frame, started)
                if frame.hedged:
                    self._hedged(source, frame, published)
            finally:
                # whatever happened, the slot goes on (a failure above: _job_done reports it)
                self._run(source, self._finish_source(source))

    @staticmethod
    def _end_trace(trace, frame: Frame, started: int) -> None:
        """Add the frame's receipt and the end of its preprocessing (``started``: when it was
        submitted) to its request's trace and hand the trace back to the core's tracer (written
        once complete); a trace never fails a frame."""
        try:
            if frame.received_mono_ns:
                trace.capture(TRACE_RECEIVED, frame.received_mono_ns)
            trace.capture(TRACE_PREPROCESS_END, started)
        finally:
            trace.release()

    def _hedged(self, source: Source, frame: Frame, published: bool) -> None:
        """Count a hedged frame's outcome, and say (throttled) that hedging happens."""
        source.count("hedged_published" if published else "hedged_lost")
        remote = self.config.remote
        self.failures.report(
            f"hedge:{source.topic}", "hedged",
            f"binding '{self.config.name}': frames of {source.topic} are hedged: the frame in "
            f"flight has waited over hedge_after_fraction {remote.hedge_after_fraction:g} of "
            f"server_timeout_ms {remote.timeout_ms}, so newer frames go to another endpoint "
            f"(this one {'published' if published else 'lost'}; counted as hedged, "
            f"hedged_published, hedged_lost in /diagnostics)", level="warn", record=False)

    def _complete(self, source: Source, frame: Frame, plan: ModelPlan, placement: Any,
                  started: int, future: Future, trace=None) -> bool:
        """Decode and publish a frame's result (True: published); count whatever else.
        ``trace``: the request's trace, which gets the publication's start and end."""
        try:
            response = future.result()
        except BaseException as exc:           # the future's failure, whatever its type
            error = as_triton_error(exc)
            if error.code in UNAVAILABLE_CODES:
                self.failures.report(f"infer:{error.code.name}", "dropped_unavailable",
                                     f"binding '{self.config.name}': model '{self.config.model}' "
                                     f"did not serve a frame of {source.topic}: {error.message}",
                                     level="warn")
                source.count("dropped_unavailable")
            else:
                self.failures.report(f"infer:{error.code.name}", "failed_inference",
                                     f"binding '{self.config.name}': inference of a frame of "
                                     f"{source.topic} on model '{self.config.model}' failed "
                                     f"({error.code.name}): {error.message}")
                source.count("failed_inference")
            return False
        elapsed = time.monotonic_ns() - started
        source.infer_latency.add(elapsed)
        self._model_latency.add(elapsed)
        if trace is not None:
            trace.capture(TRACE_PUBLISH_START)
        try:
            msg = self._decode(plan, placement, frame, response)
        except Exception as exc:               # the outputs do not decode as configured
            self._fail(source, "failed_decode", f"decoding the result of a frame of "
                       f"{source.topic} ({self.config.format})", exc)
            return False
        try:
            source.publisher.publish(msg)
            if source.extra_publishers:
                for name, extra in self._output.extras(plan.output, msg).items():
                    source.extra_publishers[name].publish(extra)
        except Exception as exc:
            self._fail(source, "failed_publish", f"publishing on {source.output_topic}", exc)
            return False
        if trace is not None:
            trace.capture(TRACE_PUBLISH_END)
        source.count("published")
        latency = self._now_ns() - (frame.stamp_ns or frame.received_ns)
        if latency >= 0:                       # a stamp ahead of our clock has no latency to tell
            source.e2e_latency.add(latency)
        if self._mirror is not None:
            self._mirror(source, msg, response.model_name, response.model_version)
        return True

    def _decode(self, plan: ModelPlan, placement: Any, frame: Frame, response):
        outputs = {name: (value[0] if plan.batching else value)
                   for name, value in response.outputs.items()}
        placement, placements = placement
        # A matched set's results carry its reference input's header
        header = (frame.msg[plan.input_name].header if isinstance(frame.msg, MatchedSet)
                  else frame.msg.header)
        return self._output.decode(plan.output, FrameOutputs(
            header, outputs, plan.batching, response.model_name, response.model_version,
            placement, placements))

    def _fail(self, source: Source, reason: str, what: str, exc: BaseException) -> None:
        """Count a frame's failure by reason and log it (throttled), with its cause. Never
        raises: it runs on the paths that must release the frame's slot afterwards."""
        try:
            cause = (exc.message if isinstance(exc, TritonRosError)
                     else f"{type(exc).__name__}: {exc}")
            self.failures.report(reason, reason,
                                 f"binding '{self.config.name}': {what} failed: {cause}")
        except Exception as inner:             # last resort: the cause must not be lost
            print(f"binding '{self.config.name}': {what} failed: {exc!r}; reporting it failed: "
                  f"{inner!r}", file=sys.stderr, flush=True)
        try:
            source.count(reason)               # after the line: see the module docstring
        except Exception as inner:
            print(f"binding '{self.config.name}': counting {reason} failed: {inner!r}",
                  file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- model plan
    def plan(self, kind: Any = "") -> ModelPlan:
        """The plan for the model version that serves now (built at its first frame of that
        kind): of input kind ``kind`` (a name; default: the binding's, else ``image``) or, for a
        synchronized binding, of the set's input kinds (``MatchedSet.kinds``)."""
        if not kind:
            kind = self._fixed_kind.name if self._fixed_kind is not None else "image"
        spec = self.target.describe()
        plan = self._plans.get(kind)
        if plan is not None and plan.spec is spec:
            return plan
        with self._plan_lock:
            plan = self._plans.get(kind)
            if plan is not None and plan.spec is spec:
                return plan
            failed = self._plan_errors.get(kind)
            if failed is not None and failed[0] is spec:
                raise failed[1]
            try:
                if isinstance(kind, str):
                    plan = build_plan(self.config, spec, INPUT_KINDS[kind], self._output)
                else:
                    plan = build_sync_plan(self.config, spec,
                                           [(name, input_kind(k)) for name, k in kind],
                                           self._output)
            except TritonRosError as exc:
                self._plan_errors[kind] = (spec, exc)
                raise
            if len(self._plans) >= 16:         # sources changed their kinds: start over
                self._plans.clear()
            self._plans[kind] = plan
            self._log.info(f"binding '{self.config.name}': model '{spec.name}' version "
                           f"{spec.version} ({spec.platform}, {self.target.location}), "
                           + (self._describe_feeds(plan, dict(kind)) if plan.feeds else
                              f"{kind} input '{plan.input_name}' {plan.input.summary}")
                           + f", format {self.config.format}")
            return plan

    @staticmethod
    def _describe_feeds(plan: ModelPlan, kinds: dict[str, str]) -> str:
        feeds = "; ".join(f"{name} [{kinds[name]}] {input_plan.summary}"
                          for name, input_plan, _, _ in plan.feeds)
        return f"inputs {feeds} (results carry the header of {plan.input_name})"
