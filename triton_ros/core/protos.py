"""Triton's generated protobuf messages, without importing grpc.

tritonclient ships ``model_config_pb2`` (the ``inference.ModelConfig`` message config.pbtxt
files parse into) inside ``tritonclient.grpc``, whose package ``__init__`` imports grpc. The core
must not import a transport, so the module is loaded from its file directly and registered under
its canonical name: a frontend that later imports ``tritonclient.grpc`` reuses the same module,
and the message types are registered with protobuf only once.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def _load_generated(name: str) -> ModuleType:
    canonical = f"tritonclient.grpc.{name}"
    module = sys.modules.get(canonical)
    if module is not None:
        return module
    package = importlib.util.find_spec("tritonclient")
    if package is None or not package.submodule_search_locations:
        raise ImportError(
            "tritonclient is required for Triton's protobuf messages "
            "(pip install tritonclient[grpc])"
        )
    path = Path(next(iter(package.submodule_search_locations))) / "grpc" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(canonical, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[canonical] = module
    spec.loader.exec_module(module)
    return module


model_config_pb2 = _load_generated("model_config_pb2")
