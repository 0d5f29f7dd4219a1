"""The TensorFlow (SavedModel, GraphDef), LiteRT and forest (FIL) backends: models made here
with each framework's own export tools, served by one real server over gRPC and HTTP with
tritonclient, and every answer compared with the framework run directly on the same model.

Tolerances: the same runtime on the same file gives the same numbers, so TensorFlow, LiteRT
FP32 and the forests are compared at rtol 1e-5 / atol 1e-6 (TensorFlow's batched matmul against
a run of other rows may differ in the last bits); quantized LiteRT outputs exactly; class
indices exactly.

The frameworks are optional extras (requirements-frameworks.txt, installed by
scripts/setup.d/45-frameworks.sh for CPython 3.11): a framework that is missing skips its tests,
saying so, and the server must then fail that framework's models naming the package to install
while serving the others (test_a_missing_framework_fails_its_models_naming_the_package, which
runs everywhere)."""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import framework_models as fm

pytestmark = pytest.mark.integration


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


HAVE_TF = _have("tensorflow")
HAVE_LITERT = _have("tensorflow", "ai_edge_litert")  # TensorFlow's converter writes them
HAVE_FORESTS = _have("xgboost", "lightgbm", "treelite", "sklearn")
_WHY = (
    "not installed: an optional extra (requirements-frameworks.txt), installed by "
    "scripts/setup.sh for CPython 3.11 only (docs/backends.md)"
)
needs_tf = pytest.mark.skipif(not HAVE_TF, reason=f"tensorflow {_WHY}")
needs_litert = pytest.mark.skipif(not HAVE_LITERT, reason=f"tensorflow or ai-edge-litert {_WHY}")
needs_forests = pytest.mark.skipif(
    not HAVE_FORESTS, reason=f"xgboost, lightgbm, treelite or scikit-learn {_WHY}"
)

RTOL, ATOL = 1e-5, 1e-6
PROTOCOLS = ["grpc", "http"]


def config(text: str, folder: Path) -> None:
    (folder / "config.pbtxt").write_text(text)


def _tensorflow_models(repo: Path, made: dict) -> None:
    module = fm.two_signature_module()
    made["tf_module"] = module
    # no config.pbtxt: platform, inputs, outputs and batching auto-completed from the signature
    fm.write_savedmodel(repo / "tf_auto" / "1", module)
    # the second signature by TF_SIGNATURE_DEF, Triton's thread parameters, two instances
    fm.write_savedmodel(repo / "tf_add" / "1", module)
    config(
        """platform: "tensorflow_savedmodel"
max_batch_size: 16
input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "b" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "sum" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "add" } }
parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }
parameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "2" } }
""",
        repo / "tf_add",
    )
    _, placeholder, (y, norm) = fm.write_graphdef(repo / "tf_graphdef" / "1", module)
    made["graphdef_names"] = (placeholder, y, norm)
    config(
        f"""platform: "tensorflow_graphdef"
max_batch_size: 8
input [ {{ name: "{placeholder}" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "{y}" data_type: TYPE_FP32 dims: [ 3 ] }},
         {{ name: "{norm}" data_type: TYPE_FP32 dims: [ 1 ] reshape: {{ shape: [ ] }} }} ]
""",
        repo / "tf_graphdef",
    )
    # a GraphDef without a configuration: Triton cannot auto-complete one either
    fm.write_graphdef(repo / "tf_graphdef_no_config" / "1", module)
    # the configuration names a signature input the model does not have
    fm.write_savedmodel(repo / "tf_bad_input" / "1", module)
    config(
        """platform: "tensorflow_savedmodel"
max_batch_size: 4
input [ { name: "z" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
""",
        repo / "tf_bad_input",
    )


