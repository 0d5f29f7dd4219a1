"""PyTorch backend (Triton's pytorch_backend, ``platform: "pytorch_libtorch"``): TorchScript.

A model version holds ``model.pt`` (or ``default_model_filename``), a TorchScript archive
(``torch.jit.script(module).save(...)`` or ``torch.jit.trace``). Each instance loads it with
``torch.jit.load`` onto its device, in eval mode, and runs ``forward`` under ``torch.no_grad`` and,
unless ``INFERENCE_MODE`` is false, ``torch.inference_mode`` (Triton's default since it made
inference mode the default). Requests are batched as for ONNX Runtime
(:class:`~triton_ros.core.backend_model.BatchedTensorInstance`): the inputs' rows are
concatenated, ``forward`` runs once, each output's rows go back to their requests.

Inputs and outputs follow Triton's naming rules for TorchScript:

- inputs are matched to ``forward``'s arguments by name when every configured input names one;
  else by the ``<name>__<index>`` convention (``INPUT__0`` is argument 0) when every input
  follows it; else in the configuration's order (with a warning). A ``forward`` taking one
  ``Dict[str, Tensor]`` gets the inputs by their configured names.
- outputs: by ``<name>__<index>`` (``OUTPUT__1`` is the second element of the returned tuple),
  else in the configuration's order. A single returned tensor is output 0.
- ``TYPE_STRING`` (BYTES) inputs and outputs are ``List[str]``, one dimension (batch included),
  as in Triton.

TorchScript carries no input or output metadata (names, data types, shapes), so a PyTorch model
needs a configuration that lists them: auto-complete says so instead of guessing (Triton's
backend does not auto-complete either). The number of ``forward`` arguments is checked against
the configured inputs at load.

Instance groups: ``KIND_CPU`` runs on the CPU; ``KIND_GPU`` loads the module onto the instance's
``cuda:<id>`` and runs on a CUDA stream of its own (CUDA is initialized only then, never for CPU
instances; without a CUDA build of torch or a GPU the load fails with UNAVAILABLE saying so);
``KIND_MODEL`` loads the module where it was saved and feeds it CPU tensors.

Parameters (Triton's names; values as Triton reads them):

- ``INTRA_OP_THREAD_COUNT`` (alias ``NUM_THREADS``, the name of Triton's Python-based PyTorch
  backend): the intra-op threads of each instance: ``torch.set_num_threads`` is called on the
  thread that executes the instance, before its runs (torch's OpenMP pool keeps the count per
  thread, so two models may differ; Triton sets it once for the process). Without it an
  instance runs with torch's default (the cores), whatever other models set.
- ``INTER_OP_THREAD_COUNT`` (alias ``NUM_INTEROP_THREADS``): ``torch.set_num_interop_threads``,
  which torch allows once per process: the first model that sets it wins, as in Triton, and a
  later different value is named in a warning.
- ``DISABLE_OPTIMIZED_EXECUTION``: runs under ``torch.jit.optimized_execution(False)``.
- ``INFERENCE_MODE`` (default true): ``torch.inference_mode`` around loading and running.
- ``DISABLE_CUDNN``: cuDNN off for the model's GPU runs.
- ``ENABLE_WEIGHT_SHARING``: instances on the same device share one loaded module.
- ``ENABLE_CACHE_CLEANING``: ``torch.cuda.empty_cache()`` after each GPU run.
- ``ENABLE_JIT_EXECUTOR``, ``ENABLE_JIT_PROFILING``, ``ENABLE_TENSOR_FUSER``: torch's JIT
  switches (process-wide in torch, set before each run of a model that names them, as Triton).

Any other parameter is named in a warning at load. ``platform: "torch_aoti"`` (AOTInductor
``model.pt2`` packages) is refused with UNSUPPORTED: not served here yet.

torch is an optional dependency (``pip install 'triton_ros[torch]'``): it is imported only when a
PyTorch model loads, and without it that model fails with UNAVAILABLE naming what to install,
while every other model serves.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Mapping

import numpy as np

from ..backend_model import (
    BackendModel,
    BackendModelInstance,
    BatchedTensorInstance,
    warn_unread_parameters,
)
from ..errors import internal, invalid_arg, unavailable, unsupported
from ..model_config import PYTORCH_AOTI_PLATFORM, PYTORCH_FILENAME, ModelConfig, expected_inputs
from .backend_parameters import framework_message, parameter_bool, parameter_int

_log = logging.getLogger("triton_ros.pytorch")

INSTALL_HINT = (
    "pip install 'triton_ros[torch]' (torch; the CPU build is torch==2.13.0+cpu, "
    "a CUDA build of torch for KIND_GPU instances)"
)

# Protocol data type -> torch dtype attribute (Triton's ModelConfigDataTypeToTorchType)
_TORCH_TYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
_DELIMITER = "__"

_READ_PARAMETERS = frozenset(
    {
        "DISABLE_OPTIMIZED_EXECUTION",
        "INFERENCE_MODE",
        "DISABLE_CUDNN",
        "ENABLE_WEIGHT_SHARING",
        "ENABLE_CACHE_CLEANING",
        "INTRA_OP_THREAD_COUNT",
        "INTER_OP_THREAD_COUNT",
        "NUM_THREADS",
        "NUM_INTEROP_THREADS",
        "ENABLE_JIT_EXECUTOR",
        "ENABLE_JIT_PROFILING",
        "ENABLE_TENSOR_FUSER",
    }
)

_interop_lock = threading.Lock()
_interop_threads: tuple[int, str] | None = None  # (count, model that set it)
_default_threads: int | None = None  # torch's intra-op count before any model set one


def import_torch(model: str):
    """torch, or UNAVAILABLE naming what to install."""
    global _default_threads
    try:
        import torch
    except ImportError as exc:
        raise unavailable(
            f"model '{model}' needs PyTorch, which is not installed here ({exc}): {INSTALL_HINT}"
        ) from None
    with _interop_lock:
        if _default_threads is None:
            _default_threads = torch.get_num_threads()
    return torch


def named_index(name: str) -> int | None:
    """The index of a ``<name>__<index>`` tensor name (Triton: the text after the first ``__``
    must be all digits), else None."""
    head, sep, tail = name.partition(_DELIMITER)
    return int(tail) if sep and tail.isdigit() else None


def input_positions(config: ModelConfig, arguments: list[str]) -> tuple[dict[str, int], str]:
    """Configured input name -> position among ``forward``'s arguments, and the convention used
    ("forward argument", "named index" or "configuration order")."""
    names = [t.name for t in config.inputs]
    if names and all(n in arguments for n in names):
        return {n: arguments.index(n) for n in names}, "forward argument"
    indexes = [named_index(n) for n in names]
    if all(i is not None for i in indexes):
        return dict(zip(names, indexes)), "named index"
    _log.warning(
        "model '%s': inputs %s are neither all arguments of forward() (%s) nor all "
        "named <name>__<index>: they are passed in the configuration's order",
        config.name,
        names,
        ", ".join(arguments),
    )
    return {n: i for i, n in enumerate(names)}, "configuration order"


def output_positions(config: ModelConfig) -> tuple[dict[str, int], str]:
    """Configured output name -> position in ``forward``'s returned tuple."""
    names = [t.name for t in config.outputs]
    indexes = [named_index(n) for n in names]
    if all(i is not None for i in indexes):
        return dict(zip(names, indexes)), "named index"
    _log.warning(
        "model '%s': outputs %s do not all follow the <name>__<index> naming "
        "convention: they are read in the configuration's order",
        config.name,
        names,
    )
    return {n: i for i, n in enumerate(names)}, "configuration order"


