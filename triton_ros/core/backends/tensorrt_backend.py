"""TensorRT backend (Triton's tensorrt_backend): ``platform: "tensorrt_plan"``, ``model.plan``.

The plan is deserialized with the ``tensorrt`` Python package (8.5 or newer: the named-tensor
API), once per GPU that instance groups name. Input and output names, data types and dynamic
shapes come from the engine, including its optimization profiles; auto-complete fills a missing
configuration from them. Each instance (``instance_group`` gpus x count) owns one execution
context per optimization profile it may use (``instance_group.profile``, default all), its own
CUDA stream and its own device buffers (:class:`~triton_ros.core.cuda_utils.CudaStream`, through
cuda-python or pycuda). A batch runs on the first of the instance's profiles whose min..max
ranges hold the batch's input shapes.

Model parameters (Triton's): ``execution_context_allocation_strategy`` ``STATIC``, how contexts
are created here; ``ON_PROFILE_CHANGE`` is warned about (contexts stay static); other keys are
named in a warning (:func:`check_parameters`).

Everything here imports ``tensorrt`` and CUDA lazily: without them, a TensorRT model fails to
load with UNAVAILABLE and a message saying what is missing, and every other model serves.

The engine-independent logic (reading an engine description, checking it against the
configuration, auto-complete, profile selection, the binding and buffer plan) is in plain
functions over :class:`EngineDescription`, so that it is tested without a GPU.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from ..backend_model import (
    BackendModel,
    BackendModelInstance,
    BatchedTensorInstance,
    warn_unread_parameters,
)
from ..datatypes import element_size, protocol_to_config, to_numpy_dtype
from ..errors import TritonRosError, internal, invalid_arg, unavailable, unsupported
from ..model_config import (
    DEFAULT_MAX_BATCH_SIZE,
    TENSORRT_FILENAME,
    WILDCARD_DIM,
    ModelConfig,
    version_dirs,
)

_log = logging.getLogger("triton_ros.tensorrt")

# TensorRT DataType names -> protocol data types.
_TRT_TYPES = {
    "FLOAT": "FP32",
    "HALF": "FP16",
    "BF16": "BF16",
    "INT8": "INT8",
    "INT32": "INT32",
    "INT64": "INT64",
    "BOOL": "BOOL",
    "UINT8": "UINT8",
}


# --------------------------------------------------------------------------------------------
# Engine description (pure data, from a real engine or built by hand in tests)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineTensor:
    name: str
    is_input: bool
    datatype: str  # protocol name
    shape: tuple[int, ...]  # -1 for dynamic dimensions, batch included
    is_shape_tensor: bool = False


@dataclass(frozen=True)
class ProfileShapes:
    min: tuple[int, ...]
    opt: tuple[int, ...]
    max: tuple[int, ...]


@dataclass(frozen=True)
class EngineDescription:
    tensors: tuple[EngineTensor, ...]
    # profiles[i][input name] = its min/opt/max shapes in optimization profile i
    profiles: tuple[Mapping[str, ProfileShapes], ...] = ()

    @property
    def inputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if t.is_input]

    @property
    def outputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if not t.is_input]

    def tensor(self, name: str) -> EngineTensor | None:
        return next((t for t in self.tensors if t.name == name), None)


def _enum_name(value) -> str:
    return getattr(value, "name", str(value).rsplit(".", 1)[-1])


def describe_engine(engine) -> EngineDescription:
    """Read names, types, shapes and optimization profiles through TensorRT's named-tensor API
    (``num_io_tensors``, ``get_tensor_*``; TensorRT >= 8.5)."""
    if not hasattr(engine, "num_io_tensors"):
        raise unsupported(
            "this TensorRT is older than 8.5 (no named-tensor API); triton_ros "
            "needs TensorRT 8.5 or newer"
        )
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        is_input = _enum_name(engine.get_tensor_mode(name)) == "INPUT"
        dtype = _enum_name(engine.get_tensor_dtype(name))
        if dtype not in _TRT_TYPES:
            raise unsupported(
                f"TensorRT tensor '{name}' has data type {dtype}, which triton_ros cannot exchange"
            )
        shape_tensor = (
            bool(engine.is_shape_inference_io(name))
            if hasattr(engine, "is_shape_inference_io")
            else False
        )
        tensors.append(
            EngineTensor(
                name,
                is_input,
                _TRT_TYPES[dtype],
                tuple(int(d) for d in engine.get_tensor_shape(name)),
                shape_tensor,
            )
        )
    profiles = []
    for profile in range(int(getattr(engine, "num_optimization_profiles", 1))):
        shapes = {}
        for t in tensors:
            if t.is_input and not t.is_shape_tensor:
                lo, opt, hi = engine.get_tensor_profile_shape(t.name, profile)
                shapes[t.name] = ProfileShapes(
                    tuple(int(d) for d in lo), tuple(int(d) for d in opt), tuple(int(d) for d in hi)
                )
        profiles.append(shapes)
    return EngineDescription(tuple(tensors), tuple(profiles))


# --------------------------------------------------------------------------------------------
# Configuration against the engine
# --------------------------------------------------------------------------------------------


def engine_max_batch_size(desc: EngineDescription) -> int:
    """The largest batch an engine takes (0: no batch dimension), over all its profiles."""
    if not desc.tensors or any(not t.shape or t.shape[0] != WILDCARD_DIM for t in desc.tensors):
        return 0
    best = 0
    for profile in desc.profiles or ({},):
        limits = [shapes.max[0] for shapes in profile.values() if shapes.max]
        if limits:
            best = max(best, min(limits))
    return best


def check_config(config: ModelConfig, desc: EngineDescription) -> None:
    """Refuse a configuration the engine cannot serve, with Triton's kind of message."""
    if any(t.is_shape_tensor for t in desc.tensors):
        raise unsupported(
            f"model '{config.name}': TensorRT shape tensors are not supported by triton_ros"
        )
    batching = config.max_batch_size > 0
    if batching:
        limit = engine_max_batch_size(desc)
        if limit == 0:
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration specifies "
                f"max_batch_size {config.max_batch_size} but the engine has no "
                f"dynamic batch dimension"
            )
        if config.max_batch_size > limit:
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration specifies "
                f"max_batch_size {config.max_batch_size} but the engine's "
                f"optimization profiles allow at most {limit}"
            )
    for tensors, is_input, what in (
        (config.inputs, True, "input"),
        (config.outputs, False, "output"),
    ):
        names = [t.name for t in desc.tensors if t.is_input == is_input]
        for tensor in tensors:
            engine_tensor = desc.tensor(tensor.name)
            if engine_tensor is None or engine_tensor.is_input != is_input:
                raise invalid_arg(
                    f"unexpected inference {what} '{tensor.name}', allowed {what}s "
                    f"are: {', '.join(names)}"
                )
            if engine_tensor.datatype != tensor.datatype:
                raise invalid_arg(
                    f"unable to load model '{config.name}', unexpected datatype "
                    f"{protocol_to_config(engine_tensor.datatype)} for {what} "
                    f"'{tensor.name}', expecting "
                    f"{protocol_to_config(tensor.datatype)}"
                )
            dims = engine_tensor.shape[1:] if batching else engine_tensor.shape
            expected = tensor.reshape if tensor.reshape is not None else tensor.dims
            if len(dims) != len(expected) or any(
                d != WILDCARD_DIM and e != WILDCARD_DIM and d != e for d, e in zip(dims, expected)
            ):
                raise invalid_arg(
                    f"unable to load model '{config.name}', {what} '{tensor.name}' "
                    f"dims {list(dims)} don't match configuration dims "
                    f"{list(expected)}"
                )
    missing = [t.name for t in desc.inputs if config.input(t.name) is None]
    if missing:
        raise invalid_arg(
            f"unable to load model '{config.name}', configuration lacks engine "
            f"input(s) {', '.join(missing)}"
        )


