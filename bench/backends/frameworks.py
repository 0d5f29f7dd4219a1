#!/usr/bin/env python3
"""One small CNN in six runtimes, and one forest, served side by side by one triton-ros-server
on this CPU: which runtime should a robot without a GPU use?

The CNN (3x224x224 image -> 10 logits: four 3x3 stride-2 convolutions of 16, 32, 64 and 128
channels with ReLU, global average pooling, a dense layer; 49 MMAC; seeded random weights) is
built once as numpy weights and written with each framework's own tools: ONNX (onnx.helper;
ONNX Runtime), TorchScript (torch.jit.trace; PyTorch), OpenVINO IR (converted from the ONNX),
SavedModel (Keras; TensorFlow), LiteRT FP32 and LiteRT INT8 (the LiteRT converter from the
Keras model; INT8 calibrated on 32 seeded images, FP32 inputs and outputs). ONNX, TorchScript
and OpenVINO take NCHW, TensorFlow and LiteRT NHWC (their own layouts); every format is checked
to give the same logits as the ONNX model run by ONNX Runtime (FP32 formats within 1e-4, INT8
within 0.05 of the logits' range) before anything is timed.

Every model runs as one instance with one thread (ONNX Runtime intra_op_thread_count 1,
PyTorch INTRA_OP_THREAD_COUNT 1, OpenVINO 1 stream and 1 thread, TensorFlow 1 intra- and 1
inter-op thread, LiteRT tflite_num_threads 1), max_batch_size 8, the dynamic batcher with a 1 ms
delay. Measured with tritonclient over gRPC, the models taking turns for ``--rounds`` rounds:

- batch 1: one request at a time, ``--seconds`` each: latency p50 and p99, images/s, and the
  server's CPU time per image (every thread of the process: on a shared host it moves less
  with the load than the wall-clock figures);
- dynamic batching: 8 clients each sending one image at a time: the same figures;
- the forest (XGBoost, 100 trees of depth 6, 32 features, binary, predict_proba; FIL backend,
  ``cpu_nthread`` 1): one request of 1 row, then of 256 rows, at a time: p50, p99, rows/s.

The table gives each figure's median over the rounds and the spread of images/s (min-max), and
images/s as a ratio to ONNX Runtime's in the same round (median of the rounds' ratios). Exits 1
when a format's answer differs from ONNX Runtime's beyond the tolerance.

    .venv/bin/python -m bench.backends.frameworks --seconds 3 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.common import (
    LOAD_AT_START,
    ServerProcess,
    commit,
    cpu_seconds,  # noqa: E402
    default_out,
    emit,
    machine,
)

SIZE = 224
CHANNELS = (3, 16, 32, 64, 128)
CLASSES = 10
FEATURES = 32
ONE_THREAD = {
    "onnx": 'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }',
    "torchscript": 'parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }',
    "openvino": 'parameters { key: "NUM_STREAMS" value: { string_value: "1" } }\n'
    'parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "1" } }\n'
    'parameters { key: "PERFORMANCE_HINT" value: { string_value: "LATENCY" } }',
    "savedmodel": 'parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }\n'
    'parameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "1" } }',
    "litert_fp32": 'parameters { key: "tflite_num_threads" value: { string_value: "1" } }',
    "litert_int8": 'parameters { key: "tflite_num_threads" value: { string_value: "1" } }',
}
BACKEND = {
    "onnx": 'backend: "onnxruntime"',
    "torchscript": 'platform: "pytorch_libtorch"',
    "openvino": 'backend: "openvino"',
    "savedmodel": 'platform: "tensorflow_savedmodel"',
    "litert_fp32": 'backend: "tflite"',
    "litert_int8": 'backend: "tflite"',
}
LABEL = {
    "onnx": "ONNX (ONNX Runtime)",
    "torchscript": "TorchScript (PyTorch)",
    "openvino": "OpenVINO IR (OpenVINO)",
    "savedmodel": "SavedModel (TensorFlow)",
    "litert_fp32": "LiteRT FP32",
    "litert_int8": "LiteRT INT8",
}


def weights() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = []
    for cin, cout in zip(CHANNELS, CHANNELS[1:]):
        out.append(
            (
                (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (9 * cin))).astype(
                    np.float32
                ),
                (rng.standard_normal(cout) * 0.1).astype(np.float32),
            )
        )
    out.append(
        (
            (rng.standard_normal((CLASSES, CHANNELS[-1])) / 8).astype(np.float32),
            (rng.standard_normal(CLASSES) * 0.1).astype(np.float32),
        )
    )
    return out


def write_onnx(path: Path, w) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, x = [], [], "images"
    for i, (k, b) in enumerate(w[:-1]):
        inits += [numpy_helper.from_array(k, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node(
                "Conv",
                [x, f"w{i}", f"b{i}"],
                [f"c{i}"],
                pads=[1, 1, 1, 1],
                strides=[2, 2],
                kernel_shape=[3, 3],
            ),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        x = f"r{i}"
    k, b = w[-1]
    inits += [numpy_helper.from_array(k, "wf"), numpy_helper.from_array(b, "bf")]
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def write_torchscript(path: Path, w) -> None:
    import torch

    layers = []
    for k, b in w[:-1]:
        conv = torch.nn.Conv2d(k.shape[1], k.shape[0], 3, stride=2, padding=1)
        conv.weight.data, conv.bias.data = torch.from_numpy(k), torch.from_numpy(b)
        layers += [conv, torch.nn.ReLU()]
    fc = torch.nn.Linear(CHANNELS[-1], CLASSES)
    fc.weight.data, fc.bias.data = torch.from_numpy(w[-1][0]), torch.from_numpy(w[-1][1])
    net = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), fc)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.trace(net.eval(), torch.zeros(1, 3, SIZE, SIZE)).save(str(path))


def write_openvino(folder: Path, onnx_path: Path) -> None:
    import openvino as ov

    folder.mkdir(parents=True, exist_ok=True)
    ov.save_model(
        ov.convert_model(str(onnx_path)), str(folder / "model.xml"), compress_to_fp16=False
    )


def keras_model(w):
    import tensorflow as tf

    image = tf.keras.Input((SIZE, SIZE, 3), name="images")
    x = image
    for k, b in w[:-1]:
        x = tf.keras.layers.ZeroPadding2D(1)(x)
        conv = tf.keras.layers.Conv2D(k.shape[0], 3, strides=2, activation="relu")
        x = conv(x)
        conv.set_weights([k.transpose(2, 3, 1, 0), b])
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    dense = tf.keras.layers.Dense(CLASSES, name="logits")
    out = dense(x)
    dense.set_weights([w[-1][0].T, w[-1][1]])
    return tf.keras.Model(image, out)


def calibration() -> np.ndarray:
    return np.random.default_rng(7).random((32, SIZE, SIZE, 3), dtype=np.float32)


def write_tensorflow(repo: Path, w) -> None:
    import tensorflow as tf

    model = keras_model(w)
    model.export(str(repo / "savedmodel" / "1" / "model.savedmodel"), verbose=False)
    for name, int8 in (("litert_fp32", False), ("litert_int8", True)):
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
        if int8:
            data = calibration()
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = lambda: ([data[i : i + 1]] for i in range(32))
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "1" / "model.tflite").write_bytes(converter.convert())


def write_forest(repo: Path) -> None:
    import xgboost as xgb

    rng = np.random.default_rng(1)
    x = rng.random((4000, FEATURES), dtype=np.float32)
    y = (x[:, :4].sum(axis=1) + 0.3 * rng.standard_normal(4000) > 2).astype(int)
    model = xgb.XGBClassifier(n_estimators=100, max_depth=6, random_state=0, n_jobs=1).fit(x, y)
    (repo / "forest" / "1").mkdir(parents=True)
    model.save_model(str(repo / "forest" / "1" / "xgboost.ubj"))
    (repo / "forest" / "config.pbtxt").write_text(f"""backend: "fil"
