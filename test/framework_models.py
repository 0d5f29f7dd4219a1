"""Small models of TensorFlow, LiteRT, XGBoost, LightGBM and scikit-learn, made at test time
with each framework's own export tools and fixed seeds (no downloads), and the small CNN the
framework benchmark runs in every format (bench/backends/frameworks.py).

Each writer imports its framework when called, so that a module using one framework runs where
the others are missing."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FEATURES = 6


def rows(n: int, seed: int, features: int = FEATURES) -> np.ndarray:
    return np.random.default_rng(seed).random((n, features), dtype=np.float32)


# ---- TensorFlow ------------------------------------------------------------------------------


def two_signature_module():
    """A tf.Module with two signatures: ``serving_default`` (x [N,4] -> y [N,3] = x @ w,
    norm [N] = sum(x^2)) and ``add`` (a, b [N,4] -> sum [N,4] = a + b * scale)."""
    import tensorflow as tf

    class TwoSignatures(tf.Module):
        def __init__(self):
            super().__init__()
            rng = np.random.default_rng(3)
            self.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32))
            self.scale = tf.Variable(np.float32(0.5))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            return {"y": tf.matmul(x, self.w), "norm": tf.reduce_sum(x * x, axis=1)}

        @tf.function(
            input_signature=[
                tf.TensorSpec([None, 4], tf.float32, name="a"),
                tf.TensorSpec([None, 4], tf.float32, name="b"),
            ]
        )
        def add(self, a, b):
            return {"sum": a + b * self.scale}

    return TwoSignatures()


def write_savedmodel(folder: Path, module) -> Path:
    """``folder/model.savedmodel`` with the module's two signatures."""
    import tensorflow as tf

    path = folder / "model.savedmodel"
    folder.mkdir(parents=True, exist_ok=True)
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.serve, "add": module.add}
    )
    return path


def write_graphdef(folder: Path, module) -> tuple[Path, str, list[str]]:
    """``folder/model.graphdef``: the ``serve`` function frozen (variables as constants);
    returns the path, the input placeholder's name and the output nodes' names (y, norm)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(module.serve.get_concrete_function())
    graph_def = frozen.graph.as_graph_def()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.graphdef"
    path.write_bytes(graph_def.SerializeToString())
    inputs = [n.name for n in graph_def.node if n.op == "Placeholder"]
    # structured outputs in the order of the signature's keys (norm, y)
    keys = sorted(module.serve.get_concrete_function().structured_outputs)
    names = {k: t.name.split(":")[0] for k, t in zip(keys, frozen.outputs)}
    return path, inputs[0], [names["y"], names["norm"]]


# ---- LiteRT -------------------------------------------------------------------------------


def keras_cnn(size: int = 16, batch: int | None = None):
    """A small Keras CNN (NHWC image [size,size,3] -> logits [3]), fixed seed; ``batch`` fixes
    the batch dimension (None: dynamic)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    image = tf.keras.Input((size, size, 3), batch_size=batch, name="image")
    x = tf.keras.layers.Conv2D(8, 3, strides=2, activation="relu")(image)
    x = tf.keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    return tf.keras.Model(image, tf.keras.layers.Dense(3, name="logits")(x))


def images(n: int, seed: int, size: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).random((n, size, size, 3), dtype=np.float32)


def tflite_bytes(model, int8: bool = False, size: int = 16) -> bytes:
    """The model as a LiteRT flat buffer: FP32, or fully int8 (int8 inputs and outputs,
    calibrated on 32 seeded images)."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        calibration = images(32, 7, size)

        def representative():
            for i in range(len(calibration)):
                yield [calibration[i : i + 1]]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return converter.convert()


def litert_run(content: bytes, x: np.ndarray) -> np.ndarray:
    """The flat buffer run directly by LiteRT's interpreter, row by row (the reference)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content, num_threads=1)
    runner = interpreter.get_signature_runner()
    key_in = next(iter(runner.get_input_details()))
    key_out = next(iter(runner.get_output_details()))
    return np.concatenate([runner(**{key_in: x[i : i + 1]})[key_out] for i in range(len(x))])


# ---- forests --------------------------------------------------------------------------------


def forest_data(n: int = 400, seed: int = 0):
    x = rows(n, seed)
    binary = (x[:, 0] + x[:, 1] > 1.0).astype(int)
    classes = np.minimum((x[:, 2] * 3).astype(int), 2)
    target = (2 * x[:, 0] - x[:, 3] + 0.1 * np.sin(7 * x[:, 4])).astype(np.float32)
    return x, binary, classes, target


def xgboost_classifier(labels):
    import xgboost as xgb

    x, *_ = forest_data()
    return xgb.XGBClassifier(n_estimators=20, max_depth=4, random_state=0, n_jobs=1).fit(x, labels)


def lightgbm_regressor():
    import lightgbm as lgb

    x, _, _, target = forest_data()
    return lgb.LGBMRegressor(
        n_estimators=30, num_leaves=15, random_state=0, n_jobs=1, verbose=-1
    ).fit(x, target)


def sklearn_forest(regressor: bool = False):
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    x, _, classes, target = forest_data()
    if regressor:
        return RandomForestRegressor(n_estimators=10, max_depth=6, random_state=0).fit(x, target)
    return RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(x, classes)


def write_treelite_checkpoint(folder: Path, estimator) -> Path:
    """``folder/checkpoint.tl``, as FIL's convert_sklearn.py writes it."""
    import treelite

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "checkpoint.tl"
    treelite.sklearn.import_model(estimator).serialize(str(path))
    return path


def fil_config(
    name: str,
    model_type: str,
    features: int,
    width: int,
    *,
    classifier: bool,
    proba: bool = False,
    extra: str = "",
    max_batch: int = 256,
) -> str:
    params = {
        "model_type": model_type,
        "is_classifier": str(classifier).lower(),
        "predict_proba": str(proba).lower(),
    }
    lines = "\n".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    return f"""name: "{name}"
backend: "fil"
max_batch_size: {max_batch}
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {width} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ }}
{lines}
{extra}"""
