"""Launch triton_ros's inference node (ROS 2 Humble, Jazzy and later).

    ros2 launch triton_ros inference.launch.py
    ros2 launch triton_ros inference.launch.py params_file:=/path/robots.yaml \\
        model_repository:=/path/models namespace:=perception log_level:=debug

Arguments:
  params_file       the node's parameters (default: the package's config/inference.yaml)
  model_repository  Triton model repository; when given, it overrides the params file's
                    model_repository (default: the params file's, else the repository installed
                    with the package)
  namespace         namespace of the node (its services, ~/status and relative output topics)
  log_level         debug, info, warn, error or fatal

FASTDDS_DEFAULT_PROFILES_FILE is set to the package's config/fastdds.xml (a shared-memory segment
large enough for camera images) unless the environment already sets it; other DDS
implementations ignore it.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.substitutions import EnvironmentVariable, LaunchConfiguration
from launch_ros.actions import Node


def _inference_node(context):
    parameters = [LaunchConfiguration("params_file").perform(context)]
    repository = LaunchConfiguration("model_repository").perform(context)
    if repository:  # only an explicit argument overrides the params file
        parameters.append({"model_repository": repository})
    return [
        Node(
            package="triton_ros",
            executable="inference_node",
            name="inference_node",
            namespace=LaunchConfiguration("namespace"),
            output="screen",
            emulate_tty=True,
            parameters=parameters,
            arguments=["--ros-args", "--log-level", LaunchConfiguration("log_level")],
        )
    ]


def generate_launch_description():
    share = get_package_share_directory("triton_ros")
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "params_file",
                default_value=os.path.join(share, "config", "inference.yaml"),
                description="YAML file with the inference node's parameters",
            ),
            DeclareLaunchArgument(
                "model_repository",
                default_value="",
                description="Triton model repository (empty: the params file's, else the bundled "
                "one)",
            ),
            DeclareLaunchArgument(
                "namespace", default_value="", description="Namespace of the node"
            ),
            DeclareLaunchArgument(
                "log_level",
                default_value="info",
                description="Log level: debug, info, warn, error or fatal",
            ),
            SetEnvironmentVariable(
                "FASTDDS_DEFAULT_PROFILES_FILE",
                EnvironmentVariable(
                    "FASTDDS_DEFAULT_PROFILES_FILE",
                    default_value=os.path.join(share, "config", "fastdds.xml"),
                ),
            ),
            OpaqueFunction(function=_inference_node),
        ]
    )
