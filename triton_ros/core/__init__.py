"""The inference core: everything Triton's server does, with no transport (no rclpy, no grpc).

The public names are resolved lazily (PEP 562) so that importing one light submodule (the Python
backend's stub process imports ``triton_ros.core.datatypes``) does not import the whole server.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "InferenceServer": ".server",
    "ServerOptions": ".server",
    "InferRequest": ".infer_request",
    "InferResponse": ".infer_request",
    "RequestedOutput": ".infer_request",
    "StatusCode": ".errors",
    "TritonRosError": ".errors",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
