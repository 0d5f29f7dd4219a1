"""What can be swept for a model, and a configuration made from a point of that space.

Each :class:`SearchDimension` is named after the config.pbtxt field it sets and lists its values
in search order (model_analyzer's linear dimension for instance counts, its exponential one for
batch sizes and thread counts):

- ``instance_group.kind``: KIND_CPU, and KIND_GPU where a GPU is present and the backend runs on
  one (TensorRT: KIND_GPU only);
- ``instance_group.count``: 1 to 5 (model_analyzer's default range);
- ``max_batch_size``: powers of two from 1 to 128 (models that batch: max_batch_size > 0);
- ``dynamic_batching.max_queue_delay_microseconds``: 0, 500, 2000, 8000 (model_analyzer turns the
  dynamic batcher on where it may; a model without one keeps "off" as its first value);
- ``dynamic_batching.preferred_batch_size``: none, [max/2], [max/4, max/2] (relative to the
  point's max_batch_size) and the model's own list;
- ``parameters.intra_op_thread_count`` and ``parameters.inter_op_thread_count`` (ONNX Runtime, as
  Triton's onnxruntime backend names them): powers of two up to the CPU count; 0 is ONNX
  Runtime's default (a thread per core). Inter-op threads only run in ONNX Runtime's parallel
  execution mode, so a point with more than one sets ``execution_mode`` "1" too.

The model's own value of every dimension is one of its values, and the user's configuration is
the space's :attr:`SearchSpace.default` point. Ensembles and sequence-batched models are swept
over client concurrency only (model_analyzer sweeps ensembles' composing models; this does not).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator

from ..core.protos import model_config_pb2 as mc

KIND = "instance_group.kind"
COUNT = "instance_group.count"
MAX_BATCH_SIZE = "max_batch_size"
DELAY = "dynamic_batching.max_queue_delay_microseconds"
PREFERRED = "dynamic_batching.preferred_batch_size"
INTRA_OP = "parameters.intra_op_thread_count"
INTER_OP = "parameters.inter_op_thread_count"
EXECUTION_MODE = "execution_mode"

#: The order quick search walks the dimensions in: the largest effect first.
QUICK_ORDER = (KIND, COUNT, INTRA_OP, MAX_BATCH_SIZE, DELAY, PREFERRED, INTER_OP)
#: The dimensions brute search crosses (model_analyzer's automatic brute search); the others
#: keep the model's values.
BRUTE_DIMENSIONS = (KIND, COUNT, MAX_BATCH_SIZE)

GPU_BACKENDS = ("onnxruntime", "tensorrt")
ONNXRUNTIME = "onnxruntime"


@dataclass(frozen=True)
class PreferredSizes:
    """A value of ``dynamic_batching.preferred_batch_size``: fractions of the point's
    max_batch_size, or the model's own list (``literal``)."""

    fractions: tuple[float, ...] = ()
    literal: tuple[int, ...] = ()

    def resolve(self, max_batch_size: int) -> list[int]:
        if self.literal:
            sizes = [s for s in self.literal if s <= max_batch_size]
        else:
            sizes = [max(1, int(max_batch_size * f)) for f in self.fractions]
        return sorted(set(sizes))

    @property
    def label(self) -> str:
        if self.literal:
            return "[" + ", ".join(str(s) for s in self.literal) + "]"
        if not self.fractions:
            return "none"
        names = {0.5: "max/2", 0.25: "max/4"}
        return "[" + ", ".join(names.get(f, f"{f:g}*max") for f in self.fractions) + "]"


@dataclass(frozen=True)
class SearchLimits:
    """Bounds of the automatic search space (model_analyzer's run_config_search_* options)."""

    min_instance_count: int = 1
    max_instance_count: int = 5
    min_model_batch_size: int = 1
    max_model_batch_size: int = 128
    max_queue_delays_us: tuple[int, ...] = (0, 500, 2000, 8000)
    max_thread_count: int = 0  # 0: the CPU count


@dataclass(frozen=True)
class SearchDimension:
    name: str
    values: tuple[Any, ...]

    def __len__(self) -> int:
        return len(self.values)


Point = tuple[int, ...]  # an index into each dimension's values


