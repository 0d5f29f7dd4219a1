"""The backend API of the core (Triton's TRITONBACKEND_Model / TRITONBACKEND_ModelInstance).

A backend provides a :class:`BackendModel` (state shared by a model version's instances, created
once per version) whose :meth:`BackendModel.create_instance` makes one
:class:`BackendModelInstance` per configured instance. An instance executes a list of requests
and returns exactly one response or error per request, in order.

:class:`BatchedTensorInstance` does this for backends that run one tensor batch per execution
(ONNX Runtime, TensorRT): it concatenates the requests' inputs along the batch dimension, runs
(in parts of rows where the backend asks for it: :meth:`BatchedTensorInstance.rows_per_run`),
checks the outputs and gives each request its own rows back.

Backends are found by name (:func:`backend_class`, the :class:`BackendRegistry`), in this order:
the built-in ones (:data:`BACKENDS`), then the ``triton_ros.backends`` entry-point group of the
installed Python packages (the entry point's name is the backend's, its value ``module:Class``
of a :class:`BackendModel` subclass), then each backend directory (``--backend-directory``, as
tritonserver's): ``<directory>/<name>/backend.py`` defining ``BACKEND_MODEL``, the class. A
backend is imported only when a model names it, so that a machine without TensorRT, CUDA, torch,
OpenVINO, TensorFlow, LiteRT or the forest libraries never imports them. The contract a plugin
implements is docs/backends.md.
"""

from __future__ import annotations

import abc
import importlib
import importlib.metadata
import importlib.util
import logging
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from .datatypes import from_numpy_dtype
from .errors import TritonRosError, as_triton_error, internal, invalid_arg, unavailable, unsupported
from .infer_request import InferRequest, InferResponse, model_facing_inputs
from .model_config import (
    DEFAULT_MAX_BATCH_SIZE,
    WILDCARD_DIM,
    ModelConfig,
    TensorConfig,
    version_dirs,
)

_log = logging.getLogger("triton_ros.backends")

