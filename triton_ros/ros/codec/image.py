"""The ``image`` input kind: ``sensor_msgs/Image`` (raw pixels in one of
:data:`~triton_ros.ros.codec.preprocess.ENCODINGS`) -> one image input of the model.

Serialized images are read without a copy of their pixels (:mod:`.serialized_image`), checked
against their header (:func:`~triton_ros.ros.codec.preprocess.check_image`), and preprocessed
into the model's input (:mod:`.preprocess`: letterbox or stretch, channels, layout,
normalization); the placement handed to the decoders is the
:class:`~triton_ros.ros.codec.preprocess.Letterbox` that maps boxes back to the image's pixels.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from sensor_msgs.msg import Image

from ..targets.spec import TensorSpec
from .base import ImageGeometry, InputKind
from .preprocess import (
    InputPlan,
    Letterbox,
    PreprocessConfig,
    Preprocessor,
    check_image,
    plan_input,
)
from .serialized_image import IMAGE_TYPE, ImageReader


class ImageInput(InputKind):
    """``sensor_msgs/Image`` in; its settings: the preprocessing's."""

    name = "image"
    ros_type = IMAGE_TYPE
    settings = PreprocessConfig

    def message_class(self) -> type:
        return Image

    def reader(self) -> ImageReader:
        return ImageReader()

    def check(self, msg: Any) -> None:
        check_image(msg.encoding, msg.height, msg.width, msg.step, len(msg.data))

    def decoded_size(self, msg: Any) -> tuple[int, int]:
        return int(msg.width), int(msg.height)

    def plan(
        self,
        settings: PreprocessConfig,
        tensor: TensorSpec,
        *,
        model: str,
        image: ImageGeometry | None = None,
    ) -> InputPlan:
        return plan_input(settings, tensor, model=model)

    def encoder(self, plan: InputPlan) -> Callable[[Any], tuple[np.ndarray, Letterbox]]:
        preprocessor = Preprocessor(plan)

        def encode(msg: Any) -> tuple[np.ndarray, Letterbox]:
            return preprocessor(msg.data, msg.encoding, msg.height, msg.width, msg.step)

        return encode


IMAGE = ImageInput()
