"""Model configuration: parse -> auto-complete -> normalize -> validate -> typed objects.

config.pbtxt is parsed with protobuf ``text_format`` into Triton's own ``inference.ModelConfig``
message (from tritonclient), so every file Triton accepts parses identically. The message is then
auto-completed (backend fields from the files on disk, then the backend's own auto-complete),
normalized with Triton's defaults (model_config_utils.cc ``NormalizeModelConfig`` and
``NormalizeInstanceGroup``) and validated (``ValidateModelConfig``). Only then is it turned into
the frozen dataclasses below, which is all the rest of the core reads. The normalized message is
kept on :attr:`ModelConfig.proto` for the ModelConfig RPC and for Python models' ``model_config``.

Fields this project does not implement are either refused with UNSUPPORTED (where ignoring them
would change results) or reported as warnings on :attr:`ModelConfig.warnings`. Numeric fields
are range-checked where a value the protobuf type allows would break the server: dims and
reshape, batch and preferred sizes, priority levels, and the batcher's delays and timeouts (at
most :data:`MAX_MICROSECONDS`, INVALID_ARG naming the field); counts such as
``instance_group.count`` or ``model_warmup.count`` are taken as given, as Triton does.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Mapping

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import FieldDescriptor
from .protos import model_config_pb2 as mc

from . import gpu
from .datatypes import config_to_protocol
from .errors import StatusCode, TritonRosError, invalid_arg, unsupported

CONFIG_FILENAME = "config.pbtxt"
WILDCARD_DIM = -1
DEFAULT_MAX_BATCH_SIZE = 4  # tritonserver --backend-config=default-max-batch-size
#: The longest delay or timeout a configuration may give, in microseconds: what a signed 64-bit
#: count of nanoseconds holds (about 292 years). Triton multiplies these uint64 fields by 1000
#: into uint64 nanoseconds without a check (past 2^64 ns the value wraps around); a larger value
#: is refused here (INVALID_ARG naming the field), where it once killed the model's threads.
MAX_MICROSECONDS = (2**63 - 1) // 1000

# Backend names and platforms (core/src/constants.h)
ONNXRUNTIME_BACKEND = "onnxruntime"
ONNXRUNTIME_PLATFORM = "onnxruntime_onnx"
ONNXRUNTIME_FILENAME = "model.onnx"
TENSORRT_BACKEND = "tensorrt"
TENSORRT_PLATFORM = "tensorrt_plan"
TENSORRT_FILENAME = "model.plan"
PYTHON_BACKEND = "python"
PYTHON_FILENAME = "model.py"
OPENVINO_BACKEND = "openvino"
OPENVINO_FILENAME = "model.xml"
PYTORCH_BACKEND = "pytorch"
PYTORCH_PLATFORM = "pytorch_libtorch"
PYTORCH_PLATFORM_ALT = "libtorch"
PYTORCH_FILENAME = "model.pt"
PYTORCH_AOTI_PLATFORM = "torch_aoti"
PYTORCH_AOTI_FILENAME = "model.pt2"
TENSORFLOW_BACKEND = "tensorflow"
TENSORFLOW_PLATFORMS = {
    "tensorflow_savedmodel": "model.savedmodel",
    "tensorflow_graphdef": "model.graphdef",
}
# LiteRT / TensorFlow Lite: the name of Triton's community backend, and a plain alias
TFLITE_BACKENDS = ("armnn_tflite", "tflite")
TFLITE_FILENAME = "model.tflite"
FIL_BACKEND = "fil"
ENSEMBLE_PLATFORM = "ensemble"

_PLATFORM_OF_BACKEND = {
    ONNXRUNTIME_BACKEND: ONNXRUNTIME_PLATFORM,
    TENSORRT_BACKEND: TENSORRT_PLATFORM,
}
# The platforms a backend accepts where it has any (ValidateModelConfig's pairs)
_PLATFORMS_OF_BACKEND = {
    ONNXRUNTIME_BACKEND: {ONNXRUNTIME_PLATFORM},
    TENSORRT_BACKEND: {TENSORRT_PLATFORM},
    PYTORCH_BACKEND: {PYTORCH_PLATFORM, PYTORCH_PLATFORM_ALT, PYTORCH_AOTI_PLATFORM},
    TENSORFLOW_BACKEND: set(TENSORFLOW_PLATFORMS),
}


# --------------------------------------------------------------------------------------------
# Typed configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorConfig:
    """One ``input`` or ``output`` entry."""

    name: str
    datatype: str  # protocol name: "FP32", "BYTES", ...
    dims: tuple[int, ...]  # without the batch dimension when max_batch_size > 0
    reshape: tuple[int, ...] | None = None
    optional: bool = False
    format: str = "FORMAT_NONE"
    label_filename: str = ""

    @property
    def has_variable_dims(self) -> bool:
        return WILDCARD_DIM in self.dims


@dataclass(frozen=True)
class QueuePolicy:
    """``ModelQueuePolicy``: what happens to requests waiting in one priority level's queue."""

    timeout_action: str = "REJECT"  # "REJECT" or "DELAY"
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    max_queue_size: int = 0  # 0: unbounded


@dataclass(frozen=True)
class DynamicBatchingConfig:
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy = QueuePolicy()
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=dict)

    def policy_for(self, level: int) -> QueuePolicy:
        return self.priority_queue_policy.get(level, self.default_queue_policy)


#: Triton's control kinds (``ModelSequenceBatching.Control.Kind``) by their config names.
CONTROL_START = "CONTROL_SEQUENCE_START"
CONTROL_READY = "CONTROL_SEQUENCE_READY"
CONTROL_END = "CONTROL_SEQUENCE_END"
CONTROL_CORRID = "CONTROL_SEQUENCE_CORRID"
#: The data types a CORRID control may have (ValidateModelConfig).
CORRID_DATATYPES = ("UINT64", "INT64", "UINT32", "INT32", "BYTES")
#: max_sequence_idle_microseconds when the configuration gives none (SEQUENCE_IDLE_DEFAULT).
SEQUENCE_IDLE_DEFAULT_US = 1_000_000
INITIAL_STATE_FOLDER = "initial_state"  # data_file is relative to <model>/initial_state


@dataclass(frozen=True)
class SequenceControl:
    """One ``control_input``'s control: the input tensor the sequence batcher fills for ``kind``
    (START, END and READY with their false/true values; CORRID with its data type)."""

    kind: str
    tensor: str
    datatype: str  # protocol name: "INT32", "FP32", "BOOL", "UINT64", ...
    false_value: float | int | bool = 0
    true_value: float | int | bool = 1


@dataclass(frozen=True)
class SequenceInitialState:
    """``state.initial_state``: zeros, or the row-major contents of
    ``<model>/initial_state/<data_file>``."""

    name: str
    dims: tuple[int, ...]
    zero_data: bool
    data_file: str = ""


@dataclass(frozen=True)
class SequenceStateConfig:
    """One ``sequence_batching.state`` (implicit state): the server passes the sequence's state
    as input ``input_name`` and keeps output ``output_name`` for its next request."""

    input_name: str
    output_name: str
    datatype: str  # protocol name
    dims: tuple[int, ...]  # without the batch dimension
    initial_state: SequenceInitialState | None = None


