"""Depth, compressedDepth and CameraInfo inputs, and the bundled rgbd_locator, in one process.

- depth images (16UC1 millimetres, 32FC1 metres, big-endian, padded rows) become metres with
  the binding's scale, clip range and fill; resizing is nearest, so no output value is a blend
  (every one is a measured depth or the fill);
- compressedDepth as compressed_depth_image_transport writes it, encoded here by another
  library (Pillow's PNG writer, the header packed by hand from the plugin's layout), for 16UC1
  and for 32FC1's quantised inverse depth; unsupported (rvl), corrupt and truncated data is
  malformed;
- K is mapped into the model input's pixels as the image is: a point projected with the
  model's K lands where the source pixel landed;
- the model, fed through the node's own plans and encoders, locates every object of the
  synthetic RGB-D frames within 2 % of its distance, for every depth encoding and transport,
  letterbox and stretch; fed the depth of another frame, it does not.
"""

from __future__ import annotations

import io
import struct
from types import SimpleNamespace as NS

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image as PilImage

from triton_ros.core.errors import TritonRosError
from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.binding.plan import build_sync_plan
from triton_ros.ros.codec.base import MalformedInput
from triton_ros.ros.codec.camera_info import CAMERA_INFO, CameraInfoConfig
from triton_ros.ros.codec.compressed_depth import (
    COMPRESSED_DEPTH,
    ReceivedCompressed,
    decode_compressed_depth,
)
from triton_ros.ros.codec.depth import DEPTH, DepthConfig
from triton_ros.ros.codec.preprocess import PreprocessConfig, plan_input
from triton_ros.ros.codec.registry import input_kind, input_kind_for_topic, output_format
from triton_ros.ros.parameters import BINDING_PARAMS, binding_config
from triton_ros.ros.targets.spec import ModelSpec, TensorSpec
from triton_ros.ros.tools.synthetic_cameras import (
    CLASS_NAMES,
    RgbdScene,
    compressed_depth,
    depth_bytes,
    parse_rgbd,
)

from ros_probe import ROOT

pytestmark = pytest.mark.unit

DEPTH_INPUT = TensorConfig(name="DEPTH", datatype="FP32", dims=(1, 256, 256))
HEADER = NS(frame_id="cam", stamp=NS(sec=1, nanosec=2))


def depth_message(pixels: np.ndarray, encoding: str, *, pad: int = 0, big: bool = False):
    h, w = pixels.shape
    data = pixels.astype(pixels.dtype.newbyteorder(">") if big else pixels.dtype)
    rows = np.zeros((h, w * pixels.itemsize + pad), np.uint8)
    rows[:, : w * pixels.itemsize] = data.view(np.uint8).reshape(h, -1)
    return NS(
        header=HEADER,
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=int(big),
        step=w * pixels.itemsize + pad,
        data=rows.reshape(-1),
    )


def encode_depth(msg, config=None, tensor=DEPTH_INPUT, kind=DEPTH):
    kind.check(msg)
    plan = kind.plan(config or DepthConfig(), tensor, model="m")
    return kind.encoder(plan)(msg)


# --------------------------------------------------------------------------------------------
# Depth images
# --------------------------------------------------------------------------------------------


def test_16uc1_is_millimetres_and_invalid_pixels_get_the_fill():
    mm = np.array([[0, 1000, 2500, 65535]] * 4, np.uint16).repeat(64, 0).repeat(64, 1)
    tensor, letterbox = encode_depth(
        depth_message(mm, "16UC1"), DepthConfig(fill=-1.0, max_m=10.0, resize="stretch")
    )
    assert tensor.shape == (1, 256, 256) and tensor.dtype == np.float32
    # 65.535 m is beyond depth_max_m: invalid, not clipped to a surface at 10 m
    np.testing.assert_allclose(tensor[0, 0, ::64], [-1.0, 1.0, 2.5, -1.0])
    assert letterbox.scale_x == 1.0


