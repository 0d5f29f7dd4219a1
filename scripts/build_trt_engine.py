#!/usr/bin/env python3
"""Build a TensorRT engine (``model.plan``) for the TensorRT backend from an ONNX model, in FP32,
FP16 or INT8, on the machine that will serve it (an engine is specific to its GPU and TensorRT).

- ``--fp16``: TensorRT may run layers in half precision (``BuilderFlag.FP16``).
- ``--int8`` with a QDQ model (``scripts/quantize_color_detector.py``'s INT8 output, calibrated
  on synthetic camera frames): explicit quantization, TensorRT takes the model's scales (the
  way TensorRT 10 recommends).
- ``--int8`` with a float model: implicit quantization calibrated here, with TensorRT's entropy
  calibrator (``IInt8EntropyCalibrator2``) fed the same synthetic camera frames
  (:func:`quantize_color_detector.calibration_frames`, ``--calibration-frames``, in batches of
  ``--calibration-batch``); the calibration cache (``--calibration-cache``) is written and reused.
  TensorRT 10 deprecates implicit quantization, and it fails there with its own message.

Dynamic batch: the first input dimension, when dynamic, gets one optimization profile from 1 to
``--max-batch`` (optimal ``--opt-batch``); the TensorRT backend picks the profile per batch.
The model's config.pbtxt then names ``platform: "tensorrt_plan"`` (auto-complete fills the rest
from the engine). Needs the ``tensorrt`` Python package and a CUDA device (cuda-python or pycuda
for the calibration buffers): without them it exits 2 saying what is missing. Not run on the
development machines (no GPU, no TensorRT); see docs/backends.md.

Usage: ``python scripts/build_trt_engine.py --onnx model.onnx --out 1/model.plan --int8``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def is_qdq(onnx_path: Path) -> bool:
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    return any(n.op_type == "QuantizeLinear" for n in model.graph.node)


class CalibrationBatches:
    """The calibration frames in batches of ``batch`` rows, each contiguous FP32 (what the
    calibrator copies to the device); the last partial batch is dropped, as TensorRT takes
    full batches only."""

    def __init__(self, frames: np.ndarray, batch: int) -> None:
        if batch < 1 or len(frames) < batch:
            raise ValueError(f"need at least one batch of {batch} frames, got {len(frames)}")
        self.frames = np.ascontiguousarray(frames, dtype=np.float32)
        self.batch = batch
        self.index = 0

    def next(self) -> np.ndarray | None:
        if self.index + self.batch > len(self.frames):
            return None
        rows = self.frames[self.index : self.index + self.batch]
        self.index += self.batch
        return rows


def make_calibrator(trt, batches: CalibrationBatches, cache: Path):
    from triton_ros.core.cuda_utils import CudaStream

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self) -> None:
            super().__init__()
            self.stream = CudaStream(0)
            self.buffer = self.stream.alloc(batches.frames[: batches.batch].nbytes)

        def get_batch_size(self) -> int:
            return batches.batch

        def get_batch(self, names):
            rows = batches.next()
            if rows is None:
                return None
            self.stream.copy_to_device(self.buffer, rows)
            self.stream.synchronize()
            return [int(self.buffer.ptr)]

        def read_calibration_cache(self):
            return cache.read_bytes() if cache.is_file() else None

        def write_calibration_cache(self, data) -> None:
            cache.write_bytes(bytes(data))

    return Calibrator()


def build(args) -> int:
    try:
        import tensorrt as trt
    except ImportError as exc:
        print(
            f"build_trt_engine: the tensorrt Python package is needed ({exc}); on a Jetson it "
            f"comes with JetPack, elsewhere pip install tensorrt on a machine with an NVIDIA "
            f"GPU",
            file=sys.stderr,
        )
        return 2
    logger = trt.Logger(trt.Logger.INFO)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):  # implicit in TRT 10
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(args.onnx)):
        for i in range(parser.num_errors):
            print(f"build_trt_engine: {parser.get_error(i)}", file=sys.stderr)
        return 1
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, args.workspace_mib << 20)
    profile = builder.create_optimization_profile()
    dynamic = False
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = list(tensor.shape)
        if shape and shape[0] == -1:
            if any(d == -1 for d in shape[1:]):
                print(
                    f"build_trt_engine: input '{tensor.name}' {shape} has dynamic dimensions "
                    f"besides the batch; only the batch is profiled here",
                    file=sys.stderr,
                )
                return 1
            dynamic = True
            rest = shape[1:]
            profile.set_shape(
                tensor.name, [1] + rest, [args.opt_batch] + rest, [args.max_batch] + rest
            )
    if dynamic:
        config.add_optimization_profile(profile)
    if args.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if args.int8:
        config.set_flag(trt.BuilderFlag.INT8)
        if is_qdq(args.onnx):
            print("build_trt_engine: QDQ model: explicit INT8 with the model's scales")
        else:
            import quantize_color_detector as quant

            batches = CalibrationBatches(
                quant.calibration_frames(args.calibration_frames), args.calibration_batch
            )
            config.int8_calibrator = make_calibrator(trt, batches, args.calibration_cache)
            if dynamic:
                config.set_calibration_profile(profile)
            print(
                f"build_trt_engine: calibrating INT8 on {args.calibration_frames} synthetic "
                f"camera frames (cache {args.calibration_cache})"
            )
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        print(
            "build_trt_engine: TensorRT could not build the engine (its log above says why)",
            file=sys.stderr,
        )
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(bytes(engine))
    print(f"build_trt_engine: wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx", type=Path, required=True, help="the ONNX model")
    parser.add_argument("--out", type=Path, required=True, help="the engine, e.g. 1/model.plan")
    parser.add_argument("--fp16", action="store_true", help="allow FP16 layers")
    parser.add_argument(
        "--int8",
        action="store_true",
        help="allow INT8 layers (QDQ: explicit; else calibrated on synthetic camera frames)",
    )
    parser.add_argument("--calibration-frames", type=int, default=256)
    parser.add_argument("--calibration-batch", type=int, default=8)
    parser.add_argument("--calibration-cache", type=Path, default=Path("calibration.cache"))
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--opt-batch", type=int, default=8)
    parser.add_argument("--workspace-mib", type=int, default=1024)
    args = parser.parse_args(argv)
    if not args.onnx.is_file():
        parser.error(f"{args.onnx} does not exist")
    if not 1 <= args.opt_batch <= args.max_batch:
        parser.error("need 1 <= --opt-batch <= --max-batch")
    return build(args)


if __name__ == "__main__":
    sys.exit(main())
