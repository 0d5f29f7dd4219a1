"""The ROS messages results are published as, and what their builders share.

Detections are ``vision_msgs/Detection2DArray`` where vision_msgs is importable (the separate
apt package ``ros-<distro>-vision-msgs``, which rosdep installs from package.xml; the ``.venv``
set-up has none) and ``triton_ros_interfaces/Detections`` otherwise; 3D detections
``vision_msgs/Detection3DArray`` or ``triton_ros_interfaces/Detections3D``; classifications are
``vision_msgs/Classification`` or ``triton_ros_interfaces/Classification``. The fallback messages
keep vision_msgs' field names (``detections[i].bbox.center.position.x``,
``detections[i].results[j].hypothesis.class_id``), so subscribers read either the same way; a
fallback result has no ``pose``. Tensors are ``triton_ros_interfaces/TensorList``. Each output
format (:mod:`.detection`, :mod:`.classification`, :mod:`.tensors`) builds its own message; the
header of every result is the input's header (stamp and frame_id).
"""

from __future__ import annotations

import array
from typing import Sequence

try:
    from vision_msgs.msg import Classification as _Classification
    from vision_msgs.msg import Detection2D as _Detection2D
    from vision_msgs.msg import Detection2DArray as _Detections
    from vision_msgs.msg import ObjectHypothesis as _Hypothesis
    from vision_msgs.msg import ObjectHypothesisWithPose as _Result

    VISION_MSGS = True
except ImportError:
    from triton_ros_interfaces.msg import Classification as _Classification
    from triton_ros_interfaces.msg import Detection2D as _Detection2D
    from triton_ros_interfaces.msg import DetectionResult as _Result
    from triton_ros_interfaces.msg import Detections as _Detections
    from triton_ros_interfaces.msg import ObjectHypothesis as _Hypothesis

    VISION_MSGS = False

# 3D detections (format detections3d): vision_msgs/Detection3DArray, else
# triton_ros_interfaces/Detections3D (same field names: detections[i].bbox.center.position.x,
# detections[i].bbox.size.x, detections[i].results[j].hypothesis.class_id; no results[].pose).
try:
    from vision_msgs.msg import Detection3D as _Detection3D
    from vision_msgs.msg import Detection3DArray as _Detections3D
except ImportError:
    from triton_ros_interfaces.msg import Detection3D as _Detection3D
    from triton_ros_interfaces.msg import Detections3D as _Detections3D

DETECTIONS_TYPE = _Detections
DETECTION_TYPE = _Detection2D
DETECTION_RESULT_TYPE = _Result
CLASSIFICATION_TYPE = _Classification
HYPOTHESIS_TYPE = _Hypothesis
DETECTIONS3D_TYPE = _Detections3D
DETECTION3D_TYPE = _Detection3D


def uint8_array(buffer) -> array.array:
    """Bytes as array('B'): rclpy accepts it for uint8[] fields without a per-element check."""
    out = array.array("B")
    out.frombytes(buffer)
    return out


def label_of(index: int, labels: Sequence[str]) -> str:
    """The class name for an index, or the index itself when no name is known."""
    if 0 <= index < len(labels) and labels[index]:
        return labels[index]
    return str(int(index))
