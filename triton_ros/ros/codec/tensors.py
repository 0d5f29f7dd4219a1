"""The ``tensors`` output format: a frame's model outputs as they are, in a
``triton_ros_interfaces/TensorList`` (name, KServe data type, shape with the batch dimension when
the model batches, little-endian bytes; BYTES tensors serialized as Triton does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
from triton_ros_interfaces.msg import Tensor, TensorList

from ...core.datatypes import from_numpy_dtype, serialize_bytes_tensor
from ...core.errors import invalid_arg
from ...settings import setting
from ..targets.spec import ModelSpec
from .base import FrameOutputs, InputPlan, OutputFormat
from .messages import uint8_array


@dataclass(frozen=True)
class TensorsConfig:
    """The tensors format's settings."""

    outputs: tuple[str, ...] = setting(
        [], "Format tensors: the model outputs to publish; empty: all."
    )


@dataclass(frozen=True)
class TensorsPlan:
    requested: tuple[str, ...] | None


def tensor_list(
    header, model_name: str, model_version: int, outputs: Iterable[tuple[str, np.ndarray]]
) -> TensorList:
    msg = TensorList(header=header, model_name=model_name, model_version=int(model_version))
    for name, value in outputs:
        datatype = from_numpy_dtype(value.dtype)
        if datatype == "BYTES":
            data = serialize_bytes_tensor(value)
        else:
            data = (
                np.ascontiguousarray(value)
                .astype(value.dtype.newbyteorder("<"), copy=False)
                .tobytes()
            )
        msg.tensors.append(
            Tensor(
                name=name,
                datatype=datatype,
                shape=[int(d) for d in value.shape],
                data=uint8_array(data),
            )
        )
    return msg


class TensorsFormat(OutputFormat):
    """``format: tensors``."""

    name = "tensors"
    settings = TensorsConfig

    def message_class(self) -> type:
        return TensorList

    def plan(self, settings: TensorsConfig, spec: ModelSpec, input_plan: InputPlan) -> TensorsPlan:
        for name in settings.outputs:
            if spec.output(name) is None:
                raise invalid_arg(
                    f"model '{spec.name}' has no output '{name}' (outputs: "
                    f"{', '.join(t.name for t in spec.outputs)})"
                )
        return TensorsPlan(tuple(settings.outputs) or None)

    def decode(self, plan: TensorsPlan, frame: FrameOutputs) -> TensorList:
        shaped = (
            (name, value[None] if frame.batched else value) for name, value in frame.outputs.items()
        )
        return tensor_list(frame.header, frame.model_name, frame.model_version, shaped)


TENSORS = TensorsFormat()
