"""Forest backend in the manner of Triton's FIL backend (``backend: "fil"``): XGBoost, LightGBM
and Treelite models (scikit-learn forests through Treelite checkpoints) on the CPU.

A model version holds one forest, in the format the ``model_type`` parameter names (Triton's
names and default file names): ``xgboost_ubj`` (``xgboost.ubj``), ``xgboost_json``
(``xgboost.json``), ``xgboost`` (``xgboost.model``, the legacy binary; the default type),
``lightgbm`` (``model.txt``) or ``treelite_checkpoint`` (``checkpoint.tl``, what
``treelite.sklearn.import_model(m).serialize(path)`` writes for a scikit-learn forest);
``default_model_filename`` names another file. Input ``input__0`` (FP32, one row of features
per batch row; NaN is a missing value) and output ``output__0`` (FP32), as Triton's FIL.

Outputs, as FIL computes them: a regressor (``is_classifier`` false) gives its prediction; a
classifier gives the class index (a binary one: 1 where the probability of class 1 exceeds
``threshold``, default 0.5; a multi-class one: the most probable class), or with
``predict_proba`` the probabilities of every class (a binary classifier: one column, the
probability of class 1, or two, ``[1 - p, p]``, as the configured output dims say). So the
output equals the library's own ``predict_proba``, and ``predict`` where its classes are
0..C-1. ``output_class`` (FIL's parameter before 25.09) is read as ``is_classifier``.

What runs the forest (``runtime``, beyond Triton): ``native`` uses the model's own library
(XGBoost's ``Booster.inplace_predict``, LightGBM's ``Booster.predict``), ``treelite`` Treelite's
GTIL (``treelite.gtil.predict``; the only choice for checkpoints and legacy XGBoost binaries),
``auto`` (the default) the native library where it is installed, else Treelite. Threads:
``cpu_nthread`` (FIL's; -1 or absent: every core) per run. FIL's GPU tuning parameters
(``chunk_size``, ``layout``, ``transfer_threshold``, ``use_experimental_optimizations``) are
accepted and have no effect on the CPU; ``treeshap_output`` is not served (UNSUPPORTED).

Auto-complete (beyond Triton's FIL, which needs a configuration): ``input__0`` with the model's
feature count and ``output__0`` with the width the parameters give; ``max_batch_size`` the
default (4) with the dynamic batcher when none is set: set a larger one for forests, whose rows
are cheap. Batching: requests' rows are concatenated and the forest runs once per batch.

The libraries are imported only when a forest model loads: without them that model fails with
UNAVAILABLE naming the package, and every other model serves.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..backend_model import (
    BackendModel,
    BackendModelInstance,
    BatchedTensorInstance,
    autofill_batching,
    autofill_tensors,
    warn_unread_parameters,
)
from ..errors import TritonRosError, internal, invalid_arg, unavailable, unsupported
from ..model_config import ModelConfig, version_dirs
from .backend_parameters import framework_message, parameter_int

_log = logging.getLogger("triton_ros.fil")

INSTALL_HINT = (
    "pip install 'triton_ros[frameworks]' (xgboost-cpu, lightgbm, treelite; "
    "requirements-frameworks.txt pins the releases tested here)"
)
INPUT = "input__0"
OUTPUT = "output__0"
# model_type -> default file name (Triton's FIL)
MODEL_FILES = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}
RUNTIMES = ("auto", "native", "treelite")
_GPU_ONLY = frozenset(
    {
        "chunk_size",
        "layout",
        "transfer_threshold",
        "use_experimental_optimizations",
        "algo",
        "threads_per_tree",
        "storage_type",
        "blocks_per_sm",
    }
)
_READ_PARAMETERS = (
    frozenset(
        {
            "model_type",
            "is_classifier",
            "output_class",
            "predict_proba",
            "threshold",
            "cpu_nthread",
            "xgboost_allow_unknown_field",
            "runtime",
        }
    )
    | _GPU_ONLY
)
_NATIVE_PACKAGE = {
    "xgboost": "xgboost",
    "xgboost_json": "xgboost",
    "xgboost_ubj": "xgboost",
    "lightgbm": "lightgbm",
}


def _import(package: str, model: str):
    try:
        return __import__(package)
    except ImportError as exc:
        raise unavailable(
            f"model '{model}' needs {package}, which is not installed here ({exc}): {INSTALL_HINT}"
        ) from None


def _installed(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


class Forest:
    """A loaded forest: :meth:`scores` of a (rows, features) batch -> (rows, classes) floats
    (probabilities for a classifier, predictions for a regressor)."""

    def __init__(
        self, predict: Callable[[np.ndarray], np.ndarray], features: int, runtime: str
    ) -> None:
        self._predict = predict
        self.features = features
        self.runtime = runtime
        self.classes = self.scores(np.zeros((1, features), np.float32)).shape[1]

    def scores(self, x: np.ndarray) -> np.ndarray:
        out = np.asarray(self._predict(x))
        return out.reshape(out.shape[0], -1)


def _load(
    path: Path, model_type: str, runtime: str, allow_unknown: bool, model: str, threads: int = -1
) -> Forest:
    native = _NATIVE_PACKAGE.get(model_type)
    if runtime == "native" and native is None:
        raise invalid_arg(
            f"model '{model}': runtime 'native' is not available for model_type "
            f"'{model_type}' (Treelite runs it: use runtime 'treelite' or 'auto')"
        )
    use_native = native is not None and (
        runtime == "native" or (runtime == "auto" and _installed(native))
    )
    try:
        if use_native and native == "xgboost":
            xgb = _import("xgboost", model)
            booster = xgb.Booster()
            booster.load_model(str(path))
            booster.set_param({"nthread": max(threads, 0)})
            return Forest(
                lambda x: booster.inplace_predict(x, validate_features=False),
                booster.num_features(),
                "xgboost",
            )
        if use_native and native == "lightgbm":
            lgb = _import("lightgbm", model)
            booster = lgb.Booster(model_file=str(path))
            return Forest(
                lambda x: booster.predict(x, num_threads=max(threads, 0)),
                booster.num_feature(),
                "lightgbm",
            )
        treelite = _import("treelite", model)
        import treelite.gtil  # noqa: F811 - its submodule, into the package imported above

        frontend = treelite.frontend
        if model_type == "treelite_checkpoint":
            forest = treelite.Model.deserialize(str(path))
        elif model_type == "lightgbm":
            forest = frontend.load_lightgbm_model(str(path))
        elif model_type == "xgboost":
            forest = frontend.load_xgboost_model_legacy_binary(str(path))
        else:
            forest = frontend.load_xgboost_model(
                str(path),
                format_choice="json" if model_type == "xgboost_json" else "ubjson",
                allow_unknown_field=allow_unknown,
            )
        return Forest(
            lambda x: treelite.gtil.predict(forest, x, nthread=threads),
            forest.num_feature,
            "treelite",
        )
    except TritonRosError:
        raise
    except Exception as exc:  # the libraries' own errors (XGBoostError, TreeliteError, ...)
        raise invalid_arg(
            f"unable to load model '{model}' ({path}, model_type "
            f"'{model_type}'): {framework_message(exc)}"
        ) from None


class _Settings:
    """FIL's parameters, read and checked."""

    def __init__(self, params: Mapping[str, str], model: str) -> None:
        def flag(key: str, default: bool) -> bool:
            value = params.get(key)
            if value is None or value.strip() == "":
                return default
            lowered = value.strip().lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise invalid_arg(
                f"model '{model}': parameter '{key}' must be true or false, got '{value}'"
            )

        self.model_type = (params.get("model_type") or "xgboost").strip()
        if self.model_type not in MODEL_FILES:
            raise invalid_arg(
                f"model '{model}': unknown model_type '{self.model_type}' (FIL "
                f"takes {', '.join(MODEL_FILES)})"
            )
        if "output_class" in params and "is_classifier" not in params:
            self.is_classifier = flag("output_class", False)
        else:
            self.is_classifier = flag("is_classifier", False)
        self.predict_proba = flag("predict_proba", False)
        self.allow_unknown = flag("xgboost_allow_unknown_field", False)
        try:
            self.threshold = float(params.get("threshold") or 0.5)
        except ValueError:
            raise invalid_arg(
                f"model '{model}': parameter 'threshold' must be a number, got "
                f"'{params.get('threshold')}'"
            ) from None
        self.runtime = (params.get("runtime") or "auto").strip()
        if self.runtime not in RUNTIMES:
            raise invalid_arg(
                f"model '{model}': parameter 'runtime' must be one of "
                f"{', '.join(RUNTIMES)}, got '{self.runtime}'"
            )
        if self.predict_proba and not self.is_classifier:
            raise invalid_arg(f"model '{model}': predict_proba needs is_classifier true")

    def width(self, classes: int, configured: int | None = None) -> int:
        """output__0's width: 1, the classes, or 2 for a binary classifier's probabilities
        where the configuration says 2."""
        if self.is_classifier and self.predict_proba:
            if classes == 1:
                return 2 if configured == 2 else 1
            return classes
        return 1


