"""How a binding feeds and reads one serving model version: :class:`ModelPlan`.

:func:`build_plan` resolves a binding's settings against the version that serves now (its
:class:`~triton_ros.ros.targets.spec.ModelSpec`, alike for every model kind, local or remote):
which input gets the message, whether requests carry a batch dimension, the input kind's plan
and encoder, and the output format's plan (which outputs to request, how to decode them).
INVALID_ARG when the settings do not fit the model.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ...core.errors import invalid_arg
from ..codec.base import InputKind, InputPlan, OutputFormat, OutputPlan
from ..parameters import BindingConfig
from ..targets.spec import ModelSpec


@dataclass(frozen=True)
class ModelPlan:
    """How this binding feeds and reads one serving model version."""

    spec: ModelSpec
    input_name: str
    batching: bool                     # the model batches: a batch dimension on every tensor
    leading_one: bool                  # a non-batching model whose image input is [1, C, H, W]
    input: InputPlan
    encode: Callable[[Any], tuple[np.ndarray, Any]]   # message -> (tensor, placement)
    output: OutputPlan

    @property
    def version(self) -> int:
        return self.spec.version


def build_plan(config: BindingConfig, spec: ModelSpec, input_kind: InputKind,
               output_format: OutputFormat) -> ModelPlan:
    """Resolve a binding's settings against a serving model; INVALID_ARG when they do not fit.

    Works alike for every model kind: ``spec`` carries the effective inputs, outputs and labels.
    """
    if config.input:
        tensor = spec.input(config.input)
        if tensor is None:
            raise invalid_arg(f"model '{spec.name}' has no input '{config.input}' (inputs: "
                              f"{', '.join(t.name for t in spec.inputs)})")
    else:
        required = [t for t in spec.inputs if not t.optional]
        if len(required) != 1:
            raise invalid_arg(f"model '{spec.name}' has inputs "
                              f"{', '.join(t.name for t in spec.inputs)}; set the binding's "
                              f"'input' parameter")
        tensor = required[0]
    others = [t.name for t in spec.inputs if not t.optional and t.name != tensor.name]
    if others:
        raise invalid_arg(f"model '{spec.name}' also requires input(s) {', '.join(others)}, which "
                          f"an {input_kind.name} binding cannot provide")
    # A model exported with a fixed batch of one and no batching (max_batch_size 0, input
    # [1, 3, H, W], as many detector exports are) takes one image like a batching model; its
    # outputs keep their leading 1, which the decoders' reshapes absorb.
    leading_one = spec.max_batch_size == 0 and len(tensor.dims) == 4 and tensor.dims[0] in (1, -1)
    if leading_one:
        tensor = replace(tensor, dims=tuple(tensor.dims[1:]))
    input_plan = input_kind.plan(config.input_settings, tensor, model=spec.name)
    return ModelPlan(spec=spec, input_name=tensor.name, batching=spec.max_batch_size > 0,
                     leading_one=leading_one, input=input_plan,
                     encode=input_kind.encoder(input_plan),
                     output=output_format.plan(config.output_settings, spec, input_plan))