# backend name -> "module:Class" of its BackendModel
BACKENDS: dict[str, str] = {
    "onnxruntime": "triton_ros.core.backends.onnxruntime_backend:OnnxRuntimeModel",
    "tensorrt": "triton_ros.core.backends.tensorrt_backend:TensorRTModel",
    "python": "triton_ros.core.backends.python_backend:PythonModel",
    "pytorch": "triton_ros.core.backends.pytorch_backend:PyTorchModel",
    "openvino": "triton_ros.core.backends.openvino_backend:OpenVINOModel",
    "tensorflow": "triton_ros.core.backends.tensorflow_backend:TensorFlowModel",
    "armnn_tflite": "triton_ros.core.backends.tflite_backend:TFLiteModel",
    "tflite": "triton_ros.core.backends.tflite_backend:TFLiteModel",
    "fil": "triton_ros.core.backends.fil_backend:FilModel",
}
#: The entry-point group in which installed packages name their backends.
ENTRY_POINT_GROUP = "triton_ros.backends"
#: The module a backend directory's ``<name>/`` holds, and the attribute naming its class.
BACKEND_FILE = "backend.py"
BACKEND_ATTRIBUTE = "BACKEND_MODEL"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class BackendRegistry:
    """Backend name -> :class:`BackendModel` subclass: built-ins, then the entry points of
    :data:`ENTRY_POINT_GROUP`, then the backend directories (``--backend-directory``).

    Looked up at each model load (nothing is cached but the imported modules), so that a
    package installed, or a directory filled, while the server runs serves its models at their
    next load. A name that fails to import or is not a BackendModel subclass fails only the
    models that name it, with UNAVAILABLE or INVALID_ARG saying which source was used."""

    def __init__(self, directories: tuple[str, ...] = ()) -> None:
        self.directories: tuple[Path, ...] = tuple(Path(d) for d in directories)
        self._lock = threading.Lock()
        self._shadow_warned: set[str] = set()

    def set_directories(self, directories) -> None:
        """The backend directories, searched in order after the entry points."""
        self.directories = tuple(Path(d) for d in directories)

    def find(self, name: str) -> type["BackendModel"]:
        if not name or not _NAME.fullmatch(name):
            raise invalid_arg(f"backend name '{name}' is not valid")
        target = BACKENDS.get(name)
        if target is not None:
            if self._entry_point(name) is not None and name not in self._shadow_warned:
                self._shadow_warned.add(name)
                _log.warning(
                    "backend '%s': the built-in backend is used; the entry point of the "
                    "same name in group '%s' is ignored",
                    name,
                    ENTRY_POINT_GROUP,
                )
            return _import_target(name, target, "built-in backend")
        entry = self._entry_point(name)
        if entry is not None:
            where = f"entry point '{entry.name} = {entry.value}' in group '{ENTRY_POINT_GROUP}'"
            try:
                cls = entry.load()
            except Exception as exc:  # a plugin's import error fails its models, named
                raise unavailable(
                    f"backend '{name}' ({where}) failed to import: {type(exc).__name__}: {exc}"
                ) from None
            return _checked_class(name, cls, where)
        for directory in self.directories:
            path = directory / name / BACKEND_FILE
            if path.is_file():
                return self._from_file(name, path)
        raise unsupported(
            f"unknown backend '{name}': not built in ({', '.join(sorted(BACKENDS))}), "
            f"no entry point of that name in group '{ENTRY_POINT_GROUP}', "
            + (
                f"and no {name}/{BACKEND_FILE} in the backend directories "
                f"({', '.join(str(d) for d in self.directories)})"
                if self.directories
                else "and no --backend-directory given"
            )
        )

    def available(self) -> dict[str, str]:
        """Every backend name this registry can find, and where from (nothing is imported)."""
        found = {name: "built-in" for name in BACKENDS}
        for entry in _entry_points():
            found.setdefault(entry.name, f"entry point {entry.value}")
        for directory in self.directories:
            try:
                children = sorted(directory.iterdir())
            except OSError:
                continue
            for child in children:
                if (child / BACKEND_FILE).is_file():
                    found.setdefault(child.name, str(child / BACKEND_FILE))
        return found

    @staticmethod
    def _entry_point(name: str):
        for entry in _entry_points():
            if entry.name == name:
                return entry
        return None

    def _from_file(self, name: str, path: Path) -> type["BackendModel"]:
        """Import ``<directory>/<name>/backend.py`` once (by its resolved path) as module
        ``triton_ros_backend_<name>``; its folder is the module's own (it may import siblings
        relatively as a package)."""
        module_name = f"triton_ros_backend_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
        resolved = str(path.resolve())
        with self._lock:
            module = sys.modules.get(module_name)
            if module is None or getattr(module, "__file__", None) != resolved:
                spec = importlib.util.spec_from_file_location(
                    module_name, resolved, submodule_search_locations=[str(path.parent.resolve())]
                )
                if spec is None or spec.loader is None:
                    raise unavailable(f"backend '{name}': cannot import {path}")
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_name] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException as exc:
                    sys.modules.pop(module_name, None)
                    raise unavailable(
                        f"backend '{name}' ({path}) failed to import: {type(exc).__name__}: {exc}"
                    ) from None
        cls = getattr(module, BACKEND_ATTRIBUTE, None)
        if cls is None:
            raise invalid_arg(
                f"backend '{name}' ({path}) defines no {BACKEND_ATTRIBUTE} (the "
                f"BackendModel subclass the backend serves models with)"
            )
        return _checked_class(name, cls, str(path))


def _entry_points():
    try:
        return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # broken metadata of some installed package
        _log.warning("reading entry points of group '%s' failed: %s", ENTRY_POINT_GROUP, exc)
        return ()


def _import_target(name: str, target: str, where: str) -> type["BackendModel"]:
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise unsupported(f"backend '{name}' is not available: {exc}") from None
    return _checked_class(name, getattr(module, class_name, None), f"{where} {target}")


def _checked_class(name: str, cls, where: str) -> type["BackendModel"]:
    if not (isinstance(cls, type) and issubclass(cls, BackendModel)):
        raise invalid_arg(
            f"backend '{name}' ({where}) is {cls!r}, not a subclass of "
            f"triton_ros.core.backend_model.BackendModel"
        )
    return cls


#: The registry the server's models are loaded with (``--backend-directory`` sets its
#: directories).
registry = BackendRegistry()


def backend_class(name: str) -> type["BackendModel"]:
    """The :class:`BackendModel` subclass serving backend ``name`` (see
    :class:`BackendRegistry`)."""
    return registry.find(name)


def backend_can_use_gpu(name: str) -> bool:
    """Whether KIND_AUTO instances of backend ``name`` go to a GPU; False when the backend cannot
    be found or its answer fails (logged: a plugin's fault never stops the server)."""
    try:
        return bool(backend_class(name).can_use_gpu())
    except TritonRosError:
        return False
    except Exception as exc:
        _log.warning(
            "backend '%s': can_use_gpu() failed (%s: %s); KIND_AUTO instances run on the CPU",
            name,
            type(exc).__name__,
            exc,
        )
        return False