def _file(version_path: Path, filename: str, model_type: str) -> Path:
    return version_path / (filename or MODEL_FILES[model_type])


class FilModel(BackendModel):
    """Model-level state: the forest (shared by the instances: a prediction keeps no state)."""

    def __init__(
        self, config: ModelConfig, *, version: int, model_path: Path, version_path: Path
    ) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        warn_unread_parameters(config, _READ_PARAMETERS, "fil", _log)
        self.settings = settings = _Settings(config.parameters, config.name)
        self.threads = parameter_int(config, "cpu_nthread", -1)
        self.model_file = _file(version_path, config.default_model_filename, settings.model_type)
        if not self.model_file.is_file():
            raise unavailable(
                f"unable to find '{self.model_file}' for model '{config.name}' "
                f"(model_type '{settings.model_type}')"
            )
        self._check_io()
        self.forest = _load(
            self.model_file,
            settings.model_type,
            settings.runtime,
            settings.allow_unknown,
            config.name,
            self.threads,
        )
        self._check_shapes()
        _log.info(
            "model '%s': %s forest run by %s, %d features, %d class score(s)",
            config.name,
            settings.model_type,
            self.forest.runtime,
            self.forest.features,
            self.forest.classes,
        )

    def _check_io(self) -> None:
        config = self.config
        if config.max_batch_size <= 0:
            raise invalid_arg(f"model '{config.name}': the FIL backend needs max_batch_size > 0")
        names = ([t.name for t in config.inputs], [t.name for t in config.outputs])
        if "treeshap_output" in names[1]:
            raise unsupported(f"model '{config.name}': treeshap_output is not served here")
        if names != ([INPUT], [OUTPUT]):
            raise invalid_arg(
                f"model '{config.name}': a FIL model has one input '{INPUT}' and "
                f"one output '{OUTPUT}' (the configuration has inputs "
                f"{names[0]} and outputs {names[1]})"
            )
        for tensor in (*config.inputs, *config.outputs):
            if tensor.datatype != "FP32" or len(tensor.dims) != 1:
                raise invalid_arg(
                    f"model '{config.name}': '{tensor.name}' must be TYPE_FP32 "
                    f"with one dimension (features or scores), as FIL's"
                )

    def _check_shapes(self) -> None:
        config, forest = self.config, self.forest
        features = config.inputs[0].dims[0]
        if features not in (-1, forest.features):
            raise invalid_arg(
                f"model '{config.name}': input '{INPUT}' has {features} features; "
                f"the model takes {forest.features}"
            )
        width = config.outputs[0].dims[0]
        expected = self.settings.width(forest.classes, width)
        if width not in (-1, expected):
            raise invalid_arg(
                f"model '{config.name}': output '{OUTPUT}' has dims [{width}]; "
                f"with is_classifier {str(self.settings.is_classifier).lower()} "
                f"and predict_proba {str(self.settings.predict_proba).lower()} "
                f"this model gives "
                f"[{expected}] ({forest.classes} class score(s))"
            )
        self.width = expected

    @classmethod
    def can_use_gpu(cls) -> bool:
        return False

    @classmethod
    def auto_complete_config(cls, proto, model_path: Path) -> list[str]:
        """input__0 and output__0 from the forest and the parameters (beyond Triton)."""
        if len(proto.input) > 0 and len(proto.output) > 0:
            return []
        versions = version_dirs(model_path)
        if not versions:
            return []
        params = {k: v.string_value for k, v in proto.parameters.items()}
        settings = _Settings(params, proto.name)
        path = _file(
            model_path / str(versions[0]), proto.default_model_filename, settings.model_type
        )
        if not path.is_file():
            return []
        forest = _load(
            path, settings.model_type, settings.runtime, settings.allow_unknown, proto.name
        )
        warnings = autofill_batching(proto, True)
        if len(proto.input) == 0:
            autofill_tensors(proto, proto.input, [(INPUT, "FP32", [-1, forest.features])])
        if len(proto.output) == 0:
            autofill_tensors(
                proto, proto.output, [(OUTPUT, "FP32", [-1, settings.width(forest.classes)])]
            )
        return warnings

    def create_instance(
        self, *, name: str, kind: str, device_id: int | None
    ) -> BackendModelInstance:
        if kind != "KIND_CPU":
            raise unavailable(
                f"model '{self.config.name}': instance kind {kind} is not served "
                f"here (FIL's GPU forests need cuML; use KIND_CPU)"
            )
        return FilInstance(self, name=name, kind=kind, device_id=device_id)


class FilInstance(BatchedTensorInstance):
    """Runs the model's forest on a batch and applies FIL's output rules."""

    def __init__(self, model: FilModel, *, name: str, kind: str, device_id: int | None) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self.may_run_on_caller = True

    def run(
        self, inputs: Mapping[str, np.ndarray], output_names: list[str]
    ) -> Mapping[str, np.ndarray]:
        model: FilModel = self.model
        x = np.ascontiguousarray(inputs[INPUT], dtype=np.float32)
        try:
            scores = model.forest.scores(x)
        except Exception as exc:
            raise internal(
                f"forest execute failure for model '{model.config.name}': {framework_message(exc)}"
            ) from None
        settings = model.settings
        if not settings.is_classifier:
            out = scores[:, :1]
        elif settings.predict_proba:
            out = (
                np.concatenate([1.0 - scores, scores], axis=1)
                if model.width == 2 and scores.shape[1] == 1
                else scores
            )
        elif scores.shape[1] == 1:
            out = (scores > settings.threshold).astype(np.float32)
        else:
            out = np.argmax(scores, axis=1).astype(np.float32)[:, None]
        return {OUTPUT: np.ascontiguousarray(out, dtype=np.float32)}
