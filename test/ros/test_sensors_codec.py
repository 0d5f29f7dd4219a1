"""The compressed input kind and the segmentation output format, in process (docs/sensors.md).

Frames of the synthetic cameras are encoded by other libraries than the node's decoder (Pillow,
and OpenCV as image_transport does) and read through the node's own ``compressed`` kind into the
bundled models run with onnxruntime: boxes against the ground truth in the camera's full pixels,
with libjpeg's reduced-size decoding and without; image_transport's format strings and colour
handling; corrupt, truncated and unsupported data refused as malformed. The segmentation format
is checked against hand-made outputs (layouts, letterbox undone by nearest) and, with the bundled
``color_segmenter``, against the cameras' ground-truth masks (per-class IoU)."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image as PILImage

from server_process import MODEL_REPOSITORY
from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.codec import compressed_image
from triton_ros.ros.codec.base import FrameOutputs, MalformedInput
from triton_ros.ros.codec.compressed_image import (
    COMPRESSED,
    CompressedConfig,
    CompressedFormat,
    parse_format,
    reduction,
)
from triton_ros.ros.codec.preprocess import Letterbox, PreprocessConfig, plan_input, preprocess
from triton_ros.ros.codec.segmentation import PALETTE, SEGMENTATION, SegmentationConfig
from triton_ros.ros.targets.spec import ModelSpec, TensorSpec
from triton_ros.ros.tools.detection_metrics import class_ious
from triton_ros.ros.tools.synthetic_cameras import (
    CLASS_NAMES,
    SyntheticScene,
    compress,
    parse_camera,
)

pytestmark = pytest.mark.unit

MODEL_INPUT = TensorConfig(name="images", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW")
SEGMENTER_CLASSES = ("background", *CLASS_NAMES)


@pytest.fixture(scope="module")
def detector():
    return ort.InferenceSession(
        str(MODEL_REPOSITORY / "color_detector" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )


@pytest.fixture(scope="module")
def segmenter():
    return ort.InferenceSession(
        str(MODEL_REPOSITORY / "color_segmenter" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )


def scene(width: int, height: int, encoding: str = "rgb8", seed: int = 0, t: float = 0.7):
    return SyntheticScene(parse_camera(f"r/c:{width}x{height}:{encoding}"), seed=seed).render(t)


def pillow(pixels: np.ndarray, codec: str, quality: int = 75) -> bytes:
    """Pillow's encoding of RGB or mono pixels: true colours in the file."""
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, "JPEG" if codec == "jpeg" else "PNG", quality=quality)
    return out.getvalue()


def message(fmt: str, data: bytes):
    return SimpleNamespace(format=fmt, data=np.frombuffer(data, np.uint8))


def encoder(resize: str = "letterbox", reduced: bool = True):
    plan = COMPRESSED.plan(
        CompressedConfig(resize=resize, reduced_decoding=reduced),
        MODEL_INPUT,
        model="color_detector",
    )
    return COMPRESSED.encoder(plan)


def detect(session, tensor: np.ndarray, letterbox: Letterbox):
    (rows,) = session.run(["detections"], {"images": tensor[None]})
    kept = rows[0][rows[0][:, 4] > 0.5]
    return letterbox.to_source(kept[:, :4]), kept[:, 5].astype(int)


def box_iou(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(w, 0) * max(h, 0)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def assert_found(boxes, classes, truth, *, min_iou: float = 0.8) -> None:
    assert sorted(classes.tolist()) == sorted(truth.classes.tolist()), (
        [CLASS_NAMES[c] for c in classes],
        [CLASS_NAMES[c] for c in truth.classes],
    )
    for box, cls in zip(truth.boxes, truth.classes):
        got = boxes[classes == cls][0]
        assert box_iou(got, box) >= min_iou, (CLASS_NAMES[cls], got.round(1), box)


# ------------------------------------------------------------------------------------------
# image_transport's format strings
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt,expected",
    [
        ("rgb8; jpeg compressed bgr8", CompressedFormat("rgb8", False)),
        ("bgr8; jpeg compressed bgr8", CompressedFormat("bgr8", False)),
        ("rgba8; jpeg compressed bgr8", CompressedFormat("rgba8", False)),
        ("rgb16; png compressed bgr16", CompressedFormat("rgb16", False)),
        ("mono8; jpeg compressed mono8", CompressedFormat("mono8", False)),
        ("mono8; png compressed ", CompressedFormat("mono8", False)),
        ("mono16; png compressed ", CompressedFormat("mono16", False)),
        # a colour image handed to the encoder in RGB order (its subscriber swaps it back)
        ("rgb8; jpeg compressed rgb8", CompressedFormat("rgb8", True)),
        ("bgr8; png compressed ", CompressedFormat("bgr8", True)),
        ("jpeg", CompressedFormat("", False)),
        ("png", CompressedFormat("", False)),
        ("", CompressedFormat("", False)),
    ],
)
def test_format_strings_as_image_transport_writes_them(fmt, expected):
    assert parse_format(fmt) == expected


