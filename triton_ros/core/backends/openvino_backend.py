"""OpenVINO backend (Triton's openvino_backend, ``backend: "openvino"``): IR and ONNX models.

A model version holds ``model.xml`` with its ``model.bin`` (OpenVINO's IR), or, with
``default_model_filename: "model.onnx"``, an ONNX model that OpenVINO reads itself. The model is
read once per version, its inputs and outputs checked against the configuration, its tensors' data
types set to the configured ones (OpenVINO's pre/post-processing converts, as Triton's backend
does: an FP16 model serves FP32 clients), then compiled once for the target device; each instance
owns one infer request of the compiled model, so that ``NUM_STREAMS`` streams serve that many
instances at once. Only ``KIND_CPU`` instances (``KIND_AUTO`` resolves to them), as in Triton.

Batching: with ``max_batch_size`` > 0 the first dimension of every input and output is the batch.
A model whose batch dimension is dynamic runs any batch the dynamic batcher forms; one exported
with a fixed batch is reshaped to a dynamic batch at load (beyond Triton, whose backend compiles a
fixed batch of ``max_batch_size`` and refuses smaller batches unless ``ENABLE_BATCH_PADDING``).
``SKIP_OV_DYNAMIC_BATCHSIZE`` ``YES`` keeps Triton's behaviour for models that cannot be
reshaped: the batch is fixed at ``max_batch_size`` and a smaller batch is refused, or padded
with zero rows under ``ENABLE_BATCH_PADDING`` ``YES``.

Parameters (Triton's names and values): ``PERFORMANCE_HINT`` (``LATENCY``, ``THROUGHPUT``,
``CUMULATIVE_THROUGHPUT``), ``NUM_STREAMS`` (``AUTO``, ``NUMA`` or a number),
``INFERENCE_NUM_THREADS``, ``COMPILATION_NUM_THREADS``, ``HINT_BF16`` (``YES``),
``CPU_EXTENSION_PATH``, ``SKIP_OV_DYNAMIC_BATCHSIZE``, ``ENABLE_BATCH_PADDING``,
``RESHAPE_IO_LAYERS`` (inputs reshaped to the configured dims, ``-1`` dynamic) and
``TARGET_DEVICE`` (``CPU`` by default; another device must be one OpenVINO lists). A bad value
fails the load with INVALID_ARG; any other parameter is named in a warning. On the CPU a model
computes in FP32 unless ``HINT_BF16`` is ``YES`` (beyond Triton, whose backend leaves OpenVINO's
default: bf16 on CPUs with AVX512-BF16 or AMX, this machine's included, which moved the bundled
detector's boxes by up to 0.16 pixel against ONNX Runtime and FP32 OpenVINO).

Auto-complete fills missing inputs and outputs (names, data types, dims) and ``max_batch_size``
from the model: batching is taken as supported when every input and output has a batch (``N``)
layout, or, where the model gives no layouts (ONNX, most IRs), when every first dimension is
dynamic (the rule of the ONNX Runtime backend here; Triton's OpenVINO backend needs the layouts),
then ``max_batch_size`` is 4 and the dynamic batcher is turned on.

openvino is imported only when an OpenVINO model loads: without it that model fails with
UNAVAILABLE naming the package, and every other model serves.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping

import numpy as np

from ..backend_model import (
    BackendModel,
    BackendModelInstance,
    BatchedTensorInstance,
    auto_complete_source,
    autofill_batching,
    autofill_tensors,
    warn_unread_parameters,
)
from ..errors import internal, invalid_arg, unavailable
from .backend_parameters import framework_message
from ..model_config import (
    OPENVINO_FILENAME,
    WILDCARD_DIM,
    ModelConfig,
    TensorConfig,
    expected_inputs,
)

_log = logging.getLogger("triton_ros.openvino")

INSTALL_HINT = "pip install openvino (requirements.txt pins the release tested here)"

# OpenVINO element type name -> protocol data type
_OV_TYPES = {
    "boolean": "BOOL",
    "u8": "UINT8",
    "u16": "UINT16",
    "u32": "UINT32",
    "u64": "UINT64",
    "i8": "INT8",
    "i16": "INT16",
    "i32": "INT32",
    "i64": "INT64",
    "f16": "FP16",
    "f32": "FP32",
    "f64": "FP64",
    "bf16": "BF16",
}
_PROTOCOL_TO_OV = {v: k for k, v in _OV_TYPES.items()}

_DEVICE_PARAMETERS = (
    "PERFORMANCE_HINT",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "COMPILATION_NUM_THREADS",
    "HINT_BF16",
)
_READ_PARAMETERS = frozenset(
    _DEVICE_PARAMETERS
    + (
        "CPU_EXTENSION_PATH",
        "SKIP_OV_DYNAMIC_BATCHSIZE",
        "ENABLE_BATCH_PADDING",
        "RESHAPE_IO_LAYERS",
        "TARGET_DEVICE",
    )
)


def import_openvino(model: str):
    try:
        import openvino
    except ImportError as exc:
        raise unavailable(
            f"model '{model}' needs OpenVINO, which is not installed here ({exc}): {INSTALL_HINT}"
        ) from None
    return openvino


def _yes(config: ModelConfig, key: str) -> bool:
    """Triton's YES-valued switches (any case); true/1/on and no/false/0/off are read too, and
    anything else is refused rather than read as no."""
    value = config.parameters.get(key)
    if value is None or value.strip() == "":
        return False
    lowered = value.strip().lower()
    if lowered in ("yes", "true", "1", "on"):
        return True
    if lowered in ("no", "false", "0", "off"):
        return False
    raise invalid_arg(f"model '{config.name}': parameter '{key}' must be YES or NO, got '{value}'")


def device_properties(config: ModelConfig) -> dict[str, object]:
    """The compile properties the model's parameters ask for (Triton's ParseParameterHelper)."""
    props: dict[str, object] = {}
    for key in _DEVICE_PARAMETERS:
        raw = config.parameters.get(key)
        if raw is None or raw.strip() == "":
            continue
        value = raw.strip().lower()
        if key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
            if not value.isdigit():
                raise invalid_arg(
                    f"expected the parameter '{key}' to be a non-negative number, got {value}"
                )
            props[key] = int(value)
        elif key == "HINT_BF16":
            if value != "yes":
                raise invalid_arg(f"expected the parameter '{key}' to be YES, got {value}")
            props["INFERENCE_PRECISION_HINT"] = "bf16"
        elif key == "NUM_STREAMS":
            if value in ("auto", "numa"):
                import openvino.properties as ov_props

                props[key] = (
                    ov_props.streams.Num.AUTO if value == "auto" else ov_props.streams.Num.NUMA
                )
            elif value.isdigit():
                props[key] = value
            else:
                raise invalid_arg(
                    f"expected the parameter '{key}' to be either "
                    f"AUTO/NUMA/<int_value>, got {value}"
                )
        elif key == "PERFORMANCE_HINT":
            if value not in ("latency", "throughput", "cumulative_throughput"):
                raise invalid_arg(
                    f"expected the parameter '{key}' to be "
                    f"LATENCY/THROUGHPUT/CUMULATIVE_THROUGHPUT, got {value}"
                )
            props[key] = value.upper()
    return props


def _datatype(port) -> str:
    name = port.get_element_type().get_type_name()
    return _OV_TYPES.get(name, name.upper())


def _dims(partial_shape) -> list[int]:
    return [d.get_length() if d.is_static else WILDCARD_DIM for d in partial_shape]


def _port(ports, name: str):
    for port in ports:
        if name in port.get_names():
            return port
    return None


def _model_file(version_path: Path, filename: str) -> Path:
    return version_path / (filename or OPENVINO_FILENAME)


def _read(ov, core, path: Path, model: str):
    try:
        return core.read_model(str(path))
    except Exception as exc:
        raise invalid_arg(
            f"unable to load model '{model}': OpenVINO cannot read {path}: {framework_message(exc)}"
        ) from None


def _supports_batching(ov, model) -> bool:
    ports = list(model.inputs) + list(model.outputs)
    layouts = [ov.layout_helpers.get_layout(p) for p in ports]
    if all(not layout.empty for layout in layouts):
        return all(ov.layout_helpers.has_batch(layout) for layout in layouts)
    return all(
        p.get_partial_shape().rank.is_static
        and len(p.get_partial_shape()) > 0
        and p.get_partial_shape()[0].is_dynamic
        for p in ports
    )


class OpenVINOModel(BackendModel):
    """Model-level state: the read, checked and compiled model, shared by the instances."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        self.model_file = _model_file(version_path, config.default_model_filename)
        if not self.model_file.is_file():
            raise unavailable(f"unable to find '{self.model_file}' for model '{config.name}'")
        warn_unread_parameters(config, _READ_PARAMETERS, "openvino", _log)
        for tensor in (*config.inputs, *config.outputs):
            if tensor.datatype not in _PROTOCOL_TO_OV:
                raise invalid_arg(
                    f"unsupported datatype TYPE_{tensor.datatype} for "
                    f"'{tensor.name}' of model '{config.name}'"
                )
        self.properties = device_properties(config)
        self.skip_dynamic_batch = _yes(config, "SKIP_OV_DYNAMIC_BATCHSIZE")
        self.batch_padding = _yes(config, "ENABLE_BATCH_PADDING")
        self.reshape_io = _yes(config, "RESHAPE_IO_LAYERS")
        self.device = (config.parameters.get("TARGET_DEVICE") or "CPU").strip().upper() or "CPU"
        ov = self.ov = import_openvino(config.name)
        self.core = ov.Core()
        extension = (config.parameters.get("CPU_EXTENSION_PATH") or "").strip()
        if extension:
            try:
                self.core.add_extension(extension)
            except Exception as exc:
                raise invalid_arg(
                    f"model '{config.name}': loading CPU_EXTENSION_PATH "
                    f"'{extension}' failed: {framework_message(exc)}"
                ) from None
        self._check_device()
        if "INFERENCE_PRECISION_HINT" not in self.properties and self.device == "CPU":
            # OpenVINO's CPU plugin computes in bf16 by default on CPUs with AVX512-BF16 or AMX,
            # which moves boxes visibly: here FP32 models compute in FP32 unless HINT_BF16 asks
            # for bf16.
            self.properties["INFERENCE_PRECISION_HINT"] = "f32"
        model = _read(ov, self.core, self.model_file, config.name)
        # a fixed batch the requests must fill (SKIP_OV_DYNAMIC_BATCHSIZE), else None
        self.fixed_batch: int | None = None
        model = self._shape(model)
        model = self._set_types(model)
        try:
            self.compiled = self.core.compile_model(model, self.device, self.properties)
        except Exception as exc:
            raise invalid_arg(
                f"unable to load model '{config.name}': OpenVINO failed to compile "
                f"it for {self.device} with {self._shown_properties()}: "
                f"{framework_message(exc)}"
            ) from None
        _log.info(
            "model '%s' compiled for %s: %s streams, hint %s",
            config.name,
            self.device,
            self._property("NUM_STREAMS"),
            self._property("PERFORMANCE_HINT"),
        )

    def _shown_properties(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.properties.items()) or "no properties"

    def _property(self, key: str):
        try:
            return self.compiled.get_property(key)
        except Exception:
            return "?"

    def _check_device(self) -> None:
        available = list(self.core.available_devices)
        base = self.device.split(":", 1)[0].split(".", 1)[0]
        if (
            base in ("AUTO", "MULTI", "HETERO", "BATCH")
            or self.device in available
            or base in available
        ):
            return
        raise unavailable(
            f"model '{self.config.name}': TARGET_DEVICE '{self.device}' is not "
            f"available to OpenVINO here (available: {', '.join(available)})"
        )

    def _shape(self, model):
        """Check the inputs and outputs against the configuration; give batching models a
        dynamic (or, with SKIP_OV_DYNAMIC_BATCHSIZE, a max_batch_size) batch dimension."""
        config = self.config
        batching = config.max_batch_size > 0
        if len(model.inputs) != expected_inputs(config):
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects "
                f"{expected_inputs(config)} inputs, model provides "
                f"{len(model.inputs)}"
            )
        new_shapes = {}
        for tensor in config.inputs:
            port = self._find(model.inputs, tensor, "input")
            shape = port.get_partial_shape()
            if shape.rank.is_dynamic:
                raise invalid_arg(
                    f"unable to load model '{config.name}': input "
                    f"'{tensor.name}' has a dynamic rank"
                )
            wanted = list(tensor.reshape if tensor.reshape is not None else tensor.dims)
            dims = _dims(shape)
            if self.reshape_io:
                dims = ([dims[0]] if batching and dims else []) + wanted
            else:
                self._compare(tensor, dims, wanted, "input")
            if batching:
                dims[0] = config.max_batch_size if self.skip_dynamic_batch else WILDCARD_DIM
            if dims != _dims(shape):
                new_shapes[port.get_any_name()] = self.ov.PartialShape(
                    [
                        self.ov.Dimension() if d == WILDCARD_DIM else self.ov.Dimension(d)
                        for d in dims
                    ]
                )
        if new_shapes:
            try:
                model.reshape(new_shapes)
            except Exception as exc:
                hint = (
                    "; set SKIP_OV_DYNAMIC_BATCHSIZE to YES to keep a fixed batch of max_batch_size"
                    if batching and not self.skip_dynamic_batch
                    else ""
                )
                raise invalid_arg(
                    f"unable to load model '{config.name}': OpenVINO cannot reshape "
                    f"its inputs to { ({k: str(v) for k, v in new_shapes.items()}) }: "
                    f"{framework_message(exc)}{hint}"
                ) from None
        if batching and self.skip_dynamic_batch:
            self.fixed_batch = config.max_batch_size
        for tensor in config.outputs:
            port = self._find(model.outputs, tensor, "output")
            wanted = list(tensor.reshape if tensor.reshape is not None else tensor.dims)
            self._compare(tensor, _dims(port.get_partial_shape()), wanted, "output")
        return model

    def _find(self, ports, tensor: TensorConfig, what: str):
        port = _port(ports, tensor.name)
        if port is None:
            names = sorted(n for p in ports for n in p.get_names())
            raise invalid_arg(
                f"unexpected inference {what} '{tensor.name}', allowed {what}s "
                f"are: {', '.join(names)}"
            )
        return port

    def _compare(
        self, tensor: TensorConfig, model_dims: list[int], wanted: list[int], what: str
    ) -> None:
        config = self.config
        dims = model_dims
        if config.max_batch_size > 0:
            if not dims:
                raise invalid_arg(
                    f"unable to load model '{config.name}', model {what} "
                    f"'{tensor.name}' has no batch dimension (max_batch_size "
                    f"{config.max_batch_size})"
                )
            dims = dims[1:]
        if len(dims) != len(wanted) or any(
            m != WILDCARD_DIM and w != WILDCARD_DIM and m != w for m, w in zip(dims, wanted)
        ):
            raise invalid_arg(
                f"unable to load model '{config.name}', model {what} "
                f"'{tensor.name}' dims {dims} don't match configuration dims "
                f"{wanted}"
            )

    def _set_types(self, model):
        """The configured data types at the model's edges (converted inside the model)."""
        ov = self.ov
        ppp = ov.preprocess.PrePostProcessor(model)
        for tensor in self.config.inputs:
            ppp.input(tensor.name).tensor().set_element_type(
                getattr(ov.Type, _PROTOCOL_TO_OV[tensor.datatype])
            )
        for tensor in self.config.outputs:
            ppp.output(tensor.name).tensor().set_element_type(
                getattr(ov.Type, _PROTOCOL_TO_OV[tensor.datatype])
            )
        try:
            return ppp.build()
        except Exception as exc:
            raise invalid_arg(
                f"unable to load model '{self.config.name}': setting the "
                f"configured data types failed: {framework_message(exc)}"
            ) from None

    @classmethod
    def can_use_gpu(cls) -> bool:
        return False  # Triton's OpenVINO backend runs KIND_CPU instances only

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """Inputs, outputs and max_batch_size from the IR or ONNX model (AutoCompleteConfig)."""
        path = auto_complete_source(proto, model_path, _model_file)
        if path is None:
            return []
        ov = import_openvino(proto.name)
        model = _read(ov, ov.Core(), path, proto.name)
        can_batch = _supports_batching(ov, model)
        warnings = autofill_batching(proto, can_batch)
        if not can_batch and proto.max_batch_size != 0:
            warnings.append(
                f"model layout for model {proto.name} does not support batching "
                f"while non-zero max_batch_size is specified"
            )
        for field, ports, what in (
            (proto.input, model.inputs, "input"),
            (proto.output, model.outputs, "output"),
        ):
            if len(field) > 0:
                continue
            for port in ports:
                if port.get_partial_shape().rank.is_dynamic:
                    raise invalid_arg(
                        f"unable to auto-complete model '{proto.name}': {what} "
                        f"'{port.get_any_name()}' has a dynamic rank; list it in "
                        f"config.pbtxt"
                    )
            autofill_tensors(
                proto,
                field,
                [(p.get_any_name(), _datatype(p), _dims(p.get_partial_shape())) for p in ports],
            )
        return warnings

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        if kind != "KIND_CPU":
            raise invalid_arg(
                f"unable to load model '{self.config.name}', Triton OpenVINO "
                f"backend supports only Kind CPU and AUTO"
            )
        return OpenVINOInstance(self, name=name, kind=kind, device_id=device_id)

    def close(self) -> None:
        self.compiled = None


