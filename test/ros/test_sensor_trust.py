"""What the node trusts of a sensor message, in process: the one pixel limit every input kind is
held to (read from headers, nothing decoded), the camera matrix (K or P), the sizes and
frame_ids of a matched RGB-D set, and the last error kept per topic for /diagnostics.

Images are encoded by other libraries than the node's readers (Pillow, OpenCV); bombs are real
images whose header was made to claim more pixels than the limit.
"""

from __future__ import annotations

import io
import logging
import struct
from types import SimpleNamespace as NS

import numpy as np
import pytest
from PIL import Image as PilImage

from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.binding.sync_inputs import ResolvedInput, SyncGroup
from triton_ros.ros.binding.synchronizer import Entry
from triton_ros.ros.codec import headers
from triton_ros.ros.codec.base import MalformedInput, check_input
from triton_ros.ros.codec.camera_info import CAMERA_INFO, CameraInfoConfig
from triton_ros.ros.codec.compressed_depth import ReceivedCompressed
from triton_ros.ros.codec.headers import MAX_PIXELS, encoded_size
from triton_ros.ros.codec.registry import INPUT_KINDS, input_kind
from triton_ros.ros.monitoring.counters import SourceCounters
from triton_ros.ros.monitoring.diagnostics import BindingFigures, DiagnosticsReporter, SourceFigures
from triton_ros.ros.monitoring.failures import FailureLog
from triton_ros.ros.parameters import BINDING_PARAMS, binding_config

pytestmark = pytest.mark.unit

HEADER = NS(frame_id="cam", stamp=NS(sec=1, nanosec=2))


def pillow(pixels: np.ndarray, fmt: str, **kw) -> bytes:
    out = io.BytesIO()
    PilImage.fromarray(pixels).save(out, format=fmt, **kw)
    return out.getvalue()


def claim_png(png: bytes, width: int, height: int) -> bytes:
    """The same PNG with an IHDR claiming ``width`` x ``height`` (its CRC left stale, as a
    hostile publisher may)."""
    return png[:16] + width.to_bytes(4, "big") + height.to_bytes(4, "big") + png[24:]


def claim_jpeg(jpeg: bytes, width: int, height: int) -> bytes:
    """The same JPEG with a frame header (SOF0/SOF2) claiming ``width`` x ``height``."""
    i = next(i for i in range(2, len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC2))
    return jpeg[: i + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + jpeg[i + 9 :]


# --------------------------------------------------------------------------------------------
# Sizes from headers, and the one limit
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt,kw", [("PNG", {}), ("JPEG", {"quality": 80}), ("JPEG", {"progressive": True})]
)
@pytest.mark.parametrize("size", [(640, 480), (33, 7)])
def test_sizes_are_read_from_headers_as_the_encoders_wrote_them(fmt, kw, size, monkeypatch):
    w, h = size
    data = pillow(np.zeros((h, w, 3), np.uint8), fmt, **kw)
    assert encoded_size(data) == (w, h)
    if fmt == "JPEG":  # without simplejpeg: the marker walk finds the same
        assert headers._jpeg_sof_size(memoryview(data)) == (w, h)


def test_headers_that_cannot_be_read_are_refused():
    png = pillow(np.zeros((8, 8), np.uint8), "PNG")
    for bad in (b"", b"GIF89a" + bytes(40), png[:20], b"\xff\xd8\xff\xe0" + bytes(4)):
        with pytest.raises(headers.HeaderError):
            encoded_size(bad)


def test_every_registered_input_kind_says_what_it_decodes_to():
    """The limit is applied by check_input to every kind: a kind added later must say its size
    (or None: no pixels of its own)."""
    for kind in INPUT_KINDS.values():
        assert callable(getattr(type(kind), "decoded_size", None)), kind.name