@pytest.mark.parametrize(
    "fmt",
    [
        "rgb8; tiff compressed ",
        "16UC1; compressedDepth png",
        "32FC1; compressedDepth",
        "tiff",
        "h264",
        "bayer_rggb8; jpeg compressed bgr8",
        "32FC1; png compressed ",
    ],
)
def test_unsupported_formats_are_malformed(fmt):
    with pytest.raises(MalformedInput):
        parse_format(fmt)


def test_check_refuses_empty_and_foreign_data():
    jpeg = pillow(scene(64, 48)[0], "jpeg")
    COMPRESSED.check(message("rgb8; jpeg compressed bgr8", jpeg))
    for fmt, data in (
        ("jpeg", b""),
        ("jpeg", b"GIF89a" + bytes(40)),
        ("png", b"\x00" * 100),
        ("rgb8; tiff compressed ", jpeg),
    ):
        with pytest.raises(MalformedInput):
            COMPRESSED.check(message(fmt, data))


# ------------------------------------------------------------------------------------------
# Boxes from compressed frames, in the camera's full pixels
# ------------------------------------------------------------------------------------------


def test_reduction_keeps_at_least_the_model_input():
    assert reduction(1920, 1080, 256, 256) == 4  # 480x270
    assert reduction(3840, 2160, 256, 256) == 8  # 480x270
    assert reduction(1280, 960, 256, 256) == 2  # 640x480 (1/4 would be 240 high)
    assert reduction(640, 480, 256, 256) == 1  # 1/2 would be 240 high
    assert reduction(2048, 2048, 256, 256) == 8  # exactly 256
    assert reduction(2047, 2047, 256, 256) == 8  # ceil(2047 / 8) = 256
    assert reduction(2049, 2040, 256, 256) == 4  # ceil(2040 / 8) = 255
    assert reduction(100, 100, 256, 256) == 1


@pytest.mark.parametrize("size", [(640, 480), (1920, 1080), (320, 240), (1280, 720)])
@pytest.mark.parametrize("library", ["pillow", "opencv"])
@pytest.mark.parametrize("codec", ["jpeg", "png"])
def test_boxes_of_compressed_frames_land_on_the_objects(detector, size, library, codec):
    pixels, truth = scene(*size, seed=size[0])
    if library == "pillow":
        fmt, data = codec, pillow(pixels, codec)
    else:
        fmt, data = compress(pixels, "rgb8", codec)
        assert fmt == f"rgb8; {codec} compressed bgr8"
    msg = message(fmt, data)
    COMPRESSED.check(msg)
    for resize in ("letterbox", "stretch"):
        tensor, letterbox = encoder(resize)(msg)
        assert (letterbox.src_width, letterbox.src_height) == size
        assert_found(*detect(detector, tensor, letterbox), truth)


def test_a_large_jpeg_for_a_small_model_never_decodes_at_full_size(detector, monkeypatch):
    """1920x1080 for 256x256: decoded at 1/4 (480x270); the boxes agree with a full decode
    within a source pixel or two, and both with the ground truth."""
    import simplejpeg

    decoded = []
    real = simplejpeg.decode_jpeg

    def spy(*args, **kwargs):
        image = real(*args, **kwargs)
        decoded.append(image.shape[:2])
        return image

    monkeypatch.setattr(simplejpeg, "decode_jpeg", spy)
    pixels, truth = scene(1920, 1080, seed=3)
    msg = message("rgb8; jpeg compressed bgr8", pillow(pixels, "jpeg"))
    reduced = detect(detector, *encoder(reduced=True)(msg))
    full = detect(detector, *encoder(reduced=False)(msg))
    assert decoded == [(270, 480), (1080, 1920)]
    assert_found(*reduced, truth)
    assert_found(*full, truth)
    order = [np.argsort(c) for _, c in (reduced, full)]
    np.testing.assert_allclose(reduced[0][order[0]], full[0][order[1]], atol=8.0)