def test_depth_outside_the_range_is_invalid_never_clipped_to_its_limits():
    m = np.array([[0.2, 0.5, 3.0, 9.99, 10.0, 10.01, 40.0, np.inf]], np.float32).repeat(2, 0)
    tensor, _ = encode_depth(
        depth_message(m, "32FC1"),
        DepthConfig(min_m=0.5, max_m=10.0, fill=0.0, resize="stretch"),
        TensorConfig(name="D", datatype="FP32", dims=(2, 8)),
    )
    # the limits themselves are valid; beyond them, no invented surface at the limit
    np.testing.assert_allclose(tensor[0], [0.0, 0.5, 3.0, 9.99, 10.0, 0.0, 0.0, 0.0], rtol=1e-6)


@pytest.mark.parametrize("big,pad", [(False, 0), (True, 0), (False, 6), (True, 4)])
def test_32fc1_is_metres_with_nan_inf_and_negatives_invalid(big, pad):
    m = np.full((256, 256), 2.0, np.float32)
    m[0, :5] = [np.nan, np.inf, -np.inf, -1.0, 0.25]  # REP 117: none is a distance
    tensor, _ = encode_depth(
        depth_message(m, "32FC1", pad=pad, big=big), DepthConfig(min_m=0.5, fill=7.0)
    )
    np.testing.assert_allclose(tensor[0, 0, :6], [7.0, 7.0, 7.0, 7.0, 7.0, 2.0])


def test_resizing_never_blends_valid_and_invalid_depths():
    rng = np.random.default_rng(1)
    mm = rng.integers(500, 5000, size=(480, 640)).astype(np.uint16)
    mm[rng.random(mm.shape) < 0.3] = 0  # holes everywhere
    mm[:, 300:340] = 0  # an invalid band
    tensor, letterbox = encode_depth(depth_message(mm, "16UC1"), DepthConfig(fill=0.0))
    measured = set(np.round(mm[mm > 0] * 0.001, 6).tolist()) | {0.0}
    assert set(np.round(tensor.reshape(-1).astype(np.float64), 6).tolist()) <= measured
    assert letterbox.pad_y == 32 and (tensor[0, :32] == 0).all() and (tensor[0, -32:] == 0).all()


def test_a_depth_input_must_be_one_floating_point_channel():
    with pytest.raises(TritonRosError, match="floating-point"):
        DEPTH.plan(
            DepthConfig(), TensorConfig(name="D", datatype="UINT8", dims=(1, 8, 8)), model="m"
        )
    with pytest.raises(TritonRosError, match="one channel"):
        DEPTH.plan(
            DepthConfig(), TensorConfig(name="D", datatype="FP32", dims=(3, 8, 8)), model="m"
        )
    plan = DEPTH.plan(
        DepthConfig(), TensorConfig(name="D", datatype="FP16", dims=(8, 8)), model="m"
    )
    assert plan.shape == (8, 8)


@pytest.mark.parametrize(
    "encoding,height,width,step,size,why",
    [
        ("mono8", 4, 4, 4, 16, "not a depth encoding"),
        ("16UC1", 4, 4, 6, 24, "step 6"),
        ("32FC1", 4, 4, 16, 60, "fewer than step"),
        ("16UC1", 0, 4, 8, 0, "empty"),
    ],
)
def test_a_depth_image_that_is_not_what_it_claims_is_malformed(
    encoding, height, width, step, size, why
):
    msg = NS(
        header=HEADER,
        encoding=encoding,
        height=height,
        width=width,
        step=step,
        data=bytes(size),
        is_bigendian=0,
    )
    with pytest.raises(MalformedInput, match=why):
        DEPTH.check(msg)


# --------------------------------------------------------------------------------------------
# compressedDepth (compressed_depth_image_transport), encoded by Pillow
# --------------------------------------------------------------------------------------------


def pil_png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    PilImage.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def config_header(fmt: int = 0, a: float = 0.0, b: float = 0.0) -> bytes:
    return struct.pack("<iff", fmt, a, b)  # compressionFormat, float depthParam[2]


@pytest.mark.parametrize("fmt", ["16UC1; compressedDepth png", "16UC1; compressedDepth", "16UC1"])
def test_compressed_depth_16uc1_png(fmt):
    mm = np.random.default_rng(2).integers(0, 9000, size=(120, 160)).astype(np.uint16)
    msg = ReceivedCompressed(HEADER, fmt, config_header() + pil_png(mm))
    pixels, unit, _ = decode_compressed_depth(msg.format, msg.data)
    assert unit == "mm" and (pixels == mm).all()
    tensor, _ = encode_depth(
        msg,
        DepthConfig(resize="stretch"),
        TensorConfig(name="D", datatype="FP32", dims=(120, 160)),
        COMPRESSED_DEPTH,
    )
    np.testing.assert_allclose(tensor, mm * 0.001, rtol=1e-6)