@dataclass(frozen=True)
class SequenceBatchingConfig:
    """``sequence_batching``: the strategy (``direct`` unless ``oldest`` is given) and its
    settings, the control inputs and the implicit states."""

    strategy: str  # "direct" or "oldest"
    max_sequence_idle_us: int = SEQUENCE_IDLE_DEFAULT_US
    controls: tuple[SequenceControl, ...] = ()
    states: tuple[SequenceStateConfig, ...] = ()
    max_queue_delay_us: int = 0  # direct or oldest
    minimum_slot_utilization: float = 0.0  # direct
    max_candidate_sequences: int = 0  # oldest; 0: max(1, max_batch_size)
    preferred_batch_sizes: tuple[int, ...] = ()  # oldest
    preserve_ordering: bool = False  # oldest

    def control(self, kind: str) -> SequenceControl | None:
        return next((c for c in self.controls if c.kind == kind), None)


@dataclass(frozen=True)
class InstanceGroupConfig:
    name: str
    kind: str  # "KIND_CPU", "KIND_GPU" or "KIND_MODEL" (AUTO resolved)
    count: int
    gpus: tuple[int, ...] = ()
    profiles: tuple[str, ...] = ()
    passive: bool = False


@dataclass(frozen=True)
class VersionPolicy:
    kind: str = "latest"  # "latest", "all" or "specific"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: Iterable[int]) -> list[int]:
        """The versions to load out of those present on disk, ascending."""
        avail = sorted(set(available))
        if self.kind == "all":
            return avail
        if self.kind == "specific":
            return [v for v in avail if v in self.versions]
        return avail[-self.num_versions :] if self.num_versions > 0 else []


@dataclass(frozen=True)
class EnsembleStep:
    model_name: str
    model_version: int  # -1: latest
    input_map: Mapping[str, str]  # step's model input -> ensemble tensor
    output_map: Mapping[str, str]  # step's model output -> ensemble tensor


@dataclass(frozen=True)
class ExecutionAccelerator:
    name: str
    parameters: Mapping[str, str]


@dataclass(frozen=True)
class OptimizationConfig:
    graph_level: int = 0
    gpu_execution_accelerators: tuple[ExecutionAccelerator, ...] = ()
    cpu_execution_accelerators: tuple[ExecutionAccelerator, ...] = ()


WARMUP_SOURCES = ("zero_data", "random_data", "input_data_file")
WARMUP_DATA_FOLDER = "warmup"  # input_data_file is relative to <model>/warmup (Triton's rule)


@dataclass(frozen=True)
class WarmupInput:
    """One input of a ``model_warmup`` sample (``ModelWarmup.Input``)."""

    name: str
    datatype: str  # protocol name: "FP32", "BYTES", ...
    dims: tuple[int, ...]  # without the batch dimension; all dims fixed
    source: str  # one of WARMUP_SOURCES
    input_data_file: str = ""  # with source "input_data_file"


@dataclass(frozen=True)
class WarmupSample:
    """One ``model_warmup`` entry: ``batch_size`` batch-1 requests executed together on every
    instance, ``count`` times (at least once, as in Triton), before the version is READY."""

    name: str
    batch_size: int  # 0: the sample is skipped, as in Triton
    inputs: tuple[WarmupInput, ...]
    count: int


@dataclass(frozen=True)
class ModelConfig:
    """A validated model configuration. ``proto`` is the normalized ``inference.ModelConfig``."""

    name: str
    platform: str
    backend: str
    max_batch_size: int
    inputs: tuple[TensorConfig, ...]
    outputs: tuple[TensorConfig, ...]
    version_policy: VersionPolicy
    dynamic_batching: DynamicBatchingConfig | None
    instance_groups: tuple[InstanceGroupConfig, ...]
    ensemble_steps: tuple[EnsembleStep, ...]
    default_model_filename: str
    parameters: Mapping[str, str]
    optimization: OptimizationConfig
    response_cache: bool
    proto: mc.ModelConfig = field(compare=False, repr=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)
    warmup: tuple[WarmupSample, ...] = ()
    sequence_batching: SequenceBatchingConfig | None = None
    decoupled: bool = False  # model_transaction_policy.decoupled

    @property
    def is_ensemble(self) -> bool:
        return self.platform == ENSEMBLE_PLATFORM

    def input(self, name: str) -> TensorConfig | None:
        return self.inputs_by_name.get(name)

    def output(self, name: str) -> TensorConfig | None:
        return self.outputs_by_name.get(name)

    # Looked up for every request: computed once (the dataclass is frozen; cached_property
    # writes the instance's __dict__ directly, and equality compares the fields only).
    @cached_property
    def inputs_by_name(self) -> Mapping[str, TensorConfig]:
        return _first_by_name(self.inputs)

    @cached_property
    def outputs_by_name(self) -> Mapping[str, TensorConfig]:
        return _first_by_name(self.outputs)

    @cached_property
    def sequence_inputs(self) -> tuple[str, ...]:
        """The model inputs the sequence batcher fills beyond the configured ones: its control
        tensors and implicit state inputs (a backend's check of the model's input count counts
        them, as Triton's backends do)."""
        sb = self.sequence_batching
        if sb is None:
            return ()
        return tuple(c.tensor for c in sb.controls) + tuple(s.input_name for s in sb.states)

    @cached_property
    def required_inputs(self) -> tuple[str, ...]:
        """The names of the inputs that are not ``optional``, in configuration order."""
        return tuple(t.name for t in self.inputs if not t.optional)

    def to_json(self) -> str:
        return model_config_to_json(self.proto)


def expected_inputs(config: ModelConfig) -> int:
    """How many inputs the model file must have: the configured ones and those the sequence
    batcher fills (control tensors, implicit state)."""
    return len(config.inputs) + len(config.sequence_inputs)


def _first_by_name(tensors: Iterable[TensorConfig]) -> dict[str, TensorConfig]:
    by_name: dict[str, TensorConfig] = {}
    for tensor in tensors:
        by_name.setdefault(tensor.name, tensor)
    return by_name


# --------------------------------------------------------------------------------------------
# Parse
# --------------------------------------------------------------------------------------------


def parse_config_text(
    text: str, *, model_name: str, source: str = CONFIG_FILENAME
) -> mc.ModelConfig:
    proto = mc.ModelConfig()
    try:
        text_format.Parse(text, proto)
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to parse {source} of model '{model_name}': {exc}") from None
    return proto


def parse_config_json(text: str, *, model_name: str) -> mc.ModelConfig:
    """A configuration given as JSON (the repository load API's ``config`` parameter)."""
    proto = mc.ModelConfig()
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"a model configuration is a JSON object, not {type(value).__name__}")
        json_format.ParseDict(value, proto)
    except (json_format.ParseError, ValueError, RecursionError) as exc:
        raise invalid_arg(f"failed to parse JSON config of model '{model_name}': {exc}") from None
    return proto