def test_colour_orders_as_image_transport_means_them(detector):
    """The same RGB pixels given to OpenCV's encoder unconverted: labelled ``... compressed
    rgb8`` they are read right (red stays red); labelled ``bgr8`` red and blue swap."""
    import cv2

    pixels, truth = scene(640, 480, seed=9)
    _, raw = cv2.imencode(".jpg", pixels)  # RGB bytes taken for BGR
    right = detect(detector, *encoder()(message("rgb8; jpeg compressed rgb8", raw.tobytes())))
    assert_found(*right, truth)
    wrong = detect(detector, *encoder()(message("rgb8; jpeg compressed bgr8", raw.tobytes())))
    red, blue = CLASS_NAMES.index("red"), CLASS_NAMES.index("blue")
    np.testing.assert_allclose(wrong[0][wrong[1] == blue], right[0][right[1] == red], atol=2)


@pytest.mark.parametrize(
    "fmt,codec", [("mono8; jpeg compressed mono8", "jpeg"), ("mono8; png compressed ", "png")]
)
def test_mono_images(detector, fmt, codec):
    pixels, truth = scene(424, 240, "mono8", seed=4)
    assert_found(*detect(detector, *encoder()(message(fmt, pillow(pixels, codec)))), truth)


def test_bgr_model_input_and_opencv_fallback_agree(detector, monkeypatch):
    """A model taking BGR gets BGR from the decoder itself; where simplejpeg is missing, OpenCV
    decodes JPEG (at full size) into the same boxes."""
    pixels, truth = scene(1280, 720, seed=5)
    msg = message("jpeg", pillow(pixels, "jpeg"))
    bgr_plan = COMPRESSED.plan(CompressedConfig(color="bgr"), MODEL_INPUT, model="m")
    tensor, letterbox = COMPRESSED.encoder(bgr_plan)(msg)
    rgb_tensor, _ = encoder()(msg)
    np.testing.assert_array_equal(tensor[[2, 1, 0]], rgb_tensor)
    monkeypatch.setattr(compressed_image, "_simplejpeg", lambda: None)
    fallback = detect(detector, *encoder()(msg))
    assert_found(*fallback, truth)


@pytest.mark.parametrize("damage", ["truncated", "garbage_body", "png_truncated", "huge_header"])
def test_corrupt_data_is_malformed(damage):
    pixels, _ = scene(640, 480, seed=6)
    jpeg, png = pillow(pixels, "jpeg"), pillow(pixels, "png")
    data = {
        "truncated": jpeg[: len(jpeg) // 2],
        "garbage_body": jpeg[:600]
        + bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8)),
        "png_truncated": png[: len(png) // 3],
        # a PNG whose IHDR claims 100000 x 100000 pixels
        "huge_header": png[:16] + (100000).to_bytes(4, "big") * 2 + png[24:],
    }[damage]
    msg = message("rgb8; jpeg compressed bgr8", data)
    COMPRESSED.check(msg)  # the header bytes look right
    with pytest.raises(MalformedInput):
        encoder()(msg)


# ------------------------------------------------------------------------------------------
# Segmentation masks
# ------------------------------------------------------------------------------------------


def seg_spec(dims, datatype="FP32", max_batch_size=8):
    return ModelSpec(
        name="seg",
        version=1,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        inputs=(TensorSpec("images", "FP32", (3, 256, 256), "FORMAT_NCHW"),),
        outputs=(TensorSpec("out", datatype, tuple(dims)),),
    )


def seg_plan(dims, **kw):
    input_plan = plan_input(PreprocessConfig(), MODEL_INPUT, model="seg")
    return SEGMENTATION.plan(SegmentationConfig(**kw), seg_spec(dims), input_plan), input_plan


def header(frame_id="cam"):
    from builtin_interfaces.msg import Time
    from std_msgs.msg import Header

    return Header(stamp=Time(sec=12, nanosec=345), frame_id=frame_id)