def bombs():
    """A message over the limit for every kind that holds pixels, each well formed otherwise."""
    rgb = np.zeros((48, 64, 3), np.uint8)
    mm = np.zeros((48, 64), np.uint16)
    side = 8200  # 67.2 Mpixel, just over 64 Mi
    assert side * side > MAX_PIXELS
    header12 = struct.pack("<iff", 0, 0.0, 0.0)
    return {
        # raw images must carry their bytes: honest ones, just too large (zeroed pages, lazily)
        "image": NS(
            header=HEADER,
            encoding="mono8",
            height=side,
            width=side,
            step=side,
            data=bytes(side * side),
            is_bigendian=0,
        ),
        "depth": NS(
            header=HEADER,
            encoding="16UC1",
            height=side,
            width=side,
            step=2 * side,
            data=bytes(2 * side * side),
            is_bigendian=0,
        ),
        "compressed": NS(
            header=HEADER,
            format="rgb8; jpeg compressed bgr8",
            data=claim_jpeg(pillow(rgb, "JPEG"), 30000, 30000),
        ),
        "compressed_png": NS(
            header=HEADER,
            format="rgb8; png compressed bgr8",
            data=claim_png(pillow(rgb, "PNG"), 30000, 30000),
        ),
        "compressed_depth": ReceivedCompressed(
            HEADER,
            "16UC1; compressedDepth png",
            header12 + claim_png(pillow(mm, "PNG"), 30000, 30000),
        ),
    }


@pytest.mark.parametrize(
    "name", ["image", "depth", "compressed", "compressed_png", "compressed_depth"]
)
def test_a_message_over_the_pixel_limit_is_refused_before_decoding(name, monkeypatch):
    kind = input_kind(name.replace("_png", ""))
    msg = bombs()[name]
    kind.check(msg)  # the kind's own check finds nothing wrong
    assert kind.decoded_size(msg) in ((8200, 8200), (30000, 30000))
    import cv2

    monkeypatch.setattr(cv2, "imdecode", lambda *a: pytest.fail("decoded"))
    with pytest.raises(MalformedInput, match="more than 64 Mpixel; not decoded"):
        check_input(kind, msg)


def test_a_real_compressed_depth_bomb_is_refused_by_its_header():
    """A 30000 x 30000 16-bit PNG of zeros: 1.8 GB decoded, a few MB sent."""
    import zlib

    width = height = 30000
    row = bytes(1 + 2 * width)  # filter byte 0 and a row of zeros
    z = zlib.compressobj(9)
    body = b"".join(z.compress(row) for _ in range(64)) + z.flush(zlib.Z_FULL_FLUSH)
    ihdr = struct.pack(">IIBBBBB", width, height, 16, 0, 0, 0, 0)

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload))
            + kind
            + payload
            + struct.pack(">I", zlib.crc32(kind + payload))
        )

    png = headers.PNG_SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", body)
    msg = ReceivedCompressed(
        HEADER, "16UC1; compressedDepth png", struct.pack("<iff", 0, 0.0, 0.0) + png
    )
    with pytest.raises(MalformedInput, match="30000x30000"):
        check_input(input_kind("compressed_depth"), msg)


def test_a_camera_info_claiming_a_huge_image_is_malformed():
    k = [500.0, 0, 320, 0, 500, 240, 0, 0, 1]
    for width, height in ((4294967295, 480), (640, 4294967295)):
        with pytest.raises(MalformedInput, match="more than the 64 Mpixel"):
            check_input(CAMERA_INFO, NS(header=HEADER, width=width, height=height, k=k))


# --------------------------------------------------------------------------------------------
# K or P
# --------------------------------------------------------------------------------------------


def camera_info(width=640, height=480):
    k = np.array([[600.0, 0, 330.0], [0, 600.0, 250.0], [0, 0, 1]])
    p = np.array([[580.0, 0, 318.0, 0], [0, 580.0, 236.0, 0], [0, 0, 1, 0]])  # rectified
    return NS(header=HEADER, width=width, height=height, k=k.reshape(-1), p=p.reshape(-1))


@pytest.mark.parametrize("matrix,fx,cx", [("K", 600.0, 330.0), ("P", 580.0, 318.0)])
def test_the_camera_matrix_is_k_or_the_left_3x3_of_p(matrix, fx, cx):
    plan = CAMERA_INFO.plan(
        CameraInfoConfig(matrix=matrix),
        TensorConfig(name="K", datatype="FP32", dims=(3, 3)),
        model="m",
    )
    tensor, intrinsics = CAMERA_INFO.encoder(plan)(camera_info())
    assert tensor[0, 0] == fx and tensor[0, 2] == cx and tensor[2, 2] == 1.0
    assert intrinsics.k.shape == (3, 3)


