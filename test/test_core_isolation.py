"""The inference core imports no transport: the ROS node and the gRPC endpoint are frontends."""

import subprocess
import sys

import pytest

from server_process import ROOT


pytestmark = pytest.mark.integration

CHECK = """
import sys
import triton_ros.core
import triton_ros.core.server, triton_ros.core.model_repository_manager
import triton_ros.core.backends.onnxruntime_backend
from triton_ros.core import InferenceServer, ServerOptions
server = InferenceServer(ServerOptions(model_repositories=("model_repository",)))
server.start()
server.stop()
transports = ("grpc", "rclpy", "rclpy_message_converter")
bad = sorted(m for m in sys.modules if m.split(".")[0] in transports)
print(",".join(bad))
"""


def test_core_imports_neither_grpc_nor_rclpy():
    result = subprocess.run(
        [sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"the core imported: {result.stdout.strip()}"
