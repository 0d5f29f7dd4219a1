"""The inference core: everything Triton's server does, with no transport (no rclpy, no grpc)."""
from .errors import StatusCode, TritonRosError
from .infer_request import InferRequest, InferResponse, RequestedOutput
from .server import InferenceServer, ServerOptions

__all__ = ["InferenceServer", "ServerOptions", "InferRequest", "InferResponse", "RequestedOutput",
           "StatusCode", "TritonRosError"]
