"""Model warmup (Triton's ``TritonModelInstance::GenerateWarmupData`` and ``WarmUp``).

When a model version loads, every ``model_warmup`` sample runs on every instance before the
version becomes READY, so that the first real request does not pay for lazy initialization
(memory arenas, kernel selection, TensorRT/CUDA contexts). As in Triton, a sample of
``batch_size`` N is N batch-1 requests executed together, ``count`` times (at least once), directly
on the instance (no scheduler, no statistics: warmup is not client traffic). A sample with
batch_size 0 is skipped. Any failure fails the load with the sample's name and the error.

Input data:

- ``zero_data``: zeros (BYTES: empty strings);
- ``random_data``: uniform [0, 1) for floating types, random bits for integers, random booleans
  (BYTES: empty strings, as in Triton). Triton fills floats with random bytes, which can be NaN;
  uniform values warm the same code paths without that hazard;
- ``input_data_file``: raw bytes read from ``<model>/warmup/<file>``: the first bytes the tensor
  needs for fixed-size types, the whole file as length-prefixed elements for BYTES.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from .backend_model import BackendModelInstance
from .datatypes import deserialize_bytes_tensor, to_numpy_dtype
from .errors import TritonRosError, invalid_arg
from .infer_request import InferRequest, InferResponse, normalize_request
from .model_config import WARMUP_DATA_FOLDER, ModelConfig, WarmupInput, WarmupSample

_log = logging.getLogger("triton_ros.warmup")


def warmup_input(
    config: ModelConfig,
    model_path: Path,
    sample: WarmupSample,
    spec: WarmupInput,
    rng: np.random.Generator,
) -> np.ndarray:
    """One request's tensor for a warmup input (with the batch dimension when batching)."""
    dtype = to_numpy_dtype(spec.datatype)
    count = math.prod(spec.dims)
    if spec.source == "input_data_file":
        path = model_path / WARMUP_DATA_FOLDER / spec.input_data_file
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise invalid_arg(
                f"warmup sample '{sample.name}': cannot read input_data_file "
                f"'{spec.input_data_file}' for input '{spec.name}': {exc}"
            ) from None
        if spec.datatype == "BYTES":
            try:
                array = deserialize_bytes_tensor(data, count)
            except TritonRosError as exc:
                raise invalid_arg(
                    f"warmup sample '{sample.name}': input_data_file "
                    f"'{spec.input_data_file}' for input '{spec.name}': "
                    f"{exc.message}"
                ) from None
        else:
            needed = count * dtype.itemsize
            if len(data) < needed:
                raise invalid_arg(
                    f"warmup sample '{sample.name}': warmup setting expects "
                    f"{needed} bytes, but the data provided from "
                    f"{spec.input_data_file} only has {len(data)} bytes"
                )
            array = np.frombuffer(data[:needed], dtype=dtype).copy()
    elif spec.datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = [b""] * count
    elif spec.source == "zero_data":
        array = np.zeros(count, dtype=dtype)
    elif dtype.kind == "f":
        array = rng.random(count).astype(dtype)
    elif dtype.kind == "b":
        array = rng.integers(0, 2, count).astype(dtype)
    else:
        array = np.frombuffer(rng.bytes(count * dtype.itemsize), dtype=dtype).copy()
    shape = ((1,) if config.max_batch_size > 0 else ()) + tuple(spec.dims)
    return array.reshape(shape)


def run_warmup(
    config: ModelConfig,
    *,
    version: int,
    model_path: Path,
    instances: Sequence[BackendModelInstance],
) -> None:
    """Run every warmup sample on every instance; raise INVALID_ARG naming the failed sample."""
    rng = np.random.default_rng()
    for sample in config.warmup:
        if sample.batch_size == 0:
            _log.debug("model '%s': skipping batch 0 warmup sample '%s'", config.name, sample.name)
            continue
        inputs = {
            spec.name: warmup_input(config, model_path, sample, spec, rng) for spec in sample.inputs
        }
        for instance in instances:
            _log.info(
                "model '%s' instance %s is running warmup sample '%s' (%d iteration%s)",
                config.name,
                instance.name,
                sample.name,
                sample.count,
                "s" if sample.count > 1 else "",
            )
            for _ in range(sample.count):
                _run_sample(config, version, instance, sample, inputs)


def _run_sample(
    config: ModelConfig,
    version: int,
    instance: BackendModelInstance,
    sample: WarmupSample,
    inputs: dict[str, np.ndarray],
) -> None:
    prefix = f"failed to run warmup sample '{sample.name}' on instance {instance.name}: "
    requests = []
    for _ in range(sample.batch_size):
        request = InferRequest(model_name=config.name, inputs=dict(inputs), model_version=version)
        try:
            normalize_request(config, request)
        except TritonRosError as exc:
            raise invalid_arg(prefix + exc.message) from None
        requests.append(request)
    # A batching model gets the whole sample as one batch; others execute one request at a time.
    groups = [requests] if config.max_batch_size > 0 else [[r] for r in requests]
    errors: list[str] = []
    for group in groups:
        try:
            result = instance.execute(group)
            responses = result.responses
        except Exception as exc:  # a backend fault fails the load, never the process
            responses = [exc] * len(group)
        if len(responses) != len(group):
            errors.append(f"{len(responses)} responses for {len(group)} requests")
        errors.extend(str(r) for r in responses if not isinstance(r, InferResponse))
    if errors:
        raise invalid_arg(prefix + "; ".join(dict.fromkeys(errors)))
