"""The ``compressed_depth`` input kind: ``sensor_msgs/CompressedImage`` as
compressed_depth_image_transport's publisher writes it -> one depth input of the model, in metres
(the depth kinds' settings, plan and encoder: :mod:`.depth`).

What is read (``.../compressedDepth`` topics; ``codec.cpp`` of
ros-perception/image_transport_plugins): ``format`` ``"16UC1; compressedDepth png"`` or
``"32FC1; compressedDepth png"`` (also ``"...; compressedDepth"``, and a bare encoding from its
older releases: PNG), ``data`` = a 12-byte ``ConfigHeader`` (``int32`` compression format, 0 =
``INV_DEPTH``; ``float32 depthParam[2]``, little-endian as the publishing machine's C struct)
followed by a 16-bit PNG. For 16UC1 the PNG holds the millimetres; for 32FC1 it holds the
quantised inverse depth ``q = A / depth + B`` (``A, B = depthParam``), so ``depth = A / (q - B)``
and ``q = 0`` means no depth. The ``rvl`` compression is not read (counted as malformed, with
that reason). The PNG's size is read from its IHDR before anything is decoded (the node's one
pixel limit, :mod:`.headers`), and it is decoded by OpenCV (``cv2.imdecode``, which releases the
GIL) on the binding's worker threads, never on the executor's (``encode_on_workers``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

try:
    import cv2
except ImportError:  # pragma: no cover - a requirement
    cv2 = None

from .base import MalformedInput
from .depth import DEPTH_ENCODINGS, DepthEncoder, DepthKind, DepthPlan
from .headers import PNG_SIGNATURE, HeaderError, pixel_limit_text, png_size
from .preprocess import Letterbox
from .serialized_message import SerializedReader

COMPRESSED_IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"
CONFIG_HEADER_SIZE = 12  # compressed_depth_image_transport's ConfigHeader
INV_DEPTH = 0  # its compressionFormat of the PNG/RVL payloads


@dataclass(frozen=True)
class ReceivedCompressed:
    """The fields of a sensor_msgs/CompressedImage the node reads."""

    header: Any
    format: str
    data: Any  # bytes-like: a view of the serialized message


def parse_compressed_depth_format(text: str) -> tuple[str, str]:
    """``"16UC1; compressedDepth png"`` -> ("16UC1", "png"), as the subscriber plugin reads it;
    MalformedInput for what it would refuse or this node does not read."""
    encoding, sep, rest = text.partition(";")
    encoding = encoding.strip()
    if not sep:
        compression = "png"  # older compressed_depth_image_transport: PNG only
    elif "compressedDepth png" in rest:
        compression = "png"
    elif "compressedDepth rvl" in rest:
        compression = "rvl"
    elif "compressedDepth" in rest and "compressedDepth " not in rest:
        compression = "png"
    else:
        raise MalformedInput(
            f"format '{text}' is not compressed_depth_image_transport's "
            f"('16UC1; compressedDepth png' or '32FC1; compressedDepth png')"
        )
    if encoding not in DEPTH_ENCODINGS:
        raise MalformedInput(
            f"format '{text}': '{encoding}' is not a depth encoding ({', '.join(DEPTH_ENCODINGS)})"
        )
    if compression != "png":
        raise MalformedInput(
            f"format '{text}': compressedDepth {compression} is not read by "
            f"this node (publish with the png format)"
        )
    return encoding, compression


def check_compressed_depth(fmt: str, data) -> str:
    """Check what can be checked without decoding; the encoding."""
    encoding, _ = parse_compressed_depth_format(fmt)
    size = len(data)
    if size <= CONFIG_HEADER_SIZE:
        raise MalformedInput(
            f"compressedDepth data has {size} bytes: no room for its "
            f"{CONFIG_HEADER_SIZE}-byte header and an image"
        )
    head = bytes(memoryview(data)[CONFIG_HEADER_SIZE : CONFIG_HEADER_SIZE + len(PNG_SIGNATURE)])
    if head != PNG_SIGNATURE:
        raise MalformedInput("compressedDepth data after its header is not a PNG image")
    return encoding


def compressed_depth_size(data) -> tuple[int, int]:
    """(width, height) of compressedDepth data's PNG, from its IHDR (nothing decoded)."""
    try:
        return png_size(data, CONFIG_HEADER_SIZE)
    except HeaderError as exc:
        raise MalformedInput(f"compressedDepth data: {exc}") from None


def decode_compressed_depth(fmt: str, data) -> tuple[np.ndarray, str, tuple[float, float] | None]:
    """compressedDepth bytes -> (uint16 [H, W] pixels, unit, inverse-depth parameters); a PNG
    that does not decode to one 16-bit channel raises MalformedInput."""
    encoding = check_compressed_depth(fmt, data)
    refused = pixel_limit_text(*compressed_depth_size(data))  # check_input's, again
    if refused is not None:
        raise MalformedInput(f"compressedDepth PNG: {refused}")
    buffer = np.frombuffer(data, np.uint8)
    header = buffer[:CONFIG_HEADER_SIZE]
    compression = int(header[:4].view("<i4")[0])
    params = header[4:CONFIG_HEADER_SIZE].view("<f4")
    if compression != INV_DEPTH:
        raise MalformedInput(
            f"compressedDepth header names compression format {compression}; "
            f"only INV_DEPTH ({INV_DEPTH}) is defined"
        )
    image = cv2.imdecode(buffer[CONFIG_HEADER_SIZE:], cv2.IMREAD_UNCHANGED)
    if image is None:
        raise MalformedInput(
            f"compressedDepth PNG of {buffer.size - CONFIG_HEADER_SIZE} bytes "
            f"does not decode (corrupt or truncated)"
        )
    if image.ndim != 2 or image.dtype != np.uint16:
        raise MalformedInput(
            f"compressedDepth PNG holds {image.dtype} "
            f"{'x'.join(map(str, image.shape))}, not one 16-bit channel"
        )
    if encoding == "16UC1":
        return image, "mm", None
    a, b = float(params[0]), float(params[1])
    if not (np.isfinite(a) and np.isfinite(b)) or a == 0.0:
        raise MalformedInput(
            f"compressedDepth 32FC1 header has quantisation parameters "
            f"({a}, {b}): not a depth quantisation"
        )
    return image, "inverse", (a, b)


class CompressedDepthInput(DepthKind):
    """``sensor_msgs/CompressedImage`` in compressed_depth_image_transport's format in."""

    name = "compressed_depth"
    ros_type = COMPRESSED_IMAGE_TYPE
    # Decoding a PNG costs milliseconds: on the workers, whatever preprocess_in_callback says.
    encode_on_workers = True

    def message_class(self) -> type:
        from sensor_msgs.msg import CompressedImage

        return CompressedImage

    def reader(self) -> SerializedReader:
        return SerializedReader(
            COMPRESSED_IMAGE_TYPE,
            lambda msg, header: ReceivedCompressed(header=header, format=msg.format, data=msg.data),
        )

    def check(self, msg: Any) -> None:
        check_compressed_depth(msg.format, msg.data)

    def decoded_size(self, msg: Any) -> tuple[int, int]:
        return compressed_depth_size(msg.data)

    def encoder(self, plan: DepthPlan) -> Callable[[Any], tuple[np.ndarray, Letterbox]]:
        encode = DepthEncoder(plan)

        def run(msg: Any) -> tuple[np.ndarray, Letterbox]:
            pixels, unit, inverse = decode_compressed_depth(msg.format, msg.data)
            return encode(pixels, unit, inverse)

        return run


COMPRESSED_DEPTH = CompressedDepthInput()
