"""Ensembles served by a real ``triton-ros-server``, checked with tritonclient over 127.0.0.1:
the bundled detector_pipeline against its steps run by hand (ONNX Runtime + numpy) and against
the ground truth of synthetic frames, error
propagation, DAGs with outputs from different steps, nested ensembles, load-time validation,
statistics and explicit-mode loading."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server_process import MODEL_REPOSITORY, ROOT


pytestmark = pytest.mark.integration

ENSEMBLE_MODELS = ROOT / "test" / "ensemble_models"
SCORE_THRESHOLD = 0.5  # model_repository/detector_postprocess/config.pbtxt
MAX_DETECTIONS = 100
SIZE = 256


@pytest.fixture(scope="module")
def server(start_module_server):
    """The bundled repository and the ensembles of test/ensemble_models (read only)."""
    return start_module_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--model-repository",
        str(ENSEMBLE_MODELS),
        timeout=120,
    )


@pytest.fixture(scope="module")
def detector_session():
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        str(MODEL_REPOSITORY / "color_detector" / "1" / "model.onnx"),
        options,
        providers=["CPUExecutionProvider"],
    )


# ------------------------------------------------------------------------------------------
# The pipeline's steps by hand
# ------------------------------------------------------------------------------------------


def reference_detections(rows: np.ndarray) -> np.ndarray:
    """Threshold, clip, best first: written plainly, one loop."""
    kept = sorted(
        (tuple(float(v) for v in row) for row in rows if row[4] >= np.float32(SCORE_THRESHOLD)),
        key=lambda r: (-r[4], r[5]),
    )
    out = np.zeros((MAX_DETECTIONS, 6), np.float32)
    for i, (x1, y1, x2, y2, score, cls) in enumerate(kept[:MAX_DETECTIONS]):
        out[i] = (
            min(max(x1, 0), SIZE),
            min(max(y1, 0), SIZE),
            min(max(x2, 0), SIZE),
            min(max(y2, 0), SIZE),
            score,
            cls,
        )
    return out


def pipeline_by_hand(session, images: np.ndarray) -> np.ndarray:
    chw = images.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    (rows,) = session.run(["detections"], {"images": chw})
    return np.stack([reference_detections(r) for r in rows])


def _scenes(seed: int, n: int) -> tuple[np.ndarray, list]:
    """256x256 rgb8 frames of the synthetic cameras, and their ground truth."""
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    scene = SyntheticScene(parse_camera("robot/camera:256x256:rgb8"), seed=seed)
    frames = [scene.render(0.37 * k) for k in range(n)]
    return np.stack([f for f, _ in frames]), [t for _, t in frames]


def _images(seed: int, n: int) -> np.ndarray:
    return _scenes(seed, n)[0]


def _infer_pipeline(client, images: np.ndarray) -> np.ndarray:
    tensor = grpcclient.InferInput("images", list(images.shape), "UINT8")
    tensor.set_data_from_numpy(images)
    return client.infer("detector_pipeline", [tensor]).as_numpy("detections")


def _ints(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), "INT32")
    tensor.set_data_from_numpy(array)
    return tensor


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------


def test_pipeline_metadata_is_the_ros_contract(server):
    client = server.client()
    meta = client.get_model_metadata("detector_pipeline")
    assert meta.platform == "ensemble"
    assert [(i.name, i.datatype, list(i.shape)) for i in meta.inputs] == [
        ("images", "UINT8", [-1, 256, 256, 3])
    ]
    assert [(o.name, o.datatype, list(o.shape)) for o in meta.outputs] == [
        ("detections", "FP32", [-1, 100, 6])
    ]
    assert client.get_model_config("detector_pipeline").config.max_batch_size == 16


def test_pipeline_equals_the_steps_run_by_hand(server, detector_session):
    client = server.client()
    images, truths = _scenes(seed=7, n=3)
    got = _infer_pipeline(client, images)
    expected = pipeline_by_hand(detector_session, images)
    assert got.shape == (3, MAX_DETECTIONS, 6) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    # And the boxes are the objects drawn: every class once, its box within a pixel.
    for detections, truth in zip(got, truths):
        found = detections[detections[:, 4] > 0]
        assert sorted(found[:, 5].astype(int)) == sorted(truth.classes.tolist())
        assert (found[:, 4] > 0.9).all() and (np.diff(found[:, 4]) <= 0).all()
        for box, cls in zip(truth.boxes, truth.classes):
            np.testing.assert_allclose(found[found[:, 5] == cls][0, :4], box, atol=1.0)
    # A flat mid-grey image has no object: every row is zero.
    empty = _infer_pipeline(client, np.full((1, SIZE, SIZE, 3), 128, np.uint8))
    assert not empty.any()


def test_pipeline_with_concurrent_clients(server, detector_session):
    def worker(seed: int) -> int:
        client = grpcclient.InferenceServerClient(server.url)
        for i in range(4):
            images = _images(seed * 100 + i, n=1 + (i % 2))
            np.testing.assert_allclose(
                _infer_pipeline(client, images),
                pipeline_by_hand(detector_session, images),
                rtol=0,
                atol=1e-5,
            )
        return 4

    client = server.client()
    before = {
        s.name: s.inference_stats.success.count
        for s in client.get_inference_statistics().model_stats
    }
    with ThreadPoolExecutor(4) as pool:
        sent = sum(f.result(timeout=240) for f in [pool.submit(worker, s) for s in range(4)])
    after = {s.name: s for s in client.get_inference_statistics().model_stats}
    # Statistics for the ensemble and for each of its steps.
    for name in (
        "detector_pipeline",
        "detector_preprocess",
        "color_detector",
        "detector_postprocess",
    ):
        assert after[name].inference_stats.success.count - before[name] == sent, name
    ensemble = after["detector_pipeline"]
    assert ensemble.execution_count >= sent
    assert ensemble.inference_stats.compute_infer.ns > 0


def test_step_error_becomes_the_ensemble_error(server):
    client = server.client()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_then_double", [_ints("A", a), _ints("B", -2 * a)])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"  # the step's own code
    assert info.value.message().startswith("in ensemble 'add_then_double', ")
    assert "checked_double got a negative value" in info.value.message()
    stats = client.get_inference_statistics("add_then_double").model_stats[0].inference_stats
    assert stats.fail.count >= 1


def test_outputs_from_different_steps_and_requested_subset(server):
    client = server.client()
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), np.int32)
    result = client.infer("add_then_double", [_ints("A", a), _ints("B", b)])
    np.testing.assert_array_equal(result.as_numpy("DOUBLED_SUM"), 2 * (a + b))
    np.testing.assert_array_equal(result.as_numpy("DIFFERENCE"), a - b)
    only = client.infer(
        "add_then_double",
        [_ints("A", a), _ints("B", b)],
        outputs=[grpcclient.InferRequestedOutput("DIFFERENCE")],
    )
    assert only.as_numpy("DOUBLED_SUM") is None
    np.testing.assert_array_equal(only.as_numpy("DIFFERENCE"), a - b)


def test_nested_ensemble(server):
    client = server.client()
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = client.infer("nested_pipeline", [_ints("X", x), _ints("Y", x)])
    np.testing.assert_array_equal(result.as_numpy("Z"), 4 * x)


def test_bad_request_to_an_ensemble_is_refused(server):
    client = server.client()
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_then_double", [_ints("A", np.zeros((1, 16), np.int32))])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "missing required input(s) ['B']" in info.value.message()


@pytest.mark.parametrize(
    "name,reason",
    [
        (
            "bad_mapping",
            "in ensemble bad_mapping, ensemble tensor A is mapping to non-existing input "
            "INPUT_NOPE in model simple",
        ),
        (
            "bad_dtype",
            "in ensemble bad_dtype, ensemble tensor A: inconsistent data type: TYPE_FP32 is "
            "inferred from model bad_dtype while TYPE_INT32 is inferred from model simple",
        ),
        ("unwritten_output", "output 'OUT' for ensemble 'unwritten_output' is not written"),
        (
            "missing_step_model",
            "ensemble 'missing_step_model' depends on 'no_such_model' which has no loaded version",
        ),
    ],
)
def test_invalid_ensembles_fail_to_load_with_the_reason(server, name, reason):
    client = server.client()
    assert not client.is_model_ready(name)
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index[name].state == "UNAVAILABLE"
    assert reason in index[name].reason
    assert client.is_model_ready("detector_pipeline")


def test_explicit_load_of_an_ensemble_loads_its_composing_models(start_server):
    server = start_server(
        "--model-repository", str(MODEL_REPOSITORY), "--model-control-mode", "explicit"
    )
    client = server.client()
    assert not client.is_model_ready("color_detector")
    client.load_model("detector_pipeline")
    for name in (
        "detector_pipeline",
        "detector_preprocess",
        "color_detector",
        "detector_postprocess",
    ):
        assert client.is_model_ready(name), name
    assert not client.is_model_ready("simple") and not client.is_model_ready("detector")
    detections = _infer_pipeline(client, _images(seed=3, n=1))
    assert detections.shape == (1, MAX_DETECTIONS, 6)
    client.unload_model("detector_pipeline", unload_dependents=True)
    assert not client.is_model_ready("detector_pipeline")
    assert not client.is_model_ready("detector_postprocess")
