"""Result messages of one frame: TensorList, detections and classification.

Detections are ``vision_msgs/Detection2DArray`` where vision_msgs is importable (the separate
apt package ``ros-<distro>-vision-msgs``, which rosdep installs from package.xml; the ``.venv``
set-up has none) and ``triton_ros_interfaces/Detections`` otherwise; classifications are
``vision_msgs/Classification`` or ``triton_ros_interfaces/Classification``. The fallback messages
keep vision_msgs' field names (``detections[i].bbox.center.position.x``,
``detections[i].results[j].hypothesis.class_id``), so subscribers read either the same way; a
fallback result has no ``pose``. The
header of every result is the input image's header (stamp and frame_id).
"""
from __future__ import annotations

import array
from typing import Iterable

import numpy as np

from ..core.datatypes import from_numpy_dtype, serialize_bytes_tensor
from .classification_decoder import ClassificationResult
from .detection_decoder import DetectionResult, label_of

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

from triton_ros_interfaces.msg import Tensor, TensorList

DETECTIONS_TYPE = _Detections
CLASSIFICATION_TYPE = _Classification


def message_type(fmt: str):
    """The ROS message class a binding of this format publishes."""
    return {"detections": _Detections, "classification": _Classification,
            "tensors": TensorList}[fmt]


def uint8_array(buffer) -> array.array:
    """Bytes as array('B'): rclpy accepts it for uint8[] fields without a per-element check."""
    out = array.array("B")
    out.frombytes(buffer)
    return out


def tensor_list(header, model_name: str, model_version: int,
                outputs: Iterable[tuple[str, np.ndarray]]) -> TensorList:
    msg = TensorList(header=header, model_name=model_name, model_version=int(model_version))
    for name, value in outputs:
        datatype = from_numpy_dtype(value.dtype)
        if datatype == "BYTES":
            data = serialize_bytes_tensor(value)
        else:
            data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"),
                                                      copy=False).tobytes()
        msg.tensors.append(Tensor(name=name, datatype=datatype,
                                  shape=[int(d) for d in value.shape], data=uint8_array(data)))
    return msg


def detections(header, result: DetectionResult, labels) -> object:
    msg = _Detections(header=header)
    for i in range(len(result)):
        x1, y1, x2, y2 = (float(v) for v in result.boxes[i])
        det = _Detection2D(header=header, id=str(i))
        det.bbox.center.position.x = (x1 + x2) / 2.0
        det.bbox.center.position.y = (y1 + y2) / 2.0
        det.bbox.size_x = x2 - x1
        det.bbox.size_y = y2 - y1
        hypothesis = _Result()
        hypothesis.hypothesis.class_id = label_of(int(result.classes[i]), labels)
        hypothesis.hypothesis.score = float(result.scores[i])
        det.results.append(hypothesis)
        msg.detections.append(det)
    return msg


def classification(header, result: ClassificationResult, labels) -> object:
    msg = _Classification(header=header)
    for index, score in zip(result.classes, result.scores):
        msg.results.append(_Hypothesis(class_id=label_of(int(index), labels), score=float(score)))
    return msg