def test_compressed_depth_32fc1_is_quantised_inverse_depth():
    # The publisher's defaults: depth_max 10 m, depth_quantization 100.
    a = np.float32(100 * 101)
    b = np.float32(1 - a / 10.0)
    depth = np.linspace(0.5, 8.0, 64 * 64, dtype=np.float32).reshape(64, 64)
    q = np.trunc(a / depth + b).astype(np.uint16)
    q[0, :5] = 0  # no depth
    msg = ReceivedCompressed(
        HEADER, "32FC1; compressedDepth png", config_header(0, float(a), float(b)) + pil_png(q)
    )
    tensor, _ = encode_depth(
        msg,
        DepthConfig(fill=-1.0),
        TensorConfig(name="D", datatype="FP32", dims=(64, 64)),
        COMPRESSED_DEPTH,
    )
    assert (tensor[0, :5] == -1.0).all()
    valid = q != 0
    np.testing.assert_allclose(tensor[valid], a / (q[valid].astype(np.float32) - b), rtol=1e-6)
    # the quantisation: about 1 mm at 3 m
    assert np.abs(tensor[valid] - depth[valid]).max() < 0.01


@pytest.mark.parametrize(
    "fmt,data,why",
    [
        ("16UC1; compressedDepth rvl", config_header() + b"\x00" * 40, "rvl is not read"),
        ("16UC1; jpeg compressed bgr8", config_header() + b"\x00" * 40, "not compressed_depth"),
        ("bgr8; compressedDepth png", config_header() + b"\x00" * 40, "not a depth encoding"),
        ("16UC1; compressedDepth png", config_header()[:8], "no room"),
        ("16UC1; compressedDepth png", config_header() + b"GIF89a" + b"\x00" * 30, "not a PNG"),
    ],
)
def test_unreadable_compressed_depth_is_malformed_at_check(fmt, data, why):
    with pytest.raises(MalformedInput, match=why):
        COMPRESSED_DEPTH.check(ReceivedCompressed(HEADER, fmt, data))


