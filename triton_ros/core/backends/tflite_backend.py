"""LiteRT (TensorFlow Lite) backend: ``backend: "armnn_tflite"`` (the name of Triton's community
TFLite backend) or ``backend: "tflite"``; ``<version>/model.tflite``, a LiteRT flat buffer.

Each instance owns a LiteRT ``Interpreter`` (from ``ai-edge-litert``, else ``tflite-runtime``)
with ``tflite_num_threads`` threads (the community backend's parameter; absent: LiteRT's own
default). LiteRT applies its XNNPACK delegate itself; ``optimization { execution_accelerators {
cpu_execution_accelerator [ { name: "xnnpack" } ] } }`` is accepted (its ``num_threads`` sets
the threads), ``armnn`` is refused (no ArmNN delegate here).

Names: where the flat buffer has signatures (every model the LiteRT converter writes from a
SavedModel or Keras model), the signature ``tflite_signature_key`` (default: the first, as
LiteRT's ``get_signature_runner()``) is run and a configured input or output may be named by
its signature key (``image``) or by its tensor's name (``serving_default_image:0``, the name
the community backend uses). A flat buffer without signatures runs its main subgraph, by tensor
names.

Quantized tensors: a configured data type equal to the model's (``TYPE_INT8`` for an int8
input) passes the values as they are. A ``TYPE_FP32`` configuration for an int8, uint8 or int16
model tensor that carries one scale and zero point converts them as LiteRT defines
quantization, ``real = scale * (q - zero_point)``: inputs are quantized
(``q = round(x / scale) + zero_point``, clamped to the type's range) and outputs dequantized.

Batching (``max_batch_size`` > 0): the first dimension of every input and output is the batch.
A model whose batch dimension is dynamic (``shape_signature`` -1, as the converter writes a
Keras model's) runs a batch as **one invocation, its inputs resized** to the batch's rows; a
model whose batch dimension is fixed at 1 runs a batch of N **as N invocations** of one row
each (**looping**: resizing a dimension the model fixed may change what its reshapes compute).
The load logs which, per model. Another fixed batch dimension is refused when batching.

Auto-complete fills the inputs and outputs (signature keys, the model's data types and dims)
and ``max_batch_size`` (the default 4, with the dynamic batcher, when every input and output has
a dynamic first dimension) from the flat buffer's signature.

The interpreter is imported only when a LiteRT model loads: without ``ai-edge-litert`` that
model fails with UNAVAILABLE naming the package, and every other model serves.
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
    check_tensor,
    warn_unread_parameters,
)
from ..datatypes import from_numpy_dtype
from ..errors import internal, invalid_arg, unavailable
from ..model_config import TFLITE_FILENAME, WILDCARD_DIM, ModelConfig, TensorConfig, expected_inputs
from .backend_parameters import framework_message, parameter_int

_log = logging.getLogger("triton_ros.tflite")

INSTALL_HINT = (
    "pip install 'triton_ros[frameworks]' (ai-edge-litert; "
    "requirements-frameworks.txt pins the release tested here)"
)
_READ_PARAMETERS = frozenset({"tflite_num_threads", "tflite_signature_key"})
_QUANTIZED = {"INT8", "UINT8", "INT16"}


def import_interpreter(model: str):
    """LiteRT's Interpreter class (ai-edge-litert, else tflite-runtime), or UNAVAILABLE."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as exc:
        try:
            from tflite_runtime.interpreter import Interpreter
        except ImportError:
            raise unavailable(
                f"model '{model}' needs LiteRT, which is not installed here ({exc}): {INSTALL_HINT}"
            ) from None
    return Interpreter


def _model_file(version_path: Path, filename: str) -> Path:
    return version_path / (filename or TFLITE_FILENAME)


class _Tensor:
    """One model input or output: its names, data type, dims and quantization."""

    def __init__(self, key: str | None, details: dict) -> None:
        self.key = key  # signature key, None without signatures
        self.name = details["name"]  # the tensor's name
        self.index = int(details["index"])
        self.datatype = from_numpy_dtype(np.dtype(details["dtype"]))
        signature = details.get("shape_signature")
        shape = signature if signature is not None and len(signature) else details["shape"]
        self.dims = [int(d) if d >= 0 else WILDCARD_DIM for d in shape]
        params = details.get("quantization_parameters") or {}
        scales = np.asarray(params.get("scales", []))
        zeros = np.asarray(params.get("zero_points", []))
        self.scale = float(scales[0]) if scales.size == 1 else None
        self.zero_point = int(zeros[0]) if zeros.size == 1 else 0

    @property
    def label(self) -> str:
        return self.key if self.key is not None else self.name


