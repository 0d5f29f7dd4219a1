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

Before that, :meth:`SyncGroup.check_set` makes sure the set describes one image, as
depth_image_proc does for its colour, depth and CameraInfo: in a set with a depth or CameraInfo
input, every image, depth image and CameraInfo must have the same width and height (a depth
image of another size is not aligned to the colour image: RealSense's ``depth/image_rect_raw``
beside ``color/image_raw`` instead of ``aligned_depth_to_color``; no scaling is attempted, since
the same aspect ratio does not make two cameras' pixels correspond). The input whose size
differs from the others' is named, and the set is malformed. A depth image or CameraInfo whose
``frame_id`` differs from the (first) image's is only warned about, as depth_image_proc does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..codec.base import InputKind
from ..codec.registry import family_of, input_kind_for_topic
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
                out.add(topic[: -len(suffix)])
    return out


def resolve_inputs(
    namespace: str, config: BindingConfig, graph: Mapping[str, Sequence[str]]
) -> list[ResolvedInput] | None:
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

    def __init__(
        self, messages: Mapping[str, Any], kinds: tuple[tuple[str, str], ...], stamp_ns: int
    ) -> None:
        super().__init__(messages)
        self.kinds = kinds  # (model input, kind name): the plan's key
        self.stamp_ns = stamp_ns  # the earliest stamp of the set

    @property
    def header(self):
        """A header of the set, for log lines (the outputs carry the reference input's)."""
        return next(iter(self.values())).header


@dataclass(frozen=True)
class SetProblem:
    """What is wrong with one input of a matched set."""

    index: int  # the input, in the group's order
    text: str


class SyncGroup:
    """One bound namespace of a synchronized binding: its inputs, their synchronizer and
    counts."""

    def __init__(
        self,
        namespace: str,
        inputs: Sequence[ResolvedInput],
        config: BindingConfig,
        readers: Sequence[Any],
    ) -> None:
        self.namespace = namespace
        self.inputs = tuple(inputs)
        self.readers = tuple(readers)  # per input: serialized bytes -> message, or None
        self.subscriptions: list[Any] = []
        self.kinds = tuple((i.name, i.kind.name) for i in self.inputs)
        # A set with an input that decodes (a compressed image) is encoded on the workers
        self.decodes = any(i.kind.encode_on_workers for i in self.inputs)
        sync = config.sync
        self.synchronizer = ApproximateTimeSync(
            len(self.inputs),
            queue_size=sync.queue_size,
            max_interval_ns=int(round(sync.slop_ms * 1e6)),
            min_interval_ns=int(round(sync.min_interval_ms * 1e6)),
            max_jump_ns=int(round(sync.max_jump_ms * 1e6)),
        )
        self._lock = threading.Lock()
        self.received = {i.name: 0 for i in self.inputs}
        self.unmatched = {(i.name, r): 0 for i in self.inputs for r in UNMATCHED_REASONS}

    def topics(self) -> list[str]:
        return [i.topic for i in self.inputs]

    def describe(self) -> str:
        return ", ".join(f"{i.name}: {i.topic} [{i.kind.name}]" for i in self.inputs)

    def add(
        self, index: int, stamp_ns: int, msg: Any, received_ns: int | None = None
    ) -> SyncResult:
        """A checked message of input ``index`` (received at ``received_ns``, node clock): the
        sets it completed and what got dropped (a bad stamp is the caller's to count)."""
        with self._lock:
            self.received[self.inputs[index].name] += 1
        result = self.synchronizer.add(index, stamp_ns, msg, received_ns)
        if result.dropped:
            with self._lock:
                for dropped in result.dropped:
                    key = (self.inputs[dropped.index].name, dropped.reason)
                    if key in self.unmatched:
                        self.unmatched[key] += 1
        return result

    def check_set(self, entries: Sequence[Entry]) -> tuple[list[SetProblem], list[SetProblem]]:
        """(size problems: the set is malformed, frame_id mismatches: warnings) of a matched
        set (see the module docstring)."""
        families = [family_of(i.kind) for i in self.inputs]
        if not any(f in ("depth", "camera_info") for f in families):
            return [], []
        sizes: list[tuple[int, int] | None] = []
        for resolved, family, entry in zip(self.inputs, families, entries):
            msg = entry.item
            if family == "camera_info":
                sizes.append((int(msg.width), int(msg.height)))
            elif family in ("image", "depth"):
                sizes.append(resolved.kind.decoded_size(msg))
            else:
                sizes.append(None)
        # The size most inputs have (ties: the first image input's) is the image's.
        ranked = sorted(
            (j for j, size in enumerate(sizes) if size is not None),
            key=lambda j: (-sizes.count(sizes[j]), families[j] != "image", j),
        )
        image = sizes[ranked[0]]
        problems = []
        for index, size in enumerate(sizes):
            if size is not None and size != image:
                others = ", ".join(
                    self.inputs[j].name for j, other in enumerate(sizes) if other == image
                )
                what = "a CameraInfo of" if families[index] == "camera_info" else "an image of"
                problems.append(
                    SetProblem(
                        index,
                        (
                            f"{what} {size[0]}x{size[1]} where {others} "
                            f"{'is' if ',' not in others else 'are'} "
                            f"{image[0]}x{image[1]}: it does not "
                            f"describe the same image (a depth image must be aligned to the colour "
                            "image, e.g. aligned_depth_to_color rather than "
                            "depth/image_rect_raw, and "
                            f"a CameraInfo must be the image's own); the set is dropped"
                        ),
                    )
                )
        reference = next((j for j, f in enumerate(families) if f == "image"), None)
        if reference is None:
            reference = (
                next(j for j, f in enumerate(families) if f == "depth")
                if "depth" in families
                else 0
            )
        frame = entries[reference].item.header.frame_id
        mismatches = [
            SetProblem(
                j,
                (
                    f"frame_id '{entries[j].item.header.frame_id}' differs from "
                    f"{self.inputs[reference].name}'s '{frame}' (on "
                    f"{self.inputs[reference].topic}): "
                    f"a depth image and CameraInfo describe the image they are aligned to; results "
                    f"carry the header of the binding's reference input"
                ),
            )
            for j, f in enumerate(families)
            if j != reference
            and f in ("depth", "camera_info")
            and entries[j].item.header.frame_id != frame
        ]
        return problems, mismatches

    def matched(self, entries: Sequence[Entry]) -> MatchedSet:
        return MatchedSet(
            {i.name: e.item for i, e in zip(self.inputs, entries)},
            self.kinds,
            min(e.stamp_ns for e in entries),
        )

    def unmatched_by_input(self) -> tuple[tuple[str, str, int], ...]:
        """(input, reason, count) of every input and reason that dropped a message."""
        with self._lock:
            return tuple((name, reason, n) for (name, reason), n in self.unmatched.items() if n)
