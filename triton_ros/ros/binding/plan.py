"""How a binding feeds and reads one serving model version: :class:`ModelPlan`.

:func:`build_plan` resolves a binding's settings against the version that serves now (its
:class:`~triton_ros.ros.targets.spec.ModelSpec`, alike for every model kind, local or remote):
which input gets the message, whether requests carry a batch dimension, the input kind's plan
and encoder, and the output format's plan (which outputs to request, how to decode them).
INVALID_ARG when the settings do not fit the model.

A synchronized binding (``inputs``) feeds several model inputs from one matched set of
messages (a mapping of model input name -> message, with the reference input's ``header``):
:func:`build_sync_plan` plans each input with the kind its topic is read with (``kinds``: the
set's own, so a source whose depth arrives compressed gets a plan of its own), CameraInfo inputs
last, against the geometry of the first image or depth input, so that K is mapped into the
pixels the model sees. :meth:`ModelPlan.encode_request` turns a message (or a set) into the
request's tensors, each with its batch dimension where the model batches, and the placements
the output format reads: the reference input's as ``placement``, every input's in
``placements``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...core.datatypes import to_numpy_dtype
from ...core.errors import TritonRosError, invalid_arg
from ..codec.base import InputKind, InputPlan, MalformedInput, OutputFormat, OutputPlan
from ..parameters import BindingConfig
from ..targets.spec import ModelSpec


@dataclass(frozen=True)
class ModelPlan:
    """How this binding feeds and reads one serving model version."""

    spec: ModelSpec
    input_name: str
    batching: bool  # the model batches: a batch dimension on every tensor
    leading_one: bool  # a non-batching model whose image input is [1, C, H, W]
    input: InputPlan
    encode: Callable[[Any], tuple[np.ndarray, Any]]  # message -> (tensor, placement)
    output: OutputPlan
    # Synchronized bindings: every input fed, (model input, its kind's plan, encoder, leading
    # one), in the model's input order; empty for a binding of one input.
    feeds: tuple[tuple[str, InputPlan, Callable[[Any], tuple[np.ndarray, Any]], bool], ...] = ()
    # Model inputs the input kind fills beside the main one (``companions`` of its plan: a
    # points tensor's count or mask) -> their numpy types.
    companion_types: Mapping[str, np.dtype] = field(default_factory=dict)

    @property
    def version(self) -> int:
        return self.spec.version

    def encode_request(self, msg: Any) -> tuple[dict[str, np.ndarray], Any, Mapping[str, Any]]:
        """A message (a matched set: model input -> message) -> (the request's tensors, the
        reference input's placement, every input's placement)."""
        if not self.feeds:
            tensor, placement = self.encode(msg)
            batched = self.batching or self.leading_one
            tensors = {self.input_name: tensor[None] if batched else tensor}
            # Inputs filled beside this one (a points tensor's count or mask), in the model's type
            for name, extra in getattr(placement, "companions", {}).items():
                extra = extra.astype(self.companion_types[name], copy=False)
                tensors[name] = extra[None] if batched else extra
            return tensors, placement, {}
        tensors, placements = {}, {}
        for name, _, encode, leading_one in self.feeds:
            try:
                tensor, placements[name] = encode(msg[name])
            except MalformedInput as exc:  # the binding names the input's own topic
                exc.input_name = name
                raise
            tensors[name] = tensor[None] if self.batching or leading_one else tensor
        return tensors, placements[self.input_name], placements


def companions_of(input_plan: InputPlan) -> tuple[str, ...]:
    """The model inputs an input plan fills beside its own (none for most kinds)."""
    return tuple(getattr(input_plan, "companions", ()))


def build_plan(
    config: BindingConfig, spec: ModelSpec, input_kind: InputKind, output_format: OutputFormat
) -> ModelPlan:
    """Resolve a binding's settings against a serving model; INVALID_ARG when they do not fit.

    Works alike for every model kind: ``spec`` carries the effective inputs, outputs and labels.
    """
    if config.input:
        tensor = spec.input(config.input)
        if tensor is None:
            raise invalid_arg(
                f"model '{spec.name}' has no input '{config.input}' (inputs: "
                f"{', '.join(t.name for t in spec.inputs)})"
            )
    else:
        required = [t for t in spec.inputs if not t.optional]
        if len(required) != 1:
            raise invalid_arg(
                f"model '{spec.name}' has inputs "
                f"{', '.join(t.name for t in spec.inputs)}; set the binding's "
                f"'input' parameter"
            )
        tensor = required[0]
    others = [t.name for t in spec.inputs if not t.optional and t.name != tensor.name]
    if others:
        # an input kind may fill inputs beside its own (``companions`` of its plan: a points
        # tensor's count or mask); any other required input is one the binding cannot feed
        try:
            filled = companions_of(
                input_kind.plan(config.settings_for(input_kind), tensor, model=spec.name)
            )
        except TritonRosError:  # its own error, raised below when planned
            filled = ()
        others = [name for name in others if name not in filled]
    if others:
        raise invalid_arg(
            f"model '{spec.name}' also requires input(s) {', '.join(others)}, which "
            f"an {input_kind.name} binding cannot provide"
        )
    # A model exported with a fixed batch of one and no batching (max_batch_size 0, input
    # [1, 3, H, W], as many detector exports are) takes one image like a batching model; its
    # outputs keep their leading 1, which the decoders' reshapes absorb.
    leading_one = spec.max_batch_size == 0 and len(tensor.dims) == 4 and tensor.dims[0] in (1, -1)
    if leading_one:
        tensor = replace(tensor, dims=tuple(tensor.dims[1:]))
    input_plan = input_kind.plan(config.settings_for(input_kind), tensor, model=spec.name)
    companions = companions_of(input_plan)
    for name in companions:
        if spec.input(name) is None:
            raise invalid_arg(
                f"model '{spec.name}' has no input '{name}' (inputs: "
                f"{', '.join(t.name for t in spec.inputs)})"
            )
    return ModelPlan(
        spec=spec,
        input_name=tensor.name,
        batching=spec.max_batch_size > 0,
        leading_one=leading_one,
        input=input_plan,
        encode=input_kind.encoder(input_plan),
        output=output_format.plan(config.settings_for(output_format), spec, input_plan),
        companion_types={n: to_numpy_dtype(spec.input(n).datatype) for n in companions},
    )


def build_sync_plan(
    config: BindingConfig,
    spec: ModelSpec,
    kinds: Sequence[tuple[str, InputKind]],
    output_format: OutputFormat,
) -> ModelPlan:
    """Resolve a synchronized binding against a serving model, for inputs read with ``kinds``
    ((model input, kind) of every input); INVALID_ARG when they do not fit."""
    fed = dict(kinds)
    missing = [name for name in fed if spec.input(name) is None]
    if missing:
        raise invalid_arg(
            f"model '{spec.name}' has no input(s) {', '.join(missing)} (inputs: "
            f"{', '.join(t.name for t in spec.inputs)}); check the binding's "
            f"'inputs'"
        )
    unfed = [t.name for t in spec.inputs if not t.optional and t.name not in fed]
    if unfed:
        raise invalid_arg(
            f"model '{spec.name}' also requires input(s) {', '.join(unfed)}, which "
            f"the binding's 'inputs' do not feed"
        )
    order = [t for t in spec.inputs if t.name in fed]  # the model's order
    planned: dict[str, tuple[InputPlan, Callable, bool]] = {}
    geometry = None
    for late in (False, True):  # CameraInfo after the images
        for tensor in order:
            kind = fed[tensor.name]
            if kind.after_images != late:
                continue
            leading_one = (
                spec.max_batch_size == 0 and len(tensor.dims) == 4 and tensor.dims[0] in (1, -1)
            )
            if leading_one:
                tensor = replace(tensor, dims=tuple(tensor.dims[1:]))
            input_plan = kind.plan(
                config.settings_for(kind), tensor, model=spec.name, image=geometry if late else None
            )
            if geometry is None:
                geometry = input_plan.geometry
            planned[tensor.name] = (input_plan, kind.encoder(input_plan), leading_one)
    reference = config.input or order[0].name
    feeds = tuple((t.name, *planned[t.name]) for t in order)
    input_plan, encode, leading_one = planned[reference]
    return ModelPlan(
        spec=spec,
        input_name=reference,
        batching=spec.max_batch_size > 0,
        leading_one=leading_one,
        input=input_plan,
        encode=encode,
        output=output_format.plan(config.settings_for(output_format), spec, input_plan),
        feeds=feeds,
    )