def test_p_of_zeros_is_malformed_where_p_is_used():
    msg = camera_info()
    msg.p = np.zeros(12)
    plan = CAMERA_INFO.plan(
        CameraInfoConfig(matrix="P"), TensorConfig(name="K", datatype="FP32", dims=(9,)), model="m"
    )
    with pytest.raises(MalformedInput, match="P has fx 0"):
        CAMERA_INFO.encoder(plan)(msg)


def config(**extra):
    raw = {s.name: s.default for s in BINDING_PARAMS}
    raw.update(
        model="rgbd_locator",
        topic_patterns=["/r*/cam"],
        format="detections3d",
        inputs={"COLOR": "color/image_raw", "DEPTH": "depth/image_raw", "K": "color/camera_info"},
        input_kinds={"DEPTH": "depth"},
    )
    raw.update(extra)
    return binding_config("rgbd", raw)


def test_camera_matrix_auto_is_p_for_rectified_topics():
    def matrix(**extra):
        return config(**extra).settings_for(CAMERA_INFO).matrix

    assert matrix() == "K"
    rectified = {
        "COLOR": "color/image_rect",
        "DEPTH": "depth/image_rect_raw",
        "K": "color/camera_info",
    }
    assert matrix(inputs=rectified) == "P"
    assert matrix(inputs=rectified, camera_matrix="K") == "K"
    assert matrix(camera_matrix="P") == "P"


# --------------------------------------------------------------------------------------------
# A matched set describes one image
# --------------------------------------------------------------------------------------------


def rgbd_group(inputs=("COLOR", "DEPTH", "K")):
    kinds = {"COLOR": "image", "DEPTH": "depth", "K": "camera_info", "RIGHT": "image"}
    resolved = [
        ResolvedInput(name, f"/r/cam/{name.lower()}", input_kind(kinds[name])) for name in inputs
    ]
    return SyncGroup("/r/cam", resolved, config(), [None] * len(resolved))


def image(width, height, frame="cam", encoding="rgb8"):
    return NS(
        header=NS(frame_id=frame, stamp=HEADER.stamp), width=width, height=height, encoding=encoding
    )


def entries(*msgs):
    return [Entry(0, m) for m in msgs]


def test_depth_of_another_size_is_named_and_the_set_refused():
    group = rgbd_group()
    problems, mismatches = group.check_set(
        entries(image(640, 480), image(848, 480, "cam", "16UC1"), camera_info())
    )
    assert [p.index for p in problems] == [1] and not mismatches
    assert "848x480 where COLOR, K are 640x480" in problems[0].text
    assert "aligned_depth_to_color" in problems[0].text
    # the same aspect ratio is no excuse: another camera's pixels
    problems, _ = group.check_set(entries(image(640, 480), image(320, 240), camera_info()))
    assert [p.index for p in problems] == [1]


def test_a_camera_info_of_another_size_is_named():
    group = rgbd_group()
    for width in (4294967295 & 0xFFFF, 1280, 0):
        problems, _ = group.check_set(
            entries(image(640, 480), image(640, 480), camera_info(width=width))
        )
        assert [p.index for p in problems] == [2], width
        assert "a CameraInfo of" in problems[0].text


def test_colour_of_another_size_than_its_depth_and_camera_info_is_the_one_named():
    problems, _ = rgbd_group().check_set(entries(image(848, 480), image(640, 480), camera_info()))
    assert [p.index for p in problems] == [0]


def test_frame_id_mismatches_are_warnings():
    problems, mismatches = rgbd_group().check_set(
        entries(image(640, 480, "cam_color"), image(640, 480, "cam_depth"), camera_info())
    )
    assert not problems
    assert [m.index for m in mismatches] == [1, 2]  # CameraInfo's frame is 'cam'
    assert "'cam_depth' differs from COLOR's 'cam_color'" in mismatches[0].text