class OpenVINOInstance(BatchedTensorInstance):
    """One infer request of the model's compiled model."""

    def __init__(
        self, model: OpenVINOModel, *, name: str, kind: str, device_id: int | None
    ) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self.request = model.compiled.create_infer_request()
        self.may_run_on_caller = True

    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        model: OpenVINOModel = self.model
        rows = None
        if model.fixed_batch is not None:
            rows = next(iter(inputs.values())).shape[0]
            if rows != model.fixed_batch:
                if not model.batch_padding:
                    raise internal(
                        f"expected requests with batch size '{model.fixed_batch}', got '{rows}'"
                        f"... this error can be avoided by setting 'ENABLE_BATCH_PADDING' "
                        f"parameter in model configuration to 'YES' at a performance cost."
                    )
                inputs = {k: _padded(v, model.fixed_batch) for k, v in inputs.items()}
        feed = {name: np.ascontiguousarray(array) for name, array in inputs.items()}
        try:
            result = self.request.infer(feed, share_inputs=True, share_outputs=False)
            out = {name: result[name] for name in output_names}
        except Exception as exc:
            raise internal(
                f"OpenVINO execute failure for model '{model.config.name}': "
                f"{framework_message(exc)}"
            ) from None
        if rows is not None and rows != model.fixed_batch:
            out = {k: v[:rows] for k, v in out.items()}
        return out

    def close(self) -> None:
        self.request = None


def _padded(array: np.ndarray, rows: int) -> np.ndarray:
    padded = np.zeros((rows,) + array.shape[1:], array.dtype)
    padded[: array.shape[0]] = array
    return padded
