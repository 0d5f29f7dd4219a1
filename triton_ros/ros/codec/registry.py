"""Every input kind and output format a binding can use, by name: the one place they are listed.

A binding's ``format`` parameter names its output format (:data:`OUTPUT_FORMATS`); its input
kind is ``image`` (:data:`INPUT_KINDS`; ``BindingConfig.input_kind``). To add a kind or a
format, write its module (implementing :class:`~triton_ros.ros.codec.base.InputKind` or
:class:`~triton_ros.ros.codec.base.OutputFormat`) and add it to the tuple below.
"""
from __future__ import annotations

from ...core.errors import invalid_arg
from .base import InputKind, OutputFormat
from .classification import CLASSIFICATION
from .detection import DETECTIONS
from .image import IMAGE
from .tensors import TENSORS

INPUT_KINDS: dict[str, InputKind] = {kind.name: kind for kind in (IMAGE,)}
OUTPUT_FORMATS: dict[str, OutputFormat] = {fmt.name: fmt for fmt in (DETECTIONS, TENSORS,
                                                                      CLASSIFICATION)}


def input_kind(name: str) -> InputKind:
    try:
        return INPUT_KINDS[name]
    except KeyError:
        raise invalid_arg(f"unknown input kind '{name}' (known: "
                          f"{', '.join(INPUT_KINDS)})") from None


def output_format(name: str) -> OutputFormat:
    try:
        return OUTPUT_FORMATS[name]
    except KeyError:
        raise invalid_arg(f"unknown format '{name}' (known: {', '.join(OUTPUT_FORMATS)})") from None