def auto_complete_from_engine(proto, desc: EngineDescription) -> list[str]:
    """Fill max_batch_size, inputs and outputs of a partial ``inference.ModelConfig``."""
    warnings: list[str] = []
    limit = engine_max_batch_size(desc)
    if proto.max_batch_size == 0 and limit > 0 and not (proto.input and proto.output):
        proto.max_batch_size = min(limit, DEFAULT_MAX_BATCH_SIZE) if limit > 1 else 1
        warnings.append(
            f"autofilled max_batch_size to {proto.max_batch_size} for model "
            f"'{proto.name}' from the engine's optimization profiles"
        )
        if (
            proto.max_batch_size > 1
            and not proto.HasField("dynamic_batching")
            and not proto.HasField("sequence_batching")
        ):
            proto.dynamic_batching.SetInParent()
    batching = proto.max_batch_size > 0

    def fill(field, tensors: Iterable[EngineTensor]) -> None:
        for tensor in tensors:
            io = field.add()
            io.name = tensor.name
            # The enum through the message's descriptor: no import of the generated module.
            data_types = io.DESCRIPTOR.fields_by_name["data_type"].enum_type.values_by_name
            io.data_type = data_types[protocol_to_config(tensor.datatype)].number
            io.dims.extend(tensor.shape[1:] if batching else tensor.shape)

    if not proto.input:
        fill(proto.input, desc.inputs)
    if not proto.output:
        fill(proto.output, desc.outputs)
    return warnings


# --------------------------------------------------------------------------------------------
# Profiles and bindings
# --------------------------------------------------------------------------------------------


def select_profile(
    desc: EngineDescription, candidates: Iterable[int], shapes: Mapping[str, tuple[int, ...]]
) -> int:
    """The first candidate profile whose min..max ranges hold every input shape."""
    candidates = list(candidates)
    for profile in candidates:
        ranges = desc.profiles[profile] if profile < len(desc.profiles) else {}
        if all(_within(ranges.get(name), shape) for name, shape in shapes.items()):
            return profile
    detail = "; ".join(
        f"profile {p}: "
        + ", ".join(f"{n} {list(r.min)}..{list(r.max)}" for n, r in desc.profiles[p].items())
        for p in candidates
        if p < len(desc.profiles)
    )
    got = ", ".join(f"{n} {list(s)}" for n, s in shapes.items())
    raise invalid_arg(f"input shapes {got} fit no optimization profile of this instance ({detail})")


def _within(ranges: ProfileShapes | None, shape: tuple[int, ...]) -> bool:
    if ranges is None:
        return True
    return len(shape) == len(ranges.min) and all(
        lo <= s <= hi for s, lo, hi in zip(shape, ranges.min, ranges.max)
    )


@dataclass(frozen=True)
class Binding:
    name: str
    is_input: bool
    datatype: str
    shape: tuple[int, ...]
    nbytes: int


def binding_plan(
    desc: EngineDescription,
    input_shapes: Mapping[str, tuple[int, ...]],
    output_shapes: Mapping[str, tuple[int, ...]],
) -> list[Binding]:
    """Every engine tensor with its concrete shape and byte size for one execution. Output shapes
    are what the execution context reports once the input shapes are set."""
    plan = []
    for tensor in desc.tensors:
        source = input_shapes if tensor.is_input else output_shapes
        shape = tuple(int(d) for d in source.get(tensor.name, tensor.shape))
        if any(d < 0 for d in shape):
            what = "input" if tensor.is_input else "output"
            raise unsupported(
                f"{what} '{tensor.name}' has shape {list(shape)} after the input "
                f"shapes are set: data-dependent output shapes are not supported"
            )
        plan.append(
            Binding(
                tensor.name,
                tensor.is_input,
                tensor.datatype,
                shape,
                int(np.prod(shape, dtype=np.int64)) * element_size(tensor.datatype),
            )
        )
    return plan


