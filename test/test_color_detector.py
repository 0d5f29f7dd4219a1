"""The bundled detector that sees (color_detector, and detector_pipeline built on it): its boxes
against the synthetic cameras' ground truth, for every encoding, several resolutions and aspect
ratios, letterbox and stretch; run in-process with onnxruntime through the node's own
preprocessing, and served by a real triton-ros-server to tritonclient over 127.0.0.1."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient

from server_process import MODEL_REPOSITORY
from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.codec.preprocess import PreprocessConfig, plan_input, preprocess
from triton_ros.ros.tools.synthetic_cameras import (
    CLASS_NAMES,
    MONO_CLASSES,
    SyntheticScene,
    parse_camera,
)


pytestmark = pytest.mark.integration

ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")
SIZES = ((640, 480), (320, 240), (848, 480), (424, 240), (480, 640), (256, 256))
MODEL_INPUT = TensorConfig(name="images", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW")
PIPELINE_INPUT = TensorConfig(
    name="images", datatype="UINT8", dims=(256, 256, 3), format="FORMAT_NHWC"
)


def tolerance(width: int, height: int, resize: str) -> tuple[float, float]:
    """A model-input pixel and a half (bilinear blending at the edges) in camera pixels, + 1."""
    sx, sy = 256 / width, 256 / height
    if resize == "letterbox":
        sx = sy = min(sx, sy)
    return 1.5 / sx + 1.0, 1.5 / sy + 1.0


def frame(width: int, height: int, encoding: str, seed: int = 0, t: float = 0.7):
    scene = SyntheticScene(parse_camera(f"r/c:{width}x{height}:{encoding}"), seed=seed)
    pixels, truth = scene.render(t)
    return (pixels if pixels.ndim == 3 else pixels[:, :, None]), truth


def assert_boxes_match(boxes: np.ndarray, classes: np.ndarray, truth, tol) -> None:
    """Every ground-truth object found once with its class, each edge within tol; no extra."""
    assert sorted(classes.astype(int).tolist()) == sorted(truth.classes.tolist()), (
        [CLASS_NAMES[int(c)] for c in classes],
        [CLASS_NAMES[c] for c in truth.classes],
    )
    for box, cls in zip(truth.boxes, truth.classes):
        got = boxes[classes.astype(int) == cls][0]
        err = np.abs(got - box)
        assert (err[[0, 2]] <= tol[0]).all() and (err[[1, 3]] <= tol[1]).all(), (
            f"{CLASS_NAMES[cls]}: {got.round(1)} vs ground truth {box} (tolerance {tol})"
        )


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(
        str(MODEL_REPOSITORY / "color_detector" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )


@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_boxes_on_the_objects_for_every_encoding_size_and_resize(session, encoding, resize):
    plan = plan_input(PreprocessConfig(resize=resize), MODEL_INPUT, model="color_detector")
    for i, (w, h) in enumerate(SIZES):
        pixels, truth = frame(w, h, encoding, seed=i)
        tensor, letterbox = preprocess(pixels, encoding, plan)
        (rows,) = session.run(["detections"], {"images": tensor[None]})
        rows = rows[0]
        kept = rows[rows[:, 4] > 0.5]
        assert_boxes_match(
            letterbox.to_source(kept[:, :4]), kept[:, 5], truth, tolerance(w, h, resize)
        )
        # Real objects score near 1, absent classes exactly 0.
        assert (kept[:, 4] > 0.95).all() and (rows[rows[:, 4] <= 0.5][:, 4] == 0).all(), rows


def test_mono8_keeps_the_objects_told_apart_by_brightness(session):
    pixels, truth = frame(424, 240, "mono8")
    assert pixels.shape == (240, 424, 1)
    assert sorted(CLASS_NAMES[c] for c in truth.classes) == sorted(MONO_CLASSES)


def test_a_wrong_channel_order_does_not_pass(session):
    """bgr8 bytes read as rgb8 turn red into blue: the class check catches the swap."""
    plan = plan_input(PreprocessConfig(), MODEL_INPUT, model="color_detector")
    pixels, truth = frame(640, 480, "bgr8")
    tensor, _ = preprocess(pixels, "rgb8", plan)  # the wrong encoding
    (rows,) = session.run(["detections"], {"images": tensor[None]})
    found = {CLASS_NAMES[int(r[5])]: r[:4] for r in rows[0] if r[4] > 0.5}
    right, _ = preprocess(pixels, "bgr8", plan)
    (good,) = session.run(["detections"], {"images": right[None]})
    true = {CLASS_NAMES[int(r[5])]: r[:4] for r in good[0] if r[4] > 0.5}
    assert set(true) == set(CLASS_NAMES)
    np.testing.assert_array_equal(found["blue"], true["red"])
    np.testing.assert_array_equal(found["red"], true["blue"])


def test_background_and_padding_score_zero(session):
    grey = np.full((1, 3, 256, 256), 114 / 255, np.float32)  # the letterbox padding
    noisy = np.clip(grey + np.random.default_rng(1).normal(0, 0.03, grey.shape), 0, 1)
    (rows,) = session.run(
        ["detections"], {"images": np.concatenate([grey, noisy]).astype(np.float32)}
    )
    assert not rows.any(), rows


def test_batched_rows_are_per_image(session):
    plan = plan_input(PreprocessConfig(), MODEL_INPUT, model="color_detector")
    frames = [frame(640, 480, "rgb8", seed=s) for s in range(4)]
    batch = np.stack([preprocess(p, "rgb8", plan)[0] for p, _ in frames])
    (rows,) = session.run(["detections"], {"images": batch})
    for k, (_pixels, _) in enumerate(frames):
        (alone,) = session.run(["detections"], {"images": batch[k : k + 1]})
        np.testing.assert_array_equal(rows[k], alone[0])


@pytest.fixture(scope="module")
def served(start_module_server):
    return start_module_server(
        "--model-repository",
        str(MODEL_REPOSITORY),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "color_detector",
        "--load-model",
        "detector_pipeline",
        timeout=120,
    )


@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
def test_tritonclient_requests_with_the_same_images(served, resize):
    """color_detector (FP32 NCHW) and detector_pipeline (UINT8 HWC) over gRPC, every encoding
    and size: boxes mapped back to the camera's pixels land on the ground truth."""
    client = served.client()
    plan = plan_input(PreprocessConfig(resize=resize), MODEL_INPUT, model="color_detector")
    raw = plan_input(PreprocessConfig(resize=resize), PIPELINE_INPUT, model="detector_pipeline")
    for i, (w, h) in enumerate(SIZES[:4]):
        for encoding in ENCODINGS:
            pixels, truth = frame(w, h, encoding, seed=10 + i)
            tensor, letterbox = preprocess(pixels, encoding, plan)
            x = grpcclient.InferInput("images", [1, *tensor.shape], "FP32")
            x.set_data_from_numpy(tensor[None])
            rows = client.infer("color_detector", [x]).as_numpy("detections")[0]
            kept = rows[rows[:, 4] > 0.5]
            assert_boxes_match(
                letterbox.to_source(kept[:, :4]), kept[:, 5], truth, tolerance(w, h, resize)
            )

            image, letterbox = preprocess(pixels, encoding, raw)
            assert image.dtype == np.uint8 and image.shape == (256, 256, 3)
            x = grpcclient.InferInput("images", [1, *image.shape], "UINT8")
            x.set_data_from_numpy(image[None])
            rows = client.infer("detector_pipeline", [x]).as_numpy("detections")[0]
            kept = rows[rows[:, 4] > 0]
            assert (np.diff(kept[:, 4]) <= 0).all() and not rows[len(kept) :].any()
            assert_boxes_match(
                letterbox.to_source(kept[:, :4]), kept[:, 5], truth, tolerance(w, h, resize)
            )


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_ground_truth_is_where_the_pixels_are(encoding):
    """Each ground-truth box holds its class's colour in the camera's encoding, edge to edge, and
    the row and column just outside it do not (so the boxes are exact, x2/y2 exclusive)."""
    from triton_ros.ros.tools.synthetic_cameras import CLASS_COLOURS, to_encoding

    for i, (w, h) in enumerate(SIZES):
        pixels, truth = frame(w, h, encoding, seed=i, t=1.9)
        assert len(truth.classes) == (2 if encoding == "mono8" else 6)
        for box, cls in zip(truth.boxes.astype(int), truth.classes):
            x1, y1, x2, y2 = box
            assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
            colour = to_encoding(
                np.array([[CLASS_COLOURS[CLASS_NAMES[cls]]]], np.uint8), encoding
            ).reshape(-1)
            inside = pixels[y1:y2, x1:x2].reshape(-1, pixels.shape[2])
            assert (inside == colour).all(), (encoding, CLASS_NAMES[cls])
            for outside in (
                pixels[y1:y2, x1 - 1] if x1 > 0 else None,
                pixels[y1:y2, x2] if x2 < w else None,
                pixels[y1 - 1, x1:x2] if y1 > 0 else None,
                pixels[y2, x1:x2] if y2 < h else None,
            ):
                if outside is not None:
                    assert not (outside == colour).all(axis=-1).all(), (encoding, box)


def test_to_encoding_orders_the_channels_of_each_encoding():
    from triton_ros.ros.tools.synthetic_cameras import to_encoding

    rgb = np.random.default_rng(3).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    r, g, b = rgb[:, :, 0], rgb[:, :, 1], rgb[:, :, 2]
    alpha = np.full_like(r, 255)
    for encoding, planes in (
        ("rgb8", (r, g, b)),
        ("bgr8", (b, g, r)),
        ("rgba8", (r, g, b, alpha)),
        ("bgra8", (b, g, r, alpha)),
    ):
        out = to_encoding(rgb, encoding)
        assert out.dtype == np.uint8 and out.flags["C_CONTIGUOUS"], encoding
        np.testing.assert_array_equal(out, np.stack(planes, axis=2), err_msg=encoding)
