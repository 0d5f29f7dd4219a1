"""The ROS 2 face of triton_ros: the ``inference_node`` and its tools.

Everything here may import rclpy; the inference core (:mod:`triton_ros.core`) never does.
"""