def instance_profiles(desc: EngineDescription, requested: Iterable[int]) -> tuple[int, ...]:
    """The profiles an instance uses (``instance_group.profile``; default every profile)."""
    count = max(len(desc.profiles), 1)
    requested = tuple(requested)
    for profile in requested:
        if profile >= count:
            raise invalid_arg(
                f"instance group specifies optimization profile {profile} but the "
                f"engine has {count}"
            )
    return requested or tuple(range(count))


# --------------------------------------------------------------------------------------------
# The backend (needs tensorrt and CUDA)
# --------------------------------------------------------------------------------------------


def _tensorrt():
    try:
        import tensorrt
    except ImportError as exc:
        raise unavailable(
            f"TensorRT is not available ({exc}); install TensorRT's Python package "
            f"(JetPack ships it; on x86_64: pip install tensorrt) to serve "
            f"tensorrt_plan models"
        ) from None
    return tensorrt


_ALLOCATION_STRATEGY = "execution_context_allocation_strategy"


def check_parameters(config: ModelConfig) -> None:
    """The model parameters Triton's tensorrt_backend reads:
    ``execution_context_allocation_strategy`` ``STATIC`` (its default, how contexts are created
    here) or ``ON_PROFILE_CHANGE`` (not done here: warned, contexts stay static); any other value
    is refused, any other key is named in a warning (Triton ignores it silently)."""
    strategy = config.parameters.get(_ALLOCATION_STRATEGY)
    if strategy is not None:
        strategy = strategy.strip()
        if strategy == "ON_PROFILE_CHANGE":
            _log.warning(
                "model '%s': %s 'ON_PROFILE_CHANGE' is not supported by triton_ros; "
                "execution contexts allocate their memory statically (STATIC)",
                config.name,
                _ALLOCATION_STRATEGY,
            )
        elif strategy != "STATIC":
            raise invalid_arg(
                f"model '{config.name}': parameter '{_ALLOCATION_STRATEGY}' must be "
                f"'STATIC' or 'ON_PROFILE_CHANGE', got '{strategy}'"
            )
    warn_unread_parameters(config, frozenset({_ALLOCATION_STRATEGY}), "tensorrt", _log)


class TensorRTModel(BackendModel):
    """Model-level state: the plan bytes and one deserialized engine per GPU."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        check_parameters(config)  # before TensorRT: a bad value is named anyway
        self.trt = _tensorrt()
        from ..cuda_utils import cuda_api

        cuda_api()  # fail the load now, with the message, if there is no CUDA binding
        self.plan_file = version_path / (config.default_model_filename or TENSORRT_FILENAME)
        if not self.plan_file.is_file():
            raise unavailable(f"unable to find '{self.plan_file}' for model '{config.name}'")
        self.plan = self.plan_file.read_bytes()
        self.logger = self.trt.Logger(self.trt.Logger.WARNING)
        self._engines: dict[int, tuple[object, object, EngineDescription]] = {}
        self._lock = threading.Lock()

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        if proto.input and proto.output and proto.max_batch_size:
            return []
        versions = version_dirs(model_path)
        plan = (
            model_path / str(versions[-1]) / (proto.default_model_filename or TENSORRT_FILENAME)
            if versions
            else None
        )
        if plan is None or not plan.is_file():
            return []
        try:
            trt = _tensorrt()
        except TritonRosError:
            return []  # the load itself reports that TensorRT is missing
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        engine = runtime.deserialize_cuda_engine(plan.read_bytes())
        if engine is None:
            raise invalid_arg(
                f"unable to deserialize '{plan}' for auto-complete of model '{proto.name}'"
            )
        return auto_complete_from_engine(proto, describe_engine(engine))

    def engine_for(self, stream) -> tuple[object, EngineDescription]:
        """The engine deserialized on the stream's device (one per GPU, shared by instances)."""
        with self._lock:
            entry = self._engines.get(stream.device_id)
            if entry is None:
                stream.activate()
                runtime = self.trt.Runtime(self.logger)
                engine = runtime.deserialize_cuda_engine(self.plan)
                if engine is None:
                    raise internal(
                        f"unable to deserialize TensorRT plan '{self.plan_file}' of "
                        f"model '{self.config.name}' on GPU {stream.device_id} (built "
                        f"with another TensorRT version or for another GPU?)"
                    )
                desc = describe_engine(engine)
                check_config(self.config, desc)
                entry = self._engines[stream.device_id] = (runtime, engine, desc)
            return entry[1], entry[2]

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None, profiles: tuple[int, ...] = ()
    ) -> BackendModelInstance:
        if kind != "KIND_GPU" or device_id is None:
            raise invalid_arg(
                f"model '{self.config.name}': TensorRT instances need kind KIND_GPU "
                f"(instance group of {name} has {kind})"
            )
        return TensorRTInstance(self, name=name, kind=kind, device_id=device_id, profiles=profiles)

    def close(self) -> None:
        self._engines.clear()