def backend_auto_complete(name: str):
    """Backend ``name``'s auto-complete function, whose failures other than TritonRosError come
    back as INVALID_ARG naming the backend; None when the backend cannot be found (its models
    then fail to load with the lookup's reason)."""
    try:
        complete = backend_class(name).auto_complete_config
    except TritonRosError:
        return None

    def checked(proto, model_path: Path) -> list[str]:
        try:
            return list(complete(proto, model_path) or [])
        except TritonRosError:
            raise
        except Exception as exc:
            raise invalid_arg(
                f"auto-complete of model '{proto.name}' by backend '{name}' "
                f"failed: {type(exc).__name__}: {exc}"
            ) from None

    return checked


def warn_unread_parameters(
    config: ModelConfig,
    read: frozenset[str],
    backend: str,
    logger: logging.Logger,
    *,
    prefix: str = "",
) -> None:
    """Name, in one warning, the model parameters a backend does not read (not in ``read``, nor
    starting with ``prefix`` when one is given). Triton ignores them silently, so a misspelt key
    would change nothing unseen; clients may still read them from the configuration."""
    unread = sorted(
        key
        for key in config.parameters
        if key not in read and not (prefix and key.startswith(prefix))
    )
    if unread:
        extra = f" and {prefix}* entries" if prefix else ""
        logger.warning(
            "model '%s': parameter(s) %s are not read by the %s backend (it reads %s%s)",
            config.name,
            ", ".join(f"'{k}'" for k in unread),
            backend,
            ", ".join(sorted(read)),
            extra,
        )


def auto_complete_source(proto, model_path: Path, model_file) -> Path | None:
    """The model file auto-complete reads: ``model_file(version_path, default_model_filename)``
    of the first version folder; None when the configuration already lists inputs and outputs,
    or there is no version folder or no such file (the load then reports what is missing)."""
    if len(proto.input) > 0 and len(proto.output) > 0:
        return None
    versions = version_dirs(model_path)
    if not versions:
        return None
    path = model_file(model_path / str(versions[0]), proto.default_model_filename)
    return path if path.is_file() else None


def autofill_batching(proto, model_can_batch: bool) -> list[str]:
    """Auto-complete's batching, as Triton's backends do it: a model that can batch and names no
    ``max_batch_size`` gets the default (4), with the dynamic batcher when it batches more than
    one and names no scheduler. Returns the warnings; the caller decides what a model that
    cannot batch but names a ``max_batch_size`` means."""
    if not model_can_batch:
        return []
    warnings = []
    if proto.max_batch_size == 0:
        proto.max_batch_size = DEFAULT_MAX_BATCH_SIZE
        warnings.append(
            f"autofilled max_batch_size to {DEFAULT_MAX_BATCH_SIZE} for model "
            f"'{proto.name}' since batching is supported but no max_batch_size is "
            f"specified in model configuration. Must specify max_batch_size to utilize "
            f"autofill with a larger max batch size"
        )
    if (
        proto.max_batch_size > 1
        and not proto.HasField("dynamic_batching")
        and not proto.HasField("sequence_batching")
    ):
        proto.dynamic_batching.SetInParent()
    return warnings


def autofill_tensors(proto, field, tensors) -> None:
    """Fill ``proto.input`` or ``proto.output`` (``field``) with ``tensors``: (name, protocol
    data type, model dims with the batch dimension where the model batches). A tensor that is
    only the batch dimension gets dims [1] reshaped to [] (Triton's rule)."""
    from .datatypes import protocol_to_config
    from .protos import model_config_pb2 as mc

    del field[:]
    batching = proto.max_batch_size > 0
    for name, datatype, dims in tensors:
        io = field.add()
        io.name = name
        io.data_type = mc.DataType.Value(protocol_to_config(datatype))
        shown = list(dims[1:] if batching else dims)
        if shown:
            io.dims.extend(shown)
        else:
            io.dims.append(1)
            if batching:
                io.reshape.SetInParent()


