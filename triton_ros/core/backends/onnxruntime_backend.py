"""ONNX Runtime backend (Triton's onnxruntime_backend).

Each instance owns its own ``InferenceSession``. KIND_CPU uses the CPU execution provider;
KIND_GPU uses the CUDA provider on the instance's GPU, and the TensorRT provider first when the
configuration lists ``gpu_execution_accelerator { name: "tensorrt" }`` (Triton's parameter names
are translated to ONNX Runtime's). The ``parameters`` Triton's backend reads are honoured:
``intra_op_thread_count``, ``inter_op_thread_count``, ``execution_mode``, ``enable_mem_arena``,
``enable_mem_pattern`` (default: off for models with a batch dimension, whose shapes vary),
``session.use_device_allocator_for_initializers`` (a session configuration entry),
``memory.enable_memory_arena_shrinkage`` (a run option, e.g. ``cpu:0``: the arena hands its
unused memory back after each run), the deprecated CUDA keys ``cudnn_conv_algo_search`` (0, 1, 2),
``gpu_mem_limit``, ``arena_extend_strategy`` (0, 1) and ``do_copy_in_default_stream`` (KIND_GPU;
as in Triton they override the ``cuda`` accelerator's parameters), plus
``optimization { graph { level } }``. Beyond Triton, every other parameter whose key starts with
``session.`` is handed to ONNX Runtime as a session configuration entry (for example
``session.intra_op.allow_spinning``); Triton's backend ignores those keys, so such a repository
still loads there. Any other parameter is named in a warning at load (Triton is silent about
it): a misspelt key would otherwise change nothing unseen.

On the CPU an executed batch of large samples runs as several smaller runs
(``max_sub_batch_size``, beyond Triton): ONNX Runtime's CPU kernels gain nothing from a batch of
images (its convolutions loop over the images) while every run's activations grow with the
batch. The parameter sets the most rows per run (``0``: the whole batch in one run, as Triton's
backend does); by default it is the most rows whose inputs hold at most 2^17 elements
(:data:`SUB_BATCH_ELEMENTS`): one image of 3x224x224 or more per run (no copy into a batch
buffer), 10 of 3x64x64, the whole batch for small samples, where batching does pay. KIND_GPU
instances run the whole batch. A part is one or more whole requests (a request of more
rows runs alone, its rows together as its client sent them), so a part is a batch Triton's
dynamic batcher could have formed itself; the model's outputs are the parts' outputs
concatenated. Served by the core, the scheduler hands such a batch out part by part to whichever
instance is free (``dynamic_batch_scheduler``); the statistics count the batch as one execution
either way.

An idle intra-op thread spins at most ``INTRA_OP_SPIN_US`` (100 us) before it sleeps, unless the
model sets ``session.intra_op.spin_duration_us`` or ``session.intra_op.allow_spinning`` itself
(beyond Triton, whose backend keeps ONNX Runtime's default; ``allow_spinning`` "1" restores it).
ONNX Runtime's idle threads otherwise spin for milliseconds, through the batcher's delay before
every run, holding a core that the thread they wait for (the event loop, a load generator, other
ROS nodes) could use. ONNX Runtime reads the key from 1.26 on; older releases (1.23, CPython
3.10's last) ignore it and keep their own spinning. Sessions of one intra-op thread have no pool
and are unaffected.

Auto-complete fills a missing or partial configuration from the model (AutoCompleteConfig):
inputs, outputs and max_batch_size (the default 4 when every tensor's first dimension is
dynamic, which also turns on the dynamic batcher).
"""

from __future__ import annotations

import logging
import os
import re
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
from ..errors import internal, invalid_arg, unavailable
from .backend_parameters import parameter_bool, parameter_int
from ..strict_parse import parse_size
from ..model_config import ONNXRUNTIME_FILENAME, WILDCARD_DIM, ModelConfig, expected_inputs

_log = logging.getLogger("triton_ros.onnxruntime")

_ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}