def _litert_models(repo: Path, made: dict) -> None:
    cnn = fm.keras_cnn()
    made["tflite_fp32"] = fp32 = fm.tflite_bytes(cnn)
    made["tflite_int8"] = int8 = fm.tflite_bytes(cnn, int8=True)
    made["tflite_fixed"] = fixed = fm.tflite_bytes(fm.keras_cnn(batch=1))
    for name, content in (
        ("tflite_auto", fp32),
        ("tflite_int8", int8),
        ("tflite_int8_fp32", int8),
        ("tflite_fixed", fixed),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.tflite").write_bytes(content)
    # int8 tensors as they are, by the tensors' names as Triton's armnn_tflite backend names them
    config(
        """backend: "armnn_tflite"
max_batch_size: 8
input [ { name: "serving_default_image:0" data_type: TYPE_INT8 dims: [ 16, 16, 3 ] } ]
output [ { name: "StatefulPartitionedCall_1:0" data_type: TYPE_INT8 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
parameters { key: "tflite_num_threads" value: { string_value: "1" } }
""",
        repo / "tflite_int8",
    )
    # the same int8 model with FP32 clients: quantized and dequantized by the backend
    config(
        """backend: "tflite"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 16, 16, 3 ] } ]
output [ { name: "output_0" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
""",
        repo / "tflite_int8_fp32",
    )
    # batch fixed at 1 in the flat buffer: served in batches by looping
    config(
        """backend: "tflite"
max_batch_size: 4
input [ { name: "image" data_type: TYPE_FP32 dims: [ 16, 16, 3 ] } ]
output [ { name: "output_0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
""",
        repo / "tflite_fixed",
    )


def _forest_models(repo: Path, made: dict) -> None:
    x, binary, classes, _ = fm.forest_data()
    made["xgb_binary"] = xgb_binary = fm.xgboost_classifier(binary)
    made["xgb_multi"] = xgb_multi = fm.xgboost_classifier(classes)
    made["lgb"] = lgb = fm.lightgbm_regressor()
    made["rf"] = rf = fm.sklearn_forest()
    made["rf_reg"] = rf_reg = fm.sklearn_forest(regressor=True)
    f = fm.FEATURES
    for name in ("xgb_proba", "xgb_threshold"):
        (repo / name / "1").mkdir(parents=True)
        xgb_binary.save_model(str(repo / name / "1" / "xgboost.ubj"))
    config(
        fm.fil_config("xgb_proba", "xgboost_ubj", f, 2, classifier=True, proba=True),
        repo / "xgb_proba",
    )
    config(
        fm.fil_config(
            "xgb_threshold",
            "xgboost_ubj",
            f,
            1,
            classifier=True,
            extra=('parameters { key: "threshold" value: { string_value: "0.3" } }'),
        ),
        repo / "xgb_threshold",
    )
    for name, runtime in (("xgb_multi", "native"), ("xgb_multi_treelite", "treelite")):
        (repo / name / "1").mkdir(parents=True)
        xgb_multi.save_model(str(repo / name / "1" / "xgboost.json"))
        # output_class: FIL's name for is_classifier before 25.09
        config(
            fm.fil_config(
                name,
                "xgboost_json",
                f,
                1,
                classifier=True,
                extra=(f'parameters {{ key: "runtime" value: {{ string_value: "{runtime}" }} }}'),
            ).replace('key: "is_classifier"', 'key: "output_class"'),
            repo / name,
        )
    for name, runtime in (("lgb_reg", "native"), ("lgb_reg_treelite", "treelite")):
        (repo / name / "1").mkdir(parents=True)
        lgb.booster_.save_model(str(repo / name / "1" / "model.txt"))
        config(
            fm.fil_config(
                name,
                "lightgbm",
                f,
                1,
                classifier=False,
                extra=(
                    f'parameters {{ key: "runtime" value: {{ string_value: "{runtime}" }} }}\n'
                    'parameters { key: "cpu_nthread" value: { string_value: "1" } }'
                ),
            ),
            repo / name,
        )
    fm.write_treelite_checkpoint(repo / "rf_proba" / "1", rf)
    config(
        fm.fil_config("rf_proba", "treelite_checkpoint", f, 3, classifier=True, proba=True),
        repo / "rf_proba",
    )
    fm.write_treelite_checkpoint(repo / "rf_class" / "1", rf)
    config(
        fm.fil_config("rf_class", "treelite_checkpoint", f, 1, classifier=True), repo / "rf_class"
    )
    # no inputs or outputs listed: auto-completed from the checkpoint (beyond Triton's FIL)
    fm.write_treelite_checkpoint(repo / "rf_reg_auto" / "1", rf_reg)
    config(
        """backend: "fil"
max_batch_size: 64
parameters { key: "model_type" value: { string_value: "treelite_checkpoint" } }
parameters { key: "is_classifier" value: { string_value: "false" } }
""",
        repo / "rf_reg_auto",
    )
    # wrong output width for predict_proba of a 3-class forest
    fm.write_treelite_checkpoint(repo / "rf_bad_width" / "1", rf)
    config(
        fm.fil_config("rf_bad_width", "treelite_checkpoint", f, 2, classifier=True, proba=True),
        repo / "rf_bad_width",
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, dict]:
    repo = tmp_path_factory.mktemp("framework_models")
    made: dict = {}
    if HAVE_TF:
        _tensorflow_models(repo, made)
    if HAVE_LITERT:
        _litert_models(repo, made)
    if HAVE_FORESTS:
        _forest_models(repo, made)
    # one model always there, so that the server has something to serve without frameworks
    (repo / "plain").mkdir()
    from model_factory import add_sub_graph, save

    save(add_sub_graph("FP32", ["N", 4]), repo / "plain" / "1" / "model.onnx")
    return repo, made


@pytest.fixture(scope="module")
def server(start_module_server, models):
    return start_module_server("--model-repository", str(models[0]), timeout=180)


def infer(
    server, protocol: str, model: str, arrays: dict[str, np.ndarray], outputs: list[str]
) -> list[np.ndarray]:
    module = grpcclient if protocol == "grpc" else httpclient
    client = server.client() if protocol == "grpc" else server.http_client()
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(
            name,
            list(array.shape),
            {np.dtype(np.float32): "FP32", np.dtype(np.int8): "INT8"}[array.dtype],
        )
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[module.InferRequestedOutput(n) for n in outputs])
    return [result.as_numpy(n) for n in outputs]


