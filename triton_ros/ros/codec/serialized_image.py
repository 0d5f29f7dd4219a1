"""A sensor_msgs/Image (or CompressedImage) read from its serialized (CDR) bytes, its pixels (or
compressed bytes) left where they arrived.

A typed rclpy subscription turns every frame into a Python ``sensor_msgs.msg.Image``: the
middleware deserializes it into a C message, and rclpy then converts that field by field into
Python objects, the pixels into a new buffer of their own. The node's bindings subscribe with
``raw=True`` instead (node parameter ``serialized_images``): rclpy hands the callback the
serialized bytes, one buffer, and rosbags' CDR deserializer (a maintained library,
https://gitlab.com/ternaris/rosbags) reads the header fields from them and returns the pixels as
a numpy view of the same bytes: no copy, and less CPU per frame than a typed message.

Only the header becomes an rclpy ``std_msgs/Header``: the outputs carry the input's header.
Bytes that are not a serialized Image raise
:class:`~triton_ros.ros.codec.preprocess.MalformedImage`, which the binding counts as
``dropped_malformed`` like any other malformed frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .preprocess import MalformedImage

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"


@dataclass(frozen=True)
class ReceivedImage:
    """The fields of a sensor_msgs/Image the node reads, as a typed message has them."""

    header: Any  # std_msgs.msg.Header
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: np.ndarray  # uint8, a read-only view of the serialized bytes


@dataclass(frozen=True)
class ReceivedCompressedImage:
    """The fields of a sensor_msgs/CompressedImage, as a typed message has them."""

    header: Any  # std_msgs.msg.Header
    format: str
    data: np.ndarray  # uint8, a read-only view of the serialized bytes


class _SerializedReader:
    """Serialized bytes of one message type -> its rosbags message, and its header as rclpy's
    ``std_msgs/Header`` (thread-safe)."""

    ros_type = ""

    def __init__(self) -> None:
        from builtin_interfaces.msg import Time
        from rosbags.serde import SerdeError
        from rosbags.typesys import Stores, get_typestore
        from std_msgs.msg import Header

        # sensor_msgs/Image, CompressedImage and std_msgs/Header are the same in every ROS 2
        # release.
        self._store = get_typestore(Stores.ROS2_HUMBLE)
        self._errors = (SerdeError, ValueError)
        self._header = Header
        self._time = Time

    def _read(self, raw: bytes) -> tuple[Any, Any]:
        try:
            # A memoryview: rosbags slices it, and a slice of bytes would copy the pixels.
            msg = self._store.deserialize_cdr(memoryview(raw), self.ros_type)
        except self._errors as exc:
            name = self.ros_type.replace("/msg/", "/")
            raise MalformedImage(f"not a serialized {name} ({len(raw)} bytes): {exc}") from exc
        head = msg.header
        return msg, self._header(
            stamp=self._time(sec=head.stamp.sec, nanosec=head.stamp.nanosec), frame_id=head.frame_id
        )


class ImageReader(_SerializedReader):
    """Serialized sensor_msgs/Image bytes -> :class:`ReceivedImage` (thread-safe)."""

    ros_type = IMAGE_TYPE

    def __call__(self, raw: bytes) -> ReceivedImage:
        msg, header = self._read(raw)
        return ReceivedImage(
            header=header,
            height=msg.height,
            width=msg.width,
            encoding=msg.encoding,
            is_bigendian=msg.is_bigendian,
            step=msg.step,
            data=msg.data,
        )


class CompressedImageReader(_SerializedReader):
    """Serialized sensor_msgs/CompressedImage bytes -> :class:`ReceivedCompressedImage`."""

    ros_type = COMPRESSED_IMAGE_TYPE

    def __call__(self, raw: bytes) -> ReceivedCompressedImage:
        msg, header = self._read(raw)
        return ReceivedCompressedImage(header=header, format=msg.format, data=msg.data)