# Triton's TensorRT accelerator parameter -> ONNX Runtime TensorRT provider option
_TRT_PASSTHROUGH = {
    "trt_max_partition_iterations",
    "trt_min_subgraph_size",
    "trt_dla_enable",
    "trt_dla_core",
    "trt_engine_cache_enable",
    "trt_engine_cache_path",
    "trt_engine_cache_prefix",
    "trt_dump_subgraphs",
    "trt_force_sequential_engine_build",
    "trt_context_memory_sharing_enable",
    "trt_timing_cache_enable",
    "trt_timing_cache_path",
    "trt_force_timing_cache",
    "trt_detailed_build_log",
    "trt_build_heuristics_enable",
    "trt_sparsity_enable",
    "trt_builder_optimization_level",
    "trt_auxiliary_streams",
    "trt_tactic_sources",
    "trt_extra_plugin_lib_paths",
    "trt_profile_min_shapes",
    "trt_profile_max_shapes",
    "trt_profile_opt_shapes",
    "trt_cuda_graph_enable",
    "trt_dump_ep_context_model",
    "trt_ep_context_file_path",
    "trt_ep_context_embed_mode",
    "trt_layer_norm_fp32_fallback",
}


def _ort():
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - a requirement of the package
        raise unavailable(f"onnxruntime is not installed: {exc}") from None
    return onnxruntime


def _model_file(version_path: Path, filename: str) -> Path:
    path = version_path / (filename or ONNXRUNTIME_FILENAME)
    if path.is_dir():  # a directory holding model.onnx and its external data
        path = path / ONNXRUNTIME_FILENAME
    return path


def _dims(shape) -> list[int]:
    return [d if isinstance(d, int) and d >= 0 else WILDCARD_DIM for d in shape]


def _io_infos(session) -> tuple[dict[str, tuple[str, list[int]]], dict[str, tuple[str, list[int]]]]:
    def infos(items):
        out = {}
        for item in items:
            out[item.name] = (_ORT_TYPES.get(item.type, item.type), _dims(item.shape or []))
        return out

    return infos(session.get_inputs()), infos(session.get_outputs())


_parse_int = parameter_int
_parse_bool = parameter_bool


_ARENA_SHRINKAGE = "memory.enable_memory_arena_shrinkage"
# The model parameters this backend reads (besides session.* entries)
_READ_PARAMETERS = frozenset(
    {
        "intra_op_thread_count",
        "inter_op_thread_count",
        "execution_mode",
        "enable_mem_arena",
        "enable_mem_pattern",
        _ARENA_SHRINKAGE,
        "cudnn_conv_algo_search",
        "gpu_mem_limit",
        "arena_extend_strategy",
        "do_copy_in_default_stream",
        "max_sub_batch_size",
    }
)
# The default bound on one CPU run's inputs when max_sub_batch_size is not set (elements, summed
# over the inputs): one 3x224x224 image a run, 2 of 3x128x128.
SUB_BATCH_ELEMENTS = 1 << 17


# How long an idle intra-op thread spins before it sleeps, unless the model says otherwise (see
# the module docstring): long enough to bridge the gaps between one run's operators, far shorter
# than the gaps between runs.
INTRA_OP_SPIN_US = 100
_SPIN_DURATION = "session.intra_op.spin_duration_us"
_SPIN_KEYS = frozenset({_SPIN_DURATION, "session.intra_op.allow_spinning"})


# Session entries ONNX Runtime reads as "1" or not: any other value would silently mean "0"
_BOOLEAN_SESSION_ENTRIES = frozenset(
    {
        "session.use_device_allocator_for_initializers",
        "session.intra_op.allow_spinning",
        "session.inter_op.allow_spinning",
        "session.set_denormal_as_zero",
        "session.disable_prepacking",
        "session.use_env_allocators",
        "session.force_spinning_stop",
    }
)
# ONNX Runtime's arena shrinkage list: "cpu:0", "gpu:0", "cpu:0;gpu:1", or empty for none
_SHRINKAGE_LIST = re.compile(r"((cpu|gpu):\d+(;(cpu|gpu):\d+)*)?")


def _session_entries(config: ModelConfig) -> dict[str, str]:
    """The parameters handed to ONNX Runtime's SessionOptions.add_session_config_entry."""
    entries = {}
    for key, value in config.parameters.items():
        if not key.startswith("session."):
            continue
        value = value.strip()
        if key in _BOOLEAN_SESSION_ENTRIES and value not in ("0", "1"):
            raise invalid_arg(
                f"model '{config.name}': parameter '{key}' must be \"0\" or \"1\", got '{value}'"
            )
        entries[key] = value
    return entries