def states(server) -> dict[str, tuple[str, str]]:
    return {
        m.name: (m.state, m.reason) for m in server.client().get_model_repository_index().models
    }


# ---- TensorFlow -----------------------------------------------------------------------------


@needs_tf
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_savedmodel_auto_completed_from_its_serving_signature(server, models, protocol):
    module = models[1]["tf_module"]
    meta = server.client().get_model_metadata("tf_auto", as_json=True)
    assert {i["name"]: i["shape"] for i in meta["inputs"]} == {"x": ["-1", "4"]}
    # a batch-only tensor gets dims [1] reshaped to [] (Triton's auto-complete rule)
    assert {o["name"]: o["shape"] for o in meta["outputs"]} == {
        "y": ["-1", "3"],
        "norm": ["-1", "1"],
    }
    cfg = server.client().get_model_config("tf_auto", as_json=True)["config"]
    assert cfg["platform"] == "tensorflow_savedmodel" and cfg["max_batch_size"] == 4
    x = fm.rows(3, 1, 4)
    y, norm = infer(server, protocol, "tf_auto", {"x": x}, ["y", "norm"])
    expected = module.serve(x)
    np.testing.assert_allclose(y, expected["y"].numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(norm.reshape(-1), expected["norm"].numpy(), rtol=RTOL, atol=ATOL)


@needs_tf
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_savedmodel_second_signature_by_tf_signature_def(server, models, protocol):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(models[0] / "tf_add" / "1" / "model.savedmodel"))
    a, b = fm.rows(2, 2, 4), fm.rows(2, 3, 4)
    (got,) = infer(server, protocol, "tf_add", {"a": a, "b": b}, ["sum"])
    expected = loaded.signatures["add"](a=tf.constant(a), b=tf.constant(b))["sum"].numpy()
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


