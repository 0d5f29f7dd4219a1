"""A binding's topics: input topics (or source namespaces) -> one model -> one output topic each.

A :class:`Binding` owns its sources (one per input topic: explicit ``topics`` bound at start,
and topics matching ``topic_patterns`` bound and unbound as the graph changes), their
subscriptions and publishers. It talks to its model only through a
:class:`~triton_ros.ros.targets.spec.ModelTarget` (the embedded core's model of any kind, or a
remote one), so ONNX, Python and ensemble models are fed and read alike, and to its messages
only through its input kind and output format (:mod:`~triton_ros.ros.codec`). A topic's kind
is the binding's ``input_kind``, else (``auto``) the type its publishers have in the ROS graph,
followed as it changes; a pattern binds each camera once (one of its image_transport topics).

Every message its subscriptions receive goes to the binding's :class:`~.frames.FramePath`, which
carries each frame to its publication. The binding's figures go to the diagnostics reporter once
a period (:meth:`Binding.figures`).

A synchronized binding (``inputs``: several topics of one source) binds source *namespaces*
instead of topics (:mod:`~triton_ros.ros.binding.sync_inputs`): a namespace is bound once every
one of its input topics is in the graph, with a subscription per input and their synchronizer.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor
from typing import Any, Callable

from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from ..codec.base import InputKind
from ..codec.registry import (
    INPUT_KINDS,
    base_topic,
    input_kind,
    kind_for_topic,
    kind_for_type,
    output_format,
)
from ..monitoring.counters import SourceCounters
from ..monitoring.diagnostics import BindingFigures, SourceFigures
from ..monitoring.executor_lag import ExecutorLag
from ..monitoring.failures import FailureLog
from ..monitoring.latency import LatencyWindow
from ..parameters import BindingConfig
from ..targets.spec import ModelTarget, TargetState
from .frames import FramePath
from .source import Source
from .sync_inputs import ResolvedInput, SyncGroup, candidate_namespaces, resolve_inputs
from .topic_discovery import TopicMatcher


class Binding:
    """The topics of one binding inside the node, and its frames' path."""

    def __init__(
        self,
        config: BindingConfig,
        *,
        node,
        target: ModelTarget,
        workers: Executor,
        callback_group,
        model_latency: LatencyWindow | None = None,
        serialized_images: bool = True,
        preprocess_in_callback: bool = True,
        executor_lag: ExecutorLag | None = None,
        mirror: Callable[[Source, Any, str, Any], None] | None = None,
    ) -> None:
        self.config = config
        self.target = target
        self._node = node
        self._group = callback_group
        self._log = node.get_logger()
        # The input kind of every topic, or None (input_kind auto): each topic's graph type.
        self._fixed_kind = None if config.input_kind == "auto" else input_kind(config.input_kind)
        self._output = output_format(config.format)
        self.failures = FailureLog(self._log)
        self.frames = FramePath(
            config,
            node=node,
            target=target,
            workers=workers,
            output=self._output,
            fixed_kind=self._fixed_kind,
            failures=self.failures,
            model_latency=model_latency if model_latency is not None else LatencyWindow(),
            preprocess_in_callback=preprocess_in_callback,
            executor_lag=executor_lag,
            mirror=mirror,
        )
        ros_types = (
            [self._fixed_kind.ros_type]
            if self._fixed_kind is not None
            else sorted({kind.ros_type for kind in INPUT_KINDS.values()})
        )
        self._matcher = (
            TopicMatcher(config.topic_patterns, ros_types) if config.topic_patterns else None
        )
        reliability = {
            "best_effort": ReliabilityPolicy.BEST_EFFORT,
            "reliable": ReliabilityPolicy.RELIABLE,
        }
        self._input_qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=config.input_depth,
            reliability=reliability[config.input_reliability],
        )
        self._output_qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=config.output_depth,
            reliability=reliability[config.output_reliability],
        )
        self._sources: dict[str, Source] = {}
        self._sources_lock = threading.Lock()
        self.retired = SourceCounters()  # totals of unbound sources, kept for the totals
        self._reaper = None  # the timer ending idle sequences
        self._skipped: set[str] = set()  # found topics of a camera read through another
        # Serialized subscriptions, read without a copy of the pixels (codec/serialized_image.py)
        # for each kind this binding may read; None: typed messages. A synchronized binding's
        # readers are its inputs' (add_sync_source).
        self._serialized = serialized_images
        self._readers: dict[str, Callable[[Any], Any] | None] = (
            {}
            if config.synchronized
            else {
                kind.name: self._make_reader(kind) if serialized_images else None
                for kind in (
                    (self._fixed_kind,) if self._fixed_kind is not None else INPUT_KINDS.values()
                )
            }
        )

    # ---------------------------------------------------------------- sources
    def start(self) -> None:
        end_after_ms = self.config.sequence_end_after_ms
        if end_after_ms > 0:  # sources of a stateful model end their sequence
            self._reaper = self._node.create_timer(
                min(0.5, end_after_ms / 4000.0),
                self._end_idle_sequences,
                callback_group=self._group,
            )
        if self.config.synchronized:
            return  # namespaces are bound as their topics appear
        graph = self._graph() if self._fixed_kind is None and self.config.topics else {}
        for topic in self.config.topics:
            types = self._publisher_types(topic, graph) if topic in graph else []
            self.add_source(topic, discovered=False, kind=self._kind_of(topic, types))

    def _end_idle_sequences(self) -> None:
        """End the sequence of each source that has sent the model nothing for
        ``sequence_end_after_ms`` (sequences.py)."""
        if self.frames.stopped:
            return
        idle_ns = self.config.sequence_end_after_ms * 1_000_000
        try:
            for source in self.sources():
                if source.snapshot()[1] == 0:  # none of its frames in the model
                    self.frames.end_sequence(
                        source,
                        f"no frame for over sequence_end_after_ms "
                        f"{self.config.sequence_end_after_ms}",
                        idle_ns=idle_ns,
                    )
        except Exception as exc:  # a defect of ours: said, and tried next period
            self.failures.report(
                "sequence_reaper",
                "failed_internal",
                f"binding '{self.config.name}': ending idle sequences failed: "
                f"{type(exc).__name__}: {exc}",
            )

    def needs_discovery(self) -> bool:
        """Whether :meth:`discover` has work: patterns to match, namespaces whose inputs bind as
        they appear (synchronized), or topics whose type the graph decides (input_kind auto)."""
        return (
            bool(self.config.topic_patterns)
            or self.config.synchronized
            or (self._fixed_kind is None and bool(self.config.topics))
        )

    def _graph(self) -> dict[str, list[str]]:
        try:
            return dict(self._node.get_topic_names_and_types())
        except Exception as exc:  # no graph yet: the names decide until discover
            self._log.warning(
                f"binding '{self.config.name}': the ROS graph could not be read "
                f"({exc}); topic types follow their names until it can"
            )
            return {}

    def _kind_of(
        self, topic: str, types: list[str] | None, current: InputKind | None = None
    ) -> InputKind:
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
        except ImportError as exc:  # rosbags missing (an apt-installed ROS 2)
            self._log.warning(
                f"binding '{self.config.name}': serialized_images is true but "
                f"{exc}; {kind.name} messages arrive typed (pip install rosbags, "
                f"or set serialized_images false)"
            )
            return None

    def _subscribe(self, source: Source, kind: InputKind) -> None:
        """Subscribe ``source`` with ``kind``'s message type (its frames carry the kind)."""
        reader = self._readers.get(kind.name)
        source.subscription = self._node.create_subscription(
            kind.message_class(),
            source.topic,
            lambda msg, s=source, k=kind, r=reader: self.frames.on_input(s, msg, k, r),
            self._input_qos,
            callback_group=self._group,
            raw=reader is not None,
        )
        source.kind = kind

    def sources(self) -> list[Source]:
        with self._sources_lock:
            return list(self._sources.values())

    def output_topic(self, topic: str) -> str:
        namespace, _, basename = topic.rpartition("/")
        if self.config.synchronized:  # topic: a source namespace, the output's home
            namespace = topic
        return self.config.output_topic_template.format(
            namespace=namespace,
            topic=topic,
            basename=basename,
            camera=base_topic(topic).rpartition("/")[0],
            output_name=self.config.output_name,
            binding=self.config.name,
            model=self.config.model,
        )

    def add_source(
        self, topic: str, *, discovered: bool, kind: InputKind | None = None
    ) -> Source | None:
        with self._sources_lock:
            if topic in self._sources or self.frames.stopped:
                return None
            output = self.output_topic(topic)
            if output == topic:
                self._log.error(
                    f"binding '{self.config.name}': output topic of '{topic}' is the "
                    f"input topic itself; check output_topic_template"
                )
                return None
            source = self._new_source(topic, output, discovered)
            self._subscribe(source, kind or self._kind_of(topic, None))
            self._sources[topic] = source
        how = "found" if discovered else "bound"
        self._log.info(
            f"binding '{self.config.name}': {how} {topic} -> {source.output_topic} "
            f"(model '{self.config.model}', {source.kind.name} input)"
        )
        return source

    def _publisher_types(self, topic: str, graph: dict[str, list[str]]) -> list[str]:
        """The message types of ``topic``'s publishers (the graph's types of the topic also
        hold this binding's own subscription's, and any other subscriber's)."""
        try:
            return sorted(
                {info.topic_type for info in self._node.get_publishers_info_by_topic(topic)}
            )
        except Exception:  # a node without graph queries: the topic's
            return graph.get(topic, [])

    def _follow_types(self, graph: dict[str, list[str]]) -> None:
        """input_kind auto: resubscribe a topic whose publishers' type is not the one it is
        read as (it was bound before any publisher, by its name; or its publishers changed)."""
        for source in self.sources():
            if source.topic not in graph:  # nobody publishes or subscribes but us: keep
                continue
            kind = self._kind_of(
                source.topic, self._publisher_types(source.topic, graph), source.kind
            )
            if kind is source.kind:
                continue
            old = source.kind
            with self._sources_lock:
                if self._sources.get(source.topic) is not source or self.frames.stopped:
                    continue
                if source.subscription is not None:
                    self._node.destroy_subscription(source.subscription)
                    source.subscription = None
                try:
                    self._subscribe(source, kind)
                except Exception as exc:  # the middleware still holds the old type's
                    # topic (rclpy destroys a subscription once no executor uses it): the next
                    # discovery period tries again; frames of the topic wait until then
                    self.failures.report(
                        f"resubscribe:{source.topic}",
                        "resubscribe",
                        f"binding '{self.config.name}': {source.topic} carries "
                        f"{kind.ros_type}, but subscribing to it failed "
                        f"({exc}); trying again",
                        level="warn",
                    )
                    continue
            self._log.info(
                f"binding '{self.config.name}': {source.topic} carries "
                f"{kind.ros_type}; read as {kind.name} (was {old.name})"
            )

    def _new_source(self, topic: str, output: str, discovered: bool) -> Source:
        """A source's flow control and its output publishers (subscriptions are the caller's)."""
        source = Source(
            topic,
            output,
            max_in_flight=self.config.max_in_flight,
            max_age_ms=self.config.max_age_ms,
            discovered=discovered,
            on_stale=self.frames.on_stale,
            hedge_after_ms=self._hedge_after_ms(),
            can_hedge=self.target.can_hedge,
        )
        source.last_seen_publisher_ns = time.monotonic_ns()
        source.publisher = self._node.create_publisher(
            self._output.message_class(), output, self._output_qos
        )
        source.output_topic = source.publisher.topic_name
        # An output format's further topics (segmentation's overlay): <output topic>/<name>
        source.extra_publishers = {
            name: self._node.create_publisher(
                msg_type, f"{source.output_topic}/{name}", self._output_qos
            )
            for name, msg_type in self._output.extra_outputs(self.config.settings_for(self._output))
        }
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
        group = source.sync
        for subscription in group.subscriptions if group is not None else (source.subscription,):
            self._node.destroy_subscription(subscription)
        for name in [topic] + (group.topics() if group is not None else []):
            self.failures.forget_topic(name)
        if group is not None:  # messages still waiting will find no partner
            for _ in group.synchronizer.clear():
                source.count("unmatched_no_partner")
        self.frames.end_sequence(source, "unbound")
        self._node.destroy_publisher(source.publisher)
        for publisher in source.extra_publishers.values():
            self._node.destroy_publisher(publisher)
        counters, _, _ = source.snapshot()
        with self._sources_lock:
            self.retired.add(counters)
        self._log.info(
            f"binding '{self.config.name}': {topic} has had no publisher for "
            f"{self.config.forget_after_s:g} s; unbound (received {counters.received}, "
            f"published {counters.published}, dropped {counters.dropped})"
        )

    def discover(self, topics_and_types, publisher_count: Callable[[str], int]) -> None:
        """Bind new topics matching the patterns (a synchronized binding: new namespaces whose
        inputs all appeared); unbind found topics whose robot went away; with input_kind auto,
        read each topic as the type its publishers have."""
        if self.frames.stopped:
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
                self.add_source(
                    topic, discovered=True, kind=self._kind_of(topic, types or graph[topic])
                )
        now = time.monotonic_ns()
        forget_ns = int(self.config.forget_after_s * 1e9)
        for source in self.sources():
            if not source.discovered:
                continue
            group = source.sync
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
        if base != topic:  # a transport subtopic: its raw topic wins
            other = base if (base in self._sources or base in found) else None
        else:
            other = next((t for t in self._sources if t != topic and base_topic(t) == topic), None)
        if other is None:
            return False
        if topic not in self._skipped:
            self._skipped.add(topic)
            self._log.info(
                f"binding '{self.config.name}': {topic} not bound: its camera is "
                f"read through {other} (one topic per camera)"
            )
        return True

    def stop(self) -> None:
        """Take no new frames; frames in the model still finish and publish; each source's
        sequence on a stateful model ends."""
        self.frames.stopped = True
        if self._reaper is not None:
            self._node.destroy_timer(self._reaper)
            self._reaper = None
        for source in self.sources():
            try:
                self.frames.end_sequence(source, "the node stops")
            except Exception as exc:  # stopping goes on
                self._log.warning(
                    f"binding '{self.config.name}': ending the sequence of "
                    f"{source.topic} failed: {exc}"
                )

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

    def add_sync_source(
        self, namespace: str, inputs: list[ResolvedInput], *, discovered: bool
    ) -> Source | None:
        """Bind one source namespace: a subscription per input, their synchronizer, one output."""
        readers = []
        for resolved in inputs:
            reader = None
            if self._serialized:
                try:
                    reader = resolved.kind.reader()
                except ImportError as exc:  # rosbags missing: typed messages
                    self._log.warning(
                        f"binding '{self.config.name}': {resolved.topic} is read "
                        f"as typed messages: {exc}"
                    )
            readers.append(reader)
        with self._sources_lock:
            if namespace in self._sources or self.frames.stopped:
                return None
            output = self.output_topic(namespace)
            if output in [i.topic for i in inputs]:
                self._log.error(
                    f"binding '{self.config.name}': output topic of '{namespace}' "
                    f"is one of its inputs; check output_topic_template"
                )
                return None
            source = self._new_source(namespace, output, discovered)
            group = SyncGroup(namespace, inputs, self.config, readers)
            source.sync = group
            for index, resolved in enumerate(inputs):
                group.subscriptions.append(
                    self._node.create_subscription(
                        resolved.kind.message_class(),
                        resolved.topic,
                        lambda msg, s=source, i=index: self.frames.on_sync_input(s, i, msg),
                        self._input_qos,
                        callback_group=self._group,
                        raw=readers[index] is not None,
                    )
                )
            self._sources[namespace] = source
        how = "found" if discovered else "bound"
        self._log.info(
            f"binding '{self.config.name}': {how} {namespace} -> "
            f"{source.output_topic} (model '{self.config.model}'; inputs matched by "
            f"stamp within {self.config.sync.slop_ms:g} ms: {group.describe()})"
        )
        return source

    # ---------------------------------------------------------------- figures
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
            group = source.sync
            sources.append(
                SourceFigures(
                    source.topic,
                    source.output_topic,
                    counters,
                    in_flight,
                    source.stalled_for_ns(now),
                    source.e2e_latency.drain(),
                    source.infer_latency.drain(),
                    group.unmatched_by_input() if group else (),
                )
            )
        with self._sources_lock:
            retired = self.retired.copy()
        try:
            state = self.target.state()
        except Exception as exc:  # a target that cannot even say: not ready
            state = TargetState(False, "UNKNOWN", f"{type(exc).__name__}: {exc}")
        config = self.config
        return BindingFigures(
            name=config.name,
            model=config.model,
            location=self.target.location,
            max_age_ms=config.max_age_ms,
            inputs=config.topics + config.topic_patterns,
            sources=tuple(sources),
            retired=retired,
            last_error=self.failures.last,
            topic_errors=self.failures.topic_errors(),
            last_stale=self.failures.last_stale,
            model_ready=state.ready,
            model_state=state.state,
            model_reason=state.reason,
            sync_slop_ms=config.sync.slop_ms if config.synchronized else None,
        )
