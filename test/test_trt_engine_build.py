"""scripts/build_trt_engine.py without a GPU: the calibration batches it feeds TensorRT's INT8
calibrator (the synthetic camera frames INT8 ONNX is calibrated on), QDQ detection, and its exit
status and message where tensorrt is missing. The engine build itself needs a GPU and TensorRT
(docs/backends.md)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from server_process import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import build_trt_engine  # noqa: E402
import quantize_color_detector as quant  # noqa: E402

pytestmark = pytest.mark.unit


def test_calibration_batches_are_full_contiguous_batches_of_the_frames():
    frames = quant.calibration_frames(20)
    assert frames.shape == (20, 3, 256, 256) and frames.dtype == np.float32
    assert 0.0 <= frames.min() and frames.max() <= 1.0
    batches = build_trt_engine.CalibrationBatches(frames, 8)
    got = []
    while (rows := batches.next()) is not None:
        assert rows.flags.c_contiguous and rows.shape == (8, 3, 256, 256)
        got.append(rows)
    assert len(got) == 2  # the last 4 frames are dropped
    np.testing.assert_array_equal(np.concatenate(got), frames[:16])
    with pytest.raises(ValueError):
        build_trt_engine.CalibrationBatches(frames[:3], 8)


def test_qdq_models_are_told_from_float_ones(tmp_path):
    paths = quant.build(tmp_path, 8)
    assert build_trt_engine.is_qdq(paths["int8"])
    assert not build_trt_engine.is_qdq(paths["fp32"]) and not build_trt_engine.is_qdq(paths["fp16"])


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="tensorrt is here")
def test_without_tensorrt_it_exits_2_saying_what_is_needed(tmp_path, capsys):
    source = ROOT / "model_repository" / "color_detector" / "1" / "model.onnx"
    rc = build_trt_engine.main(
        ["--onnx", str(source), "--out", str(tmp_path / "model.plan"), "--int8"]
    )
    assert rc == 2
    assert "the tensorrt Python package is needed" in capsys.readouterr().err
    assert not (tmp_path / "model.plan").exists()