@needs_tf
def test_savedmodel_concurrent_requests_are_batched_each_gets_its_rows(server, models):
    import tensorflow as tf

    loaded = tf.saved_model.load(str(models[0] / "tf_add" / "1" / "model.savedmodel"))
    before = _executions(server, "tf_add")

    def one(i):
        a, b = fm.rows(i % 3 + 1, 10 + i, 4), fm.rows(i % 3 + 1, 40 + i, 4)
        (got,) = infer(server, "grpc", "tf_add", {"a": a, "b": b}, ["sum"])
        return got, loaded.signatures["add"](a=tf.constant(a), b=tf.constant(b))["sum"].numpy()

    with ThreadPoolExecutor(8) as pool:
        for got, expected in pool.map(one, range(24)):
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    inferences, executions = _executions(server, "tf_add")
    assert inferences - before[0] == 8 * (1 + 2 + 3)  # rows
    assert executions - before[1] < 24  # some requests shared an execution


def _executions(server, model: str) -> tuple[int, int]:
    stats = server.client().get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


@needs_tf
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_graphdef_by_node_names_matches_the_function(server, models, protocol):
    module = models[1]["tf_module"]
    placeholder, y_name, norm_name = models[1]["graphdef_names"]
    x = fm.rows(5, 4, 4)
    y, norm = infer(server, protocol, "tf_graphdef", {placeholder: x}, [y_name, norm_name])
    expected = module.serve(x)
    np.testing.assert_allclose(y, expected["y"].numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(norm.reshape(-1), expected["norm"].numpy(), rtol=RTOL, atol=ATOL)


@needs_tf
def test_tensorflow_threads_come_from_the_model_parameters(explicit_core, models):
    """TF_NUM_INTRA_THREADS and TF_NUM_INTER_THREADS reach each instance's session."""
    import shutil

    shutil.copytree(models[0] / "tf_add", explicit_core.repo_path / "tf_add")
    explicit_core.load_model("tf_add")
    instances = explicit_core.get_model("tf_add").instances
    assert len(instances) == 2
    sessions = {id(i.session) for i in instances}
    assert len(sessions) == 2  # one session per instance (Triton's default)
    for instance in instances:
        options = instance.session._config
        assert options.intra_op_parallelism_threads == 1
        assert options.inter_op_parallelism_threads == 2
        assert options.use_per_session_threads


@needs_tf
def test_tensorflow_load_failures_say_what_is_wrong(server):
    found = states(server)
    state, reason = found["tf_graphdef_no_config"]
    assert state == "UNAVAILABLE"
    assert "config.pbtxt must list its inputs (placeholders: x)" in reason
    state, reason = found["tf_bad_input"]
    assert state == "UNAVAILABLE"
    assert "unexpected inference input 'z', allowed inputs are: x" in reason
    assert "Traceback" not in server.log()


# ---- LiteRT --------------------------------------------------------------------------------


def _quantize(x: np.ndarray, scale: float, zero: int) -> np.ndarray:
    return np.clip(np.round(x / np.float32(scale)) + zero, -128, 127).astype(np.int8)


def _io_quantization(content: bytes):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=content).get_signature_runner()
    (i,), (o,) = runner.get_input_details().values(), runner.get_output_details().values()
    return i["quantization"], o["quantization"]


@needs_litert
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litert_fp32_auto_completed_and_resized_to_the_batch(server, models, protocol):
    meta = server.client().get_model_metadata("tflite_auto", as_json=True)
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [
        ("image", "FP32", ["-1", "16", "16", "3"])
    ]
    assert [o["name"] for o in meta["outputs"]] == ["output_0"]
    x = fm.images(4, 11)
    (got,) = infer(server, protocol, "tflite_auto", {"image": x}, ["output_0"])
    np.testing.assert_allclose(
        got, fm.litert_run(models[1]["tflite_fp32"], x), rtol=RTOL, atol=ATOL
    )
    assert "dynamic batch dimension: a batch runs as one invocation" in server.log()


