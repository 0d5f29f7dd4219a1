"""Image preprocessing of the ROS node: encodings, letterbox, layouts, dtypes, normalization."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from triton_ros.core.errors import TritonRosError
from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.codec.preprocess import (
    MalformedImage,
    PreprocessConfig,
    Preprocessor,
    check_image,
    letterbox_for,
    plan_input,
    preprocess,
)


pytestmark = pytest.mark.unit

RNG = np.random.default_rng(7)


def reference_bilinear(image: np.ndarray, nh: int, nw: int) -> np.ndarray:
    """Per-pixel bilinear resize with half-pixel centers, written the slow obvious way."""
    h, w = image.shape[:2]
    out = np.zeros((nh, nw, image.shape[2]))
    for y in range(nh):
        sy = min(max((y + 0.5) * h / nh - 0.5, 0), h - 1)
        y0 = int(np.floor(sy))
        y1, fy = min(y0 + 1, h - 1), sy - y0
        for x in range(nw):
            sx = min(max((x + 0.5) * w / nw - 0.5, 0), w - 1)
            x0 = int(np.floor(sx))
            x1, fx = min(x0 + 1, w - 1), sx - x0
            out[y, x] = (
                image[y0, x0] * (1 - fy) * (1 - fx)
                + image[y0, x1] * (1 - fy) * fx
                + image[y1, x0] * fy * (1 - fx)
                + image[y1, x1] * fy * fx
            )
    return out


# The OpenCV path rounds resized pixels to 8 bits before normalizing (as cv_bridge pipelines
# do) and uses fixed-point bilinear weights: within one grey level of the exact values.
BOTH = pytest.mark.parametrize("use_opencv", [False, True], ids=["numpy", "opencv"])


def grey_levels(use_opencv: bool) -> float:
    return 1.0 if use_opencv else 1e-3


def nchw(size: int = 16, datatype: str = "FP32") -> TensorConfig:
    return TensorConfig("images", datatype, (3, size, size), format="FORMAT_NCHW")


@BOTH
def test_letterbox_bilinear_matches_reference_and_pads(use_opencv):
    image = RNG.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    plan = plan_input(PreprocessConfig(pad_value=114), nchw(), model="m")
    out, box = preprocess(image, "rgb8", plan, use_opencv=use_opencv)
    assert out.shape == (3, 16, 16) and out.dtype == np.float32
    # 40x30 -> 16x12, centred vertically: 2 rows of padding above and below
    assert (box.scale_x, box.scale_y, box.pad_x, box.pad_y) == (0.4, 0.4, 0.0, 2.0)
    expected = reference_bilinear(image, 12, 16).transpose(2, 0, 1) / 255.0
    np.testing.assert_allclose(out[:, 2:14, :], expected, atol=grey_levels(use_opencv) / 255)
    np.testing.assert_allclose(out[:, :2, :], 114 / 255.0, atol=1e-6)
    np.testing.assert_allclose(out[:, 14:, :], 114 / 255.0, atol=1e-6)


@pytest.mark.parametrize(
    "encoding,to_rgb",
    [
        ("rgb8", lambda a: a),
        ("bgr8", lambda a: a[..., ::-1]),
        ("rgba8", lambda a: a[..., :3]),
        ("bgra8", lambda a: a[..., 2::-1]),
        ("mono8", lambda a: np.repeat(a, 3, axis=2)),
        ("8UC1", lambda a: np.repeat(a, 3, axis=2)),
    ],
)
@BOTH
def test_encodings_become_the_models_rgb(encoding, to_rgb, use_opencv):
    channels = {"rgba8": 4, "bgra8": 4, "mono8": 1, "8UC1": 1}.get(encoding, 3)
    image = RNG.integers(0, 256, (16, 16, channels), dtype=np.uint8)
    plan = plan_input(PreprocessConfig(), nchw(), model="m")
    out, _ = preprocess(image, encoding, plan, use_opencv=use_opencv)
    np.testing.assert_allclose(out, to_rgb(image).transpose(2, 0, 1) / 255.0, atol=1e-6)


@BOTH
def test_bgr_model_and_mono_model(use_opencv):
    image = RNG.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    bgr = plan_input(PreprocessConfig(color="bgr"), nchw(), model="m")
    out, _ = preprocess(image, "rgb8", bgr, use_opencv=use_opencv)
    np.testing.assert_allclose(out, image[..., ::-1].transpose(2, 0, 1) / 255.0, atol=1e-6)
    mono = plan_input(PreprocessConfig(), TensorConfig("x", "FP32", (1, 16, 16)), model="m")
    assert (mono.layout, mono.color) == ("NCHW", "mono")
    out, _ = preprocess(image, "bgr8", mono, use_opencv=use_opencv)
    luma = image[..., ::-1].astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    np.testing.assert_allclose(out[0], luma / 255.0, atol=grey_levels(use_opencv) / 255)


@BOTH
def test_uint8_nhwc_input_gets_raw_pixels(use_opencv):
    image = RNG.integers(0, 256, (20, 40, 3), dtype=np.uint8)
    tensor = TensorConfig("images", "UINT8", (16, 16, 3))  # no format: layout from dims
    plan = plan_input(PreprocessConfig(pad_value=7), tensor, model="m")
    assert plan.layout == "NHWC" and plan.gain is None
    out, box = preprocess(image, "rgb8", plan, use_opencv=use_opencv)
    assert out.shape == (16, 16, 3) and out.dtype == np.uint8
    assert box.pad_y == 4.0
    expected = np.rint(reference_bilinear(image, 8, 16))
    assert np.abs(out[4:12].astype(np.int16) - expected).max() <= (1 if use_opencv else 0)
    assert (out[:4] == 7).all() and (out[12:] == 7).all()


@BOTH
def test_scale_mean_std_and_nearest_stretch(use_opencv):
    image = RNG.integers(0, 256, (32, 16, 3), dtype=np.uint8)
    cfg = PreprocessConfig(
        resize="stretch",
        interpolation="nearest",
        scale=1.0,
        mean=(10.0, 20.0, 30.0),
        std=(2.0, 4.0, 8.0),
    )
    plan = plan_input(cfg, TensorConfig("x", "FP16", (8, 8, 3), format="FORMAT_NHWC"), model="m")
    out, box = preprocess(image, "rgb8", plan, use_opencv=use_opencv)
    assert out.dtype == np.float16 and (box.scale_x, box.scale_y) == (0.5, 0.25)
    nearest = image[2::4, 1::2].astype(np.float64)  # centres of 4x2 source blocks
    expected = (nearest - [10, 20, 30]) / [2, 4, 8]
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-3, atol=1e-2)


@BOTH
def test_row_padding_step_is_honoured(use_opencv):
    image = RNG.integers(0, 256, (12, 10, 3), dtype=np.uint8)
    padded = np.zeros((12, 16, 3), np.uint8)
    padded[:, :10] = image
    plan = plan_input(PreprocessConfig(), nchw(8), model="m")
    direct, _ = preprocess(image, "rgb8", plan, use_opencv=use_opencv)
    strided, _ = Preprocessor(plan, use_opencv=use_opencv)(padded.tobytes(), "rgb8", 12, 10, 16 * 3)
    np.testing.assert_array_equal(direct, strided)


def test_letterbox_maps_boxes_back_to_source_pixels():
    plan = plan_input(PreprocessConfig(), nchw(256), model="m")
    box, nw, nh = letterbox_for(512, 256, plan)
    assert (nw, nh, box.pad_x, box.pad_y) == (256, 128, 0.0, 64.0)
    mapped = box.to_source(np.array([[64, 64, 192, 192], [-10, 0, 300, 40]], np.float32))
    np.testing.assert_allclose(mapped, [[128, 0, 384, 256], [0, 0, 512, 0]])


@pytest.mark.parametrize(
    "args,message",
    [
        (("yuv9000", 4, 4, 12, 48), "unsupported encoding 'yuv9000'"),
        (("rgb8", 4, 4, 12, 47), "fewer than step x height"),
        (("rgb8", 4, 4, 11, 48), "smaller than width x channels"),
        (("mono8", 0, 4, 4, 0), "empty image"),
    ],
)
def test_malformed_images_are_refused_with_a_reason(args, message):
    with pytest.raises(MalformedImage, match=message):
        check_image(*args)


def test_plans_that_cannot_fit_the_model_are_refused():
    with pytest.raises(TritonRosError, match="needs 3 dims"):
        plan_input(PreprocessConfig(), TensorConfig("x", "FP32", (3, 16)), model="m")
    with pytest.raises(TritonRosError, match="set the binding's 'width'"):
        plan_input(PreprocessConfig(), TensorConfig("x", "FP32", (3, 16, -1)), model="m")
    with pytest.raises(TritonRosError, match="cannot tell NCHW from NHWC"):
        plan_input(PreprocessConfig(), TensorConfig("x", "FP32", (3, 8, 3)), model="m")
    with pytest.raises(TritonRosError, match="'mean' has 2 values for 3 channels"):
        plan_input(PreprocessConfig(mean=(1.0, 2.0)), nchw(), model="m")
    variable = plan_input(
        PreprocessConfig(width=32, height=24), TensorConfig("x", "FP32", (3, -1, -1)), model="m"
    )
    assert (variable.width, variable.height) == (32, 24)


@pytest.mark.parametrize(
    "encoding,channels", [("rgb8", 3), ("bgr8", 3), ("rgba8", 4), ("bgra8", 4), ("mono8", 1)]
)
@pytest.mark.parametrize("datatype,layout", [("FP32", "NCHW"), ("UINT8", "NHWC")])
@pytest.mark.parametrize("height,width", [(480, 640), (640, 480)], ids=["landscape", "portrait"])
def test_opencv_and_numpy_paths_agree_on_camera_frames(
    encoding, channels, datatype, layout, height, width
):
    """A 640x480 camera frame (or a portrait one, padded left and right) letterboxed into
    256x256: OpenCV within one grey level of numpy."""
    image = RNG.integers(0, 256, (height, width, channels), dtype=np.uint8)
    dims = (3, 256, 256) if layout == "NCHW" else (256, 256, 3)
    plan = plan_input(
        PreprocessConfig(), TensorConfig("x", datatype, dims, format=f"FORMAT_{layout}"), model="m"
    )
    fast, box_fast = preprocess(image, encoding, plan, use_opencv=True)
    slow, box_slow = preprocess(image, encoding, plan, use_opencv=False)
    assert box_fast == box_slow and fast.shape == slow.shape and fast.dtype == slow.dtype
    levels = 1.0 / 255 if datatype == "FP32" else 1
    assert np.abs(fast.astype(np.float64) - slow.astype(np.float64)).max() <= levels + 1e-6


def test_threads_preprocessing_one_geometry_at_once_each_get_their_own_frame():
    """Workers share a Preprocessor; each thread letterboxes into a canvas of its own."""
    plan = plan_input(PreprocessConfig(), nchw(256), model="m")
    shared = Preprocessor(plan)
    images = [RNG.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(4)]
    expected = [preprocess(image, "rgb8", plan)[0] for image in images]
    wrong: list[int] = []

    def work(i: int) -> None:
        data = images[i].tobytes()
        for _ in range(50):
            out, _ = shared(data, "rgb8", 480, 640, 640 * 3)
            if not np.array_equal(out, expected[i]):
                wrong.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