def _tensors(interpreter, signature_key: str | None) -> tuple[list[_Tensor], list[_Tensor]]:
    if signature_key is None:
        return (
            [_Tensor(None, d) for d in interpreter.get_input_details()],
            [_Tensor(None, d) for d in interpreter.get_output_details()],
        )
    runner = interpreter.get_signature_runner(signature_key)
    return (
        [_Tensor(k, d) for k, d in runner.get_input_details().items()],
        [_Tensor(k, d) for k, d in runner.get_output_details().items()],
    )


def _signature(interpreter, wanted: str, model: str) -> str | None:
    """The signature to run: ``wanted``, else the first; None when the model has none."""
    signatures = list(interpreter.get_signature_list())
    if not signatures:
        if wanted:
            raise invalid_arg(
                f"model '{model}': tflite_signature_key '{wanted}' given but the "
                f"flat buffer has no signatures"
            )
        return None
    if wanted:
        if wanted not in signatures:
            raise invalid_arg(
                f"model '{model}': the flat buffer has no signature '{wanted}' "
                f"(it has {', '.join(signatures)})"
            )
        return wanted
    return signatures[0]


def _open(Interpreter, content: bytes, threads: int | None, model: str):
    try:
        return Interpreter(model_content=content, num_threads=threads)
    except Exception as exc:
        raise invalid_arg(
            f"unable to load model '{model}': LiteRT cannot read it: {framework_message(exc)}"
        ) from None


class TFLiteModel(BackendModel):
    """Model-level state: the flat buffer's bytes, the signature, the checked tensors."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        self.model_file = _model_file(version_path, config.default_model_filename)
        if not self.model_file.is_file():
            raise unavailable(f"unable to find '{self.model_file}' for model '{config.name}'")
        warn_unread_parameters(config, _READ_PARAMETERS, "LiteRT", _log)
        self.threads = self._threads()
        self.Interpreter = import_interpreter(config.name)
        self.content = self.model_file.read_bytes()
        probe = _open(self.Interpreter, self.content, 1, config.name)
        self.signature_key = _signature(
            probe, (config.parameters.get("tflite_signature_key") or "").strip(), config.name
        )
        inputs, outputs = _tensors(probe, self.signature_key)
        # config name -> model tensor, and the conversions each needs
        self.inputs = self._match(config.inputs, inputs, "input")
        self.outputs = self._match(config.outputs, outputs, "output")
        if expected_inputs(config) != len(inputs) and not any(t.optional for t in config.inputs):
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects "
                f"{expected_inputs(config)} inputs, model provides {len(inputs)}"
            )
        self.loop = False
        if config.max_batch_size > 0:
            batch = {t.dims[0] for t in inputs if t.dims}
            self.loop = batch == {1}
            _log.info(
                "model '%s': %s",
                config.name,
                "batch dimension fixed at 1 in the model: a batch of N rows runs as N "
                "invocations (looping)"
                if self.loop
                else "dynamic batch dimension: a batch runs as one invocation with its inputs "
                "resized to the batch's rows",
            )

    def _threads(self) -> int | None:
        config = self.config
        threads = parameter_int(config, "tflite_num_threads", 0) or None
        for accel in config.optimization.cpu_execution_accelerators:
            if accel.name != "xnnpack":
                raise invalid_arg(
                    f"model '{config.name}': execution accelerator '{accel.name}' "
                    f"is not available (LiteRT applies XNNPACK itself; no ArmNN "
                    f"delegate here)"
                )
            if "num_threads" in accel.parameters:
                try:
                    threads = int(accel.parameters["num_threads"]) or None
                except ValueError:
                    raise invalid_arg(
                        f"model '{config.name}': xnnpack num_threads must be an "
                        f"integer, got '{accel.parameters['num_threads']}'"
                    ) from None
        if config.optimization.gpu_execution_accelerators:
            raise invalid_arg(
                f"model '{config.name}': no GPU execution accelerator for LiteRT here"
            )
        if threads is not None and threads < 0:
            raise invalid_arg(
                f"model '{config.name}': tflite_num_threads must be positive, got {threads}"
            )
        return threads

    def _match(
        self, tensors: tuple[TensorConfig, ...], model_tensors: list[_Tensor], what: str
    ) -> dict[str, tuple[_Tensor, bool]]:
        """Configured name -> (model tensor, whether values are (de)quantized)."""
        by_name = {t.key: t for t in model_tensors if t.key is not None}
        by_name.update({t.name: t for t in model_tensors})
        matched = {}
        batching = self.config.max_batch_size > 0
        for tensor in tensors:
            found = by_name.get(tensor.name)
            if found is None:
                raise invalid_arg(
                    f"unexpected inference {what} '{tensor.name}', allowed {what}s "
                    f"are: {', '.join(sorted(by_name))}"
                )
            convert = (
                tensor.datatype == "FP32"
                and found.datatype in _QUANTIZED
                and found.scale is not None
                and found.scale > 0
            )
            dims = list(found.dims)
            if batching and dims and dims[0] == 1:
                dims[0] = WILDCARD_DIM  # a batch of 1 fixed in the model: served by looping
            check_tensor(
                self.config, tensor, ("FP32" if convert else found.datatype, dims), what, batching
            )
            matched[tensor.name] = (found, convert)
        return matched

    @classmethod
    def can_use_gpu(cls) -> bool:
        return False

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """Inputs, outputs and max_batch_size from the flat buffer's signature."""
        path = auto_complete_source(proto, model_path, _model_file)
        if path is None:
            return []
        interpreter = _open(import_interpreter(proto.name), path.read_bytes(), 1, proto.name)
        params = {k: v.string_value for k, v in proto.parameters.items()}
        key = _signature(interpreter, params.get("tflite_signature_key", "").strip(), proto.name)
        inputs, outputs = _tensors(interpreter, key)
        can_batch = all(t.dims and t.dims[0] == WILDCARD_DIM for t in inputs + outputs)
        warnings = autofill_batching(proto, can_batch)
        for field, tensors in ((proto.input, inputs), (proto.output, outputs)):
            if len(field) == 0:
                autofill_tensors(proto, field, [(t.label, t.datatype, t.dims) for t in tensors])
        return warnings

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        if kind != "KIND_CPU":
            raise invalid_arg(
                f"unable to load model '{self.config.name}': the LiteRT backend "
                f"runs KIND_CPU instances only"
            )
        return TFLiteInstance(self, name=name, kind=kind, device_id=device_id)