@dataclass(frozen=True)
class SearchSpace:
    dimensions: tuple[SearchDimension, ...]
    default: Point

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @property
    def size(self) -> int:
        n = 1
        for d in self.dimensions:
            n *= len(d)
        return n

    def index(self, name: str) -> int | None:
        return self.names.index(name) if name in self.names else None

    def values(self, point: Point) -> dict[str, Any]:
        return {d.name: d.values[i] for d, i in zip(self.dimensions, point)}

    def changes(self, point: Point) -> dict[str, Any]:
        """The values of ``point`` that differ from the model's own (what a variant sets)."""
        values = self.values(point)
        return {
            d.name: values[d.name]
            for d, i, j in zip(self.dimensions, point, self.default)
            if i != j
        }

    def step(self, point: Point, dimension: int, delta: int) -> Point | None:
        """``point`` moved ``delta`` values along one dimension, or None past its ends."""
        i = point[dimension] + delta
        if not 0 <= i < len(self.dimensions[dimension]):
            return None
        return point[:dimension] + (i,) + point[dimension + 1 :]

    def grid(self, names: tuple[str, ...]) -> Iterator[Point]:
        """Every point crossing the named dimensions, the others at the default."""
        axes = [
            range(len(d)) if d.name in names else (self.default[k],)
            for k, d in enumerate(self.dimensions)
        ]

        def walk(prefix: tuple[int, ...], rest: list) -> Iterator[Point]:
            if not rest:
                yield prefix
                return
            for i in rest[0]:
                yield from walk(prefix + (i,), rest[1:])

        yield from walk((), axes)


def describe(values: dict[str, Any]) -> dict[str, str]:
    """Column labels of a point's values (for the tables)."""
    out = {}
    for name, value in values.items():
        if isinstance(value, PreferredSizes):
            out[name] = value.label
        elif value is None:
            out[name] = "off"
        elif name in (INTRA_OP, INTER_OP) and value == 0:
            out[name] = "0 (ONNX Runtime's default)"
        else:
            out[name] = str(value)
    return out


def _with(values: list, value) -> tuple:
    """``values`` with ``value`` added, in order (None, "off", first)."""
    merged = list(values) if value in values else [*values, value]
    return tuple(sorted(merged, key=lambda v: (v is not None, v if v is not None else 0)))


def _powers_of_two(low: int, high: int) -> list[int]:
    out, v = [], 1
    while v <= high:
        if v >= low:
            out.append(v)
        v *= 2
    return out


def _threads(config: mc.ModelConfig, key: str, default: int) -> int:
    param = config.parameters.get(key) if key in config.parameters else None
    try:
        return int(param.string_value) if param is not None else default
    except ValueError:
        return default


