"""The shared peer benchmark's tinydet at another input size, for bench/peer/run.sh.

tinydet (../shared/peer-bench/make_model.py) is convolutions and a head that reshapes to
``[N, channels, -1]``, so the same weights serve any image size: this copy sets the input's
height and width and leaves the outputs' cell count to ONNX Runtime (a symbolic dimension), so
PyTriton and triton-ros-server both read the new shapes from the model itself. Runs in the peer
benchmark's PyTriton environment, which has ``onnx``.

    python -m bench.peer.model_variant --model tinydet.onnx --size 448 --out tinydet_448.onnx
"""

from __future__ import annotations

import argparse

import onnx


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="tinydet.onnx (float32 NCHW input)")
    ap.add_argument("--size", type=int, required=True, help="input height and width")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    model = onnx.load(a.model)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != 4 or dims[1].dim_value != 3:
        raise SystemExit(f"{a.model}: expected a [N, 3, H, W] input, got {len(dims)} dimensions")
    dims[2].dim_value = dims[3].dim_value = a.size
    for output in model.graph.output:  # [N, cells, k]: the cell count follows the size
        output.type.tensor_type.shape.dim[1].dim_param = "cells"
    del model.graph.value_info[:]  # intermediate shapes of the old size
    onnx.checker.check_model(model)
    onnx.save(model, a.out)
    print(f"wrote {a.out}: input [N, 3, {a.size}, {a.size}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
