"""Every input kind and output format a binding can use, by name: the one place they are listed.

A binding's ``format`` parameter names its output format (:data:`OUTPUT_FORMATS`); its
``input_kind`` parameter names its input kind (:data:`INPUT_KINDS`), or is ``auto``: each topic
then gets the kind of the message type the ROS graph shows for it (:func:`kind_for_type`: the
first kind registered for that type). A synchronized binding's inputs each have theirs
(``depth``, ``compressed_depth``, ``camera_info``: its ``input_kinds``, else by the topic's message
type, :func:`input_kind_for_topic`). To add a kind or a format, write its module (implementing
:class:`~triton_ros.ros.codec.base.InputKind` or :class:`~triton_ros.ros.codec.base.OutputFormat`)
and add it to the tuple below: its settings (its config class) become the binding's parameters,
and its config is built for every binding and held by its name.
"""

from __future__ import annotations

from ...core.errors import invalid_arg
from .base import InputKind, OutputFormat
from .camera_info import CAMERA_INFO
from .classification import CLASSIFICATION
from .compressed_image import COMPRESSED
from .compressed_depth import COMPRESSED_DEPTH
from .depth import DEPTH
from .detection import DETECTIONS
from .detection3d import DETECTIONS3D
from .image import IMAGE
from .pointcloud import POINTCLOUD
from .segmentation import SEGMENTATION
from .tensors import TENSORS

# In this order: an ``auto`` topic's type picks the first kind registered for it (images before
# depth images, compressed images before compressedDepth).
INPUT_KINDS: dict[str, InputKind] = {
    kind.name: kind
    for kind in (IMAGE, COMPRESSED, DEPTH, COMPRESSED_DEPTH, CAMERA_INFO, POINTCLOUD)
}
OUTPUT_FORMATS: dict[str, OutputFormat] = {
    fmt.name: fmt for fmt in (DETECTIONS, TENSORS, CLASSIFICATION, SEGMENTATION, DETECTIONS3D)
}
# Every kind and format, each declaring its settings (a binding holds them by name)
PARTS: tuple[InputKind | OutputFormat, ...] = (*INPUT_KINDS.values(), *OUTPUT_FORMATS.values())


def input_kind(name: str) -> InputKind:
    try:
        return INPUT_KINDS[name]
    except KeyError:
        raise invalid_arg(
            f"unknown input kind '{name}' (known: {', '.join(INPUT_KINDS)})"
        ) from None


def kind_for_type(ros_type: str) -> InputKind | None:
    """The input kind an ``auto`` binding reads a topic of ``ros_type`` with (the first kind
    registered for it), or None when no kind reads that type."""
    return next((kind for kind in INPUT_KINDS.values() if kind.ros_type == ros_type), None)


# image_transport's transport subtopics of an image topic, and the kind each is read with
TRANSPORT_KINDS: dict[str, InputKind] = {"compressed": COMPRESSED}


def base_topic(topic: str) -> str:
    """An image topic without image_transport's transport subtopic:
    ``/robot1/front/image_raw/compressed`` -> ``/robot1/front/image_raw``."""
    head, _, last = topic.rpartition("/")
    return head if last in TRANSPORT_KINDS and head else topic


def kind_for_topic(topic: str) -> InputKind:
    """The kind an ``auto`` binding subscribes a topic with before the graph shows its type
    (no publisher yet): image_transport's naming (``.../compressed`` is a CompressedImage),
    else a raw image. The graph's type replaces it as soon as a publisher appears."""
    return TRANSPORT_KINDS.get(topic.rpartition("/")[2], IMAGE)


def output_format(name: str) -> OutputFormat:
    try:
        return OUTPUT_FORMATS[name]
    except KeyError:
        raise invalid_arg(f"unknown format '{name}' (known: {', '.join(OUTPUT_FORMATS)})") from None


def family_of(kind: InputKind) -> str:
    """What a kind reads, whatever the message carries it: ``depth`` for ``depth`` (Image) and
    ``compressed_depth`` (CompressedImage); a kind without a family is its own."""
    return kind.family


def input_kind_for_topic(configured: str, ros_type: str) -> InputKind | None:
    """The kind that reads a topic of ``ros_type`` as an input configured ``configured`` (a
    kind's name or family; "": by the message type: an image, a CameraInfo), or None.

    So ``depth`` reads a ``.../image_raw`` Image and a ``.../compressedDepth`` CompressedImage
    alike, and an image input reads a CompressedImage with the compressed image kind where one
    is registered."""
    kinds = [k for k in INPUT_KINDS.values() if k.ros_type == ros_type]
    for kind in kinds:
        if configured and kind.name == configured:
            return kind
    wanted = configured or None
    for kind in kinds:
        family = family_of(kind)
        if wanted is not None and family == wanted:
            return kind
        if (
            wanted in (None, "image")
            and family not in ("depth", "camera_info")
            and (family == "image" or ros_type != "sensor_msgs/msg/Image")
        ):
            return kind
        if wanted is None and family == "camera_info":
            return kind
    return None
