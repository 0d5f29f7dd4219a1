"""How ``ros2 launch <package> <file>`` finds a launch file, for the tests of the install layouts
(test_ament_index.py: scripts/setup.sh's environment; test_colcon_workflow.py: a colcon install).

``share_file_path`` reproduces exactly ros2launch's ``get_share_file_path_from_package``
(ros2/launch_ros, ros2launch/ros2launch/api/api.py, the same on Humble, Jazzy and Rolling):
``os.walk`` over ``get_package_share_directory(package)``, without ``followlinks``, keeping
every file of that name; none is FileNotFoundError ("file ... was not found in the share
directory of package ..."), two are MultipleLaunchFilesError. ros2launch is not on PyPI (nor
is launch), so it is reproduced rather than imported; a share directory whose launch/ is a link
to a directory fails it, as it failed the real command.
"""

from __future__ import annotations

import os

from ament_index_python.packages import get_package_share_directory


class MultipleLaunchFilesError(Exception):
    pass


def share_file_path(package_name: str, file_name: str) -> str:
    """ros2launch.api.get_share_file_path_from_package, its semantics reproduced."""
    package_share_directory = get_package_share_directory(package_name)
    matching_file_paths = []
    for root, _dirs, files in os.walk(package_share_directory):
        for name in files:
            if name == file_name:
                matching_file_paths.append(os.path.join(root, name))
    if len(matching_file_paths) == 0:
        raise FileNotFoundError(
            f"file '{file_name}' was not found in the share directory of "
            f"package '{package_name}' which is at '{package_share_directory}'"
        )
    if len(matching_file_paths) > 1:
        raise MultipleLaunchFilesError(
            f"file '{file_name}' was found more than once in the share "
            f"directory of package '{package_name}'"
        )
    return matching_file_paths[0]
