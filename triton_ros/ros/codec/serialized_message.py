"""Any sensor message read from its serialized (CDR) bytes by rosbags, as
:mod:`.serialized_image` reads images: one reader for the other input kinds (CameraInfo,
CompressedImage for compressedDepth).

:class:`SerializedReader` deserializes the bytes with rosbags' CDR deserializer (large ``uint8[]``
fields, such as a compressed image's data, come back as numpy views of the received buffer, not
copies) and turns the message's ``std_msgs/Header`` into an rclpy one, as the outputs carry it.
The kind then reads the fields it needs from rosbags' message (same field names as rclpy's).
Bytes that are not a serialized message of that type raise
:class:`~triton_ros.ros.codec.base.MalformedInput` (counted as ``dropped_malformed``).
"""

from __future__ import annotations

from typing import Any, Callable

from .base import MalformedInput


class SerializedReader:
    """Serialized ``ros_type`` bytes -> ``convert(message, header)`` (thread-safe)."""

    def __init__(self, ros_type: str, convert: Callable[[Any, Any], Any]) -> None:
        from builtin_interfaces.msg import Time
        from rosbags.serde import SerdeError
        from rosbags.typesys import Stores, get_typestore
        from std_msgs.msg import Header

        # The sensor_msgs read here (CameraInfo, CompressedImage) are the same in every ROS 2.
        self._store = get_typestore(Stores.ROS2_HUMBLE)
        self._type = ros_type
        self._errors = (SerdeError, ValueError, KeyError, IndexError)
        self._header = Header
        self._time = Time
        self._convert = convert

    def __call__(self, raw: bytes) -> Any:
        try:
            msg = self._store.deserialize_cdr(memoryview(raw), self._type)
        except self._errors as exc:
            raise MalformedInput(
                f"not a serialized {self._type} ({len(raw)} bytes): {exc}"
            ) from exc
        head = msg.header
        header = self._header(
            stamp=self._time(sec=head.stamp.sec, nanosec=head.stamp.nanosec), frame_id=head.frame_id
        )
        return self._convert(msg, header)
