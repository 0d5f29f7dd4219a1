"""Backends: ONNX Runtime, TensorRT and Python, each imported only when a model needs it."""