max_batch_size: 256
input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {FEATURES} ] }} ]
output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "model_type" value: {{ string_value: "xgboost_ubj" }} }}
parameters {{ key: "is_classifier" value: {{ string_value: "true" }} }}
parameters {{ key: "predict_proba" value: {{ string_value: "true" }} }}
parameters {{ key: "cpu_nthread" value: {{ string_value: "1" }} }}
""")


def io_names(fmt: str) -> tuple[str, str, bool]:
    """(input, output, NHWC) of a format as served."""
    if fmt == "torchscript":
        return "INPUT__0", "OUTPUT__0", False
    if fmt in ("onnx", "openvino"):
        return "images", "logits", False
    if fmt == "savedmodel":
        return "images", "output_0", True
    return "images", "output_0", True


def write_configs(repo: Path) -> None:
    for fmt, backend in BACKEND.items():
        name_in, name_out, nhwc = io_names(fmt)
        dims = f"{SIZE}, {SIZE}, 3" if nhwc else f"3, {SIZE}, {SIZE}"
        (repo / fmt / "config.pbtxt").write_text(f"""{backend}
max_batch_size: 8
input [ {{ name: "{name_in}" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "{name_out}" data_type: TYPE_FP32 dims: [ {CLASSES} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
dynamic_batching {{ max_queue_delay_microseconds: 1000 }}
{ONE_THREAD[fmt]}
""")


def request(client, fmt: str, x_nchw: np.ndarray):
    import tritonclient.grpc as grpcclient

    name_in, name_out, nhwc = io_names(fmt)
    x = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1)) if nhwc else x_nchw
    tensor = grpcclient.InferInput(name_in, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer(fmt, [tensor]).as_numpy(name_out)


def check_answers(url: str, repo: Path) -> list[str]:
    """Every format's logits against the ONNX model run by ONNX Runtime directly."""
    import onnxruntime as ort
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    x = np.random.default_rng(3).random((4, 3, SIZE, SIZE), dtype=np.float32)
    reference = ort.InferenceSession(
        str(repo / "onnx" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    ).run(None, {"images": x})[0]
    span = float(reference.max() - reference.min())
    failures = []
    for fmt in BACKEND:
        got = request(client, fmt, x)
        error = float(np.abs(got - reference).max())
        limit = 0.05 * span if fmt == "litert_int8" else 1e-4 * max(1.0, span)
        print(f"check {fmt}: max |logits - ONNX Runtime's| = {error:.2e} (limit {limit:.1e})")
        if error > limit:
            failures.append(f"{fmt}: logits differ from ONNX Runtime's by {error:.3g}")
    return failures


def timed(send, clients: int, seconds: float, rows: int, pid: int) -> dict[str, float]:
    """``clients`` threads calling ``send()`` back to back for ``seconds``; the server's (``pid``)
    CPU ms per row."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            send()
            latencies[i].append(time.perf_counter() - t0)

    start, cpu = time.perf_counter(), cpu_seconds(pid)
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(pid) - cpu
    every = sorted(v for part in latencies for v in part)
    return {
        "p50": 1e3 * every[len(every) // 2],
        "p99": 1e3 * every[int(len(every) * 0.99)],
        "rate": len(every) * rows / elapsed,
        "cpu": 1e3 * cpu / (len(every) * rows),
    }


def measure(url: str, pid: int, seconds: float, rounds: int) -> dict:
    import tritonclient.grpc as grpcclient

    rng = np.random.default_rng(5)
    image = rng.random((1, 3, SIZE, SIZE), dtype=np.float32)
    features = {n: rng.random((n, FEATURES), dtype=np.float32) for n in (1, 256)}
    clients = [grpcclient.InferenceServerClient(url) for _ in range(8)]
    results: dict = {}
    cases = [(fmt, mode) for fmt in BACKEND for mode in ("b1", "dyn")] + [
        ("forest", "1"),
        ("forest", "256"),
    ]
    for r in range(rounds):
        order = cases if r % 2 == 0 else cases[::-1]  # alternate the order
        for fmt, mode in order:
            if fmt == "forest":
                rows = int(mode)
                import tritonclient.grpc as g

                tensor = g.InferInput("input__0", [rows, FEATURES], "FP32")
                tensor.set_data_from_numpy(features[rows])
                stats = timed(lambda: clients[0].infer("forest", [tensor]), 1, seconds, rows, pid)
            elif mode == "b1":
                stats = timed(lambda: request(clients[0], fmt, image), 1, seconds, 1, pid)
            else:
                local = threading.local()

                def send():
                    if not hasattr(local, "client"):
                        local.client = grpcclient.InferenceServerClient(url)
                    request(local.client, fmt, image)

                stats = timed(send, 8, seconds, 1, pid)
            results.setdefault((fmt, mode), []).append(stats)
            print(
                f"round {r + 1} {fmt} {mode}: p50 {stats['p50']:.2f} ms, p99 "
                f"{stats['p99']:.2f} ms, {stats['rate']:.0f}/s, server CPU "
                f"{stats['cpu']:.2f} ms/row",
                flush=True,
            )
    return results


def table(results: dict, rounds: int) -> list[str]:
    def med(fmt, mode, key):
        return statistics.median(s[key] for s in results[(fmt, mode)])

    def spread(fmt, mode):
        rates = [s["rate"] for s in results[(fmt, mode)]]
        return f"{min(rates):.0f}-{max(rates):.0f}"

    def ratio(fmt, mode):
        return statistics.median(
            a["rate"] / b["rate"] for a, b in zip(results[(fmt, mode)], results[("onnx", mode)])
        )

    lines = [
        "| model (runtime) | b1 p50 ms | b1 p99 ms | b1 img/s (spread) | b1 vs ORT | "
        "b1 server CPU ms/img | dynamic p50 ms | dynamic p99 ms | dynamic img/s (spread) | "
        "dynamic vs ORT | dynamic server CPU ms/img |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for fmt in BACKEND:
        cells = [LABEL[fmt]]
        for mode in ("b1", "dyn"):
            cells += [
                f"{med(fmt, mode, 'p50'):.2f}",
                f"{med(fmt, mode, 'p99'):.2f}",
                f"{med(fmt, mode, 'rate'):.0f} ({spread(fmt, mode)})",
                f"{ratio(fmt, mode):.2f}x",
                f"{med(fmt, mode, 'cpu'):.2f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| forest (FIL, XGBoost 100 trees) | p50 ms | p99 ms | rows/s (spread) | "
        "server CPU us/row |",
        "|---|---:|---:|---:|---:|",
    ]
    for rows in ("1", "256"):
        lines.append(
            f"| {rows} row(s) a request | {med('forest', rows, 'p50'):.2f} | "
            f"{med('forest', rows, 'p99'):.2f} | {med('forest', rows, 'rate'):.0f} "
            f"({spread('forest', rows)}) | {1e3 * med('forest', rows, 'cpu'):.1f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per case and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=default_out("frameworks"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frameworks-bench-") as tmp:
        repo = Path(tmp) / "repo"
        w = weights()
        write_onnx(repo / "onnx" / "1" / "model.onnx", w)
        write_torchscript(repo / "torchscript" / "1" / "model.pt", w)
        write_openvino(repo / "openvino" / "1", repo / "onnx" / "1" / "model.onnx")
        write_tensorflow(repo, w)
        write_configs(repo)
        write_forest(repo)
        server = ServerProcess(
            "--model-repository", str(repo), "--strict-readiness=true", log=Path(tmp) / "server.log"
        )
        try:
            failures = check_answers(server.url(), repo)
            results = measure(server.url(), server.proc.pid, args.seconds, args.rounds)
        finally:
            server.stop()
    lines = [
        f"Machine: {machine()}; load average at the start {' '.join(LOAD_AT_START)}; "
        f"commit {commit()}; {args.rounds} rounds of {args.seconds:g} s per case, medians "
        f"and the spread of the rounds.",
        "",
    ] + table(results, args.rounds)
    lines += [""] + [f"FAILED: {f}" for f in failures]
    return emit("\n".join(lines) + "\n", args.out) or (1 if failures else 0)


if __name__ == "__main__":
    sys.exit(main())