def _check_positions(
    config: ModelConfig, positions: Mapping[str, int], count: int | None, what: str
) -> None:
    seen: dict[int, str] = {}
    for name, index in positions.items():
        if count is not None and index >= count:
            raise invalid_arg(
                f"unable to load model '{config.name}': {what} '{name}' is "
                f"position {index}, but forward() has {count} {what}s"
            )
        if index in seen:
            raise invalid_arg(
                f"unable to load model '{config.name}': {what}s '{seen[index]}' "
                f"and '{name}' both name position {index}"
            )
        seen[index] = name


def _check_datatypes(config: ModelConfig) -> None:
    batch = 1 if config.max_batch_size > 0 else 0
    for what, tensors in (("input", config.inputs), ("output", config.outputs)):
        for tensor in tensors:
            if tensor.datatype == "BYTES":
                dims = tensor.reshape if tensor.reshape is not None else tensor.dims
                if len(dims) + batch > 1:
                    raise invalid_arg(
                        f"unable to load model '{config.name}': Triton only "
                        f"supports 1 dimensional List of String as {what} for "
                        f"'{tensor.name}'"
                    )
            elif tensor.datatype not in _TORCH_TYPES:
                raise invalid_arg(
                    f"unable to load model '{config.name}': unsupported datatype "
                    f"TYPE_{tensor.datatype} for {what} '{tensor.name}'"
                )