def model_config_to_json(proto: mc.ModelConfig) -> str:
    """JSON as Triton writes it (ModelConfigToJson): proto field names, every field printed
    (``always_print_primitive_fields``), int64 fields as numbers (Triton's FixInt)."""
    as_dict = json_format.MessageToDict(
        proto, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return json.dumps(_ints_as_numbers(proto.DESCRIPTOR, as_dict))


def model_config_to_text(proto: mc.ModelConfig) -> str:
    """config.pbtxt text of a configuration: protobuf text format, which is what Triton (and
    :func:`parse_config_text`) reads; repeated numbers on one line (``dims: [3, 224, 224]``)."""
    return text_format.MessageToString(proto, use_short_repeated_primitives=True)


_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _ints_as_numbers(descriptor, value: dict) -> dict:
    # protobuf's JSON mapping writes 64-bit integers as strings; Triton's FixInt turns exactly
    # those fields back into numbers (a string parameter "5" or a tensor named "7" stays text).
    out = {}
    for key, item in value.items():
        field = descriptor.fields_by_name.get(key)
        if field is None:
            out[key] = item
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[key] = {k: _convert_field(value_field, v) for k, v in item.items()}
        elif isinstance(item, list):
            out[key] = [_convert_field(field, v) for v in item]
        else:
            out[key] = _convert_field(field, item)
    return out


def _convert_field(field, item):
    if field.message_type is not None and isinstance(item, dict):
        return _ints_as_numbers(field.message_type, item)
    if field.type in _INT64_TYPES and isinstance(item, str):
        return int(item)
    return item


# --------------------------------------------------------------------------------------------
# Auto-complete
# --------------------------------------------------------------------------------------------


def version_dirs(model_path: Path) -> list[int]:
    """Numeric subdirectories of a model directory (others are ignored, as in Triton)."""
    out = []
    try:
        entries = list(os.scandir(model_path))
    except OSError:
        return out
    for entry in entries:
        if entry.is_dir() and entry.name.isdigit():
            out.append(int(entry.name))
    return sorted(out)


def auto_complete_backend_fields(proto: mc.ModelConfig, model_name: str, model_path: Path) -> None:
    """Fill name, backend, platform and default_model_filename (AutoCompleteBackendFields)."""
    if not proto.name:
        proto.name = model_name
    versions = version_dirs(model_path)
    contents: set[str] = set()
    if versions:
        try:
            contents = set(os.listdir(model_path / str(versions[0])))
        except OSError:
            contents = set()

    if proto.platform == ENSEMBLE_PLATFORM or proto.HasField("ensemble_scheduling"):
        return
    version_path = model_path / str(versions[0]) if versions else None

    def is_file(name: str) -> bool:
        return name in contents and version_path is not None and not (version_path / name).is_dir()

    guessing = not proto.platform and not proto.default_model_filename and bool(versions)
    # Triton's order: TensorFlow, TensorRT, ONNX Runtime, OpenVINO, PyTorch, Python.
    if not proto.platform and proto.backend in ("", TENSORFLOW_BACKEND):
        # TensorFlow needs its platform: from the file name, else from what the folder holds
        by_file = {f: p for p, f in TENSORFLOW_PLATFORMS.items()}
        if proto.default_model_filename in by_file:
            proto.platform = by_file[proto.default_model_filename]
        elif not proto.default_model_filename and version_path is not None:
            if "model.savedmodel" in contents and (version_path / "model.savedmodel").is_dir():
                proto.platform = "tensorflow_savedmodel"
            if is_file("model.graphdef"):
                proto.platform = "tensorflow_graphdef"
    if proto.platform in TENSORFLOW_PLATFORMS:
        proto.backend = proto.backend or TENSORFLOW_BACKEND
        proto.default_model_filename = (
            proto.default_model_filename or TENSORFLOW_PLATFORMS[proto.platform]
        )
        return
    if not proto.backend:
        if (
            proto.platform == TENSORRT_PLATFORM
            or proto.default_model_filename == TENSORRT_FILENAME
            or (guessing and is_file(TENSORRT_FILENAME))
        ):
            proto.backend = TENSORRT_BACKEND
        elif (
            proto.platform == ONNXRUNTIME_PLATFORM
            or proto.default_model_filename == ONNXRUNTIME_FILENAME
            or (guessing and ONNXRUNTIME_FILENAME in contents)
        ):  # a file or a directory
            proto.backend = ONNXRUNTIME_BACKEND
        elif proto.default_model_filename == OPENVINO_FILENAME or (
            guessing and OPENVINO_FILENAME in contents
        ):
            proto.backend = OPENVINO_BACKEND
        elif proto.platform in (
            PYTORCH_PLATFORM,
            PYTORCH_PLATFORM_ALT,
            PYTORCH_AOTI_PLATFORM,
        ) or proto.default_model_filename in (PYTORCH_FILENAME, PYTORCH_AOTI_FILENAME):
            proto.backend = PYTORCH_BACKEND
        elif guessing and is_file(PYTORCH_FILENAME):
            proto.backend, proto.platform = PYTORCH_BACKEND, PYTORCH_PLATFORM
        elif guessing and is_file(PYTORCH_AOTI_FILENAME):
            proto.backend, proto.platform = PYTORCH_BACKEND, PYTORCH_AOTI_PLATFORM
        elif proto.default_model_filename == PYTHON_FILENAME or (
            guessing and PYTHON_FILENAME in contents
        ):
            proto.backend = PYTHON_BACKEND
        elif proto.default_model_filename == TFLITE_FILENAME or (
            guessing and is_file(TFLITE_FILENAME)
        ):
            proto.backend = "tflite"  # beyond Triton, whose core guesses no TFLite
    if proto.backend in _PLATFORM_OF_BACKEND and not proto.platform:
        proto.platform = _PLATFORM_OF_BACKEND[proto.backend]
    if proto.backend == PYTORCH_BACKEND and not proto.platform:
        proto.platform = PYTORCH_PLATFORM  # until an AOTI platform is named, as Triton
    if not proto.default_model_filename:
        proto.default_model_filename = {
            ONNXRUNTIME_BACKEND: ONNXRUNTIME_FILENAME,
            TENSORRT_BACKEND: TENSORRT_FILENAME,
            PYTHON_BACKEND: PYTHON_FILENAME,
            OPENVINO_BACKEND: OPENVINO_FILENAME,
            TFLITE_BACKENDS[0]: TFLITE_FILENAME,
            TFLITE_BACKENDS[1]: TFLITE_FILENAME,
            PYTORCH_BACKEND: (
                PYTORCH_AOTI_FILENAME
                if proto.platform == PYTORCH_AOTI_PLATFORM
                else PYTORCH_FILENAME
            ),
        }.get(proto.backend, "")


# --------------------------------------------------------------------------------------------
# Normalize
# --------------------------------------------------------------------------------------------


def normalize(proto: mc.ModelConfig, *, auto_gpu: bool = True) -> None:
    """Triton's defaults (NormalizeModelConfig + NormalizeInstanceGroup).

    ``auto_gpu`` says whether the model's backend can run on the GPUs here: KIND_AUTO becomes
    KIND_GPU only then. (Triton's backends are built with GPU support; an onnxruntime without
    the CUDA provider is not, and a model that names no kind must still load on it.)
    """
    if not proto.HasField("version_policy"):
        proto.version_policy.latest.num_versions = 1
    if proto.HasField("dynamic_batching"):
        if not proto.dynamic_batching.preferred_batch_size and proto.max_batch_size > 0:
            proto.dynamic_batching.preferred_batch_size.append(proto.max_batch_size)
    if proto.HasField("sequence_batching"):
        sb = proto.sequence_batching
        if sb.max_sequence_idle_microseconds == 0:
            sb.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        if (
            sb.HasField("oldest")
            and not sb.oldest.preferred_batch_size
            and proto.max_batch_size > 0
        ):
            sb.oldest.preferred_batch_size.append(proto.max_batch_size)
    if proto.HasField("ensemble_scheduling") or proto.platform == ENSEMBLE_PLATFORM:
        return

    supported_gpus = gpu.supported_gpus()
    if not proto.instance_group:
        group = proto.instance_group.add()
        group.name = proto.name
    for index, group in enumerate(proto.instance_group):
        if not group.name:
            group.name = f"{proto.name}_{index}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            if (
                not auto_gpu
                or not supported_gpus
                or any(g not in supported_gpus for g in group.gpus)
            ):
                group.kind = mc.ModelInstanceGroup.KIND_CPU
            else:
                group.kind = mc.ModelInstanceGroup.KIND_GPU
        if group.count < 1:
            # SetDefaultInstanceCount: ONNX Runtime (and TensorFlow) get 2 CPU instances.
            cpu_default = (
                group.kind == mc.ModelInstanceGroup.KIND_CPU
                and proto.backend == ONNXRUNTIME_BACKEND
            )
            group.count = 2 if cpu_default else 1
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and not group.gpus:
            group.gpus.extend(sorted(supported_gpus))


