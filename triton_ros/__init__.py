"""triton_ros: Triton Inference Server's serving model for ROS 2, in Python.

``triton_ros.core`` is the inference server (model repository, dynamic batcher, backends) and
imports neither rclpy nor grpc; ``triton_ros.frontend`` holds the KServe v2 endpoints and
``triton_ros.ros`` the ROS 2 node, each a thin frontend over one shared core.
"""

__version__ = "0.1.0"