def check_tensor(
    config: ModelConfig,
    tensor: TensorConfig,
    info: tuple[str, list[int]],
    what: str,
    batching: bool,
) -> None:
    """A model tensor's (protocol data type, dims with the batch dimension) against its
    configuration; INVALID_ARG saying what differs (the ONNX Runtime backend's messages)."""
    dtype, model_dims = info
    if dtype != tensor.datatype:
        raise invalid_arg(
            f"unable to load model '{config.name}', unexpected datatype "
            f"TYPE_{dtype if dtype != 'BYTES' else 'STRING'} for {what} "
            f"'{tensor.name}', expecting TYPE_"
            f"{tensor.datatype if tensor.datatype != 'BYTES' else 'STRING'}"
        )
    expected = list(tensor.reshape if tensor.reshape is not None else tensor.dims)
    if batching:
        if not model_dims or model_dims[0] != WILDCARD_DIM:
            raise invalid_arg(
                f"unable to load model '{config.name}', model {what} "
                f"'{tensor.name}' has shape {model_dims}: the first dimension must "
                f"be dynamic to support batching (max_batch_size "
                f"{config.max_batch_size})"
            )
        model_dims = model_dims[1:]
    if len(model_dims) != len(expected) or any(
        m != WILDCARD_DIM and e != WILDCARD_DIM and m != e for m, e in zip(model_dims, expected)
    ):
        # Scalars/empty reshape: the model may legitimately see [] where the config says [1].
        if not (expected == [] and model_dims == []):
            raise invalid_arg(
                f"unable to load model '{config.name}', model {what} "
                f"'{tensor.name}' dims {model_dims} don't match configuration dims "
                f"{expected}"
            )


# answer_early(pairs of (request, response), compute_input_ns, compute_infer_ns, compute_output_ns):
# the requests of one finished part of a batch, answered at once by the model.
AnswerEarly = Callable[[list[tuple[InferRequest, InferResponse]], int, int, int], None]


class _Streamed:
    """See :data:`STREAMED`."""

    def __repr__(self) -> str:
        return "STREAMED"


#: The response an instance gives for a request of a decoupled model: its responses go (or
#: went) through the request's ``response_factory`` (Triton's response factory), in order, the
#: last one final. An error in its place fails the request, unless its final response was sent.
STREAMED = _Streamed()


@dataclass
class ExecuteResult:
    """One response or error per request (or :data:`STREAMED`), and how long each phase took."""

    responses: list[InferResponse | TritonRosError]
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0


class BackendModelInstance(abc.ABC):
    """One execution context (its own session, stream or process)."""

    def __init__(
        self, model: "BackendModel", *, name: str, kind: str, device_id: int | None
    ) -> None:
        self.model = model
        self.name = name
        self.kind = kind
        self.device_id = device_id
        # Set (to the reason) when the instance can no longer execute, e.g. a Python stub that
        # cannot be restarted: its thread stops taking batches and the other instances serve.
        self.failure: str | None = None
        # Whether the instance may execute on the thread that submits a request (see
        # Model._execute_directly): only an instance whose execute needs nothing of its own
        # thread, computes on the CPU and calls nothing back into the server.
        self.may_run_on_caller = False
        # Set by the model where a request may be answered before the rest of its batch
        # (no preserve_ordering): an execute that runs a batch in parts hands each finished
        # part's responses here, with the part's times so far; see BatchedTensorInstance.
        self.answer_early: AnswerEarly | None = None

    @abc.abstractmethod
    def execute(self, requests: list[InferRequest]) -> ExecuteResult:
        """Run the requests; never raise for one request's fault (return its error instead).
        Requests handed to :attr:`answer_early` keep their place in the result."""

    def close(self) -> None:
        """Release the instance's resources."""


