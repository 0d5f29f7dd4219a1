"""TensorFlow backend (Triton's tensorflow_backend, ``backend: "tensorflow"``): SavedModel and
GraphDef.

Platforms, as Triton's: ``tensorflow_savedmodel`` (``<version>/model.savedmodel/``, a SavedModel
folder) and ``tensorflow_graphdef`` (``<version>/model.graphdef``, a binary ``GraphDef`` with its
variables frozen into constants). Each instance owns a TensorFlow session
(``tf.compat.v1.Session``, as Triton's backend runs one per instance) unless
``MAX_SESSION_SHARE_COUNT`` lets that many instances share one.

- **SavedModel**: the meta graph tagged ``TF_GRAPH_TAG`` (default ``serve``) is loaded; its
  signature ``TF_SIGNATURE_DEF`` (default ``serving_default``; when absent, the first signature
  other than the init and train ops, with a warning, as Triton) names the inputs and outputs:
  the configuration's names are the signature's keys, fed and fetched as the tensors they map
  to. Data types and shapes are checked against the signature at load.
- **GraphDef**: an input is a ``Placeholder`` node, an output any node, by name (``node`` is the
  node's first output, ``node:1`` its second); input data types and shapes are checked against
  the placeholders'. A GraphDef carries no signature, so its configuration must list the inputs
  and outputs (as Triton: auto-complete cannot fill them).

Batching: with ``max_batch_size`` > 0 the first dimension of every input and output is the
batch, which must be dynamic in the signature or placeholder. Requests are concatenated along it
and each gets its own rows back (:class:`BatchedTensorInstance`).

Parameters (Triton's names): ``TF_NUM_INTRA_THREADS`` and ``TF_NUM_INTER_THREADS`` (the
session's intra- and inter-op threads; 0 or absent: TensorFlow's choice, the cores),
``TF_USE_PER_SESSION_THREADS`` (each session its own inter-op pool), ``TF_GRAPH_TAG``,
``TF_SIGNATURE_DEF``, ``MAX_SESSION_SHARE_COUNT`` and ``TF_INIT_OPS_FILE`` (a JSON file,
``{"init_ops": [...]}``, in the version folder or else the model folder: operations run once
after a GraphDef's session is created). Two choices beyond Triton, so that the threads a model
asks for are its own: the intra-op pool is each session's (``TF_OVERRIDE_GLOBAL_THREADPOOL`` is
set to 1 before TensorFlow is first imported, unless already set; TensorFlow otherwise sizes one
pool for the process by the first session), and a model that sets ``TF_NUM_INTER_THREADS``
without ``TF_USE_PER_SESSION_THREADS`` gets a pool of its own too (Triton's TensorFlow shares
the process's, sized by the first model). ``optimization { graph { level } }`` turns XLA off
(-1) or on (1, 2), as Triton. Any other parameter is named in a warning.

Auto-complete (SavedModel only, as Triton): inputs and outputs (the signature's keys, data
types, dims) and ``max_batch_size`` (the default 4, with the dynamic batcher, when every input
and output has a dynamic first dimension), read from ``saved_model.pb`` without running
TensorFlow.

Instance kinds: ``KIND_CPU``; ``KIND_GPU`` only where this TensorFlow sees a GPU (tensorflow-cpu,
the package installed here, never does: the load says so). tensorflow is imported only when a
TensorFlow model loads: without it that model fails with UNAVAILABLE naming the package, and
every other model serves.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Mapping

import numpy as np

from ..backend_model import (
    BackendModel,
    BackendModelInstance,
    BatchedTensorInstance,
    autofill_batching,
    autofill_tensors,
    check_tensor,
    warn_unread_parameters,
)
from ..errors import internal, invalid_arg, unavailable
from ..model_config import (
    TENSORFLOW_PLATFORMS,
    WILDCARD_DIM,
    ModelConfig,
    TensorConfig,
    expected_inputs,
    version_dirs,
)
from .backend_parameters import parameter_bool, parameter_int

_log = logging.getLogger("triton_ros.tensorflow")

INSTALL_HINT = (
    "pip install 'triton_ros[frameworks]' (tensorflow-cpu; "
    "requirements-frameworks.txt pins the release tested here)"
)
SAVEDMODEL_PLATFORM = "tensorflow_savedmodel"
GRAPHDEF_PLATFORM = "tensorflow_graphdef"
DEFAULT_TAG = "serve"
DEFAULT_SIGNATURE = "serving_default"
_INTERNAL_SIGNATURES = ("__saved_model_init_op", "__saved_model_train_op")

# TensorFlow DataType enum name -> protocol data type (Triton's ConvertDataType)
_TF_TYPES = {
    "DT_BOOL": "BOOL",
    "DT_UINT8": "UINT8",
    "DT_UINT16": "UINT16",
    "DT_UINT32": "UINT32",
    "DT_UINT64": "UINT64",
    "DT_INT8": "INT8",
    "DT_INT16": "INT16",
    "DT_INT32": "INT32",
    "DT_INT64": "INT64",
    "DT_HALF": "FP16",
    "DT_FLOAT": "FP32",
    "DT_DOUBLE": "FP64",
    "DT_STRING": "BYTES",
}
_READ_PARAMETERS = frozenset(
    {
        "TF_NUM_INTRA_THREADS",
        "TF_NUM_INTER_THREADS",
        "TF_USE_PER_SESSION_THREADS",
        "TF_GRAPH_TAG",
        "TF_SIGNATURE_DEF",
        "MAX_SESSION_SHARE_COUNT",
        "TF_INIT_OPS_FILE",
    }
)
_import_lock = threading.Lock()


def import_tensorflow(model: str):
    """tensorflow, or UNAVAILABLE naming what to install. The first import sets the process's
    TensorFlow environment defaults: per-session intra-op pools, and C++ info lines off."""
    with _import_lock:
        os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        try:
            import tensorflow
        except ImportError as exc:
            raise unavailable(
                f"model '{model}' needs TensorFlow, which is not installed here "
                f"({exc}): {INSTALL_HINT}"
            ) from None
    return tensorflow


def _dtype_name(enum_value: int) -> str:
    from tensorflow.core.framework import types_pb2

    name = types_pb2.DataType.Name(enum_value)
    return _TF_TYPES.get(name, name)


def _shape(shape_proto) -> list[int] | None:
    """dims of a TensorShapeProto (-1 unknown); None for an unknown rank."""
    if shape_proto.unknown_rank:
        return None
    return [d.size if d.size >= 0 else WILDCARD_DIM for d in shape_proto.dim]


def _signature_def(meta_graph, key: str, model: str):
    """Triton's choice: ``key``, else the first signature that is not the init or train op."""
    signatures = meta_graph.signature_def
    if key in signatures:
        return key, signatures[key]
    for name in sorted(signatures):
        if name not in _INTERNAL_SIGNATURES:
            _log.warning(
                "model '%s': unable to find signature '%s', using signature '%s'", model, key, name
            )
            return name, signatures[name]
    raise invalid_arg(f"unable to load model '{model}', expected '{key}' signature")