# --------------------------------------------------------------------------------------------
# Validate
# --------------------------------------------------------------------------------------------


def _kind_name(kind: int) -> str:
    return mc.ModelInstanceGroup.Kind.Name(kind)


def _validate_io(proto: mc.ModelConfig, io, what: str) -> None:
    prefix = f"model '{proto.name}': {what} "
    if not io.name:
        raise invalid_arg(prefix + "must specify 'name'")
    prefix += f"'{io.name}' "
    if io.data_type == mc.TYPE_INVALID:
        raise invalid_arg(prefix + "must specify 'data_type'")
    if not io.dims:
        raise invalid_arg(prefix + "must specify 'dims'")
    for dim in io.dims:
        if dim < 1 and dim != WILDCARD_DIM:
            raise invalid_arg(
                prefix + f"dimension must be integer >= 1, or -1 to indicate a "
                f"variable-size dimension, got {list(io.dims)}"
            )
    if io.HasField("reshape"):
        if not io.reshape.shape and proto.max_batch_size == 0:
            raise invalid_arg(
                prefix + "cannot have empty reshape for non-batching model as "
                "scalar tensors are not supported"
            )
        for dim in io.reshape.shape:
            if dim < 1 and dim != WILDCARD_DIM:
                raise invalid_arg(
                    prefix + f"reshape dimensions must be integer >= 1, or -1, got "
                    f"{list(io.reshape.shape)}"
                )
        if _chunks(io.dims) != _chunks(io.reshape.shape) and not (
            not io.reshape.shape and _chunks(io.dims) == [1]
        ):
            raise invalid_arg(
                prefix + f"has different size for dims {list(io.dims)} and reshape "
                f"{list(io.reshape.shape)}"
            )
    if io.is_shape_tensor and proto.platform != TENSORRT_PLATFORM:
        raise invalid_arg(
            prefix + "is a shape tensor: shape tensors are only supported for TensorRT platform"
        )
    if io.is_non_linear_format_io:
        raise unsupported(
            prefix + "sets is_non_linear_format_io, which triton_ros does not support"
        )
    if getattr(io, "allow_ragged_batch", False):
        raise unsupported(prefix + "sets allow_ragged_batch, which triton_ros does not support")
    if (
        what == "input"
        and io.format in (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW)
        and len(io.dims) != 3
    ):
        raise invalid_arg(prefix + "format NHWC/NCHW requires 3 dims")
    try:
        config_to_protocol(mc.DataType.Name(io.data_type))
    except TritonRosError:
        raise invalid_arg(prefix + f"has invalid data_type {io.data_type}") from None


def _chunks(dims) -> list[int]:
    """Element counts between wildcard dims (Triton's reshape compatibility rule)."""
    out, current = [], 1
    for d in dims:
        if d == WILDCARD_DIM:
            out.append(current)
            current = 1
        else:
            current *= d
    out.append(current)
    return out


def check_label_filename(model: str, output: str, label_filename: str) -> None:
    """A label file is a path relative to the model's folder that stays inside it: no absolute
    path, no ``..`` component, no NUL (Triton joins it to the model directory)."""
    parts = label_filename.replace("\\", "/").split("/")
    if (
        label_filename.startswith(("/", "\\"))
        or os.path.isabs(label_filename)
        or ".." in parts
        or "\x00" in label_filename
    ):
        raise invalid_arg(
            f"model '{model}': label_filename '{label_filename}' of output "
            f"'{output}' must be a relative path inside the model's folder"
        )