def _quantize(array: np.ndarray, tensor: _Tensor) -> np.ndarray:
    info = np.iinfo(np.dtype(tensor.datatype.lower()))
    q = np.round(np.asarray(array, np.float32) / np.float32(tensor.scale)) + tensor.zero_point
    return np.clip(q, info.min, info.max).astype(info.dtype)


def _dequantize(array: np.ndarray, tensor: _Tensor) -> np.ndarray:
    return (
        np.float32(tensor.scale) * (array.astype(np.float32) - np.float32(tensor.zero_point))
    ).astype(np.float32)


class TFLiteInstance(BatchedTensorInstance):
    """One LiteRT interpreter."""

    def __init__(self, model: TFLiteModel, *, name: str, kind: str, device_id: int | None) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self.interpreter = _open(model.Interpreter, model.content, model.threads, model.config.name)
        self.runner = None
        if model.signature_key is not None:
            self.runner = self.interpreter.get_signature_runner(model.signature_key)
        else:
            self.interpreter.allocate_tensors()
        self.may_run_on_caller = True

    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        model: TFLiteModel = self.model
        feed = {}
        for name, array in inputs.items():
            tensor, convert = model.inputs[name]
            feed[tensor] = _quantize(array, tensor) if convert else np.ascontiguousarray(array)
        try:
            if model.loop:
                rows = next(iter(feed.values())).shape[0]
                parts = [
                    self._invoke({t: a[i : i + 1] for t, a in feed.items()}) for i in range(rows)
                ]
                raw = {t: np.concatenate([p[t] for p in parts]) for t in parts[0]} if parts else {}
            else:
                raw = self._invoke(feed)
        except Exception as exc:
            raise internal(
                f"LiteRT execute failure for model '{model.config.name}': {framework_message(exc)}"
            ) from None
        out = {}
        for name in output_names:
            tensor, convert = model.outputs[name]
            value = raw[tensor.index]
            out[name] = _dequantize(value, tensor) if convert else value
        return out

    def _invoke(self, feed: dict[_Tensor, np.ndarray]) -> dict[int, np.ndarray]:
        """One invocation: model output tensor index -> value (a copy)."""
        model: TFLiteModel = self.model
        if self.runner is not None:
            result = self.runner(**{t.key: a for t, a in feed.items()})
            return {t.index: result[t.key] for t, _ in model.outputs.values()}
        interpreter = self.interpreter
        shapes = {d["index"]: tuple(d["shape"]) for d in interpreter.get_input_details()}
        resized = False
        for tensor, array in feed.items():
            if shapes.get(tensor.index) != array.shape:
                interpreter.resize_tensor_input(tensor.index, list(array.shape))
                resized = True
        if resized:
            interpreter.allocate_tensors()
        for tensor, array in feed.items():
            interpreter.set_tensor(tensor.index, array)
        interpreter.invoke()
        return {t.index: interpreter.get_tensor(t.index) for t, _ in model.outputs.values()}

    def close(self) -> None:
        self.runner = None
        self.interpreter = None