def _signature_io(signature) -> tuple[dict, dict]:
    """{key: (tensor name, protocol data type, dims or None)} of a signature's inputs, outputs."""

    def infos(items):
        return {
            key: (info.name, _dtype_name(info.dtype), _shape(info.tensor_shape))
            for key, info in items
        }

    return infos(signature.inputs.items()), infos(signature.outputs.items())


def _meta_graph(saved_model_dir: Path, tag: str, model: str):
    """The meta graph tagged ``tag`` of ``saved_model.pb`` (read as a protobuf message only)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = saved_model_dir / "saved_model.pb"
    if not path.is_file():
        raise unavailable(
            f"unable to find '{path}' for model '{model}' (a SavedModel folder "
            f"holds saved_model.pb)"
        )
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(path.read_bytes())
    except Exception as exc:
        raise invalid_arg(
            f"unable to load model '{model}': {path} is not a SavedModel: {exc}"
        ) from None
    for meta_graph in saved.meta_graphs:
        if tag in meta_graph.meta_info_def.tags:
            return meta_graph
    tags = sorted({t for m in saved.meta_graphs for t in m.meta_info_def.tags})
    raise invalid_arg(
        f"unable to load model '{model}', expected '{tag}' tag (the SavedModel "
        f"has {', '.join(tags) or 'no tags'}; TF_GRAPH_TAG chooses one)"
    )


def _tensor_name(name: str) -> str:
    """A GraphDef node name as the tensor it names: ``node`` is ``node:0``."""
    return name if ":" in name else f"{name}:0"


def _message(exc: BaseException) -> str:
    """A TensorFlow error's own message (its first line: the rest is the graph's call sites)."""
    text = str(getattr(exc, "message", "") or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextlib.contextmanager
def _quiet_deprecations():
    """tf.compat.v1's loader warns that it is deprecated at each call: not the user's concern."""
    try:
        from tensorflow.python.util import deprecation

        silence = deprecation.silence()
    except (ImportError, AttributeError):
        silence = contextlib.nullcontext()
    with silence:
        yield


class TensorFlowModel(BackendModel):
    """Model-level state: the platform, the checked inputs and outputs, the sessions' options."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        if config.platform not in TENSORFLOW_PLATFORMS:
            raise invalid_arg(
                f"platform {config.platform or '(none)'} not supported for "
                f"TensorFlow model '{config.name}' (expected "
                f"{' or '.join(sorted(TENSORFLOW_PLATFORMS))})"
            )
        self.is_graphdef = config.platform == GRAPHDEF_PLATFORM
        self.model_file = version_path / (
            config.default_model_filename or TENSORFLOW_PLATFORMS[config.platform]
        )
        if not self.model_file.exists():
            raise unavailable(f"unable to find '{self.model_file}' for model '{config.name}'")
        warn_unread_parameters(config, _READ_PARAMETERS, "tensorflow", _log)
        self.intra = parameter_int(config, "TF_NUM_INTRA_THREADS", 0)
        if self.intra < 0:
            raise invalid_arg(
                f"parameter 'TF_NUM_INTRA_THREADS' must be non-negative number "
                f"for TensorFlow model '{config.name}'"
            )
        self.inter = parameter_int(config, "TF_NUM_INTER_THREADS", 0)
        per_session = parameter_bool(config, "TF_USE_PER_SESSION_THREADS")
        self.per_session = (
            per_session if per_session is not None else "TF_NUM_INTER_THREADS" in config.parameters
        )
        self.share = parameter_int(config, "MAX_SESSION_SHARE_COUNT", 1)
        if self.share <= 0:
            raise invalid_arg(
                f"parameter 'MAX_SESSION_SHARE_COUNT' must be positive number "
                f"for TensorFlow model '{config.name}'"
            )
        self.tag = (config.parameters.get("TF_GRAPH_TAG") or "").strip() or DEFAULT_TAG
        self.signature_key = (
            config.parameters.get("TF_SIGNATURE_DEF") or ""
        ).strip() or DEFAULT_SIGNATURE
        self.init_ops = self._init_ops()
        self.tf = import_tensorflow(config.name)
        self.gpus = self.tf.config.list_physical_devices("GPU")
        # config name -> tensor name fed or fetched
        self.feeds: dict[str, str] = {}
        self.fetches: dict[str, str] = {}
        if self.is_graphdef:
            self.graph_def = self._read_graph_def()
            self._check_graphdef()
        else:
            meta_graph = _meta_graph(self.model_file, self.tag, config.name)
            self.signature_key, signature = _signature_def(
                meta_graph, self.signature_key, config.name
            )
            self._check_signature(*_signature_io(signature))
        self._sessions: list = []  # (session, instances using it)
        self._lock = threading.Lock()

    def _init_ops(self) -> list[str]:
        name = (self.config.parameters.get("TF_INIT_OPS_FILE") or "").strip()
        if not name:
            return []
        for folder in (self.version_path, self.model_path):
            path = folder / name
            if path.is_file():
                try:
                    ops = json.loads(path.read_text())["init_ops"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise invalid_arg(
                        f"model '{self.config.name}': TF_INIT_OPS_FILE {path} must "
                        f"be JSON with a list 'init_ops': {exc}"
                    ) from None
                if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
                    raise invalid_arg(
                        f"model '{self.config.name}': 'init_ops' of {path} must be "
                        f"a list of operation names"
                    )
                return ops
        raise invalid_arg(
            f"model '{self.config.name}': TF_INIT_OPS_FILE '{name}' is in neither "
            f"{self.version_path} nor {self.model_path}"
        )

    def _read_graph_def(self):
        graph_def = self.tf.compat.v1.GraphDef()
        try:
            graph_def.ParseFromString(self.model_file.read_bytes())
        except Exception as exc:
            raise invalid_arg(
                f"unable to load model '{self.config.name}': {self.model_file} is "
                f"not a binary GraphDef: {exc}"
            ) from None
        if not graph_def.node:
            raise invalid_arg(f"model {self.config.name} has an empty network")
        return graph_def

    def _check_graphdef(self) -> None:
        config = self.config
        nodes = {node.name: node for node in self.graph_def.node}
        placeholders = {n: node for n, node in nodes.items() if node.op == "Placeholder"}
        if not config.inputs or not config.outputs:
            raise invalid_arg(
                f"unable to load model '{config.name}': a GraphDef carries no "
                f"signature, so config.pbtxt must list its inputs (placeholders: "
                f"{', '.join(sorted(placeholders)) or 'none'}) and outputs (node "
                f"names)"
            )
        if expected_inputs(config) != len(placeholders) and not any(
            t.optional for t in config.inputs
        ):
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects "
                f"{expected_inputs(config)} inputs, model provides "
                f"{len(placeholders)}"
            )
        for tensor in config.inputs:
            node = placeholders.get(tensor.name.split(":")[0])
            if node is None:
                raise invalid_arg(
                    f"unexpected inference input '{tensor.name}', allowed inputs "
                    f"are: {', '.join(sorted(placeholders))}"
                )
            dims = _shape(node.attr["shape"].shape) if "shape" in node.attr else None
            self._check(tensor, _dtype_name(node.attr["dtype"].type), dims, "input")
            self.feeds[tensor.name] = _tensor_name(tensor.name)
        for tensor in config.outputs:
            if tensor.name.split(":")[0] not in nodes:
                raise invalid_arg(
                    f"unexpected inference output '{tensor.name}': the GraphDef "
                    f"has no node of that name"
                )
            self.fetches[tensor.name] = _tensor_name(tensor.name)

    def _check_signature(self, inputs: dict, outputs: dict) -> None:
        config = self.config
        if expected_inputs(config) != len(inputs) and not any(t.optional for t in config.inputs):
            raise invalid_arg(
                f"unable to load model '{config.name}', configuration expects "
                f"{expected_inputs(config)} inputs, model provides {len(inputs)}"
            )
        for tensors, infos, what, names in (
            (config.inputs, inputs, "input", self.feeds),
            (config.outputs, outputs, "output", self.fetches),
        ):
            for tensor in tensors:
                info = infos.get(tensor.name)
                if info is None:
                    raise invalid_arg(
                        f"unexpected inference {what} '{tensor.name}', allowed "
                        f"{what}s are: {', '.join(sorted(infos))} (signature "
                        f"'{self.signature_key}')"
                    )
                self._check(tensor, info[1], info[2], what)
                names[tensor.name] = info[0]

    def _check(
        self, tensor: TensorConfig, datatype: str, dims: list[int] | None, what: str
    ) -> None:
        if dims is None:  # unknown rank: only the data type can be checked
            dims = ([WILDCARD_DIM] if self.config.max_batch_size > 0 else []) + list(
                tensor.reshape if tensor.reshape is not None else tensor.dims
            )
        check_tensor(self.config, tensor, (datatype, dims), what, self.config.max_batch_size > 0)

    @classmethod
    def can_use_gpu(cls) -> bool:
        return False  # tensorflow-cpu; KIND_GPU is still refused or served explicitly

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """Inputs, outputs and max_batch_size from a SavedModel's signature (Triton's
        AutoCompleteHelper); a GraphDef needs its configuration."""
        if len(proto.input) > 0 and len(proto.output) > 0:
            return []
        versions = version_dirs(model_path)
        if not versions or proto.platform != SAVEDMODEL_PLATFORM:
            return []
        folder = (
            model_path
            / str(versions[0])
            / (proto.default_model_filename or TENSORFLOW_PLATFORMS[SAVEDMODEL_PLATFORM])
        )
        if not (folder / "saved_model.pb").is_file():
            return []
        import_tensorflow(proto.name)
        params = {k: v.string_value for k, v in proto.parameters.items()}
        tag = params.get("TF_GRAPH_TAG", "").strip() or DEFAULT_TAG
        meta_graph = _meta_graph(folder, tag, proto.name)
        _, signature = _signature_def(
            meta_graph, params.get("TF_SIGNATURE_DEF", "").strip() or DEFAULT_SIGNATURE, proto.name
        )
        inputs, outputs = _signature_io(signature)
        ios = list(inputs.values()) + list(outputs.values())
        can_batch = all(dims and dims[0] == WILDCARD_DIM for _, _, dims in ios)
        if not can_batch and proto.max_batch_size > 0:
            raise invalid_arg(
                f"unable to autofill for '{proto.name}', configuration specified "
                f"max-batch {proto.max_batch_size} but model signature does not "
                f"support batching"
            )
        warnings = autofill_batching(proto, can_batch)
        for field, infos, _what in (
            (proto.input, inputs, "input"),
            (proto.output, outputs, "output"),
        ):
            if len(field) > 0:
                continue
            for key, (_, _, dims) in infos.items():
                if dims is None or (not dims and proto.max_batch_size == 0):
                    raise invalid_arg(
                        f"Unable to autofill for '{proto.name}': the rank of model "
                        f"tensor '{key}' is {'unknown' if dims is None else 0} and "
                        f"dimensions are not defined"
                    )
            autofill_tensors(
                proto,
                field,
                [(key, dtype, dims) for key, (_, dtype, dims) in sorted(infos.items())],
            )
        return warnings

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        if kind == "KIND_GPU" and not self.gpus:
            raise unavailable(
                f"instance group of model '{self.config.name}' has kind KIND_GPU "
                f"but this TensorFlow sees no GPU (tensorflow-cpu, or no CUDA "
                f"device); use KIND_CPU"
            )
        return TensorFlowInstance(self, name=name, kind=kind, device_id=device_id)

    def session(self, kind: str, device_id: int | None):
        """A session for a new instance: a shared one with room (MAX_SESSION_SHARE_COUNT), else
        a new one."""
        with self._lock:
            for entry in self._sessions:
                if entry[1] < self.share and entry[2] == (kind, device_id):
                    entry[1] += 1
                    return entry[0]
            session = self._new_session(kind, device_id)
            self._sessions.append([session, 1, (kind, device_id)])
            return session

    def _new_session(self, kind: str, device_id: int | None):
        tf = self.tf
        options = tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=self.intra,
            inter_op_parallelism_threads=self.inter,
            use_per_session_threads=self.per_session,
            allow_soft_placement=True,
        )
        level = self.config.optimization.graph_level
        if level:
            jit = tf.compat.v1.OptimizerOptions
            options.graph_options.optimizer_options.global_jit_level = (
                jit.OFF if level == -1 else jit.ON_1 if level == 1 else jit.ON_2
            )
        device = f"/gpu:{device_id or 0}" if kind == "KIND_GPU" else "/cpu:0"
        graph = tf.Graph()
        try:
            with graph.as_default(), graph.device(device), _quiet_deprecations():
                session = tf.compat.v1.Session(graph=graph, config=options)
                if self.is_graphdef:
                    tf.compat.v1.import_graph_def(self.graph_def, name="")
                    for op in self.init_ops:
                        session.run(op)
                else:
                    tf.compat.v1.saved_model.loader.load(session, [self.tag], str(self.model_file))
        except Exception as exc:
            raise invalid_arg(
                f"unable to load model '{self.config.name}': TensorFlow failed: {_message(exc)}"
            ) from None
        _log.info(
            "model '%s': TensorFlow session with %s intra-op and %s inter-op threads%s",
            self.config.name,
            self.intra or "default",
            self.inter or "default",
            " (per session)" if self.per_session else "",
        )
        return session

    def release(self, session) -> None:
        with self._lock:
            for entry in self._sessions:
                if entry[0] is session:
                    entry[1] -= 1
                    if entry[1] == 0:
                        self._sessions.remove(entry)
                        session.close()
                    return

    def close(self) -> None:
        with self._lock:
            for session, _, _ in self._sessions:
                session.close()
            self._sessions.clear()


class TensorFlowInstance(BatchedTensorInstance):
    """Runs batches on its model's session (its own unless MAX_SESSION_SHARE_COUNT)."""

    def __init__(
        self, model: TensorFlowModel, *, name: str, kind: str, device_id: int | None
    ) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self.session = model.session(kind, device_id)
        self.may_run_on_caller = kind != "KIND_GPU"

    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        model: TensorFlowModel = self.model
        feed = {model.feeds[name]: array for name, array in inputs.items()}
        fetches = {name: model.fetches[name] for name in output_names}
        try:
            return self.session.run(fetches, feed)
        except Exception as exc:
            raise internal(
                f"TensorFlow execute failure for model '{model.config.name}': {_message(exc)}"
            ) from None

    def close(self) -> None:
        if self.session is not None:
            self.model.release(self.session)
            self.session = None