def test_images_alone_are_not_compared():
    """Stereo or multi-camera models: images of several sizes and frames are normal."""
    problems, mismatches = rgbd_group(("COLOR", "RIGHT")).check_set(
        entries(image(640, 480, "left"), image(1280, 720, "right"))
    )
    assert not problems and not mismatches


# --------------------------------------------------------------------------------------------
# Every broken topic is named, not only the latest
# --------------------------------------------------------------------------------------------


class _Core:
    def repository_index(self):
        return []


def figures(log: FailureLog) -> BindingFigures:
    source = SourceFigures("/r/cam", "/r/cam/detections3d", SourceCounters(), 0, 0, [], [])
    return BindingFigures(
        name="rgbd",
        model="m",
        location="local",
        max_age_ms=0,
        inputs=("/r*/cam",),
        sources=(source,),
        retired=SourceCounters(),
        last_error=log.last,
        last_stale=None,
        model_ready=True,
        model_state="READY",
        model_reason="",
        sync_slop_ms=10.0,
        topic_errors=log.topic_errors(),
    )


def test_the_last_error_of_every_topic_is_kept_and_each_topic_throttled_on_its_own(caplog):
    log = FailureLog(logging.getLogger("trust_test"))
    reporter = DiagnosticsReporter(_Core())
    with caplog.at_level(logging.WARNING, logger="trust_test"):
        for i in range(50):  # two broken depth topics, interleaved
            for topic in ("/a/cam/depth", "/b/cam/depth"):
                log.report(
                    f"malformed:{topic}",
                    "dropped_malformed",
                    f"bad {topic} {i}",
                    level="warn",
                    topic=topic,
                )
            _, (health,) = reporter.report([figures(log)], (i + 1) * 1_000_000_000)
            names = {topic for topic, _, _ in health.topic_errors}
            assert names == {"/a/cam/depth", "/b/cam/depth"}
    # each topic's first line at once, then throttled on its own
    assert [r.getMessage() for r in caplog.records] == ["bad /a/cam/depth 0", "bad /b/cam/depth 0"]
    assert dict((t, e.text) for t, e in log.topic_errors()) == {
        "/a/cam/depth": "bad /a/cam/depth 49",
        "/b/cam/depth": "bad /b/cam/depth 49",
    }
    log.forget_topic("/a/cam/depth")
    assert [t for t, _ in log.topic_errors()] == ["/b/cam/depth"]


def test_the_status_message_names_every_topic_with_an_error_in_the_period():
    log = FailureLog(logging.getLogger("trust_test"))
    reporter = DiagnosticsReporter(_Core())
    reporter.report([figures(log)], 1_000_000_000)
    for topic in ("/a/cam/depth", "/b/cam/color/camera_info"):
        log.report(
            f"malformed:{topic}", "dropped_malformed", f"bad {topic}", level="warn", topic=topic
        )
    fig = figures(log)
    counters = SourceCounters(received=4, dropped_malformed=2)
    fig = BindingFigures(
        **{
            **fig.__dict__,
            "sources": (SourceFigures("/r/cam", "/r/cam/detections3d", counters, 0, 0, [], []),),
        }
    )
    _, (health,) = reporter.report([fig], 2_000_000_000)
    assert "(on /a/cam/depth, /b/cam/color/camera_info)" in health.message, health.message
    _, (health,) = reporter.report([fig], 3_000_000_000)  # a quiet period: none named
    assert "(on " not in health.message


def test_decoded_kinds_are_encoded_on_the_workers():
    """Whatever preprocess_in_callback says: a set with a compressedDepth input goes to the
    worker threads, so one camera's PNG never holds up the executor."""
    for name in ("compressed", "compressed_depth"):
        assert input_kind(name).encode_on_workers is True
    for name in ("image", "depth", "camera_info"):
        assert not getattr(input_kind(name), "encode_on_workers", False)
    group = rgbd_group()
    assert not group.decodes
    resolved = list(group.inputs)
    resolved[1] = ResolvedInput(
        "DEPTH", "/r/cam/depth/image_raw/compressedDepth", input_kind("compressed_depth")
    )
    assert SyncGroup("/r/cam", resolved, config(), [None] * 3).decodes