def _set_interop_threads(torch, count: int, model: str) -> None:
    global _interop_threads
    with _interop_lock:
        if _interop_threads is None:
            try:
                torch.set_num_interop_threads(count)
            except RuntimeError as exc:  # torch allows it once, before any inter-op work
                _log.warning(
                    "model '%s': INTER_OP_THREAD_COUNT %d not applied: %s (torch keeps %d)",
                    model,
                    count,
                    exc,
                    torch.get_num_interop_threads(),
                )
            _interop_threads = (count, model)
        elif _interop_threads[0] != count:
            _log.warning(
                "model '%s': INTER_OP_THREAD_COUNT %d ignored: torch's inter-op pool "
                "is process-wide and model '%s' set it to %d first",
                model,
                count,
                _interop_threads[1],
                _interop_threads[0],
            )


class PyTorchModel(BackendModel):
    """Model-level state: the TorchScript file, the parameters, shared modules."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        if config.platform == PYTORCH_AOTI_PLATFORM:
            raise unsupported(
                f"model '{config.name}': platform '{PYTORCH_AOTI_PLATFORM}' "
                f"(AOTInductor model.pt2 packages) is not served by triton_ros; "
                f"save a TorchScript model.pt (torch.jit.script or trace) with "
                f"platform 'pytorch_libtorch'"
            )
        self.model_file = version_path / (config.default_model_filename or PYTORCH_FILENAME)
        if not self.model_file.is_file():
            raise unavailable(f"unable to find '{self.model_file}' for model '{config.name}'")
        warn_unread_parameters(config, _READ_PARAMETERS, "pytorch", _log)
        _check_datatypes(config)
        self.torch = import_torch(config.name)
        params = config.parameters
        self.optimized_execution = not parameter_bool(config, "DISABLE_OPTIMIZED_EXECUTION")
        inference_mode = parameter_bool(config, "INFERENCE_MODE")
        self.inference_mode = True if inference_mode is None else inference_mode
        self.cudnn = not parameter_bool(config, "DISABLE_CUDNN")
        self.weight_sharing = bool(parameter_bool(config, "ENABLE_WEIGHT_SHARING"))
        self.cache_cleaning = bool(parameter_bool(config, "ENABLE_CACHE_CLEANING"))
        key = "INTRA_OP_THREAD_COUNT" if "INTRA_OP_THREAD_COUNT" in params else "NUM_THREADS"
        intra = parameter_int(config, key, 0)
        key = (
            "INTER_OP_THREAD_COUNT" if "INTER_OP_THREAD_COUNT" in params else "NUM_INTEROP_THREADS"
        )
        inter = parameter_int(config, key, 0)
        if intra < 0 or inter < 0:
            raise invalid_arg(
                f"model '{config.name}': thread counts must be 0 (torch's default) or positive"
            )
        # Every instance sets its thread's count before it runs: the parameter, else torch's
        # default, so that another model's setting (torch's default for threads that have not
        # run yet) never leaks into this one.
        self.intra_op_threads = intra or _default_threads or 0
        if inter > 0:
            _set_interop_threads(self.torch, inter, config.name)
        self.jit_switches = self._jit_switches(config)
        self._shared: dict[tuple[str, int | None], object] = {}
        self._shared_lock = threading.Lock()

    def _jit_switches(self, config: ModelConfig) -> list[tuple[object, bool]]:
        """(torch setter, value) for the JIT parameters the model sets."""
        switches = []
        for key, setter in (
            ("ENABLE_JIT_EXECUTOR", "_jit_set_profiling_executor"),
            ("ENABLE_JIT_PROFILING", "_jit_set_profiling_mode"),
            ("ENABLE_TENSOR_FUSER", "_jit_set_texpr_fuser_enabled"),
        ):
            value = parameter_bool(config, key)
            if value is None:
                continue
            function = getattr(self.torch._C, setter, None)
            if function is None:
                _log.warning(
                    "model '%s': parameter '%s' is not applied: this torch (%s) has no %s",
                    config.name,
                    key,
                    self.torch.__version__,
                    setter,
                )
                continue
            switches.append((function, value))
        return switches

    @classmethod
    def can_use_gpu(cls) -> bool:
        """KIND_AUTO instances go to a GPU only with a CUDA build of torch that sees one (torch
        is only looked for here, not imported, when it is not installed)."""
        import importlib.util

        try:
            if importlib.util.find_spec("torch") is None:
                return False
            import torch
        except ImportError:
            return False
        return bool(torch.cuda.is_available())

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """TorchScript has no input or output metadata to complete a configuration from."""
        if proto.platform == PYTORCH_AOTI_PLATFORM:
            return []
        missing = [
            what
            for what, field in (("inputs", proto.input), ("outputs", proto.output))
            if len(field) == 0
        ]
        if missing:
            raise invalid_arg(
                f"model '{proto.name}': a TorchScript model (platform pytorch_libtorch, "
                f"{proto.default_model_filename or PYTORCH_FILENAME}) carries no names, data "
                f"types or shapes of its inputs and outputs, so config.pbtxt must list its "
                f"{' and '.join(missing)} (names INPUT__0, OUTPUT__0, ... or forward()'s argument "
                f"names; Triton's PyTorch backend does not auto-complete them either)"
            )
        return []

    def load_module(self, device, kind: str):
        """The TorchScript module for ``device``: loaded, or shared with another instance on
        the same device when ENABLE_WEIGHT_SHARING is set."""
        key = (device.type, device.index)
        if self.weight_sharing:
            with self._shared_lock:
                module = self._shared.get(key)
                if module is None:
                    module = self._shared[key] = self._load(device, kind)
                else:
                    _log.info(
                        "model '%s': instance reuses the module loaded on %s",
                        self.config.name,
                        device,
                    )
                return module
        return self._load(device, kind)

    def _load(self, device, kind: str):
        torch = self.torch
        try:
            with torch.inference_mode(self.inference_mode):
                if kind == "KIND_MODEL":
                    module = torch.jit.load(str(self.model_file))
                else:
                    module = torch.jit.load(str(self.model_file), map_location=device)
        except Exception as exc:
            raise internal(
                f"failed to load model '{self.config.name}' ({self.model_file}) with "
                f"torch.jit.load (a TorchScript archive, from torch.jit.script or "
                f"torch.jit.trace and .save): {type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            ) from None
        module.eval()
        return module

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        return PyTorchInstance(self, name=name, kind=kind, device_id=device_id)

    def close(self) -> None:
        self._shared.clear()


class PyTorchInstance(BatchedTensorInstance):
    """One TorchScript module on one device."""

    def __init__(self, model: PyTorchModel, *, name: str, kind: str, device_id: int | None) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        torch = self.torch = model.torch
        config = model.config
        self._stream = None
        if kind == "KIND_GPU":
            if not torch.cuda.is_available():
                raise unavailable(
                    f"instance group of model '{config.name}' has kind KIND_GPU but this torch "
                    f"({torch.__version__}) sees no CUDA device (torch.cuda.is_available() is "
                    f"false): install a CUDA build of torch on a machine with an NVIDIA GPU, or "
                    f"use KIND_CPU"
                )
            count = torch.cuda.device_count()
            if device_id is not None and device_id >= count:
                raise unavailable(
                    f"instance group of model '{config.name}' names GPU "
                    f"{device_id}, but torch sees {count} CUDA device(s)"
                )
            self.device = torch.device("cuda", device_id or 0)
            self._stream = torch.cuda.Stream(device=self.device)
        else:
            self.device = torch.device("cpu")
        self._input_device = self.device if kind == "KIND_GPU" else torch.device("cpu")
        self.module = model.load_module(self.device, kind)
        self._bind(config)
        self.may_run_on_caller = kind == "KIND_CPU"

    def _bind(self, config: ModelConfig) -> None:
        """Map the configured inputs and outputs onto forward()'s arguments and results."""
        try:
            schema = self.module.forward.schema
        except Exception as exc:
            raise invalid_arg(
                f"unable to load model '{config.name}': its TorchScript module "
                f"has no forward method: {exc}"
            ) from None
        arguments = list(schema.arguments)
        if arguments and arguments[0].type.kind() == "ClassType":  # self
            arguments = arguments[1:]
        kinds = [a.type.kind() for a in arguments]
        self._dict_input = len(arguments) == 1 and kinds[0] == "DictType"
        if self._dict_input:
            self._input_position = {t.name: 0 for t in config.inputs}
        else:
            if "DictType" in kinds:
                raise internal(
                    "Multiple inputs of kind DictType were detected. Only a single "
                    "input of type Dict(str, Tensor) is supported."
                )
            for argument, kind in zip(arguments, kinds):
                if kind not in ("TensorType", "ListType", "OptionalType"):
                    raise internal(
                        f"An input of type '{argument.type}' was detected in the "
                        f"model. Only a single input of type Dict(str, Tensor) or "
                        f"input(s) of type Tensor are supported."
                    )
            if len(arguments) != expected_inputs(config):
                raise invalid_arg(
                    f"unable to load model '{config.name}', configuration expects "
                    f"{expected_inputs(config)} inputs, model provides "
                    f"{len(arguments)}"
                )
            positions, convention = input_positions(config, [a.name for a in arguments])
            _check_positions(config, positions, len(arguments), "input")
            self._input_position = positions
            _log.debug("model '%s': inputs by %s", config.name, convention)
        self._arguments = len(arguments)
        positions, convention = output_positions(config)
        _check_positions(config, positions, None, "output")
        self._output_position = positions
        self._outputs_by_position = {i: n for n, i in positions.items()}
        self._bytes = {t.name for t in (*config.inputs, *config.outputs) if t.datatype == "BYTES"}

    # ------------------------------------------------------------------ execution
    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        torch = self.torch
        model: PyTorchModel = self.model
        if model.intra_op_threads and torch.get_num_threads() != model.intra_op_threads:
            torch.set_num_threads(model.intra_op_threads)  # this thread's intra-op pool
        for setter, value in model.jit_switches:
            setter(value)
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            if model.inference_mode:
                stack.enter_context(torch.inference_mode())
            stack.enter_context(torch.jit.optimized_execution(model.optimized_execution))
            if self._stream is not None:
                torch.backends.cudnn.enabled = model.cudnn
                stack.enter_context(torch.cuda.stream(self._stream))
            tensors = {name: self._to_torch(name, array) for name, array in inputs.items()}
            try:
                if self._dict_input:
                    result = self.module(tensors)
                else:
                    args: list = [None] * self._arguments
                    for name, value in tensors.items():
                        args[self._input_position[name]] = value
                    result = self.module(*args)
                outputs = self._outputs(result, output_names)
            except Exception as exc:
                raise internal(
                    f"PyTorch execute failure: {type(exc).__name__}: {framework_message(exc)}"
                ) from None
            finally:
                if self._stream is not None and model.cache_cleaning:
                    torch.cuda.empty_cache()
        return outputs

    def _to_torch(self, name: str, array: np.ndarray):
        if name in self._bytes:  # List[str], one dimension
            try:
                return [
                    x.decode("utf-8") if isinstance(x, (bytes, bytearray)) else str(x)
                    for x in array.reshape(-1)
                ]
            except UnicodeDecodeError as exc:
                raise invalid_arg(
                    f"input '{name}' holds bytes that are not UTF-8 text, which a "
                    f"TorchScript List[str] requires: {exc}"
                ) from None
        if not array.flags.writeable:  # torch.from_numpy shares memory; read-only is copied
            array = array.copy()
        tensor = self.torch.from_numpy(array)
        if self._input_device.type != "cpu":
            tensor = tensor.to(self._input_device, non_blocking=True)
        return tensor

    def _outputs(self, result, output_names: list[str]) -> dict[str, np.ndarray]:
        torch = self.torch
        if isinstance(result, torch.Tensor) or _is_strings(result):
            values = [result]
        elif isinstance(result, (tuple, list)):
            values = list(result)
        else:
            raise internal(
                f"model '{self.model.config.name}' returned {type(result).__name__}: "
                f"forward() must return a tensor, or a tuple or list of tensors"
            )
        out: dict[str, np.ndarray] = {}
        for name in output_names:
            position = self._output_position[name]
            if position >= len(values):
                raise internal(
                    f"output '{name}' is position {position} but model "
                    f"'{self.model.config.name}' returned {len(values)} value(s)"
                )
            value = values[position]
            if isinstance(value, torch.Tensor):
                if value.device.type != "cpu":
                    value = value.cpu()  # waits for the instance's stream
                out[name] = value.detach().contiguous().numpy()
            elif _is_strings(value):
                out[name] = np.array([s.encode("utf-8") for s in value], dtype=np.object_)
            else:
                raise internal(
                    f"output '{name}' of model '{self.model.config.name}' is a "
                    f"{type(value).__name__}, not a tensor or a list of strings"
                )
        return out

    def close(self) -> None:
        self.module = None
        self._stream = None


def _is_strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) for s in value) and bool(value)