def _arena_shrinkage(config: ModelConfig) -> str | None:
    value = config.parameters.get(_ARENA_SHRINKAGE)
    if value is None:
        return None
    value = value.strip()
    if not _SHRINKAGE_LIST.fullmatch(value):
        raise invalid_arg(
            f"model '{config.name}': parameter '{_ARENA_SHRINKAGE}' must list "
            f"devices as 'cpu:0' or 'cpu:0;gpu:0', got '{value}'"
        )
    return value


def _max_sub_batch(config: ModelConfig) -> int | None:
    """Rows per CPU run: None for whole batches (``0``), 0 for the default (from the samples'
    size), else the parameter's row count."""
    if "max_sub_batch_size" not in config.parameters:
        return 0
    rows = _parse_int(config, "max_sub_batch_size", 0)
    if rows < 0:
        raise invalid_arg(
            f"model '{config.name}': parameter 'max_sub_batch_size' must be 0 "
            f"(whole batches) or a row count, got {rows}"
        )
    return rows or None


def _deprecated_cuda_options(config: ModelConfig) -> dict[str, str]:
    """Triton's CUDA provider options read from the model's parameters (deprecated there in
    favour of the ``cuda`` accelerator's parameters, still honoured)."""
    params = config.parameters
    options: dict[str, str] = {}
    if "cudnn_conv_algo_search" in params:
        options["cudnn_conv_algo_search"] = _parse_choice(
            config, "cudnn_conv_algo_search", ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")
        )
    if "gpu_mem_limit" in params:  # a byte count, checked here rather than by the provider
        limit = parse_size(
            params["gpu_mem_limit"].strip(), f"parameter 'gpu_mem_limit' of model '{config.name}'"
        )
        options["gpu_mem_limit"] = str(limit)
    if "arena_extend_strategy" in params:
        options["arena_extend_strategy"] = _parse_choice(
            config, "arena_extend_strategy", ("kNextPowerOfTwo", "kSameAsRequested")
        )
    if "do_copy_in_default_stream" in params:
        copy = _parse_bool(config, "do_copy_in_default_stream")
        options["do_copy_in_default_stream"] = "1" if copy else "0"
    return options


def _parse_choice(config: ModelConfig, key: str, names: tuple[str, ...]) -> str:
    """An integer parameter that indexes ``names`` (Triton's numbered CUDA options) -> the name
    ONNX Runtime takes; another number is refused with Triton's message."""
    index = _parse_int(config, key, 0)
    if not 0 <= index < len(names):
        raise invalid_arg(f"unsupported {key} value '{index}' is requested")
    return names[index]


class OnnxRuntimeModel(BackendModel):
    """Model-level state: the model file and checked I/O."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        self.model_file = _model_file(version_path, config.default_model_filename)
        if not self.model_file.is_file():
            raise unavailable(f"unable to find '{self.model_file}' for model '{config.name}'")
        warn_unread_parameters(config, _READ_PARAMETERS, "onnxruntime", _log, prefix="session.")
        # Checked once per model, before any instance: a bad value fails the load, named
        self.session_entries = _session_entries(config)
        self.arena_shrinkage = _arena_shrinkage(config)
        self.max_sub_batch = _max_sub_batch(config)

    @classmethod
    def can_use_gpu(cls) -> bool:
        # A CPU-only onnxruntime (the PyPI default) runs KIND_AUTO models on the CPU.
        return "CUDAExecutionProvider" in _ort().get_available_providers()

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """Triton's ModelState::AutoCompleteConfig for ONNX models."""
        model_file = auto_complete_source(proto, model_path, _model_file)
        if model_file is None:
            return []
        ort = _ort()
        try:
            session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise invalid_arg(
                f"unable to load model '{proto.name}' for auto-complete: {exc}"
            ) from None
        inputs, outputs = _io_infos(session)
        can_batch = all(
            dims and dims[0] == WILDCARD_DIM
            for _, dims in list(inputs.values()) + list(outputs.values())
        )
        warnings = autofill_batching(proto, can_batch)
        if not can_batch and proto.max_batch_size != 0:
            raise invalid_arg(
                f"autofill failed for model '{proto.name}': model does not support "
                f"batching while non-zero max_batch_size is specified"
            )
        if len(proto.input) == 0:
            autofill_tensors(
                proto, proto.input, [(n, dtype, dims) for n, (dtype, dims) in inputs.items()]
            )
        if len(proto.output) == 0:
            autofill_tensors(
                proto, proto.output, [(n, dtype, dims) for n, (dtype, dims) in outputs.items()]
            )
        return warnings

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        return OnnxRuntimeInstance(self, name=name, kind=kind, device_id=device_id)


