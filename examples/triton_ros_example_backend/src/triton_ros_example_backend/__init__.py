"""An example triton_ros backend, ``example_affine``: ``OUTPUT0 = INPUT0 * scale + offset``.

It shows the whole backend contract of docs/backends.md in a few lines:

- :class:`AffineModel` (a ``BackendModel``) reads the model version's own file,
  ``<version>/affine.json`` (``{"scale": 2.0, "offset": 1.0}``), once per loaded version, and
  its ``parameters`` (``scale`` overrides the file's); a bad file fails the load with
  INVALID_ARG, which the server shows as the model's reason;
- ``auto_complete_config`` fills a missing configuration (one input, one output, FP32, a
  dynamic dimension, batching) as a backend whose model format carries its own metadata does;
- :class:`AffineInstance` (a ``BatchedTensorInstance``) computes one batch: the core has
  already checked every request against the configuration and concatenated the batch's rows;
  it splits the outputs back to the requests.

Registered by this package's entry point (pyproject.toml), group ``triton_ros.backends``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from triton_ros.core.backend_model import BackendModel, BatchedTensorInstance
from triton_ros.core.errors import invalid_arg, unavailable

MODEL_FILE = "affine.json"


class AffineModel(BackendModel):
    def __init__(self, config, *, version, model_path, version_path) -> None:
        super().__init__(config, version=version, model_path=model_path, version_path=version_path)
        path = Path(version_path) / (config.default_model_filename or MODEL_FILE)
        if not path.is_file():
            raise unavailable(f"unable to find '{path}' for model '{config.name}'")
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
            self.scale = float(config.parameters.get("scale", spec.get("scale", 1.0)))
            self.offset = float(spec.get("offset", 0.0))
        except (ValueError, TypeError, AttributeError) as exc:
            raise invalid_arg(f"model '{config.name}': {path.name} is not valid: {exc}") from None

    @classmethod
    def can_use_gpu(cls) -> bool:
        return False  # KIND_AUTO instances run on the CPU

    @classmethod
    def auto_complete_config(cls, proto, model_path) -> list[str]:
        from triton_ros.core.protos import model_config_pb2 as mc

        if len(proto.input) == 0:
            proto.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=[-1])
        if len(proto.output) == 0:
            proto.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[-1])
        if proto.max_batch_size == 0:
            proto.max_batch_size = 8
            proto.dynamic_batching.SetInParent()
        return [f"example_affine filled the configuration of model '{proto.name}'"]

    def create_instance(self, *, name, kind, device_id):
        if kind != "KIND_CPU":
            raise invalid_arg(f"model '{self.config.name}': example_affine runs on the CPU only")
        return AffineInstance(self, name=name, kind=kind, device_id=device_id)


class AffineInstance(BatchedTensorInstance):
    def __init__(self, model, *, name, kind, device_id) -> None:
        super().__init__(model, name=name, kind=kind, device_id=device_id)
        self.may_run_on_caller = True  # pure numpy: may run on the request's thread

    def run(self, inputs, output_names):
        model = self.model
        x = inputs["INPUT0"]
        return {
            "OUTPUT0": (x * np.float32(model.scale) + np.float32(model.offset)).astype(
                x.dtype, copy=False
            )
        }
