"""Every input kind and output format a binding can use, by name: the one place they are listed.

A binding's ``format`` parameter names its output format (:data:`OUTPUT_FORMATS`); its
``input_kind`` parameter names its input kind (:data:`INPUT_KINDS`), or is ``auto``: each topic
then gets the kind of the message type the ROS graph shows for it (:func:`kind_for_type`: the
first kind registered for that type). To add a kind or a format, write its module (implementing
:class:`~triton_ros.ros.codec.base.InputKind` or :class:`~triton_ros.ros.codec.base.OutputFormat`)
and add it to the tuple below.
"""
from __future__ import annotations

from ...core.errors import invalid_arg
from .base import InputKind, OutputFormat
from .classification import CLASSIFICATION
from .compressed_image import COMPRESSED
from .detection import DETECTIONS
from .image import IMAGE
from .segmentation import SEGMENTATION
from .tensors import TENSORS

INPUT_KINDS: dict[str, InputKind] = {kind.name: kind for kind in (IMAGE, COMPRESSED)}
OUTPUT_FORMATS: dict[str, OutputFormat] = {fmt.name: fmt for fmt in (DETECTIONS, TENSORS,
                                                                      CLASSIFICATION,
                                                                      SEGMENTATION)}


def input_kind(name: str) -> InputKind:
    try:
        return INPUT_KINDS[name]
    except KeyError:
        raise invalid_arg(f"unknown input kind '{name}' (known: "
                          f"{', '.join(INPUT_KINDS)})") from None


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
