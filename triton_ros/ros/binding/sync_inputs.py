"""The sources of a synchronized binding: the topics of one source namespace, matched by stamp.

A binding with ``inputs`` (``{COLOR: color/image_raw, DEPTH: depth/image_raw, K:
color/camera_info}``: model input -> topic relative to a source namespace) is fed per
*namespace*: its ``topics`` are namespaces (``/robot3/rgbd``), its ``topic_patterns`` globs of
namespaces (``/robot*/rgbd*``). A namespace is bound once every input's topic is in the ROS
graph (:func:`candidate_namespaces`, :func:`resolve_inputs`), each with the input kind that reads
its message type (:func:`~triton_ros.ros.codec.registry.input_kind_for_topic`: the input's
``input_kinds`` entry, else by the type). As image_transport subscribers do, an input names the
*base* topic: ``depth/image_raw`` is read from ``.../depth/image_raw`` (a raw Image) or, where only
that exists, from ``.../depth/image_raw/compressedDepth`` (compressed_depth_image_transport) or
``.../compressed`` (a compressed image, where that kind is registered).

A :class:`SyncGroup` holds one namespace's subscriptions and its synchronizer
(:class:`~triton_ros.ros.binding.synchronizer.ApproximateTimeSync`: ``sync_slop_ms``,
``sync_queue_size``, ``sync_min_interval_ms``), counts each input's messages and the ones that
found no set, by reason, and turns each matched set into a :class:`MatchedSet`: one message per
model input, which the binding hands to its flow control as one frame, so that the set is one
request in the model's dynamic batcher, batched with the sets (and frames) of other robots.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..codec.base import InputKind
from ..codec.registry import input_kind_for_topic
from ..parameters import BindingConfig
from .synchronizer import UNMATCHED_REASONS, ApproximateTimeSync, Entry, SyncResult

# image_transport's transports that an input's base topic may be published with
TRANSPORTS = ("compressedDepth", "compressed")


@dataclass(frozen=True)
class ResolvedInput:
    """One input of a bound namespace: the model input, the topic read and its kind."""

    name: str
    topic: str
    kind: InputKind


def candidate_namespaces(config: BindingConfig, topics: Iterable[str]) -> set[str]:
    """Namespaces of the graph where the binding's first input's topic is published (with any
    transport); whether each is bound is for the patterns and :func:`resolve_inputs` to say."""
    _, relative = config.inputs[0]
    suffixes = ["/" + relative] + [f"/{relative}/{t}" for t in TRANSPORTS]
    out = set()
    for topic in topics:
        for suffix in suffixes:
            if topic.endswith(suffix) and len(topic) > len(suffix):
                out.add(topic[:-len(suffix)])
    return out


def resolve_inputs(namespace: str, config: BindingConfig,
                   graph: Mapping[str, Sequence[str]]) -> list[ResolvedInput] | None:
    """Every input's topic and kind in ``namespace``, or None while one is not in the graph
    (``graph``: topic -> its message types)."""
    kinds = dict(config.input_kinds)
    out = []
    for name, relative in config.inputs:
        base = f"{namespace}/{relative}"
        found = None
        for topic in (base, *(f"{base}/{t}" for t in TRANSPORTS)):
            for ros_type in graph.get(topic, ()):
                kind = input_kind_for_topic(kinds.get(name, ""), ros_type)
                if kind is not None:
                    found = ResolvedInput(name, topic, kind)
                    break
            if found is not None:
                break
        if found is None:
            return None
        out.append(found)
    return out


class MatchedSet(dict):
    """One matched set: model input -> message (a mapping, as the plan's encoders read it)."""

    def __init__(self, messages: Mapping[str, Any], kinds: tuple[tuple[str, str], ...],
                 stamp_ns: int) -> None:
        super().__init__(messages)
        self.kinds = kinds                     # (model input, kind name): the plan's key
        self.stamp_ns = stamp_ns               # the earliest stamp of the set

    @property
    def header(self):
        """A header of the set, for log lines (the outputs carry the reference input's)."""
        return next(iter(self.values())).header


class SyncGroup:
    """One bound namespace of a synchronized binding: its inputs, their synchronizer and
    counts."""

    def __init__(self, namespace: str, inputs: Sequence[ResolvedInput], config: BindingConfig,
                 readers: Sequence[Any]) -> None:
        self.namespace = namespace
        self.inputs = tuple(inputs)
        self.readers = tuple(readers)          # per input: serialized bytes -> message, or None
        self.subscriptions: list[Any] = []
        self.kinds = tuple((i.name, i.kind.name) for i in self.inputs)
        # A set with an input that decodes (a compressed image) is encoded on the workers
        self.decodes = any(getattr(i.kind, "encode_on_workers", False) for i in self.inputs)
        sync = config.sync
        self.synchronizer = ApproximateTimeSync(
            len(self.inputs), queue_size=sync.queue_size,
            max_interval_ns=int(round(sync.slop_ms * 1e6)),
            min_interval_ns=int(round(sync.min_interval_ms * 1e6)))
        self._lock = threading.Lock()
        self.received = {i.name: 0 for i in self.inputs}
        self.unmatched = {(i.name, r): 0 for i in self.inputs for r in UNMATCHED_REASONS}

    def topics(self) -> list[str]:
        return [i.topic for i in self.inputs]

    def describe(self) -> str:
        return ", ".join(f"{i.name}: {i.topic} [{i.kind.name}]" for i in self.inputs)

    def add(self, index: int, stamp_ns: int, msg: Any) -> SyncResult:
        """A checked message of input ``index``: the sets it completed and what got dropped."""
        with self._lock:
            self.received[self.inputs[index].name] += 1
        result = self.synchronizer.add(index, stamp_ns, msg)
        if result.dropped:
            with self._lock:
                for dropped in result.dropped:
                    self.unmatched[(self.inputs[dropped.index].name, dropped.reason)] += 1
        return result

    def matched(self, entries: Sequence[Entry]) -> MatchedSet:
        return MatchedSet({i.name: e.item for i, e in zip(self.inputs, entries)}, self.kinds,
                          min(e.stamp_ns for e in entries))

    def unmatched_by_input(self) -> tuple[tuple[str, str, int], ...]:
        """(input, reason, count) of every input and reason that dropped a message."""
        with self._lock:
            return tuple((name, reason, n) for (name, reason), n in self.unmatched.items() if n)
