"""Ensembles served by a real ``triton-ros-server``, checked with tritonclient over 127.0.0.1:
the bundled detector_pipeline against its steps run by hand (ONNX Runtime + numpy), error
propagation, DAGs with outputs from different steps, nested ensembles, load-time validation,
statistics and explicit-mode loading."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from server_process import MODEL_REPOSITORY, ROOT, ServerProcess

ENSEMBLE_MODELS = ROOT / "test" / "ensemble_models"
SCORE_THRESHOLD = 0.018      # model_repository/detector_postprocess/config.pbtxt
IOU_THRESHOLD = 0.45
MAX_DETECTIONS = 100
SIZE = 256


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("ensembles")
    shutil.copytree(MODEL_REPOSITORY, root / "bundled")
    shutil.copytree(ENSEMBLE_MODELS, root / "extra")
    server = ServerProcess("--model-repository", str(root / "bundled"),
                           "--model-repository", str(root / "extra"))
    server.wait_live(timeout=120)
    yield server
    rc = server.stop()
    assert rc == 0, f"server exited with {rc}:\n{server.log()}"


@pytest.fixture(scope="module")
def detector_session():
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(MODEL_REPOSITORY / "detector" / "1" / "model.onnx"), options,
                                providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------------------------------
# The pipeline's steps by hand
# ------------------------------------------------------------------------------------------

def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0.0) * max(h, 0.0)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def reference_detections(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Threshold, clip, class-wise greedy NMS, best first: written plainly, one loop."""
    threshold = np.float32(SCORE_THRESHOLD)
    candidates = [(float(scores[i, c]), c, i) for i in range(scores.shape[0])
                  for c in range(scores.shape[1]) if scores[i, c] >= threshold]
    candidates.sort(key=lambda t: (-t[0], t[1], t[2]))
    kept: list[tuple[float, int, np.ndarray]] = []
    for score, cls, i in candidates:
        box = np.clip(boxes[i], np.float32(0), np.float32(SIZE))
        if any(k_cls == cls and _iou(box, k_box) > IOU_THRESHOLD for _, k_cls, k_box in kept):
            continue
        kept.append((score, cls, box))
        if len(kept) == MAX_DETECTIONS:
            break
    out = np.zeros((MAX_DETECTIONS, 6), np.float32)
    for row, (score, cls, box) in enumerate(kept):
        out[row, :4] = box
        out[row, 4] = score
        out[row, 5] = cls
    return out


def pipeline_by_hand(session, images: np.ndarray) -> np.ndarray:
    chw = images.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
    boxes, scores = session.run(["boxes", "scores"], {"images": chw})
    return np.stack([reference_detections(b, s) for b, s in zip(boxes, scores)])


def _images(seed: int, n: int) -> np.ndarray:
    """Camera-like test images: flat regions, blocks and noise (so some boxes pass, not all)."""
    rng = np.random.default_rng(seed)
    images = np.empty((n, SIZE, SIZE, 3), np.uint8)
    for k in range(n):
        blocks = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        images[k] = blocks.repeat(16, axis=0).repeat(16, axis=1)
        if k % 2:
            images[k] = rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)
    return images


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
    assert [(i.name, i.datatype, list(i.shape)) for i in meta.inputs] == \
        [("images", "UINT8", [-1, 256, 256, 3])]
    assert [(o.name, o.datatype, list(o.shape)) for o in meta.outputs] == \
        [("detections", "FP32", [-1, 100, 6])]
    assert client.get_model_config("detector_pipeline").config.max_batch_size == 16


def test_pipeline_equals_the_steps_run_by_hand(server, detector_session):
    client = server.client()
    images = _images(seed=7, n=3)
    got = _infer_pipeline(client, images)
    expected = pipeline_by_hand(detector_session, images)
    assert got.shape == (3, MAX_DETECTIONS, 6) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    kept = (expected[:, :, 4] > 0).sum(axis=1)
    assert (kept > 0).all() and (kept < MAX_DETECTIONS).any(), kept  # a meaningful case
    # A flat image has no box above the threshold: every row is zero.
    empty = _infer_pipeline(client, np.zeros((1, SIZE, SIZE, 3), np.uint8))
    assert not empty.any()


def test_pipeline_with_concurrent_clients(server, detector_session):
    def worker(seed: int) -> int:
        client = grpcclient.InferenceServerClient(server.url)
        for i in range(4):
            images = _images(seed * 100 + i, n=1 + (i % 2))
            np.testing.assert_allclose(_infer_pipeline(client, images),
                                       pipeline_by_hand(detector_session, images), rtol=0, atol=1e-5)
        return 4

    client = server.client()
    before = {s.name: s.inference_stats.success.count
              for s in client.get_inference_statistics().model_stats}
    with ThreadPoolExecutor(4) as pool:
        sent = sum(f.result(timeout=240) for f in [pool.submit(worker, s) for s in range(4)])
    after = {s.name: s for s in client.get_inference_statistics().model_stats}
    # Statistics for the ensemble and for each of its steps.
    for name in ("detector_pipeline", "detector_preprocess", "detector", "detector_postprocess"):
        assert after[name].inference_stats.success.count - before[name] == sent, name
    ensemble = after["detector_pipeline"]
    assert ensemble.execution_count >= sent
    assert ensemble.inference_stats.compute_infer.ns > 0


def test_step_error_becomes_the_ensemble_error(server):
    client = server.client()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_then_double", [_ints("A", a), _ints("B", -2 * a)])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"   # the step's own code
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
    only = client.infer("add_then_double", [_ints("A", a), _ints("B", b)],
                        outputs=[grpcclient.InferRequestedOutput("DIFFERENCE")])
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


@pytest.mark.parametrize("name,reason", [
    ("bad_mapping", "in ensemble bad_mapping, ensemble tensor A is mapping to non-existing input "
                    "INPUT_NOPE in model simple"),
    ("bad_dtype", "in ensemble bad_dtype, ensemble tensor A: inconsistent data type: TYPE_FP32 is "
                  "inferred from model bad_dtype while TYPE_INT32 is inferred from model simple"),
    ("unwritten_output", "output 'OUT' for ensemble 'unwritten_output' is not written"),
    ("missing_step_model", "ensemble 'missing_step_model' depends on 'no_such_model' which has no "
                           "loaded version"),
])
def test_invalid_ensembles_fail_to_load_with_the_reason(server, name, reason):
    client = server.client()
    assert not client.is_model_ready(name)
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index[name].state == "UNAVAILABLE"
    assert reason in index[name].reason
    assert client.is_model_ready("detector_pipeline")


def test_explicit_load_of_an_ensemble_loads_its_composing_models(start_server):
    server = start_server("--model-repository", str(MODEL_REPOSITORY),
                          "--model-control-mode", "explicit")
    client = server.client()
    assert not client.is_model_ready("detector")
    client.load_model("detector_pipeline")
    for name in ("detector_pipeline", "detector_preprocess", "detector", "detector_postprocess"):
        assert client.is_model_ready(name), name
    assert not client.is_model_ready("simple")
    detections = _infer_pipeline(client, _images(seed=3, n=1))
    assert detections.shape == (1, MAX_DETECTIONS, 6)
    client.unload_model("detector_pipeline", unload_dependents=True)
    assert not client.is_model_ready("detector_pipeline")
    assert not client.is_model_ready("detector_postprocess")
