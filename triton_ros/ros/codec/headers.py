"""How many pixels an input holds, read from its header before anything is decoded, and the one
limit every input kind is held to.

:data:`MAX_PIXELS` (64 Mpixel) bounds what one message may make the node allocate: a message
whose header claims more is malformed and is never decoded (a 2 MB PNG can claim 30000 x 30000
16-bit pixels, 1.8 GB decoded). :func:`~triton_ros.ros.codec.base.check_input` applies it to every
kind through the kind's ``decoded_size``; this module reads the sizes of encoded images:

- PNG: the IHDR chunk, which the PNG specification requires first, holds width and height as
  big-endian 32-bit integers at bytes 16-23 of the file;
- JPEG: the frame header (SOF) read by simplejpeg (libjpeg-turbo) where it is installed; without
  it, by walking the JPEG markers to the first SOF segment (ITU T.81, B.2), because no other
  library of the node's runtime reads a JPEG header without decoding the image.
"""

from __future__ import annotations

from typing import Any

MAX_PIXELS = 1 << 26  # 64 Mpixel: a header claiming more is refused unread
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
# JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): not DHT, JPG, DAC
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_NO_LENGTH = frozenset(range(0xD0, 0xD9)) | {0x01}  # RSTn, SOI, EOI, TEM


class HeaderError(ValueError):
    """Encoded bytes whose header cannot be read; the message says why."""


def pixel_limit_text(width: int, height: int) -> str | None:
    """Why ``width`` x ``height`` is refused (over :data:`MAX_PIXELS`), or None."""
    if width * height > MAX_PIXELS:
        return (
            f"the header claims {width}x{height} pixels, more than {MAX_PIXELS >> 20} "
            f"Mpixel; not decoded"
        )
    return None


def png_size(data: Any, offset: int = 0) -> tuple[int, int]:
    """(width, height) of the PNG starting at byte ``offset`` of ``data``, from its IHDR."""
    head = bytes(memoryview(data)[offset : offset + 24])
    if head[:8] != PNG_SIGNATURE:
        raise HeaderError("not a PNG image")
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise HeaderError("PNG without its IHDR chunk first (truncated or corrupt)")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def jpeg_size(data: Any) -> tuple[int, int]:
    """(width, height) of a JPEG, from its frame header."""
    try:
        import simplejpeg
    except ImportError:  # an apt-installed ROS 2 without it
        return _jpeg_sof_size(memoryview(data))
    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError as exc:
        raise HeaderError(f"JPEG header does not decode: {exc}") from None
    return int(width), int(height)


def _jpeg_sof_size(view: memoryview) -> tuple[int, int]:
    if bytes(view[:3]) != JPEG_MAGIC:
        raise HeaderError("not a JPEG image")
    i, end = 2, len(view)
    while i + 4 <= end:
        if view[i] != 0xFF:
            raise HeaderError(f"JPEG marker expected at byte {i}")
        marker = view[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _NO_LENGTH:
            i += 2
            continue
        length = int.from_bytes(view[i + 2 : i + 4], "big")
        if marker in _SOF:
            if i + 9 > end:
                break
            return (
                int.from_bytes(view[i + 7 : i + 9], "big"),
                int.from_bytes(view[i + 5 : i + 7], "big"),
            )
        if marker == 0xDA or length < 2:
            break  # scan data before any frame header: not a JPEG
        i += 2 + length
    raise HeaderError("JPEG without a frame header (truncated or corrupt)")


def encoded_size(data: Any, offset: int = 0) -> tuple[int, int]:
    """(width, height) of a PNG or JPEG at ``offset`` of ``data``; HeaderError for anything else."""
    head = bytes(memoryview(data)[offset : offset + 8])
    if head == PNG_SIGNATURE:
        return png_size(data, offset)
    if head.startswith(JPEG_MAGIC):
        return jpeg_size(memoryview(data)[offset:] if offset else data)
    raise HeaderError("neither JPEG nor PNG")