@needs_litert
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litert_int8_tensors_by_their_names_exactly_as_litert(server, models, protocol):
    content = models[1]["tflite_int8"]
    (scale, zero), _ = _io_quantization(content)
    q = _quantize(fm.images(4, 12), scale, zero)
    (got,) = infer(
        server,
        protocol,
        "tflite_int8",
        {"serving_default_image:0": q},
        ["StatefulPartitionedCall_1:0"],
    )
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, fm.litert_run(content, q))


@needs_litert
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_litert_int8_with_fp32_clients_quantized_as_litert_defines(server, models, protocol):
    """real = scale * (q - zero_point): the backend quantizes the input and dequantizes the
    output exactly as a client of the interpreter would."""
    content = models[1]["tflite_int8"]
    (si, zi), (so, zo) = _io_quantization(content)
    x = fm.images(3, 13)
    (got,) = infer(server, protocol, "tflite_int8_fp32", {"image": x}, ["output_0"])
    q_out = fm.litert_run(content, _quantize(x, si, zi))
    expected = np.float32(so) * (q_out.astype(np.float32) - np.float32(zo))
    np.testing.assert_array_equal(got, expected)
    # and the int8 model stays close to the FP32 one (quantization error, not a mix-up)
    fp32 = fm.litert_run(models[1]["tflite_fp32"], x)
    assert np.abs(got - fp32).max() < 8 * so


@needs_litert
def test_litert_fixed_batch_served_by_looping(server, models):
    assert (
        "batch dimension fixed at 1 in the model: a batch of N rows runs as N invocations "
        "(looping)" in server.log()
    )
    content = models[1]["tflite_fixed"]

    def one(i):
        x = fm.images(1 + i % 2, 20 + i)
        (got,) = infer(server, "grpc", "tflite_fixed", {"image": x}, ["output_0"])
        return got, fm.litert_run(content, x)

    with ThreadPoolExecutor(6) as pool:
        for got, expected in pool.map(one, range(12)):
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


# ---- forests (FIL) --------------------------------------------------------------------------


@needs_forests
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_xgboost_classifier_predict_proba(server, models, protocol):
    x = fm.rows(50, 31)
    (got,) = infer(server, protocol, "xgb_proba", {"input__0": x}, ["output__0"])
    np.testing.assert_allclose(got, models[1]["xgb_binary"].predict_proba(x), rtol=RTOL, atol=ATOL)


@needs_forests
def test_xgboost_binary_threshold(server, models):
    x = fm.rows(200, 32)
    (got,) = infer(server, "grpc", "xgb_threshold", {"input__0": x}, ["output__0"])
    p = models[1]["xgb_binary"].predict_proba(x)[:, 1]
    np.testing.assert_array_equal(got[:, 0], (p > 0.3).astype(np.float32))
    assert 0 < ((p > 0.3) != (p > 0.5)).sum()  # the threshold mattered for some rows


