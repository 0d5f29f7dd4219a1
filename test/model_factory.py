"""Real ONNX models and Triton model directories built by the tests (onnx.helper, no downloads)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ONNX_TYPES = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}


def save(model_graph, path: Path) -> Path:
    model = helper.make_model(model_graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def identity_graph(datatype: str, dims: list, *, name: str = "identity"):
    t = ONNX_TYPES[datatype]
    return helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", t, dims)],
        [helper.make_tensor_value_info("OUTPUT0", t, dims)],
    )


def identity_config(name: str, datatype: str = "FP32", *, instances: int = 1) -> str:
    """config.pbtxt of an ``identity_graph(datatype, [-1])`` model without batching: INPUT0 of
    any length in, the same out, on ``instances`` CPU instances."""
    config_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: {config_type} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {config_type} dims: [ -1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""


def slow_graph(size: int = 768, repeats: int = 3):
    """OUTPUT0 = INPUT0 (FP32 [N,1]) + 0 * sum(a chain of size x size MatMuls): slow but exact.

    Each batch row costs ``repeats * 2 * size**3`` FLOPs (13-50 ms per row at the defaults on one
    core, depending on the CPU), so a test can keep an instance busy while it queues other
    requests. Size a timeout against the fast end of that range.
    """
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((size, size)) / np.sqrt(size)).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["INPUT0", "r3"], ["x3"]),
        helper.make_node("Expand", ["x3", "wide_shape"], ["mm_in"]),
    ]
    x = "mm_in"
    for i in range(repeats):
        nodes.append(helper.make_node("MatMul", [x, "w"], [f"mm{i}"]))
        x = f"mm{i}"
    nodes += [
        helper.make_node("ReduceSum", [x, "axes"], ["red"], keepdims=0),
        helper.make_node("Reshape", ["red", "r2"], ["red2"]),
        helper.make_node("Mul", ["red2", "zero"], ["zeroed"]),
        helper.make_node("Add", ["INPUT0", "zeroed"], ["OUTPUT0"]),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array([1, size, size], np.int64), "wide_shape"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "axes"),
        numpy_helper.from_array(np.zeros(1, np.float32), "zero"),
        numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "r3"),
        numpy_helper.from_array(np.array([-1, 1], np.int64), "r2"),
    ]
    return helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["N", 1])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["N", 1])],
        initializer=inits,
    )


def add_sub_graph(datatype: str = "FP32", dims: list | None = None):
    t = ONNX_TYPES[datatype]
    dims = dims or ["N", 4]
    return helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [
            helper.make_tensor_value_info("INPUT0", t, dims),
            helper.make_tensor_value_info("INPUT1", t, dims),
        ],
        [
            helper.make_tensor_value_info("OUTPUT0", t, dims),
            helper.make_tensor_value_info("OUTPUT1", t, dims),
        ],
    )


def write_model(repo: Path, name: str, graph, config: str | None, *, versions=(1,)) -> Path:
    """A Triton model directory: <repo>/<name>/config.pbtxt (if given) and <v>/model.onnx."""
    model_dir = repo / name
    for v in versions:
        save(graph, model_dir / str(v) / "model.onnx")
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def slow_config(
    name: str, *, max_batch_size: int = 1, dynamic_batching: str = "", instances: int = 1
) -> str:
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
parameters {{ key: "intra_op_thread_count" value: {{ string_value: "1" }} }}
{dynamic_batching}
"""
