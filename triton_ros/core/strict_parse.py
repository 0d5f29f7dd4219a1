"""Strict parsing of sizes and counts that arrive as text (headers, flags, shared memory, ROS).

Python's ``int()`` accepts far more than a size: ``"0_2"``, ``" 2 "``, ``"+2"``, ``"２"``
(full-width digits) and, with a base, ``"0x2"``. Triton parses these with ``std::stoull``-like code
on decimal ASCII digits only. Every place that turns client text into a size or a count (the HTTP
``Content-Length`` / ``Inference-Header-Content-Length`` headers, chunk sizes, ``--cache-config
size=``, shared memory offsets and byte sizes) goes through :func:`parse_size` so that there is one
rule, and a refused value is an INVALID_ARG error naming what it was.

Written by hand because it is five lines: no library offers "decimal ASCII digits, bounded".
"""

from __future__ import annotations

from typing import Any

from .errors import TritonRosError, invalid_arg

#: Sizes above this are refused outright (no request, region or cache is this large); it keeps
#: a 4000-digit "size" from costing a quadratic int conversion.
MAX_SIZE = 2**63 - 1
_MAX_DIGITS = len(str(MAX_SIZE))


def parse_size(text: str | bytes, what: str, *, maximum: int = MAX_SIZE) -> int:
    """A non-negative decimal integer made of ASCII digits only, at most ``maximum``.

    Refuses signs, spaces, underscores, ``0x``/``0o``/``0b`` prefixes, non-ASCII digits and the
    empty string with INVALID_ARG ``"invalid <what>: ..."``.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("ascii")
        except UnicodeDecodeError:
            raise invalid_arg(f"invalid {what}: expected a decimal integer") from None
    if not isinstance(text, str):
        raise invalid_arg(f"invalid {what}: expected a decimal integer, got {type(text).__name__}")
    if not text or len(text) > _MAX_DIGITS or not text.isascii() or not text.isdigit():
        shown = text if len(text) <= 32 else text[:32] + "..."
        raise invalid_arg(f"invalid {what}: expected a decimal integer, got {shown!r}")
    value = int(text)
    if value > maximum:
        raise invalid_arg(f"invalid {what}: {value} exceeds the maximum of {maximum}")
    return value


def parse_model_version(text: str) -> int:
    """A model version as the protocols give it: '' or '-1' -> -1 (the latest ready version),
    '3' -> 3; anything else (signs, spaces, ``0x``, ``1e3``) is INVALID_ARG with Triton's
    message."""
    if text in ("", "-1"):
        return -1
    try:
        return parse_size(text, "model version")
    except TritonRosError:
        raise invalid_arg(
            f"failed to get model version from specified version string "
            f"'{text[:64]}' (must be integral)"
        ) from None


def require_size(value: Any, what: str, *, maximum: int = MAX_SIZE) -> int:
    """An already-typed integer size (JSON or protobuf): an ``int`` (not ``bool``) in
    ``[0, maximum]``; a ``str`` goes through :func:`parse_size`. Anything else is INVALID_ARG."""
    if isinstance(value, str):
        return parse_size(value, what, maximum=maximum)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid_arg(
            f"invalid {what}: expected an unsigned integer, got {type(value).__name__}"
        )
    if value < 0 or value > maximum:
        raise invalid_arg(f"invalid {what}: {value} is outside [0, {maximum}]")
    return value