class OnnxRuntimeInstance(BatchedTensorInstance):
    """One ONNX Runtime session."""

    def __init__(
        self, model: OnnxRuntimeModel, *, name: str, kind: str, device_id: int | None
    ) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        ort = _ort()
        config = model.config
        options = ort.SessionOptions()
        intra = _parse_int(config, "intra_op_thread_count", 0)
        inter = _parse_int(config, "inter_op_thread_count", 0)
        if intra > 0:
            options.intra_op_num_threads = intra
        if inter > 0:
            options.inter_op_num_threads = inter
        mode = _parse_int(config, "execution_mode", 0)
        if mode not in (0, 1):
            raise invalid_arg(
                f"Invalid configuration value provided. Expected values for "
                f"execution_mode are 0 or 1 but got {mode} ."
            )
        options.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        level = config.optimization.graph_level
        options.graph_optimization_level = {
            -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        }.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        arena = _parse_bool(config, "enable_mem_arena")
        if arena is not None:
            options.enable_cpu_mem_arena = arena
        pattern = _parse_bool(config, "enable_mem_pattern")
        if pattern is None and config.max_batch_size > 0:
            # ONNX Runtime keeps one memory plan per input shape it has seen; a dynamic batcher
            # feeds up to max_batch_size shapes, and the plans held 70 MB more at peak for two
            # tinydet instances than planning off (measured when befd38b adopted it), for no
            # measurable speed. The model's parameter still decides when it is set.
            pattern = False
        if pattern is not None:
            options.enable_mem_pattern = pattern
        for key, value in model.session_entries.items():
            try:
                options.add_session_config_entry(key, value)
            except Exception as exc:  # ONNX Runtime checks key and value lengths
                raise invalid_arg(f"model '{config.name}': parameter '{key}': {exc}") from None
        if not _SPIN_KEYS & model.session_entries.keys():
            options.add_session_config_entry(_SPIN_DURATION, str(INTRA_OP_SPIN_US))
        self._run_options = None
        if model.arena_shrinkage:
            self._run_options = ort.RunOptions()
            self._run_options.add_run_config_entry(_ARENA_SHRINKAGE, model.arena_shrinkage)

        providers = self._providers(ort, config, kind, device_id)
        try:
            self.session = ort.InferenceSession(
                str(model.model_file), sess_options=options, providers=providers
            )
        except Exception as exc:
            raise internal(
                f"onnxruntime failed to load model '{config.name}' ({model.model_file}): {exc}"
            ) from None
        self._check_io(config)
        self._bytes_inputs = {t.name for t in config.inputs if t.datatype == "BYTES"}
        # Rows per run on the CPU: None = the whole batch, 0 = from the samples' size
        self._sub_batch: int | None = None
        if kind != "KIND_GPU" and config.max_batch_size > 1:
            self._sub_batch = model.max_sub_batch
        self.may_run_on_caller = kind != "KIND_GPU"
        _log.debug("instance %s of '%s' uses %s", name, config.name, self.session.get_providers())

    @staticmethod
    def _providers(ort, config: ModelConfig, kind: str, device_id: int | None) -> list:
        if kind != "KIND_GPU":
            return ["CPUExecutionProvider"]
        available = set(ort.get_available_providers())
        providers: list = []
        cuda_options: dict[str, str] = {"device_id": str(device_id or 0)}
        for accel in config.optimization.gpu_execution_accelerators:
            if accel.name == "tensorrt":
                if "TensorrtExecutionProvider" not in available:
                    raise unavailable(
                        f"model '{config.name}' asks for the TensorRT execution accelerator but "
                        f"this onnxruntime has no TensorrtExecutionProvider (available: "
                        f"{sorted(available)}); install onnxruntime-gpu with TensorRT (JetPack's "
                        f"onnxruntime-gpu on Jetson)"
                    )
                providers.append(
                    (
                        "TensorrtExecutionProvider",
                        _trt_options(config, accel.parameters, device_id or 0),
                    )
                )
            elif accel.name == "cuda":
                cuda_options.update(accel.parameters)
            else:
                raise invalid_arg(f"unknown Execution Accelerator '{accel.name}' is requested")
        cuda_options.update(_deprecated_cuda_options(config))
        if "CUDAExecutionProvider" not in available:
            raise unavailable(
                f"instance group of model '{config.name}' has kind KIND_GPU but this onnxruntime "
                f"has no CUDAExecutionProvider (available: {sorted(available)}); install "
                f"onnxruntime-gpu, or use KIND_CPU"
            )
        providers.append(("CUDAExecutionProvider", cuda_options))
        providers.append("CPUExecutionProvider")
        return providers

    def _check_io(self, config: ModelConfig) -> None:
        inputs, outputs = _io_infos(self.session)
        batching = config.max_batch_size > 0
        required = [n for n in inputs]
        expected = expected_inputs(config)
        if expected != len(required) and not any(t.optional for t in config.inputs):
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects "
                f"{expected} inputs, model provides {len(required)}"
            )
        for tensors, infos, what in (
            (config.inputs, inputs, "input"),
            (config.outputs, outputs, "output"),
        ):
            for tensor in tensors:
                info = infos.get(tensor.name)
                if info is None:
                    raise invalid_arg(
                        f"unexpected inference {what} '{tensor.name}', allowed "
                        f"{what}s are: {', '.join(infos)}"
                    )
                check_tensor(config, tensor, info, what, batching)

    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        feed = {}
        for name, array in inputs.items():
            if name in self._bytes_inputs:
                try:
                    array = np.array(
                        [
                            x.decode("utf-8") if isinstance(x, (bytes, bytearray)) else x
                            for x in array.flat
                        ],
                        dtype=object,
                    ).reshape(array.shape)
                except UnicodeDecodeError as exc:
                    raise invalid_arg(
                        f"input '{name}' holds bytes that are not UTF-8 text, which "
                        f"ONNX string tensors require: {exc}"
                    ) from None
            feed[name] = np.ascontiguousarray(array)
        try:
            values = self.session.run(output_names, feed, self._run_options)
        except Exception as exc:
            raise internal(
                f"onnxruntime execution failure for model '{self.model.config.name}': {exc}"
            ) from None
        return dict(zip(output_names, values))

    def rows_per_run(self, row_elements: int) -> int | None:
        if self._sub_batch is None:
            return None
        if self._sub_batch > 0:
            return self._sub_batch
        return max(1, SUB_BATCH_ELEMENTS // row_elements) if row_elements else None

    def close(self) -> None:
        self.session = None


def _trt_options(config: ModelConfig, params: Mapping[str, str], device_id: int) -> dict[str, str]:
    options: dict[str, str] = {"device_id": str(device_id)}
    for key, value in params.items():
        if key == "precision_mode":
            if value == "FP16":
                options["trt_fp16_enable"] = "True"
            elif value == "INT8":
                options["trt_int8_enable"] = "True"
            elif value == "BF16":
                options["trt_bf16_enable"] = "True"
            elif value != "FP32":
                raise invalid_arg(f"unsupported precision mode '{value}' is requested")
        elif key == "max_workspace_size_bytes":
            options["trt_max_workspace_size"] = value
        elif key == "int8_calibration_table_name":
            options["trt_int8_calibration_table_name"] = value
        elif key == "int8_use_native_calibration_table":
            options["trt_int8_use_native_calibration_table"] = value
        elif key in _TRT_PASSTHROUGH:
            options[key] = value
        else:
            raise invalid_arg(
                f"unknown parameter '{key}' is provided for TensorRT Execution Accelerator"
            )
    if (
        options.get("trt_engine_cache_enable", "").lower() in ("1", "true")
        and "trt_engine_cache_path" not in options
    ):
        # Keep engines next to the model so that restarts do not rebuild them.
        options["trt_engine_cache_path"] = os.path.join(
            os.environ.get("TRITON_ROS_CACHE_DIR", "/tmp/triton_ros_trt_cache"), config.name
        )
    return options