class BackendModel(abc.ABC):
    """Backend state for one version of a model."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        self.config = config
        self.version = version
        self.model_path = model_path
        self.version_path = version_path
        # What the model may call back into (TRITONBACKEND_ModelServer): the repository manager,
        # with infer(request) -> Future, is_ready(name, version), load(name, ...), unload(name).
        # Set by Model.load before any instance is created; None when served stand-alone.
        self.server = None

    @classmethod
    def can_use_gpu(cls) -> bool:
        """Whether KIND_AUTO instances of this backend go to a GPU when one exists."""
        return True

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """Fill a partial ``inference.ModelConfig`` from the model files; return warnings."""
        return []

    @abc.abstractmethod
    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance: ...

    def close(self) -> None:
        """Release model-level resources after every instance is closed."""


class BatchedTensorInstance(BackendModelInstance):
    """Concatenate requests into one batch, :meth:`run` it, split the outputs per request.

    A batch that runs in parts (:meth:`rows_per_run`) is answered part by part: each part's
    outputs are split among its own requests, and where the model allows it
    (:attr:`answer_early`) those requests are answered before the next part runs, so the first
    requests of a batch do not wait for its last."""

    def __init__(
        self, model: "BackendModel", *, name: str, kind: str, device_id: int | None
    ) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self._batch_buffers: dict[str, np.ndarray] = {}  # per input, reused batch to batch

    @abc.abstractmethod
    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        """Execute the model on batch tensors (model-facing shapes): the whole batch, or one part
        of it when :meth:`rows_per_run` says so."""

    def rows_per_run(self, row_elements: int) -> int | None:
        """At most how many rows of a batch whose inputs hold ``row_elements`` elements per row
        one :meth:`run` takes; None (the default): the whole batch at once."""
        return None

    def execute(self, requests: list[InferRequest]) -> ExecuteResult:
        config = self.model.config
        batching = config.max_batch_size > 0
        t0 = time.monotonic_ns()
        wanted: list[str] = []
        for request in requests:
            for name in request.output_names(config):
                if name not in wanted:
                    wanted.append(name)
        per_request = [model_facing_inputs(config, r) for r in requests]
        groups = self._groups(per_request, requests) if batching else [list(range(len(requests)))]
        input_ns = infer_ns = output_ns = 0  # assembling, running, splitting (all parts)
        responses: list[InferResponse | TritonRosError] = []
        try:
            for number, group in enumerate(groups):
                start = time.monotonic_ns()
                if len(group) == 1:
                    feed = dict(per_request[group[0]])
                else:
                    feed = {
                        name: self._assemble(name, [per_request[i][name] for i in group])
                        for name in per_request[group[0]]
                    }
                ran = time.monotonic_ns()
                input_ns += ran - start
                outputs = self.run(feed, wanted)
                if len(group) > 1:  # copied off the reused buffers the next part overwrites
                    outputs = self._detach(outputs, feed)
                split = time.monotonic_ns()
                infer_ns += split - ran
                part = [requests[i] for i in group]
                responses += self._split(config, part, outputs, wanted, batching)
                output_ns += time.monotonic_ns() - split
                if self.answer_early is not None and number < len(groups) - 1:
                    self.answer_early(
                        list(zip(part, responses[-len(part) :])), input_ns, infer_ns, output_ns
                    )
        except Exception as exc:  # a backend failure fails the rest of the batch, never the server
            err = (
                exc
                if isinstance(exc, TritonRosError)
                else internal(
                    f"{type(self).__name__} failed to execute model '{config.name}': "
                    f"{as_triton_error(exc).message}"
                )
            )
            # the requests without a response yet get the error; the failing step counts as running
            return ExecuteResult(
                responses + [err] * (len(requests) - len(responses)),
                input_ns,
                time.monotonic_ns() - t0 - input_ns - output_ns,
                output_ns,
            )
        return ExecuteResult(responses, input_ns, infer_ns, output_ns)

    def _split(
        self,
        config: ModelConfig,
        requests: list[InferRequest],
        outputs: Mapping[str, np.ndarray],
        wanted: list[str],
        batching: bool,
    ) -> list[InferResponse]:
        """One run's outputs, checked, as each of its requests' own rows."""
        total_rows = sum(r.batch_size for r in requests)
        checked = {
            name: self._checked_output(config, name, outputs, total_rows, batching)
            for name in wanted
        }
        responses = []
        offset = 0
        for request in requests:
            rows = request.batch_size
            names = request.output_names(config)
            if batching:
                outs = {n: checked[n][offset : offset + rows] for n in names}
            else:
                outs = {n: checked[n] for n in names}
            offset += rows
            responses.append(InferResponse(config.name, self.model.version, request.id, outs))
        return responses

    def _groups(
        self, per_request: list[Mapping[str, np.ndarray]], requests: list[InferRequest]
    ) -> list[list[int]]:
        """The requests (by index) each :meth:`run` takes: all of them in one run, or, where
        :meth:`rows_per_run` asks for parts, parts of whole requests of at most that many rows
        (a request of more rows runs alone: its rows always run together, as its client sent
        them). A part then fills the reusable buffers instead of the whole batch."""
        whole = [list(range(len(requests)))]
        if len(requests) == 1:
            return whole
        # asked first: a backend that runs whole batches (the default) pays for nothing more
        limit = self.request_rows_per_run(per_request[0], requests[0])
        if limit is None or limit <= 0:
            return whole
        if not all(self._batch_dimension(i, r) for i, r in zip(per_request[1:], requests[1:])):
            return whole  # no common batch dimension: one run
        if limit >= sum(r.batch_size for r in requests):
            return whole
        groups: list[list[int]] = []
        filled = limit
        for index, request in enumerate(requests):
            if filled + request.batch_size > limit:
                groups.append([])
                filled = 0
            groups[-1].append(index)
            filled += request.batch_size
        return groups

    def request_rows_per_run(
        self, inputs: Mapping[str, np.ndarray], request: InferRequest
    ) -> int | None:
        """:meth:`rows_per_run` for a batch of requests like ``request``, whose inputs are
        ``inputs``: None (the whole batch) when they do not all lead with its batch size."""
        if not self._batch_dimension(inputs, request):
            return None
        return self.rows_per_run(sum(a.size // a.shape[0] for a in inputs.values()))

    @staticmethod
    def _batch_dimension(inputs: Mapping[str, np.ndarray], request: InferRequest) -> bool:
        """Whether every input of the request leads with its (non-zero) batch size."""
        rows = request.batch_size
        return (
            bool(rows)
            and bool(inputs)
            and all(a.ndim and a.shape[0] == rows for a in inputs.values())
        )

    def _assemble(self, name: str, parts: list[np.ndarray]) -> np.ndarray:
        """The parts' rows, one after another, in this instance's reusable buffer for the input:
        the only copy a tensor goes through before the backend (a fresh multi-megabyte array per
        batch costs page faults and lets the heap grow)."""
        first = parts[0]
        if first.dtype == np.object_:
            return np.concatenate(parts, axis=0)
        rows = sum(int(p.shape[0]) for p in parts)
        buffers = self._batch_buffers
        buf = buffers.get(name)
        if (
            buf is None
            or buf.dtype != first.dtype
            or buf.shape[1:] != first.shape[1:]
            or buf.shape[0] < rows
        ):
            capacity = max(
                rows,
                min(
                    2 * (buf.shape[0] if buf is not None else 0),
                    max(self.model.config.max_batch_size, rows),
                ),
            )
            buf = buffers[name] = np.empty((capacity,) + first.shape[1:], first.dtype)
        try:
            return np.concatenate(parts, axis=0, out=buf[:rows])
        except (ValueError, TypeError):  # shapes that do not line up: numpy's own error
            return np.concatenate(parts, axis=0)

    @staticmethod
    def _detach(
        outputs: Mapping[str, np.ndarray], feed: Mapping[str, np.ndarray]
    ) -> Mapping[str, np.ndarray]:
        """Copies of outputs that share memory with a reused input buffer (a backend may return
        an input as an output): the buffer is overwritten by the next batch."""
        if not any(
            isinstance(v, np.ndarray) and any(np.may_share_memory(v, f) for f in feed.values())
            for v in outputs.values()
        ):
            return outputs
        return {
            k: (
                v.copy()
                if isinstance(v, np.ndarray)
                and any(np.may_share_memory(v, f) for f in feed.values())
                else v
            )
            for k, v in outputs.items()
        }

    @staticmethod
    def _checked_output(
        config: ModelConfig,
        name: str,
        outputs: Mapping[str, np.ndarray],
        total_rows: int,
        batching: bool,
    ) -> np.ndarray:
        array = outputs.get(name)
        if array is None:
            raise internal(f"model '{config.name}' did not produce output '{name}'")
        array = np.asarray(array)
        tensor = config.output(name)
        if batching and (array.ndim == 0 or array.shape[0] != total_rows):
            raise internal(
                f"output '{name}' of model '{config.name}' has shape {list(array.shape)}; "
                f"expected batch dimension {total_rows}"
            )
        if tensor is not None:
            if tensor.datatype == "BYTES":
                if array.dtype != np.object_ or any(isinstance(x, str) for x in array.flat):
                    array = np.array(
                        [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in array.flat],
                        dtype=np.object_,
                    ).reshape(array.shape)
            elif from_numpy_dtype(array.dtype) != tensor.datatype:
                raise internal(
                    f"output '{name}' of model '{config.name}' has data type "
                    f"{from_numpy_dtype(array.dtype)}; the model configuration "
                    f"declares {tensor.datatype}"
                )
        if tensor is not None and tensor.reshape is not None and WILDCARD_DIM not in tensor.dims:
            # The model produces the reshape shape; clients see the configured dims.
            array = array.reshape(((array.shape[0],) if batching else ()) + tensor.dims)
        return array
