"""A model whose answer is larger than its question, for bench/peer/run.sh: the response case.

tinydet answers a 602 KB image with 94 KB of boxes and scores, so the shared comparison weighs
each server's receive path far more than its reply path. This model is a segmentation head's
shape: ``images`` float32 ``[N, 3, 224, 224]`` (the shared input JSON) -> 3x3 convolution to 8
channels -> Relu -> 1x1 convolution -> Sigmoid -> ``masks`` float32 ``[N, 8, 224, 224]``, 1.6 MB
per image, with little compute (about 14 MMAC per image), so what perf_analyzer measures is
mostly each server writing and sending large replies. Deterministic (seeded weights); built with
``onnx`` in the peer benchmark's PyTriton environment.

    python -m bench.peer.seg_model --out seg8.onnx          # from the project root
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.peer.tiny_model import cli, finish

CHANNELS = 8
SIZE = 224


def build(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((CHANNELS, 3, 3, 3)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((CHANNELS, CHANNELS, 1, 1)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["images", "w1"], ["c1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c1"], ["r1"]),
            helper.make_node("Conv", ["r1", "w2"], ["c2"]),
            helper.make_node("Sigmoid", ["c2"], ["masks"]),
        ],
        "seg8",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("masks", TensorProto.FLOAT, ["N", CHANNELS, SIZE, SIZE])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return finish(graph)


def main() -> int:
    return cli(
        build, __doc__, f"images [N, 3, {SIZE}, {SIZE}] -> masks [N, {CHANNELS}, {SIZE}, {SIZE}]"
    )


if __name__ == "__main__":
    raise SystemExit(main())
