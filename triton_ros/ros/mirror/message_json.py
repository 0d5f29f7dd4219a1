"""A ROS message as a JSON-able dict, with the message's own field names (those ``ros2 topic
echo`` prints), for the Kafka mirror.

Written here because the library that does this for ``ros2 topic echo``
(``rosidl_runtime_py.convert.message_to_ordereddict``) is not on PyPI, where this package's
Python dependencies come from. The conversion follows the message's own type description
(``get_fields_and_field_types``): nested messages become objects, arrays and sequences lists,
``builtin_interfaces/Time`` stays ``{"sec", "nanosec"}``. Two choices a JSON reader needs:

- ``uint8``/``octet`` arrays and sequences (a tensor's ``data``) are base64 text, as protobuf's
  JSON mapping writes bytes: a list of numbers would be four times the size;
- a float that is not finite (NaN, infinity) is ``null``: JSON has no such numbers.
"""

from __future__ import annotations

import array
import base64
import math
import re
from typing import Any

import numpy as np

# 'sequence<uint8>', 'sequence<octet, 16>', 'uint8[4]', 'octet[8]'
_BYTES_TYPE = re.compile(r"^(sequence<(uint8|octet)(, ?\d+)?>|(uint8|octet)\[\d+\])$")
# per message type: its fields, and whether each is bytes (read once, from the type)
_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def message_to_dict(msg: Any) -> dict[str, Any]:
    """``msg`` (an rclpy message) as a dict of its fields, in declaration order."""
    fields = _FIELDS.get(type(msg))
    if fields is None:
        fields = _FIELDS[type(msg)] = tuple(
            (name, bool(_BYTES_TYPE.match(kind)))
            for name, kind in msg.get_fields_and_field_types().items()
        )
    return {
        name: (
            base64.b64encode(_as_bytes(getattr(msg, name))).decode("ascii")
            if raw
            else _value(getattr(msg, name))
        )
        for name, raw in fields
    }


def type_name(msg: Any) -> str:
    """``package/msg/Type`` of an rclpy message, e.g. ``vision_msgs/msg/Detection2DArray``."""
    return f"{type(msg).__module__.split('.')[0]}/msg/{type(msg).__name__}"


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (array.array, np.ndarray)):
        return value.tobytes()
    # a list of octets (one-byte bytes objects) or of small ints
    return b"".join(v if isinstance(v, bytes) else bytes((int(v),)) for v in value)


def _value(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if type(value) in _FIELDS or hasattr(value, "get_fields_and_field_types"):
        return message_to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    if isinstance(value, (array.array, np.ndarray)):
        return [_value(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return _value(value.item())
    if isinstance(value, bytes):  # a single octet
        return value[0] if len(value) == 1 else list(value)
    raise TypeError(f"a {type(value).__name__} field has no JSON form")
