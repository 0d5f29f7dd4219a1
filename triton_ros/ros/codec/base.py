"""The two interfaces of a binding's codec: an input kind reads a received message into one model
input tensor, an output format turns one frame's model outputs into the message published.

A binding knows what it subscribes to and what it publishes only through these, looked up by
name in :mod:`~triton_ros.ros.codec.registry`. Both are planned once per serving model version
against its :class:`~triton_ros.ros.targets.spec.ModelSpec` (``plan``: INVALID_ARG when the
binding's settings do not fit the model), then run per frame:

- :class:`InputKind`: the ROS message class and graph type the binding subscribes to, a reader
  of serialized messages (pixels left where they arrived), ``check`` (a message that cannot be
  read as its header claims raises :class:`MalformedInput`, counted as ``dropped_malformed``),
  ``decoded_size`` (the pixels it would be decoded into, read from its header: every kind is
  held to one limit by :func:`check_input`, the check the binding runs on each message),
  ``plan`` against the model input, and the ``encoder`` of a plan: message -> (tensor without
  the batch dimension, placement: where the input sits in the model input, for the decoder);
- :class:`OutputFormat`: the ROS message class published, ``plan`` (which outputs to request),
  and ``decode``: :class:`FrameOutputs` -> message, with the input's header.

Each declares its own settings: ``settings`` is its config class, whose fields are settings
(``triton_ros/settings.py``), declared by the node as ``<binding>.<name>`` parameters, and
``configure`` builds that config from a binding's values (the settings held by kind or format
name in the binding's config). Every member has its default here; a kind or format overrides
what it has: an input kind's ``family`` (what it reads: ``depth`` for Image and compressedDepth
alike), ``encode_on_workers`` (its encoder decodes, e.g. a JPEG, and runs on the worker threads
whatever ``preprocess_in_callback`` says) and ``after_images`` (planned after the binding's image
inputs, with their geometry: CameraInfo's); an output format's ``extra_outputs`` and ``extras``
(further topics per source, ``<output topic>/<name>``: segmentation's colour overlay).

Adding an input kind (a point cloud) or an output format is one module that subclasses
:class:`InputKind` or :class:`OutputFormat`, with its config class beside it, and one line in
the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from ...settings import Namer, build
from ..targets.spec import ModelSpec, TensorSpec
from .headers import pixel_limit_text


class MalformedInput(ValueError):
    """A received message that cannot be read as its header claims; the message says why.
    ``input_name``: the model input whose message it is, in a synchronized binding's set."""

    input_name: str | None = None


class ImageGeometry(Protocol):
    """How an image input places its pixels in the model input (an image or depth plan)."""

    width: int
    height: int
    resize: str


class InputPlan(Protocol):
    """An input kind's plan against one model input."""

    @property
    def summary(self) -> str:
        """The plan in a few words, for the log line that announces it."""

    @property
    def geometry(self) -> ImageGeometry | None:
        """The image geometry of this input (None: it has no pixels), which the kinds planned
        after the images (``after_images``) are given."""


class Configured:
    """What a kind or format declares of its settings."""

    #: Its config class (a frozen dataclass whose fields are settings); None: it has none.
    settings: type | None = None

    def configure(self, values: Mapping[str, Any], name: Namer) -> Any:
        """Its config from a binding's values (by parameter name, relative to the binding),
        errors naming the parameter through ``name``."""
        return build(self.settings, values, name) if self.settings is not None else None


class InputKind(Configured):
    """One kind of input message -> one model input tensor (the base of every input kind)."""

    name: str = ""  # the registry's name of the kind
    ros_type: str = ""  # the graph's name of the message type subscribed to
    encode_on_workers: bool = False  # its encoder decodes: run on the workers
    after_images: bool = False  # planned after the image inputs, with their geometry

    @property
    def family(self) -> str:
        """What it reads, whatever the message carries it (a kind of its own by default)."""
        return self.name

    def message_class(self) -> type:
        """The ROS message class subscribed to."""
        raise NotImplementedError

    def reader(self) -> Callable[[Any], Any]:
        """Serialized message bytes -> a message with the fields ``check`` and the encoder
        read (ImportError when the library it needs is missing: typed messages then)."""
        raise NotImplementedError

    def check(self, msg: Any) -> None:
        """Raise :class:`MalformedInput` when ``msg`` cannot be read as its header claims."""
        raise NotImplementedError

    def decoded_size(self, msg: Any) -> tuple[int, int] | None:
        """(width, height) of the pixels ``msg`` becomes, read from its header without decoding
        (a checked message; MalformedInput where that header cannot be read), or None for a
        message without pixels of its own."""
        raise NotImplementedError

    def plan(
        self, settings: Any, tensor: TensorSpec, *, model: str, image: ImageGeometry | None = None
    ) -> InputPlan:
        """Resolve the binding's input settings against the model input. ``image``: the
        geometry of the binding's image inputs, for a kind planned ``after_images``."""
        raise NotImplementedError

    def encoder(self, plan: InputPlan) -> Callable[[Any], tuple[np.ndarray, Any]]:
        """message -> (input tensor without the batch dimension, placement)."""
        raise NotImplementedError


def check_input(kind: InputKind, msg: Any) -> None:
    """What every received message passes before it is used, whatever its kind: the kind's own
    check, then one pixel limit (:data:`~triton_ros.ros.codec.headers.MAX_PIXELS`) on the size
    its header claims, so that nothing is decoded or allocated for a message over it."""
    kind.check(msg)
    size = kind.decoded_size(msg)
    if size is not None:
        refused = pixel_limit_text(*size)
        if refused is not None:
            raise MalformedInput(refused)


@dataclass(frozen=True)
class FrameOutputs:
    """One frame's answer, as an output format decodes it."""

    header: Any  # the input message's std_msgs/Header
    outputs: Mapping[str, np.ndarray]  # by name, without the batch dimension
    batched: bool  # the model batches (its outputs had a batch dimension)
    model_name: str
    model_version: int
    placement: Any  # the encoder's: where the input sat in the model input
    # Synchronized bindings: every input's placement by model input (a CameraInfo's is its
    # Intrinsics: K as received and in model pixels); ``placement`` is the reference input's.
    placements: Mapping[str, Any] = field(default_factory=dict)


class OutputPlan(Protocol):
    """An output format's plan against one model version."""

    @property
    def requested(self) -> tuple[str, ...] | None:
        """The model outputs to request (None: all of them)."""


class OutputFormat(Configured):
    """One frame's model outputs -> the message published (the base of every output format)."""

    name: str = ""  # the binding's ``format`` parameter

    def message_class(self) -> type:
        """The ROS message class published."""
        raise NotImplementedError

    def plan(self, settings: Any, spec: ModelSpec, input_plan: InputPlan) -> OutputPlan:
        """Resolve the binding's output settings against the model's outputs."""
        raise NotImplementedError

    def decode(self, plan: OutputPlan, frame: FrameOutputs) -> Any:
        """The message of one frame."""
        raise NotImplementedError

    def extra_outputs(self, settings: Any) -> tuple[tuple[str, type], ...]:
        """Further topics of each source, (suffix of its output topic, message class); none by
        default."""
        return ()

    def extras(self, plan: OutputPlan, msg: Any) -> dict[str, Any]:
        """The further messages of one frame (:meth:`extra_outputs`), from its message."""
        return {}
