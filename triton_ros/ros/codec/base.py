"""The two interfaces of a binding's codec: an input kind reads a received message into one model
input tensor, an output format turns one frame's model outputs into the message published.

A binding knows what it subscribes to and what it publishes only through these, looked up by
name in :mod:`~triton_ros.ros.codec.registry`. Both are planned once per serving model version
against its :class:`~triton_ros.ros.targets.spec.ModelSpec` (``plan``: INVALID_ARG when the
binding's settings do not fit the model), then run per frame:

- :class:`InputKind`: the ROS message class and graph type the binding subscribes to, a reader
  of serialized messages (pixels left where they arrived), ``check`` (a message that cannot be
  read as its header claims raises :class:`MalformedInput`, counted as ``dropped_malformed``),
  ``plan`` against the model input, and the ``encoder`` of a plan: message -> (tensor without
  the batch dimension, placement: where the input sits in the model input, for the decoder);
- :class:`OutputFormat`: the ROS message class published, ``plan`` (which outputs to request),
  and ``decode``: :class:`FrameOutputs` -> message, with the input's header.

Two members are optional (read with a default): an input kind's ``encode_on_workers`` (True:
its encoder decodes, e.g. a JPEG, and runs on the worker threads whatever
``preprocess_in_callback`` says, so that decoding spreads over cores), and an output format's
``extra_outputs(settings)`` -> ((name, message class), ...) with ``extras(plan, msg)`` -> {name:
message}: further topics per source, ``<output topic>/<name>`` (segmentation's colour overlay).

Adding an input kind (a compressed image, a depth image, a point cloud) is one module that
implements :class:`InputKind` and one line in the registry (a kind may also say what it reads,
``family``, e.g. ``depth`` for Image and compressedDepth alike, and ``after_images`` where its
plan needs the image inputs' geometry, as CameraInfo's does); an output format (segmentation
masks) likewise. Their settings are parsed in ros/parameters.py, where every parameter is
declared.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from ..targets.spec import ModelSpec, TensorSpec


class MalformedInput(ValueError):
    """A received message that cannot be read as its header claims; the message says why."""


class InputPlan(Protocol):
    """An input kind's plan against one model input."""

    @property
    def summary(self) -> str:
        """The plan in a few words, for the log line that announces it."""


class InputKind(Protocol):
    """One kind of input message -> one model input tensor."""

    name: str                          # the registry's name of the kind
    ros_type: str                      # the graph's name of the message type subscribed to

    def message_class(self) -> type:
        """The ROS message class subscribed to."""

    def reader(self) -> Callable[[Any], Any]:
        """Serialized message bytes -> a message with the fields ``check`` and the encoder
        read (ImportError when the library it needs is missing: typed messages then)."""

    def check(self, msg: Any) -> None:
        """Raise :class:`MalformedInput` when ``msg`` cannot be read as its header claims."""

    def plan(self, settings: Any, tensor: TensorSpec, *, model: str) -> InputPlan:
        """Resolve the binding's input settings against the model input."""

    def encoder(self, plan: InputPlan) -> Callable[[Any], tuple[np.ndarray, Any]]:
        """message -> (input tensor without the batch dimension, placement)."""


@dataclass(frozen=True)
class FrameOutputs:
    """One frame's answer, as an output format decodes it."""

    header: Any                        # the input message's std_msgs/Header
    outputs: Mapping[str, np.ndarray]  # by name, without the batch dimension
    batched: bool                      # the model batches (its outputs had a batch dimension)
    model_name: str
    model_version: int
    placement: Any                     # the encoder's: where the input sat in the model input
    # Synchronized bindings: every input's placement by model input (a CameraInfo's is its
    # Intrinsics: K as received and in model pixels); ``placement`` is the reference input's.
    placements: Mapping[str, Any] = field(default_factory=dict)


class OutputPlan(Protocol):
    """An output format's plan against one model version."""

    @property
    def requested(self) -> tuple[str, ...] | None:
        """The model outputs to request (None: all of them)."""


class OutputFormat(Protocol):
    """One frame's model outputs -> the message published."""

    name: str                          # the binding's ``format`` parameter

    def message_class(self) -> type:
        """The ROS message class published."""

    def plan(self, settings: Any, spec: ModelSpec, input_plan: InputPlan) -> OutputPlan:
        """Resolve the binding's output settings against the model's outputs."""

    def decode(self, plan: OutputPlan, frame: FrameOutputs) -> Any:
        """The message of one frame."""