@dataclass
class _Context:
    context: object
    buffers: dict[str, object] = field(default_factory=dict)


class TensorRTInstance(BatchedTensorInstance):
    """One CUDA stream, one execution context per usable profile, its own device buffers."""

    def __init__(
        self,
        model: TensorRTModel,
        *,
        name: str,
        kind: str,
        device_id: int,
        profiles: tuple[int, ...] = (),
    ) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        from ..cuda_utils import CudaStream

        self.stream = CudaStream(device_id)
        try:
            self.engine, self.desc = model.engine_for(self.stream)
            self.profiles = instance_profiles(self.desc, profiles)
            self.contexts: dict[int, _Context] = {}
            for profile in self.profiles:
                context = self.engine.create_execution_context()
                if context is None:
                    raise internal(
                        f"TensorRT could not create an execution context for model "
                        f"'{model.config.name}' (out of GPU memory?)"
                    )
                if len(self.desc.profiles) > 1:
                    context.set_optimization_profile_async(profile, self.stream.handle)
                self.contexts[profile] = _Context(context)
            self.stream.synchronize()
        except BaseException:
            self.stream.close()
            raise

    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        self.stream.activate()
        shapes = {name: tuple(array.shape) for name, array in inputs.items()}
        profile = select_profile(self.desc, self.profiles, shapes)
        slot = self.contexts[profile]
        context = slot.context
        for name, shape in shapes.items():
            if not context.set_input_shape(name, shape):
                raise invalid_arg(f"TensorRT refused shape {list(shape)} for input '{name}'")
        output_shapes = {t.name: tuple(context.get_tensor_shape(t.name)) for t in self.desc.outputs}
        plan = binding_plan(self.desc, shapes, output_shapes)
        host_out: dict[str, np.ndarray] = {}
        for binding in plan:
            buffer = slot.buffers[binding.name] = self.stream.ensure(
                slot.buffers.get(binding.name), binding.nbytes
            )
            context.set_tensor_address(binding.name, buffer.ptr)
            if binding.is_input:
                self.stream.copy_to_device(
                    buffer,
                    np.ascontiguousarray(
                        inputs[binding.name], dtype=to_numpy_dtype(binding.datatype)
                    ),
                )
        if not context.execute_async_v3(self.stream.handle):
            raise internal(f"TensorRT execution failed for model '{self.model.config.name}'")
        for binding in plan:
            if not binding.is_input and binding.name in output_names:
                host = np.empty(binding.shape, to_numpy_dtype(binding.datatype))
                self.stream.copy_to_host(host, slot.buffers[binding.name])
                host_out[binding.name] = host
        self.stream.synchronize()
        return host_out

    def close(self) -> None:
        self.contexts = {}
        self.stream.close()