@needs_forests
@pytest.mark.parametrize("model", ["xgb_multi", "xgb_multi_treelite"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_xgboost_multiclass_predict_native_and_treelite(server, models, model, protocol):
    x = fm.rows(80, 33)
    (got,) = infer(server, protocol, model, {"input__0": x}, ["output__0"])
    np.testing.assert_array_equal(got[:, 0], models[1]["xgb_multi"].predict(x))


@needs_forests
@pytest.mark.parametrize("model", ["lgb_reg", "lgb_reg_treelite"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_lightgbm_regressor_native_and_treelite(server, models, model, protocol):
    x = fm.rows(64, 34)
    (got,) = infer(server, protocol, model, {"input__0": x}, ["output__0"])
    # LightGBM predicts in float64; FIL's output is FP32
    np.testing.assert_allclose(got[:, 0], models[1]["lgb"].predict(x), rtol=RTOL, atol=ATOL)


@needs_forests
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sklearn_forest_through_a_treelite_checkpoint(server, models, protocol):
    rf = models[1]["rf"]
    x = fm.rows(60, 35)
    (proba,) = infer(server, protocol, "rf_proba", {"input__0": x}, ["output__0"])
    np.testing.assert_allclose(proba, rf.predict_proba(x), rtol=RTOL, atol=ATOL)
    (classes,) = infer(server, protocol, "rf_class", {"input__0": x}, ["output__0"])
    np.testing.assert_array_equal(classes[:, 0], rf.predict(x))
    (reg,) = infer(server, protocol, "rf_reg_auto", {"input__0": x}, ["output__0"])
    np.testing.assert_allclose(reg[:, 0], models[1]["rf_reg"].predict(x), rtol=RTOL, atol=ATOL)


@needs_forests
def test_forest_requests_batched_rows_back_to_each(server, models):
    rf = models[1]["rf"]

    def one(i):
        x = fm.rows(1 + i % 5, 100 + i)
        (got,) = infer(server, "grpc", "rf_proba", {"input__0": x}, ["output__0"])
        return got, rf.predict_proba(x)

    with ThreadPoolExecutor(8) as pool:
        for got, expected in pool.map(one, range(32)):
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


@needs_forests
def test_forest_load_failures_say_what_is_wrong(server):
    state, reason = states(server)["rf_bad_width"]
    assert state == "UNAVAILABLE"
    assert "output 'output__0' has dims [2]" in reason and "gives [3]" in reason
    cfg = server.client().get_model_config("rf_reg_auto", as_json=True)["config"]
    assert [(i["name"], i["dims"]) for i in cfg["input"]] == [("input__0", [str(fm.FEATURES)])]


# ---- without the frameworks ----------------------------------------------------------------

_MISSING = ("tensorflow", "ai_edge_litert", "tflite_runtime", "xgboost", "lightgbm", "treelite")


def test_a_missing_framework_fails_its_models_naming_the_package(
    start_module_server, tmp_path_factory
):
    """A server where the frameworks cannot be imported (each shadowed by a package that raises
    ImportError, as an uninstalled one does): their models fail to load with UNAVAILABLE
    naming what to install; the server starts and serves the rest."""
    root = tmp_path_factory.mktemp("no_frameworks")
    shadow = root / "shadow"
    for name in _MISSING:
        (shadow / name).mkdir(parents=True)
        (shadow / name / "__init__.py").write_text(
            f'raise ImportError("No module named {name!r} (shadowed by the test)")\n'
        )
    repo = root / "repo"
    from model_factory import add_sub_graph, save

    save(add_sub_graph("FP32", ["N", 4]), repo / "plain" / "1" / "model.onnx")
    for name, file, text in (
        (
            "savedmodel",
            "model.graphdef",
            'platform: "tensorflow_graphdef"\nmax_batch_size: 0\n'
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
        ),
        (
            "litert",
            "model.tflite",
            'backend: "tflite"\nmax_batch_size: 0\n'
            'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
        ),
        (
            "forest",
            "xgboost.json",
            'backend: "fil"\nmax_batch_size: 8\n'
            'input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
            'output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            'parameters { key: "model_type" value: { string_value: "xgboost_json" } }\n',
        ),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / file).write_bytes(b"not read")
        (repo / name / "config.pbtxt").write_text(text)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shadow), env.get("PYTHONPATH")) if p)
    server = start_module_server("--model-repository", str(repo), env=env)
    found = states(server)
    packages = {"savedmodel": "tensorflow-cpu", "litert": "ai-edge-litert", "forest": "treelite"}
    for name, package in packages.items():
        state, reason = found[name]
        assert state == "UNAVAILABLE", (name, state, reason)
        assert "is not installed here" in reason and package in reason, (name, reason)
    assert server.client().is_model_ready("plain")
    assert "Traceback" not in server.log()
