"""Requests of the bundled ``simple`` model, built one way for every test: Triton's add/sub
example, INPUT0 and INPUT1 ``[N, 16]`` INT32, OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 -
INPUT1. A plain module (test/ is on sys.path through its conftest)."""

from __future__ import annotations

from typing import Any

import numpy as np

INPUTS = ("INPUT0", "INPUT1")
WIDTH = 16


def simple_array(value: int | None = None, rows: int = 1) -> np.ndarray:
    """A ``[rows, 16]`` INT32 input: every element ``value``, or 0, 1, 2... when None."""
    if value is None:
        return np.arange(rows * WIDTH, dtype=np.int32).reshape(rows, WIDTH)
    return np.full((rows, WIDTH), value, np.int32)


def simple_inputs(
    client: Any,
    a: Any = None,
    b: Any = None,
    *,
    binary: bool = True,
    datatype: str = "INT32",
    names: tuple[str, ...] = INPUTS,
) -> list:
    """tritonclient InferInputs of ``simple`` (``client``: the module, ``tritonclient.grpc`` or
    ``tritonclient.http``): INPUT0 = ``a``, INPUT1 = ``b`` (``a`` when None). An int is a
    ``[1, 16]`` tensor of it; None for ``a`` is 0, 1, 2...; a shape other than ``[N, 16]`` or a
    ``datatype`` the model does not take make a bad request on purpose, as ``names`` (the inputs
    sent) without one of them does. ``binary``: HTTP's binary tensor extension (False: the tensors
    as JSON)."""
    a = simple_array(a) if a is None or isinstance(a, int) else a
    b = a if b is None else simple_array(b) if isinstance(b, int) else b
    inputs = []
    for name, data in zip(names, (a, b)):
        tensor = client.InferInput(name, list(data.shape), datatype)
        if client.__name__.endswith("http"):
            tensor.set_data_from_numpy(data, binary_data=binary)
        else:
            tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs
