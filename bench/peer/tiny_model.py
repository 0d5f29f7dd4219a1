"""A model whose compute is next to nothing, for bench/peer/run.sh: the per-request cost case.

tinydet spends about a millisecond per image in ONNX Runtime, so its comparison mostly weighs
the two servers' batching and ONNX Runtime. This model (``images`` float32 ``[N, 16]`` ->
MatMul with a fixed 16x16 weight -> Relu -> ``scores`` ``[N, 16]``) costs ONNX Runtime a few
microseconds per batch, so what perf_analyzer measures is each server's own path: gRPC, the
dynamic batcher, the hand-offs to the model and back. Deterministic (seeded weights); built with
``onnx`` in the peer benchmark's PyTriton environment.

    python -m bench.peer.tiny_model --out tiny16.onnx       # from the project root
"""

from __future__ import annotations

import argparse
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FEATURES = 16


def build(seed: int = 0) -> onnx.ModelProto:
    weight = np.random.default_rng(seed).standard_normal((FEATURES, FEATURES)) * 0.1
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["images", "w"], ["mm"]),
            helper.make_node("Relu", ["mm"], ["scores"]),
        ],
        "tiny16",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", FEATURES])],
        [numpy_helper.from_array(weight.astype(np.float32), "w")],
    )
    return finish(graph)


def finish(graph: onnx.GraphProto) -> onnx.ModelProto:
    """The model of ``graph``, checked (shared with bench/peer/seg_model.py)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # loadable by older ONNX Runtime releases too
    onnx.checker.check_model(model)
    return model


def cli(build: Callable[[int], onnx.ModelProto], doc: str, shapes: str) -> int:
    """``--out FILE [--seed N]``: write ``build(seed)`` there."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    onnx.save(build(a.seed), a.out)
    print(f"wrote {a.out}: {shapes}")
    return 0


def main() -> int:
    return cli(build, __doc__, f"images [N, {FEATURES}] -> scores [N, {FEATURES}]")


if __name__ == "__main__":
    raise SystemExit(main())