def validate(proto: mc.ModelConfig) -> list[str]:
    """Raise on an invalid or unsupported configuration; return warnings for ignored fields."""
    name = proto.name
    warnings: list[str] = []
    if not name:
        raise invalid_arg("model configuration must specify 'name'")
    is_ensemble = proto.platform == ENSEMBLE_PLATFORM
    if not proto.backend and not is_ensemble:
        if proto.platform:
            raise invalid_arg(f"unexpected platform type '{proto.platform}' for {name}")
        raise invalid_arg(f"must specify 'platform' or 'backend' for '{name}'")
    if proto.backend and is_ensemble:
        raise invalid_arg(
            f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"
        )
    expected_platforms = _PLATFORMS_OF_BACKEND.get(proto.backend)
    if expected_platforms and proto.platform and proto.platform not in expected_platforms:
        raise invalid_arg(
            f"unexpected 'platform' and 'backend' pair, got:{proto.platform}, {proto.backend}"
        )
    if proto.max_batch_size < 0:
        raise invalid_arg(
            f"'max_batch_size' must be non-negative value for {name}, got {proto.max_batch_size}"
        )

    if proto.HasField("dynamic_batching"):
        db = proto.dynamic_batching
        for size in db.preferred_batch_size:
            if size <= 0:
                raise invalid_arg(
                    f"dynamic batching preferred size must be positive for {name}, got {size}"
                )
            if size > proto.max_batch_size:
                raise invalid_arg(
                    f"dynamic batching preferred size must be <= max batch size "
                    f"for {name}, got {size} > {proto.max_batch_size}"
                )
        _check_microseconds(
            name, "dynamic_batching.max_queue_delay_microseconds", db.max_queue_delay_microseconds
        )
        _check_microseconds(
            name,
            "dynamic_batching.default_queue_policy.default_timeout_microseconds",
            db.default_queue_policy.default_timeout_microseconds,
        )
        for level, policy in sorted(db.priority_queue_policy.items()):
            _check_microseconds(
                name,
                f"dynamic_batching.priority_queue_policy[{level}].default_timeout_microseconds",
                policy.default_timeout_microseconds,
            )
        if db.priority_levels != 0:
            if db.default_priority_level == 0 or db.default_priority_level > db.priority_levels:
                raise invalid_arg(
                    f"default priority level must be in range [1, "
                    f"{db.priority_levels}] for {name}, got "
                    f"{db.default_priority_level}"
                )
            for level in db.priority_queue_policy:
                if level == 0 or level > db.priority_levels:
                    raise invalid_arg(
                        f"priority queue policy must have priority level in range "
                        f"[1, {db.priority_levels}] for {name}, got {level}"
                    )
        if db.preserve_ordering:
            if db.priority_levels > 1:
                raise invalid_arg(
                    f"Only one priority level is allowed when 'preserve_ordering' "
                    f"is true for {name}"
                )
            policies = [db.default_queue_policy, *db.priority_queue_policy.values()]
            if any(
                p.default_timeout_microseconds != 0
                and p.timeout_action == mc.ModelQueuePolicy.DELAY
                for p in policies
            ):
                raise invalid_arg(
                    f"Queue policy can not have DELAY as timeout action when "
                    f"'preserve_ordering' is true for {name}"
                )
        if proto.max_batch_size == 0:
            warnings.append(
                f"model '{name}': dynamic_batching has no effect when max_batch_size is 0; "
                f"each request executes alone"
            )

    if proto.HasField("sequence_batching"):
        _validate_sequence_batching(proto, warnings)
    if proto.batch_input or proto.batch_output:
        raise unsupported(
            f"model '{name}': batch_input/batch_output are not supported by triton_ros"
        )
    if proto.model_transaction_policy.decoupled and proto.response_cache.enable:
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with "
            f"'decoupled' transaction policy. Please disable the response cache."
        )

    if is_ensemble:
        if not proto.HasField("ensemble_scheduling") or not proto.ensemble_scheduling.step:
            raise invalid_arg(
                f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
            )
        if proto.instance_group:
            raise invalid_arg(f"instance group should not be specified for ensemble '{name}'")
        if proto.HasField("optimization"):
            raise invalid_arg(f"optimization should not be specified for ensemble '{name}'")
        if proto.model_warmup:
            raise invalid_arg(f"model_warmup can not be specified for ensemble '{name}'")
        if proto.ensemble_scheduling.max_inflight_requests:
            warnings.append(f"model '{name}': ensemble_scheduling.max_inflight_requests is ignored")
        _validate_ensemble_graph(proto)
    elif proto.HasField("ensemble_scheduling"):
        raise invalid_arg(
            f"model '{name}' sets ensemble_scheduling but its platform is "
            f"'{proto.platform}', not 'ensemble'"
        )

    seen: set[str] = set()
    for io in proto.input:
        _validate_io(proto, io, "input")
        if io.name in seen:
            raise invalid_arg(f"model '{name}': input '{io.name}' is declared twice")
        seen.add(io.name)
    seen = set()
    for io in proto.output:
        _validate_io(proto, io, "output")
        if io.label_filename:
            check_label_filename(name, io.name, io.label_filename)
        if io.name in seen:
            raise invalid_arg(f"model '{name}': output '{io.name}' is declared twice")
        seen.add(io.name)

    if not is_ensemble:
        _validate_instance_groups(proto, warnings)
        _validate_warmup(proto)
    _collect_ignored_fields(proto, warnings)
    return warnings


_BOOLEAN_KINDS = (CONTROL_START, CONTROL_END, CONTROL_READY)


def _kind(kind: int) -> str:
    return mc.ModelSequenceBatching.Control.Kind.Name(kind)


def _sequence_controls(proto: mc.ModelConfig) -> tuple[SequenceControl, ...]:
    """The control inputs with Triton's checks (GetBooleanSequenceControlProperties and
    GetTypedSequenceControlProperties): named, one tensor per control, each kind at most once,
    START/END/READY with exactly one false/true pair of two values, CORRID with a data type
    Triton allows and no false/true values."""
    name = proto.name
    seen_tensors: set[str] = set()
    by_kind: dict[str, SequenceControl] = {}
    for control_input in proto.sequence_batching.control_input:
        tensor = control_input.name
        if not tensor:
            raise invalid_arg(f"sequence batching control tensor must have a name for {name}")
        if tensor in seen_tensors:
            raise invalid_arg(
                f"sequence batching control tensor '{tensor}' is specified for "
                f"multiple control kinds for {name}"
            )
        seen_tensors.add(tensor)
        for c in control_input.control:
            kind = _kind(c.kind)
            if kind in by_kind:
                raise invalid_arg(f"sequence batching specifies multiple {kind} tensors for {name}")
            pairs = [
                (field_name, list(values))
                for field_name, values in (
                    ("int32_false_true", c.int32_false_true),
                    ("fp32_false_true", c.fp32_false_true),
                    ("bool_false_true", c.bool_false_true),
                )
                if values
            ]
            if kind == CONTROL_CORRID:
                if pairs:
                    raise invalid_arg(
                        f"sequence batching must not specify either "
                        f"'int32_false_true', 'fp32_false_true' or "
                        f"'bool_false_true' for {kind} for {name}"
                    )
                datatype = (
                    config_to_protocol(mc.DataType.Name(c.data_type))
                    if c.data_type != mc.TYPE_INVALID
                    else ""
                )
                if datatype not in CORRID_DATATYPES:
                    raise invalid_arg(
                        f"unexpected data type for control {kind} for {name}. "
                        f"Allowed data types are TYPE_UINT64, TYPE_INT64, "
                        f"TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                    )
                by_kind[kind] = SequenceControl(kind, tensor, datatype)
                continue
            if not pairs:
                raise invalid_arg(
                    f"sequence batching must specify either 'int32_false_true', "
                    f"'fp32_false_true' or 'bool_false_true' for {kind} for {name}"
                )
            if len(pairs) > 1:
                raise invalid_arg(
                    f"sequence batching specifies more than one from "
                    f"'int32_false_true', 'fp32_false_true' and 'bool_false_true' "
                    f"for {kind} for {name}"
                )
            field_name, values = pairs[0]
            if len(values) != 2:
                raise invalid_arg(
                    f"sequence batching control '{field_name}' must have exactly 2 "
                    f"entries for {kind} for {name}"
                )
            datatype = {
                "int32_false_true": "INT32",
                "fp32_false_true": "FP32",
                "bool_false_true": "BOOL",
            }[field_name]
            by_kind[kind] = SequenceControl(kind, tensor, datatype, values[0], values[1])
    order = (CONTROL_START, CONTROL_END, CONTROL_READY, CONTROL_CORRID)
    return tuple(by_kind[k] for k in order if k in by_kind)


def _validate_sequence_batching(proto: mc.ModelConfig, warnings: list[str]) -> None:
    """``sequence_batching`` (ValidateModelConfig and the sequence batcher's own checks at load:
    GenerateInitialStateData); fields triton_ros does not serve are refused (UNSUPPORTED) or,
    where they only tune memory, named in a warning."""
    name = proto.name
    sb = proto.sequence_batching
    if proto.response_cache.enable:
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with "
            f"sequence batching scheduler. Please disable the response cache."
        )
    if sb.iterative_sequence:
        raise unsupported(
            f"model '{name}': sequence_batching.iterative_sequence is not "
            f"supported by triton_ros (requests are never rescheduled)"
        )
    _sequence_controls(proto)
    _check_microseconds(
        name, "sequence_batching.max_sequence_idle_microseconds", sb.max_sequence_idle_microseconds
    )
    if sb.HasField("oldest"):
        _check_microseconds(
            name,
            "sequence_batching.oldest.max_queue_delay_microseconds",
            sb.oldest.max_queue_delay_microseconds,
        )
        for size in sb.oldest.preferred_batch_size:
            if size <= 0:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be positive for {name}"
                )
            if size > proto.max_batch_size:
                raise invalid_arg(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if sb.HasField("direct"):
        _check_microseconds(
            name,
            "sequence_batching.direct.max_queue_delay_microseconds",
            sb.direct.max_queue_delay_microseconds,
        )
        utilization = sb.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise invalid_arg(
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
            )
    inputs, outputs = set(), set()
    for state in sb.state:
        where = f"model '{name}': sequence_batching state"
        if not state.input_name or not state.output_name:
            raise invalid_arg(f"{where} must specify 'input_name' and 'output_name'")
        if state.input_name in inputs:
            raise invalid_arg(f"State input name '{state.input_name}' specified more than once.")
        if state.output_name in outputs:
            raise invalid_arg(f"State output name '{state.output_name}' specified more than once.")
        inputs.add(state.input_name)
        outputs.add(state.output_name)
        if state.data_type == mc.TYPE_INVALID:
            raise invalid_arg(f"{where} '{state.input_name}' must specify 'data_type'")
        if not state.dims:
            raise invalid_arg(f"{where} '{state.input_name}' must specify 'dims'")
        for dim in state.dims:
            if dim < 1 and dim != WILDCARD_DIM:
                raise invalid_arg(
                    f"{where} '{state.input_name}': dimension must be integer >= "
                    f"1, or -1 to indicate a variable-size dimension, got "
                    f"{list(state.dims)}"
                )
        try:
            config_to_protocol(mc.DataType.Name(state.data_type))
        except TritonRosError:
            raise invalid_arg(
                f"{where} '{state.input_name}' has invalid data_type {state.data_type}"
            ) from None
        if state.use_same_buffer_for_input_output or state.use_growable_memory:
            warnings.append(
                f"{where} '{state.input_name}': use_same_buffer_for_input_output and "
                f"use_growable_memory are ignored (they only place the state's "
                f"GPU buffers)"
            )
        _validate_initial_state(state)


def _validate_initial_state(state) -> None:
    """GenerateInitialStateData's checks, with its messages (the data file's size is checked
    when the model loads, as there)."""
    source = state.input_name
    if len(state.initial_state) > 1:
        raise invalid_arg(
            f"initial_state field for state input '{source}' must contain exactly "
            f"one or zero element. Found '{len(state.initial_state)}' elements."
        )
    if not state.initial_state:
        return
    initial = state.initial_state[0]
    if initial.data_type != state.data_type:
        raise invalid_arg(
            f"The data type used for 'initial_state' field of state '{source}' "
            f"does not match the state data type."
        )
    if not initial.name:
        raise invalid_arg(
            f"Field 'name' must be set when using initial_state for state input '{source}'."
        )
    if len(initial.dims) != len(state.dims):
        raise invalid_arg(
            f"Number of dimensions in 'initial_state' doesn't match the size of "
            f"'state' dimensions for state input '{source}'. "
            f"{len(initial.dims)} != {len(state.dims)}"
        )
    for got, want in zip(initial.dims, state.dims):
        if got == WILDCARD_DIM:
            raise invalid_arg(
                f"'initial_state' field for state input name '{source}' contains "
                f"variable dimensions."
            )
        if got < 1:
            raise invalid_arg(
                f"'initial_state' dims for state input name '{source}' must be "
                f"integers >= 1, got {list(initial.dims)}"
            )
        if want != WILDCARD_DIM and got != want:
            raise invalid_arg(
                f"'initial_state' dim for input name '{source}' doesn't match "
                f"'state' dim description. {got} != {want}"
            )
    which = initial.WhichOneof("state_data")
    if which is None:
        raise invalid_arg(f"initial_state setting expects state'{source}' to have state_data set")
    if which == "data_file":
        rel = initial.data_file
        if not rel or os.path.isabs(rel) or ".." in Path(rel).parts or "\x00" in rel:
            raise invalid_arg(
                f"initial_state of state input '{source}': data_file '{rel}' must "
                f"be a file name inside the model's '{INITIAL_STATE_FOLDER}' "
                f"directory"
            )


def _sequence_batching(proto: mc.ModelConfig) -> SequenceBatchingConfig | None:
    if not proto.HasField("sequence_batching"):
        return None
    sb = proto.sequence_batching
    states = []
    for state in sb.state:
        initial = None
        if state.initial_state:
            i = state.initial_state[0]
            initial = SequenceInitialState(
                name=i.name,
                dims=tuple(int(d) for d in i.dims),
                zero_data=i.WhichOneof("state_data") == "zero_data",
                data_file=i.data_file,
            )
        states.append(
            SequenceStateConfig(
                input_name=state.input_name,
                output_name=state.output_name,
                datatype=config_to_protocol(mc.DataType.Name(state.data_type)),
                dims=tuple(int(d) for d in state.dims),
                initial_state=initial,
            )
        )
    oldest = sb.HasField("oldest")
    return SequenceBatchingConfig(
        strategy="oldest" if oldest else "direct",
        max_sequence_idle_us=int(sb.max_sequence_idle_microseconds),
        controls=_sequence_controls(proto),
        states=tuple(states),
        max_queue_delay_us=int(
            sb.oldest.max_queue_delay_microseconds
            if oldest
            else sb.direct.max_queue_delay_microseconds
        ),
        minimum_slot_utilization=0.0 if oldest else float(sb.direct.minimum_slot_utilization),
        max_candidate_sequences=int(sb.oldest.max_candidate_sequences) if oldest else 0,
        preferred_batch_sizes=tuple(sorted(set(int(s) for s in sb.oldest.preferred_batch_size)))
        if oldest
        else (),
        preserve_ordering=bool(sb.oldest.preserve_ordering) if oldest else False,
    )


def _check_microseconds(model: str, field_name: str, value: int) -> None:
    if value > MAX_MICROSECONDS:
        raise invalid_arg(
            f"model '{model}': {field_name} must be at most {MAX_MICROSECONDS} "
            f"(292 years), got {value}"
        )


def _warmup_source(proto_input) -> str:
    return proto_input.WhichOneof("input_data_type") or ""


def _validate_warmup(proto: mc.ModelConfig) -> None:
    """``model_warmup`` samples must describe requests the model accepts (Triton finds these
    faults only when it builds the samples at load time; the messages are its own)."""
    declared = {io.name: io for io in proto.input}
    for sample in proto.model_warmup:
        where = f"model '{proto.name}': warmup sample '{sample.name}'"
        if not sample.name:
            raise invalid_arg(f"model '{proto.name}': every model_warmup sample must have a name")
        if proto.max_batch_size > 0 and sample.batch_size > proto.max_batch_size:
            raise invalid_arg(
                f"{where} has batch_size {sample.batch_size}, larger than "
                f"max_batch_size {proto.max_batch_size}"
            )
        for name, value in sample.inputs.items():
            source = _warmup_source(value)
            if not source:
                raise invalid_arg(
                    f"{where}: warmup setting expects input '{name}' to have input_data_type set"
                )
            if any(d < 0 for d in value.dims):
                raise invalid_arg(
                    f"{where}: warmup setting expects all variable-size dimensions "
                    f"are specified for input '{name}'"
                )
            config_input = declared.get(name)
            if config_input is None:
                raise invalid_arg(
                    f"{where}: unexpected input '{name}', the model has no such input"
                )
            if value.data_type != config_input.data_type:
                raise invalid_arg(
                    f"{where}: input '{name}' has data_type "
                    f"{mc.DataType.Name(value.data_type)}, the model expects "
                    f"{mc.DataType.Name(config_input.data_type)}"
                )
            dims = list(value.dims)
            if len(dims) != len(config_input.dims) or any(
                c != WILDCARD_DIM and c != d for c, d in zip(config_input.dims, dims)
            ):
                raise invalid_arg(
                    f"{where}: input '{name}' has dims {dims}, the model expects "
                    f"{list(config_input.dims)}"
                )
            if source == "input_data_file":
                rel = value.input_data_file
                if not rel or os.path.isabs(rel) or ".." in Path(rel).parts:
                    raise invalid_arg(
                        f"{where}: input '{name}' input_data_file '{rel}' must be "
                        f"a file name inside the model's '{WARMUP_DATA_FOLDER}' "
                        f"directory"
                    )


def _validate_ensemble_graph(proto: mc.ModelConfig) -> None:
    """The data flow of an ensemble on its own (ValidateEnsembleSchedulingConfig): every step
    names a model and maps inputs and outputs, each ensemble tensor is written at most once, every
    output is reachable from the inputs (a cycle never is) and no tensor is left unused. Checks
    that need the composing models' configurations run when the ensemble loads
    (ensemble_scheduler.validate_ensemble)."""
    name = proto.name
    produced: dict[str, int] = {}  # ensemble tensor -> step that writes it
    consumers: dict[str, list[int]] = {}  # ensemble tensor -> steps that read it
    step_inputs: list[set[str]] = []
    for index, step in enumerate(proto.ensemble_scheduling.step):
        if not step.model_name:
            raise invalid_arg(f"must specify 'model_name' in step {index} of ensemble '{name}'")
        if not step.input_map:
            raise invalid_arg(f"must specify 'input_map' in step {index} of ensemble '{name}'")
        if not step.output_map:
            raise invalid_arg(f"must specify 'output_map' in step {index} of ensemble '{name}'")
        targets = list(step.output_map.values())
        for tensor in targets:
            if tensor in produced or targets.count(tensor) > 1:
                raise invalid_arg(
                    f"ensemble tensor '{tensor}' can appear in an output map only "
                    f"once for ensemble '{name}' step {index}"
                )
            produced[tensor] = index
        step_inputs.append(set(step.input_map.values()))
        for tensor in step.input_map.values():
            consumers.setdefault(tensor, []).append(index)

    known = set(produced) | set(consumers)
    for io in proto.input:
        if io.name not in known:
            raise invalid_arg(f"ensemble input '{io.name}' for ensemble '{name}' is not used")
    # Propagate readiness from the ensemble inputs (a step runs once all its inputs are ready).
    ready = {io.name for io in proto.input}
    done_steps: set[int] = set()
    progress = True
    while progress:
        progress = False
        for index, needed in enumerate(step_inputs):
            if index not in done_steps and needed <= ready:
                done_steps.add(index)
                ready.update(proto.ensemble_scheduling.step[index].output_map.values())
                progress = True
    outputs = set()
    for io in proto.output:
        if io.name not in known:
            raise invalid_arg(f"ensemble output '{io.name}' for ensemble '{name}' is not used")
        if io.name not in ready:
            message = f"output '{io.name}' for ensemble '{name}' is not written"
            missing = _first_unconnected(io.name, produced, step_inputs, ready)
            if missing and missing != io.name:
                message += f": at least one of its depending tensors, '{missing}', is not connected"
            raise invalid_arg(message)
        outputs.add(io.name)
    for tensor in sorted(known - outputs):
        if tensor not in ready or not consumers.get(tensor):
            raise invalid_arg(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def _first_unconnected(
    tensor: str, produced: Mapping[str, int], step_inputs: list[set[str]], ready: set[str]
) -> str:
    """Walk back from a tensor that is never written to the first input that is never ready."""
    seen: set[str] = set()
    current = tensor
    while current in produced and current not in seen:
        seen.add(current)
        pending = sorted(t for t in step_inputs[produced[current]] if t not in ready)
        if not pending:
            break
        current = pending[0]
    return current


def _validate_instance_groups(proto: mc.ModelConfig, warnings: list[str]) -> None:
    name = proto.name
    if not proto.instance_group:
        raise invalid_arg(f"must specify one or more 'instance group's for {name}")
    supported_gpus = gpu.supported_gpus()
    for group in proto.instance_group:
        where = f"instance group {group.name} of model {name}"
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL:
            if group.gpus:
                raise invalid_arg(f"{where} has kind KIND_MODEL but specifies one or more GPUs")
        elif group.kind == mc.ModelInstanceGroup.KIND_GPU:
            if not group.gpus:
                if not supported_gpus:
                    raise invalid_arg(f"{where} has kind KIND_GPU but no GPUs are available")
                raise invalid_arg(f"{where} has kind KIND_GPU but specifies no GPUs")
            for gid in group.gpus:
                if gid not in supported_gpus:
                    raise invalid_arg(
                        f"{where} specifies invalid or unsupported gpu id {gid}. GPUs available "
                        f"are: {', '.join(map(str, sorted(supported_gpus))) or 'none'}"
                    )
        elif group.kind == mc.ModelInstanceGroup.KIND_CPU:
            if group.gpus:
                raise invalid_arg(f"{where} has kind KIND_CPU but specifies one or more GPUs")
        else:
            raise TritonRosError(
                StatusCode.INTERNAL, f"{where} has unexpected kind {_kind_name(group.kind)}"
            )
        if group.profile and proto.platform != TENSORRT_PLATFORM:
            raise invalid_arg(
                f"{where} and platform {proto.platform} specifies profile field "
                f"which is only supported for TensorRT models"
            )
        for profile in group.profile:
            if not profile.isdigit():
                raise invalid_arg(
                    f"{where} specifies invalid profile {profile}. The field should "
                    f"contain the string representation of a non-negative integer."
                )
        if group.HasField("rate_limiter"):
            warnings.append(f"{where}: rate_limiter is ignored (triton_ros has no rate limiter)")
        if group.secondary_devices:
            warnings.append(f"{where}: secondary_devices are ignored")
        if group.host_policy:
            warnings.append(f"{where}: host_policy is ignored")
        if group.passive:
            warnings.append(f"{where}: passive instances are created but never scheduled")


def _collect_ignored_fields(proto: mc.ModelConfig, warnings: list[str]) -> None:
    name = proto.name
    opt = proto.optimization
    if opt.HasField("cuda"):
        warnings.append(f"model '{name}': optimization.cuda is ignored")
    if opt.priority:
        warnings.append(f"model '{name}': optimization.priority is ignored")
    if opt.gather_kernel_buffer_threshold:
        warnings.append(f"model '{name}': optimization.gather_kernel_buffer_threshold is ignored")
    if opt.eager_batching:
        warnings.append(f"model '{name}': optimization.eager_batching is ignored")
    for accel in opt.execution_accelerators.cpu_execution_accelerator:
        warnings.append(
            f"model '{name}': CPU execution accelerator '{accel.name}' is not "
            f"available in triton_ros and is ignored"
        )
    if proto.model_repository_agents.agents:
        warnings.append(f"model '{name}': model_repository_agents are ignored")
    if proto.cc_model_filenames:
        warnings.append(f"model '{name}': cc_model_filenames are ignored")
    if proto.HasField("model_metrics") or proto.metric_tags:
        warnings.append(f"model '{name}': model_metrics/metric_tags are ignored")
    if proto.HasField("model_operations"):
        warnings.append(f"model '{name}': model_operations are ignored")


# --------------------------------------------------------------------------------------------
# Typed conversion
# --------------------------------------------------------------------------------------------


def _tensor(io, is_input: bool) -> TensorConfig:
    return TensorConfig(
        name=io.name,
        datatype=config_to_protocol(mc.DataType.Name(io.data_type)),
        dims=tuple(int(d) for d in io.dims),
        reshape=tuple(int(d) for d in io.reshape.shape) if io.HasField("reshape") else None,
        optional=bool(io.optional) if is_input else False,
        format=mc.ModelInput.Format.Name(io.format) if is_input else "FORMAT_NONE",
        label_filename=io.label_filename if not is_input else "",
    )


def _queue_policy(p: mc.ModelQueuePolicy) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=mc.ModelQueuePolicy.TimeoutAction.Name(p.timeout_action),
        default_timeout_us=int(p.default_timeout_microseconds),
        allow_timeout_override=bool(p.allow_timeout_override),
        max_queue_size=int(p.max_queue_size),
    )


def to_typed(proto: mc.ModelConfig, warnings: Iterable[str] = ()) -> ModelConfig:
    db = None
    if proto.HasField("dynamic_batching"):
        d = proto.dynamic_batching
        db = DynamicBatchingConfig(
            preferred_batch_sizes=tuple(sorted(set(int(s) for s in d.preferred_batch_size))),
            max_queue_delay_us=int(d.max_queue_delay_microseconds),
            preserve_ordering=bool(d.preserve_ordering),
            priority_levels=int(d.priority_levels),
            default_priority_level=int(d.default_priority_level),
            default_queue_policy=_queue_policy(d.default_queue_policy),
            priority_queue_policy={
                int(k): _queue_policy(v) for k, v in d.priority_queue_policy.items()
            },
        )
    vp = proto.version_policy
    which = vp.WhichOneof("policy_choice")
    if which == "all":
        version_policy = VersionPolicy(kind="all")
    elif which == "specific":
        version_policy = VersionPolicy(
            kind="specific", versions=tuple(int(v) for v in vp.specific.versions)
        )
    else:
        version_policy = VersionPolicy(kind="latest", num_versions=int(vp.latest.num_versions))
    groups = tuple(
        InstanceGroupConfig(
            name=g.name,
            kind=_kind_name(g.kind),
            count=int(g.count),
            gpus=tuple(int(x) for x in g.gpus),
            profiles=tuple(g.profile),
            passive=bool(g.passive),
        )
        for g in proto.instance_group
    )
    steps = tuple(
        EnsembleStep(
            model_name=s.model_name,
            model_version=int(s.model_version),
            input_map=dict(s.input_map),
            output_map=dict(s.output_map),
        )
        for s in proto.ensemble_scheduling.step
    )
    accels = proto.optimization.execution_accelerators
    optimization = OptimizationConfig(
        graph_level=int(proto.optimization.graph.level),
        gpu_execution_accelerators=tuple(
            ExecutionAccelerator(a.name, dict(a.parameters))
            for a in accels.gpu_execution_accelerator
        ),
        cpu_execution_accelerators=tuple(
            ExecutionAccelerator(a.name, dict(a.parameters))
            for a in accels.cpu_execution_accelerator
        ),
    )
    warmup = tuple(
        WarmupSample(
            name=w.name,
            batch_size=int(w.batch_size),
            count=max(1, int(w.count)),
            inputs=tuple(
                WarmupInput(
                    name=n,
                    datatype=config_to_protocol(mc.DataType.Name(v.data_type)),
                    dims=tuple(int(d) for d in v.dims),
                    source=_warmup_source(v),
                    input_data_file=v.input_data_file,
                )
                for n, v in sorted(w.inputs.items())
            ),
        )
        for w in proto.model_warmup
    )
    return ModelConfig(
        name=proto.name,
        platform=proto.platform,
        backend=proto.backend,
        max_batch_size=int(proto.max_batch_size),
        inputs=tuple(_tensor(io, True) for io in proto.input),
        outputs=tuple(_tensor(io, False) for io in proto.output),
        version_policy=version_policy,
        dynamic_batching=db,
        instance_groups=groups,
        ensemble_steps=steps,
        default_model_filename=proto.default_model_filename,
        parameters={k: v.string_value for k, v in proto.parameters.items()},
        optimization=optimization,
        response_cache=bool(proto.response_cache.enable),
        proto=proto,
        warnings=tuple(warnings),
        warmup=warmup,
        sequence_batching=_sequence_batching(proto),
        decoupled=bool(proto.model_transaction_policy.decoupled),
    )


# --------------------------------------------------------------------------------------------
# The whole flow
# --------------------------------------------------------------------------------------------

AutoCompleteFn = Callable[[mc.ModelConfig, Path], list[str]]


def load_model_config(
    model_name: str,
    model_path: Path,
    *,
    strict: bool = False,
    override: mc.ModelConfig | None = None,
    backend_auto_complete: Callable[[str], AutoCompleteFn | None] | None = None,
    backend_can_use_gpu: Callable[[str], bool] | None = None,
) -> ModelConfig:
    """Read, complete, normalize and validate the configuration of the model at model_path.

    ``override`` replaces config.pbtxt (the load API's ``config`` parameter).
    ``backend_auto_complete(backend)`` returns the backend's auto-complete function, if any; it
    runs unless ``strict`` (tritonserver ``--strict-model-config=true``).
    ``backend_can_use_gpu(backend)`` decides where KIND_AUTO instances go (default: a GPU if any).
    """
    config_file = model_path / CONFIG_FILENAME
    if override is not None:
        proto = mc.ModelConfig()
        proto.CopyFrom(override)
    elif config_file.is_file():
        try:
            text = config_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise invalid_arg(
                f"failed to read {config_file} of model '{model_name}': {exc}"
            ) from None
        proto = parse_config_text(text, model_name=model_name, source=str(config_file))
    elif strict:
        raise invalid_arg(
            f"model '{model_name}': {CONFIG_FILENAME} is required when "
            f"--strict-model-config=true (no {config_file})"
        )
    else:
        proto = mc.ModelConfig()

    if proto.name and proto.name != model_name:
        raise invalid_arg(
            f"unexpected directory name '{model_name}' for model '{proto.name}', "
            f"directory name must equal model name"
        )

    auto_complete_backend_fields(proto, model_name, model_path)
    warnings: list[str] = []
    if not strict and backend_auto_complete is not None and proto.backend:
        complete = backend_auto_complete(proto.backend)
        if complete is not None:
            warnings.extend(complete(proto, model_path) or [])
    auto_gpu = backend_can_use_gpu(proto.backend) if backend_can_use_gpu and proto.backend else True
    normalize(proto, auto_gpu=auto_gpu)
    warnings.extend(validate(proto))
    return to_typed(proto, warnings)