def test_corrupt_truncated_and_8_bit_pngs_are_malformed_when_decoded():
    mm = np.full((64, 64), 1234, np.uint16)
    good = pil_png(mm)
    cases = {
        "truncated": config_header() + good[: len(good) // 2],
        "corrupt": config_header() + good[:40] + bytes(len(good) - 40),
        "8 bit": config_header() + pil_png(np.zeros((8, 8), np.uint8)),
        "format 1": config_header(1) + good,
    }
    for _name, data in cases.items():
        with pytest.raises(MalformedInput):
            decode_compressed_depth("16UC1; compressedDepth png", data)


# --------------------------------------------------------------------------------------------
# CameraInfo
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
@pytest.mark.parametrize("size", [(640, 480), (424, 240), (480, 640)])
def test_k_is_mapped_into_the_model_pixels_as_the_image_is(resize, size):
    w, h = size
    image = plan_input(
        PreprocessConfig(resize=resize),
        TensorConfig(name="C", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW"),
        model="m",
    )
    plan = CAMERA_INFO.plan(
        CameraInfoConfig(),
        TensorConfig(name="K", datatype="FP32", dims=(3, 3)),
        model="m",
        image=image,
    )
    k = np.array([[0.9 * w, 0.0, w / 2 + 7], [0.0, 0.9 * w, h / 2 - 5], [0.0, 0.0, 1.0]])
    msg = NS(header=HEADER, width=w, height=h, k=k.reshape(-1))
    CAMERA_INFO.check(msg)
    tensor, intrinsics = CAMERA_INFO.encoder(plan)(msg)
    lb = intrinsics.letterbox
    for point in ([0.3, -0.2, 2.0], [-0.5, 0.4, 1.0]):
        u, v, _ = k @ point / point[2]  # source pixel (centres at integers)
        mu, mv, _ = tensor.astype(np.float64) @ point / point[2]
        assert mu == pytest.approx((u + 0.5) * lb.scale_x - 0.5 + lb.pad_x, abs=1e-3)
        assert mv == pytest.approx((v + 0.5) * lb.scale_y - 0.5 + lb.pad_y, abs=1e-3)


def test_an_uncalibrated_or_sizeless_camera_info_is_malformed():
    with pytest.raises(MalformedInput, match="uncalibrated"):
        CAMERA_INFO.check(NS(header=HEADER, width=640, height=480, k=np.zeros(9)))
    with pytest.raises(MalformedInput, match="9"):
        CAMERA_INFO.check(NS(header=HEADER, width=640, height=480, k=np.ones(4)))
    image = plan_input(
        PreprocessConfig(), TensorConfig(name="C", datatype="FP32", dims=(3, 64, 64)), model="m"
    )
    plan = CAMERA_INFO.plan(
        CameraInfoConfig(),
        TensorConfig(name="K", datatype="FP32", dims=(9,)),
        model="m",
        image=image,
    )
    with pytest.raises(MalformedInput, match="no width and height"):
        CAMERA_INFO.encoder(plan)(
            NS(header=HEADER, width=0, height=0, k=np.array([500, 0, 320, 0, 500, 240, 0, 0, 1.0]))
        )


def test_kinds_are_found_by_the_topic_type():
    assert input_kind_for_topic("", "sensor_msgs/msg/Image").name == "image"
    assert input_kind_for_topic("depth", "sensor_msgs/msg/Image").name == "depth"
    assert (
        input_kind_for_topic("depth", "sensor_msgs/msg/CompressedImage").name == "compressed_depth"
    )
    assert input_kind_for_topic("", "sensor_msgs/msg/CameraInfo").name == "camera_info"
    assert input_kind_for_topic("camera_info", "sensor_msgs/msg/Image") is None


# --------------------------------------------------------------------------------------------
# Parameters and plans of a synchronized binding
# --------------------------------------------------------------------------------------------

INPUTS = {"COLOR": "color/image_raw", "DEPTH": "depth/image_raw", "K": "color/camera_info"}


def rgbd_config(**extra):
    raw = {s.name: s.default for s in BINDING_PARAMS}
    raw.update(
        model="rgbd_locator",
        topic_patterns=["/robot*/rgbd*"],
        format="detections3d",
        score_threshold=0.5,
        inputs=dict(INPUTS),
        input_kinds={"DEPTH": "depth"},
    )
    raw.update(extra)
    return binding_config("rgbd", raw)


@pytest.mark.parametrize(
    "extra,why",
    [
        ({"inputs": {**INPUTS, "DEPTH": "/abs/depth"}}, "relative"),
        ({"input_kinds": {"DEPTH": "lidar"}}, "unknown input kind 'lidar'"),
        ({"input_kinds": {"IR": "depth"}}, "'IR' is not one of the binding's inputs"),
        ({"input": "IR"}, "names the one whose header"),
        ({"sync_queue_size": 0}, "sync_queue_size"),
        ({"depth_min_m": 2.0, "depth_max_m": 1.0}, "must make a range"),
        ({"depth_scale": 0.0}, "depth_scale"),
    ],
)
def test_a_synchronized_binding_with_bad_settings_is_refused(extra, why):
    with pytest.raises(TritonRosError, match=why):
        rgbd_config(**extra)


SPEC = ModelSpec(
    "rgbd_locator",
    1,
    "onnxruntime_onnx",
    16,
    (
        TensorSpec("COLOR", "FP32", (3, 256, 256), "FORMAT_NCHW"),
        TensorSpec("DEPTH", "FP32", (1, 256, 256)),
        TensorSpec("K", "FP32", (3, 3)),
    ),
    (TensorSpec("detections3d", "FP32", (6, 8)),),
    {"detections3d": tuple(CLASS_NAMES)},
)


def kinds(depth: str = "depth"):
    return [
        ("COLOR", input_kind("image")),
        ("DEPTH", input_kind(depth)),
        ("K", input_kind("camera_info")),
    ]


def test_a_plan_needs_every_model_input_fed_and_no_other():
    with pytest.raises(TritonRosError, match="also requires input"):
        build_sync_plan(rgbd_config(), SPEC, kinds()[:2], output_format("detections3d"))
    with pytest.raises(TritonRosError, match=r"has no input\(s\) IR"):
        build_sync_plan(
            rgbd_config(),
            SPEC,
            kinds() + [("IR", input_kind("image"))],
            output_format("detections3d"),
        )
    plan = build_sync_plan(rgbd_config(), SPEC, kinds(), output_format("detections3d"))
    assert plan.input_name == "COLOR" and [f[0] for f in plan.feeds] == ["COLOR", "DEPTH", "K"]
    assert plan.feeds[2][1].image is plan.feeds[0][1]  # K mapped into COLOR's pixels


# --------------------------------------------------------------------------------------------
# The model, through the node's plans and encoders
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session():
    return ort.InferenceSession(
        str(ROOT / "model_repository" / "rgbd_locator" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )


def rgbd_messages(scene: RgbdScene, t: float, *, depth_t: float | None = None):
    spec = scene.spec
    rgb, depth_m, truth = scene.render(t)
    if depth_t is not None:
        _, depth_m, _ = scene.render(depth_t)
    colour = NS(
        header=HEADER,
        height=spec.height,
        width=spec.width,
        encoding="rgb8",
        step=spec.width * 3,
        data=rgb.reshape(-1),
        is_bigendian=0,
    )
    if spec.depth_transport == "compressedDepth":
        fmt, data = compressed_depth(depth_m, spec.depth_encoding)
        depth = ReceivedCompressed(HEADER, fmt, data)
    else:
        depth = depth_message(depth_bytes(depth_m, spec.depth_encoding), spec.depth_encoding)
    info = NS(header=HEADER, width=spec.width, height=spec.height, k=scene.k.reshape(-1))
    return {"COLOR": colour, "DEPTH": depth, "K": info}, truth


def locate(session, plan, messages) -> np.ndarray:
    tensors, _, _ = plan.encode_request(messages)
    return session.run(None, tensors)[0][0]


def errors(rows: np.ndarray, truth) -> list[float]:
    """Per ground-truth object: its position error over its distance (inf: not found)."""
    out = []
    for position, cls in zip(truth.positions, truth.classes):
        found = rows[(rows[:, 7] == cls) & (rows[:, 6] > 0.5)]
        out.append(
            float(np.linalg.norm(found[0, :3] - position) / position[2])
            if len(found)
            else float("inf")
        )
    return out


@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
@pytest.mark.parametrize(
    "camera",
    [
        "640x480:16UC1:raw",
        "848x480:32FC1:raw",
        "320x240:16UC1:compressedDepth",
        "480x640:32FC1:compressedDepth",
    ],
)
def test_every_object_is_located_within_2_percent(session, camera, resize):
    scene = RgbdScene(parse_rgbd(f"r/c:{camera}"), seed=5)
    depth_kind = "compressed_depth" if camera.endswith("compressedDepth") else "depth"
    plan = build_sync_plan(
        rgbd_config(resize=resize), SPEC, kinds(depth_kind), output_format("detections3d")
    )
    for t in (0.2, 0.9, 2.1):
        messages, truth = rgbd_messages(scene, t)
        for kind, msg in zip(kinds(depth_kind), messages.values()):
            kind[1].check(msg)
        errs = errors(locate(session, plan, messages), truth)
        assert max(errs) <= 0.02, errs


def test_the_depth_of_another_frame_gives_wrong_positions(session):
    """What the synchronizer is for: the neighbouring frame's depth (33 ms later at 30 Hz)."""
    scene = RgbdScene(parse_rgbd("r/c:640x480:16UC1"), seed=5)
    plan = build_sync_plan(rgbd_config(), SPEC, kinds(), output_format("detections3d"))
    wrong = 0
    total = 0
    for t in (0.2, 0.9, 2.1):
        messages, truth = rgbd_messages(scene, t, depth_t=t + 1 / 30)
        errs = errors(locate(session, plan, messages), truth)
        wrong += sum(e > 0.02 for e in errs)
        total += len(errs)
    assert wrong >= 0.8 * total, (wrong, total)