def test_segmentation_undoes_the_letterbox_by_nearest():
    """Class ids drawn in model pixels come back in the source's: each source pixel takes the
    class at its centre, whatever the layout (scores, ids, a coarser grid)."""
    plan, input_plan = seg_plan((3, 256, 256))
    _, box = preprocess(np.zeros((480, 640, 3), np.uint8), "rgb8", input_plan)  # pad_y 32
    ids = np.zeros((256, 256), np.int64)
    ids[100:140, 50:90] = 2
    ids[:32] = 1  # the padding: never in the mask
    scores = np.stack([(ids == k).astype(np.float32) for k in range(3)])
    # source rows/cols whose centre falls in the block: x in [50, 90) / 0.4, y in [68, 108) / 0.4
    expected = np.zeros((480, 640), np.uint8)
    expected[170:270, 125:225] = 2
    for layout, output in (
        ("scores", scores),
        ("ids", ids),
        ("ids [1,H,W]", ids[None]),
        ("float ids", ids.astype(np.float32)),
    ):
        msg = SEGMENTATION.decode(
            plan, FrameOutputs(header(), {"out": output}, True, "seg", 1, box)
        )
        mask = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width)
        assert (msg.encoding, msg.width, msg.height, msg.step) == ("mono8", 640, 480, 640)
        assert (msg.header.frame_id, msg.header.stamp.sec, msg.header.stamp.nanosec) == (
            "cam",
            12,
            345,
        )
        np.testing.assert_array_equal(mask, expected, err_msg=layout)
    # a stride-4 output grid covers the same model input
    coarse = ids[::4, ::4]
    msg = SEGMENTATION.decode(plan, FrameOutputs(header(), {"out": coarse}, True, "seg", 1, box))
    mask = np.frombuffer(msg.data, np.uint8).reshape(480, 640)
    assert np.mean(mask == expected) > 0.99


def test_segmentation_overlay_and_bad_outputs():
    plan, input_plan = seg_plan((256, 256), overlay=True)
    assert [name for name, _ in SEGMENTATION.extra_outputs(SegmentationConfig(overlay=True))] == [
        "overlay"
    ]
    assert SEGMENTATION.extra_outputs(SegmentationConfig()) == ()
    _, box = preprocess(np.zeros((256, 256, 3), np.uint8), "rgb8", input_plan)
    ids = np.arange(256 * 256).reshape(256, 256) % 7
    msg = SEGMENTATION.decode(plan, FrameOutputs(header(), {"out": ids}, True, "seg", 1, box))
    overlay = SEGMENTATION.extras(plan, msg)["overlay"]
    assert (overlay.encoding, overlay.width, overlay.height) == ("rgb8", 256, 256)
    np.testing.assert_array_equal(
        np.frombuffer(overlay.data, np.uint8).reshape(256, 256, 3), PALETTE[ids]
    )
    assert PALETTE[0].tolist() == [0, 0, 0] and PALETTE[1].tolist() == [128, 0, 0]
    with pytest.raises(ValueError, match="mono8"):
        SEGMENTATION.decode(plan, FrameOutputs(header(), {"out": ids + 300}, True, "seg", 1, box))
    with pytest.raises(Exception, match="segmentation takes"):
        seg_plan((5,))


@pytest.mark.parametrize(
    "camera,compressed",
    [
        ("640x480:rgb8", False),
        ("320x240:bgr8", False),
        ("848x480:rgba8", False),
        ("424x240:mono8", False),
        ("1920x1080:rgb8", True),
        ("640x480:rgb8", True),
    ],
)
def test_color_segmenter_masks_against_ground_truth(segmenter, camera, compressed):
    """The bundled model through the node's codec: per-class IoU >= 0.9 in source pixels."""
    size, encoding = camera.split(":")
    width, height = (int(v) for v in size.split("x"))
    spec = seg_spec((7, 256, 256))
    for seed in range(2):
        pixels, truth = scene(width, height, encoding, seed=seed, t=1.3 * seed)
        if compressed:
            input_plan = COMPRESSED.plan(CompressedConfig(), MODEL_INPUT, model="seg")
            fmt, data = compress(pixels, encoding, "jpeg")
            tensor, box = COMPRESSED.encoder(input_plan)(message(fmt, data))
        else:
            input_plan = plan_input(PreprocessConfig(), MODEL_INPUT, model="seg")
            tensor, box = preprocess(
                pixels if pixels.ndim == 3 else pixels[:, :, None], encoding, input_plan
            )
        (scores,) = segmenter.run(["scores"], {"images": tensor[None]})
        plan = SEGMENTATION.plan(SegmentationConfig(), spec, input_plan)
        msg = SEGMENTATION.decode(
            plan, FrameOutputs(header(), {"out": scores[0]}, True, "seg", 1, box)
        )
        mask = np.frombuffer(msg.data, np.uint8).reshape(height, width)
        ious = class_ious(mask, truth.mask(width, height), len(SEGMENTER_CLASSES))
        present = [1 + k for k in truth.classes] + [0]
        assert all(ious[k] >= 0.9 for k in present), {
            SEGMENTER_CLASSES[k]: round(ious[k], 3) for k in present
        }