def model_search_space(
    served: mc.ModelConfig,
    limits: SearchLimits = SearchLimits(),
    *,
    gpu_count: int = 0,
    cpu_count: int | None = None,
) -> SearchSpace:
    """The search space of the model whose served (completed, normalized) configuration is
    ``served``."""
    cpu_count = cpu_count or os.cpu_count() or 1
    dims: list[SearchDimension] = []
    default: list[int] = []

    def add(name: str, values: tuple, current) -> None:
        dims.append(SearchDimension(name, values))
        default.append(values.index(current))

    if served.platform == "ensemble" or served.HasField("sequence_batching"):
        if served.HasField("sequence_batching") and served.instance_group:
            group = served.instance_group[0]
            counts = list(range(limits.min_instance_count, limits.max_instance_count + 1))
            add(COUNT, _with(counts, group.count), group.count)
        return SearchSpace(tuple(dims), tuple(default))

    backend = served.backend
    group = served.instance_group[0] if served.instance_group else None
    kind = mc.ModelInstanceGroup.Kind.Name(group.kind) if group else "KIND_CPU"
    kinds = ["KIND_CPU"]
    if gpu_count and backend in GPU_BACKENDS:
        kinds = ["KIND_GPU"] if backend == "tensorrt" else ["KIND_CPU", "KIND_GPU"]
    add(KIND, _with(kinds, kind), kind)

    count = group.count if group else 1
    counts = list(range(limits.min_instance_count, limits.max_instance_count + 1))
    add(COUNT, _with(counts, count), count)

    if served.max_batch_size > 0:
        sizes = _powers_of_two(limits.min_model_batch_size, limits.max_model_batch_size)
        add(MAX_BATCH_SIZE, _with(sizes, served.max_batch_size), served.max_batch_size)
        has_batcher = served.HasField("dynamic_batching")
        delay = served.dynamic_batching.max_queue_delay_microseconds if has_batcher else None
        delays = list(limits.max_queue_delays_us) + ([] if has_batcher else [None])
        add(DELAY, _with(delays, delay), delay)
        own = tuple(served.dynamic_batching.preferred_batch_size)
        preferred = [PreferredSizes(), PreferredSizes((0.5,)), PreferredSizes((0.25, 0.5))]
        current = PreferredSizes(literal=own) if own else PreferredSizes()
        if current not in preferred:
            preferred.append(current)
        add(PREFERRED, tuple(preferred), current)

    if backend == ONNXRUNTIME:
        top = limits.max_thread_count or cpu_count
        intra = _threads(served, "intra_op_thread_count", 0)
        values = _powers_of_two(1, top)
        ordered = tuple(sorted(set(values) | {intra}, key=lambda v: v if v > 0 else top + 0.5))
        add(INTRA_OP, ordered, intra)
        if cpu_count >= 2:
            inter = _threads(served, "inter_op_thread_count", 0)
            values = [0] + [v for v in _powers_of_two(2, top)]
            add(INTER_OP, _with(values, inter), inter)
    return SearchSpace(tuple(dims), tuple(default))


def _kind_value(name: str) -> int:
    return mc.ModelInstanceGroup.Kind.Value(name)


def apply_changes(
    user: mc.ModelConfig,
    changes: dict[str, Any],
    served: mc.ModelConfig,
    values: dict[str, Any] | None = None,
) -> mc.ModelConfig:
    """A copy of the user's configuration with ``changes`` (from :meth:`SearchSpace.changes`)
    set. ``served`` gives the values a change depends on that the user may not have written
    (the max_batch_size auto-complete chose); ``values`` (the point's every value) gives the
    preferred batch sizes to resolve again for a new max_batch_size."""
    if values and MAX_BATCH_SIZE in changes and PREFERRED in values and PREFERRED not in changes:
        changes = {**changes, PREFERRED: values[PREFERRED]}
    proto = mc.ModelConfig()
    proto.CopyFrom(user)
    if KIND in changes or COUNT in changes:
        if len(proto.instance_group) != 1:
            # none written (the server chose), or several: one group with the swept values
            template = served.instance_group[0] if served.instance_group else None
            del proto.instance_group[:]
            group = proto.instance_group.add()
            group.kind = template.kind if template else _kind_value("KIND_CPU")
            group.count = template.count if template else 1
        group = proto.instance_group[0]
        if KIND in changes:
            group.kind = _kind_value(changes[KIND])
            if changes[KIND] != "KIND_GPU":
                del group.gpus[:]
        if COUNT in changes:
            group.count = changes[COUNT]
    if MAX_BATCH_SIZE in changes:
        proto.max_batch_size = changes[MAX_BATCH_SIZE]
    max_batch_size = proto.max_batch_size or served.max_batch_size
    if DELAY in changes:
        if changes[DELAY] is None:
            proto.ClearField("dynamic_batching")
        else:
            proto.dynamic_batching.max_queue_delay_microseconds = changes[DELAY]
    if PREFERRED in changes and proto.HasField("dynamic_batching"):
        del proto.dynamic_batching.preferred_batch_size[:]
        proto.dynamic_batching.preferred_batch_size.extend(
            changes[PREFERRED].resolve(max_batch_size)
        )
    for name in (INTRA_OP, INTER_OP):
        if name in changes:
            key = name.split(".", 1)[1]
            if changes[name]:
                proto.parameters[key].string_value = str(changes[name])
            elif key in proto.parameters:
                del proto.parameters[key]
    if changes.get(INTER_OP, 0) >= 2:
        proto.parameters[EXECUTION_MODE].string_value = "1"
    return proto
