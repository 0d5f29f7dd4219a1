"""Synthetic multi-robot cameras: sensor_msgs/Image streams for demos, tests and benchmarks.

``python -m triton_ros.ros.tools.synthetic_cameras [--camera
ROBOT/CAMERA:WxH[:ENCODING[:TRANSPORT]]]... [--rate HZ] [--transport raw|compressed]`` (installed
as the ``synthetic_cameras`` console script)

Each camera publishes ``<prefix>/<robot>/<camera>/image_raw`` with the sensor_data QoS and
frame_id ``<robot>/<camera>_optical_frame``: a noisy mid-grey background with solid rectangles of
the bundled ``color_detector``'s classes (red, green, blue, yellow, black, white; mono8 cameras
only black and white) bouncing inside cells of their own, so that none hides another; with
``--moving``, bouncing over the whole image, crossing each other and passing behind a pillar
(:class:`MovingScene`: for trackers). Next to
each image topic, ``<prefix>/<robot>/<camera>/ground_truth`` carries each frame's objects with
the image's header: boxes in the camera's own pixels (x2, y2 exclusive), ``class_id`` the class
name, score 1, ``id`` the object's identity (stable for the camera's life, from 1), as the
message type the node publishes detections with
(``vision_msgs/Detection2DArray`` where importable, else ``triton_ros_interfaces/Detections``).
All cameras of the process are triggered together at ``--rate`` (like a hardware-synchronized
rig) and stamped with the capture time. Without ``--camera`` it runs two
robots with two cameras each, all of different resolutions and encodings. SIGINT or SIGTERM (or
``--seconds``) stops it; it prints how many frames each camera sent and exits 0.

A stop is bounded (``ros_process.ExitWatchdog``): it may take :data:`STOP_S` in all, else every
thread's stack is written to stderr and the process ends; a second SIGINT or SIGTERM ends it at
once. rclpy publishes holding the GIL, so a DDS write that never
returns (a shared-memory port locked by a process that was killed) would leave no Python code
running, not even the signal handler: such a tool once ignored SIGINT and SIGTERM for 14 minutes.
A round of frames that takes longer than :data:`STALL_S` is therefore ended from C: stacks on
stderr, exit status 1.

Compressed transport (``--transport compressed``, or a camera's ``TRANSPORT`` ``jpeg`` or
``png``): the camera publishes ``sensor_msgs/CompressedImage`` on ``<image topic>/compressed``
instead, as image_transport's compressed publisher does: encoded with OpenCV's ``imencode``
(colour converted to BGR first; ``--jpeg-quality``, ``--png-level``) and the ``format`` string it
writes (``rgb8; jpeg compressed bgr8``, ``mono8; jpeg compressed mono8``, ``bgr8; png compressed
bgr8``, ``mono8; png compressed ``). The ground truth is the same. ``--ground-truth-masks`` also
publishes each frame's mask on ``<prefix>/<robot>/<camera>/ground_truth_mask``
(``sensor_msgs/Image`` mono8, the camera's pixels, the image's header): 0 background, ``1 + k``
for class ``CLASS_NAMES[k]``, the class ids of the bundled ``color_segmenter``.

RGB-D cameras (``--rgbd ROBOT/CAMERA:WxH[:DEPTH_ENCODING[:TRANSPORT]]``, e.g.
``robot3/rgbd:640x480:32FC1:compressedDepth``) publish, under ``<prefix>/<robot>/<camera>``, the
layout of a ROS depth camera driver: ``color/image_raw`` (rgb8, the same scenes),
``color/camera_info`` (K: focal length 0.9 x width, principal point near the centre),
``depth/image_raw`` aligned to the colour image (16UC1 millimetres or 32FC1 metres; with
``compressedDepth``, ``depth/image_raw/compressedDepth`` as compressed_depth_image_transport
writes it: a 12-byte header and a 16-bit PNG, 32FC1 as quantised inverse depth), and
``ground_truth_3d``: each object's centre in the colour optical frame (frame_id
``<robot>/<camera>_color_optical_frame``) in the message type the node publishes 3D detections
with. Each object is a flat rectangle facing the camera at a distance drawn afresh every frame
(0.6 to 3.0 m), so that depth of another frame puts it elsewhere; the background is a plane 3.5
to 5 m away with a band of invalid pixels (0 / NaN) along the left edge and scattered holes, as
stereo cameras have. ``--sync-jitter-ms J`` stamps the depth image and the CameraInfo up to J ms
off the colour image's stamp; ``--unpaired P`` leaves out the depth image or the CameraInfo of a
fraction P of the frames, so that their other messages find no partner.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from ..codec.detection import DetectionResult, detections_message
from ..codec.messages import DETECTIONS_TYPE, uint8_array
from ..codec.preprocess import ENCODINGS
from ..ros_process import ExitWatchdog, init_ros, strip_ros_args

TRANSPORTS = ("raw", "jpeg", "png")  # a camera's: raw Image, or CompressedImage of a codec
DEFAULT_CAMERAS = (
    "robot1/camera_front:640x480:rgb8",
    "robot1/camera_rear:320x240:bgr8",
    "robot2/camera_front:848x480:rgb8",
    "robot2/camera_rear:424x240:mono8",
)
STOP_S = 3.0  # SIGINT/SIGTERM -> the process gone, at most (with the exit's second)
STALL_S = 10.0  # one round of frames taking longer: a publish is stuck in the middleware


@dataclass(frozen=True)
class CameraSpec:
    robot: str
    camera: str
    width: int
    height: int
    encoding: str = "rgb8"
    transport: str = ""  # raw, jpeg or png; "": --transport decides

    def topic(self, prefix: str = "") -> str:
        return f"{prefix.rstrip('/')}/{self.robot}/{self.camera}/image_raw"

    def compressed_topic(self, prefix: str = "") -> str:
        """Where image_transport's compressed transport publishes this camera."""
        return self.topic(prefix) + "/compressed"

    @property
    def frame_id(self) -> str:
        return f"{self.robot}/{self.camera}_optical_frame"


def parse_camera(text: str) -> CameraSpec:
    """'robot1/camera_front:640x480[:rgb8[:jpeg]]' -> CameraSpec."""
    try:
        name, size, *rest = text.split(":")
        robot, camera = name.split("/")
        width, height = (int(v) for v in size.lower().split("x"))
        encoding = rest[0] if rest else "rgb8"
        transport = rest[1] if len(rest) > 1 else ""
        if len(rest) > 2:
            raise ValueError(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"camera '{text}' is not ROBOT/CAMERA:WIDTHxHEIGHT[:ENCODING[:TRANSPORT]]"
        ) from None
    if encoding not in ENCODINGS:
        raise argparse.ArgumentTypeError(
            f"encoding '{encoding}' is not one of {', '.join(ENCODINGS)}"
        )
    if transport not in ("",) + TRANSPORTS:
        raise argparse.ArgumentTypeError(
            f"transport '{transport}' is not one of {', '.join(TRANSPORTS)}"
        )
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"camera '{text}' has an empty size")
    return CameraSpec(robot, camera, width, height, encoding, transport)


# What the scenes draw: solid rectangles of the classes of the bundled ``color_detector``
# (model_repository/color_detector/labels.txt), one per class at most, in RGB. Colour cameras
# draw all six; mono8 cameras only the two told apart by brightness (hues vanish in grey).
CLASS_COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 190, 40),
    "blue": (30, 60, 220),
    "yellow": (230, 210, 20),
    "black": (15, 15, 15),
    "white": (245, 245, 245),
}
CLASS_NAMES = tuple(CLASS_COLOURS)
MONO_CLASSES = ("black", "white")
_LUMA = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601, as the node's preprocess


@dataclass(frozen=True)
class GroundTruth:
    """The objects of one frame: boxes [M, 4] (x1, y1, x2, y2; x2, y2 exclusive) in the camera's
    own pixels and their class indices [M] into :data:`CLASS_NAMES`."""

    boxes: np.ndarray
    classes: np.ndarray
    # Each object's identity [M] (stable for the camera's life, from 1): Detection2D.id of the
    # ground truth message.
    ids: np.ndarray | None = None
    # Moving scenes: the frame's classes per pixel as drawn (objects overlap there).
    drawn: np.ndarray | None = None

    def mask(self, width: int, height: int) -> np.ndarray:
        """The frame's classes per pixel [height, width] uint8: 0 background, ``1 + k`` inside
        an object of class ``k`` (objects never overlap, but in moving scenes: as drawn)."""
        if self.drawn is not None:
            return self.drawn
        out = np.zeros((height, width), np.uint8)
        for (x1, y1, x2, y2), k in zip(self.boxes.astype(np.int64), self.classes):
            out[y1:y2, x1:x2] = k + 1
        return out


def to_encoding(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """An RGB uint8 [H, W, 3] image as the bytes of ``encoding`` ([H, W] or [H, W, C]); for
    rgb8 a contiguous ``rgb`` itself, not a copy."""
    if encoding in ("mono8", "8UC1"):
        return np.rint(rgb.astype(np.float32) @ _LUMA).clip(0, 255).astype(np.uint8)
    if encoding == "rgb8":
        return np.ascontiguousarray(rgb)
    # OpenCV moves the channels (alpha 255): numpy's reordered copies of the channel axis cost
    # 2 ms per 640x480 frame, the cameras' largest cost at 8 cameras x 30 Hz.
    import cv2

    code = {"bgr8": cv2.COLOR_RGB2BGR, "rgba8": cv2.COLOR_RGB2RGBA, "bgra8": cv2.COLOR_RGB2BGRA}[
        encoding
    ]
    return cv2.cvtColor(np.ascontiguousarray(rgb), code)


class SyntheticScene:
    """Frames of one camera and their ground truth: a noisy mid-grey background and solid
    rectangles of distinct classes, each bouncing inside a cell of its own (so none occludes
    another and each box is exact)."""

    def __init__(self, spec: CameraSpec, seed: int) -> None:
        rng = np.random.default_rng(seed)
        h, w = spec.height, spec.width
        self.encoding = spec.encoding
        mono = spec.encoding in ("mono8", "8UC1")
        names = MONO_CLASSES if mono else CLASS_NAMES
        ys = np.linspace(100, 150, h, dtype=np.float32)[:, None, None]
        xs = np.linspace(0, 20, w, dtype=np.float32)[None, :, None]
        noise = rng.normal(0.0, 4.0, size=(h, w, 3)).astype(np.float32)
        self.background = (ys + xs + noise).clip(0, 255).astype(np.uint8)
        cols = 2 if mono else 3
        rows = 1 if mono else 2
        cell_w, cell_h = w // cols, h // rows
        self.objects = []
        order = rng.permutation(len(names))
        for k, i in enumerate(order):
            cx, cy = (k % cols) * cell_w, (k // cols) * cell_h
            bw = max(4, int(rng.uniform(0.35, 0.65) * cell_w))
            bh = max(4, int(rng.uniform(0.35, 0.65) * cell_h))
            speed = rng.uniform(-0.25, 0.25, size=2) * np.array([cell_w, cell_h])
            start = rng.uniform(0, 1, size=2) * np.array([cell_w - bw, cell_h - bh])
            self.objects.append(
                (
                    CLASS_NAMES.index(names[i]),
                    np.array([cx, cy]),
                    bw,
                    bh,
                    np.array(CLASS_COLOURS[names[i]], np.uint8),
                    speed,
                    start,
                    np.array([cell_w - bw, cell_h - bh], np.float64),
                )
            )
        self.width, self.height = w, h

    def render(self, t: float) -> tuple[np.ndarray, GroundTruth]:
        """The frame at time ``t`` (seconds) in the camera's encoding, and its ground truth."""
        img = self.background.copy()
        boxes, classes = [], []
        for class_id, origin, bw, bh, colour, speed, start, span in self.objects:
            pos = np.abs(((start + speed * t) % (2 * span)) - span) if span.all() else start
            x, y = int(origin[0] + pos[0]), int(origin[1] + pos[1])
            img[y : y + bh, x : x + bw] = colour
            boxes.append((x, y, x + bw, y + bh))
            classes.append(class_id)
        return to_encoding(img, self.encoding), GroundTruth(
            np.array(boxes, np.float32),
            np.array(classes, np.int64),
            np.arange(1, len(classes) + 1, dtype=np.int64),
        )

    def frame(self, t: float) -> np.ndarray:
        return self.render(t)[0]


class MovingScene:
    """Frames of one camera whose objects cross (``--moving``): the same classes and background
    as :class:`SyntheticScene`, but each object moves over the whole image at a constant
    velocity, bouncing off its edges, drawn in a fixed order (a later one hides an earlier one
    where they cross), and a grey pillar (no class) stands in the middle, in front of them all,
    wider than every object: an object passing behind it vanishes for a few frames. The ground
    truth holds what is visible: each object's box is that of its visible pixels, an object with
    fewer than :data:`MIN_VISIBLE` pixels (or a fifth of its own) visible is left out; its
    identity (``ids``, from 1) never changes."""

    MIN_VISIBLE = 16
    PILLAR = (128, 128, 128)

    def __init__(self, spec: CameraSpec, seed: int) -> None:
        rng = np.random.default_rng(1000 + seed)
        base = SyntheticScene(spec, seed)
        self.background, self.encoding = base.background, base.encoding
        h, w = spec.height, spec.width
        self.width, self.height = w, h
        names = MONO_CLASSES if spec.encoding in ("mono8", "8UC1") else CLASS_NAMES
        self.pillar = (int(0.46 * w), int(0.56 * w))  # x range, full height
        self.objects = []
        for i in rng.permutation(len(names)):
            bw = max(4, int(rng.uniform(0.06, 0.09) * w))
            bh = max(4, int(rng.uniform(0.10, 0.18) * h))
            span = np.array([w - bw, h - bh], np.float64)
            speed = rng.uniform(0.10, 0.20, size=2) * np.array([w, h]) * rng.choice([-1, 1], 2)
            start = rng.uniform(0, 1, size=2) * span
            self.objects.append(
                (
                    CLASS_NAMES.index(names[i]),
                    bw,
                    bh,
                    np.array(CLASS_COLOURS[names[i]], np.uint8),
                    speed,
                    start,
                    span,
                )
            )

    def render(self, t: float) -> tuple[np.ndarray, GroundTruth]:
        img = self.background.copy()
        drawn = np.zeros((self.height, self.width), np.uint8)
        owner = np.zeros((self.height, self.width), np.int16)  # 1 + object index
        for index, (class_id, bw, bh, colour, speed, start, span) in enumerate(self.objects):
            pos = np.abs(((start + speed * t) % (2 * span)) - span)
            x, y = int(pos[0]), int(pos[1])
            img[y : y + bh, x : x + bw] = colour
            drawn[y : y + bh, x : x + bw] = class_id + 1
            owner[y : y + bh, x : x + bw] = index + 1
        x1, x2 = self.pillar
        img[:, x1:x2] = self.PILLAR
        drawn[:, x1:x2] = 0
        owner[:, x1:x2] = 0
        boxes, classes, ids = [], [], []
        for index, (class_id, bw, bh, *_rest) in enumerate(self.objects):
            ys, xs = np.nonzero(owner == index + 1)
            if len(xs) < max(self.MIN_VISIBLE, bw * bh // 5):
                continue
            boxes.append((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
            classes.append(class_id)
            ids.append(index + 1)
        return to_encoding(img, self.encoding), GroundTruth(
            np.array(boxes, np.float32).reshape(-1, 4),
            np.array(classes, np.int64),
            np.array(ids, np.int64),
            drawn,
        )

    def frame(self, t: float) -> np.ndarray:
        return self.render(t)[0]


def ground_truth_topic(image_topic: str) -> str:
    """The ground truth topic next to an image topic: .../image_raw -> .../ground_truth."""
    return image_topic.rsplit("/", 1)[0] + "/ground_truth"


def ground_truth_mask_topic(image_topic: str) -> str:
    """The ground-truth mask topic next to an image topic: .../image_raw -> ...
    /ground_truth_mask."""
    return image_topic.rsplit("/", 1)[0] + "/ground_truth_mask"


def compress(
    pixels: np.ndarray, encoding: str, codec: str, *, jpeg_quality: int = 75, png_level: int = 3
) -> tuple[str, bytes]:
    """An image as image_transport's compressed publisher sends it: (format, data). Colour is
    converted to BGR for OpenCV's encoder (so the file holds true colours), mono stays mono."""
    import cv2

    mono = encoding in ("mono8", "8UC1")
    if mono:
        image, target = pixels, "mono8"
    else:
        code = {
            "rgb8": cv2.COLOR_RGB2BGR,
            "rgba8": cv2.COLOR_RGBA2BGR,
            "bgra8": cv2.COLOR_BGRA2BGR,
        }.get(encoding)
        image, target = (pixels if code is None else cv2.cvtColor(pixels, code)), "bgr8"
    if codec == "jpeg":
        ok, data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
        fmt = f"{encoding}; jpeg compressed {target}"
    else:
        ok, data = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, png_level])
        # image_transport names no target for a mono PNG
        fmt = f"{encoding}; png compressed {'' if mono else target}"
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {encoding} image as {codec}")
    return fmt, data.tobytes()


def mask_message(header, mask: np.ndarray):
    """A ground-truth mask as sensor_msgs/Image mono8 with the image's header."""
    from sensor_msgs.msg import Image

    h, w = mask.shape
    return Image(
        header=header,
        height=h,
        width=w,
        encoding="mono8",
        step=w,
        data=uint8_array(memoryview(np.ascontiguousarray(mask)).cast("B")),
    )


def ground_truth_message(header, truth: GroundTruth):
    """The ground truth as the message type the node publishes detections with (score 1, each
    object's identity as its ``id``)."""
    return detections_message(
        header,
        DetectionResult(
            truth.boxes, np.ones(len(truth.classes), np.float32), truth.classes, truth.ids
        ),
        list(CLASS_NAMES),
    )


class SyntheticCameras:
    """Publishes every camera of ``specs`` from ``node`` once per :meth:`tick`."""

    def __init__(
        self,
        node,
        specs: list[CameraSpec],
        *,
        prefix: str = "",
        transport: str = "raw",
        jpeg_quality: int = 75,
        png_level: int = 3,
        masks: bool = False,
        moving: bool = False,
    ) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CompressedImage, Image

        self._node = node
        self._image_type = Image
        self._compressed_type = CompressedImage
        self.specs = specs
        scene = MovingScene if moving else SyntheticScene
        self.scenes = [scene(s, seed=i) for i, s in enumerate(specs)]
        # Each camera's transport: its own, else the default (compressed: JPEG)
        default = "jpeg" if transport == "compressed" else transport
        self.transports = [s.transport or default for s in specs]
        self._jpeg_quality, self._png_level = jpeg_quality, png_level
        self.publishers = [
            node.create_publisher(Image, s.topic(prefix), qos_profile_sensor_data)
            if t == "raw"
            else node.create_publisher(
                CompressedImage, s.compressed_topic(prefix), qos_profile_sensor_data
            )
            for s, t in zip(specs, self.transports)
        ]
        self.mask_publishers = (
            [
                node.create_publisher(Image, ground_truth_mask_topic(s.topic(prefix)), 100)
                for s in specs
            ]
            if masks
            else []
        )
        # Ground truth is small and each message matters to whoever scores the detector:
        # reliable, with a history deep enough (a few seconds) for a subscriber that lags.
        self.truth_publishers = [
            node.create_publisher(DETECTIONS_TYPE, ground_truth_topic(s.topic(prefix)), 100)
            for s in specs
        ]
        self.sent = [0] * len(specs)
        self._t0 = time.monotonic()

    def tick(self) -> None:
        stamp = self._node.get_clock().now().to_msg()
        t = time.monotonic() - self._t0
        for i, (spec, scene, pub) in enumerate(zip(self.specs, self.scenes, self.publishers)):
            pixels, truth = scene.render(t)
            if self.transports[i] == "raw":
                msg = self._image_type()
                msg.height, msg.width = spec.height, spec.width
                msg.encoding = spec.encoding
                msg.step = spec.width * ENCODINGS[spec.encoding][0]
                msg.data = uint8_array(memoryview(pixels).cast("B"))  # one copy, not two
            else:
                msg = self._compressed_type()
                msg.format, data = compress(
                    pixels,
                    spec.encoding,
                    self.transports[i],
                    jpeg_quality=self._jpeg_quality,
                    png_level=self._png_level,
                )
                msg.data = uint8_array(data)
            msg.header.stamp = stamp
            msg.header.frame_id = spec.frame_id
            # Ground truth first, so that a subscriber has it when the results arrive.
            self.truth_publishers[i].publish(ground_truth_message(msg.header, truth))
            if self.mask_publishers:
                self.mask_publishers[i].publish(
                    mask_message(msg.header, truth.mask(spec.width, spec.height))
                )
            pub.publish(msg)
            self.sent[i] += 1


# --------------------------------------------------------------------------------------------
# RGB-D cameras: aligned depth, CameraInfo and the 3D ground truth
# --------------------------------------------------------------------------------------------

DEPTH_ENCODINGS = ("16UC1", "32FC1")
DEPTH_TRANSPORTS = ("raw", "compressedDepth")
# compressed_depth_image_transport's publisher defaults (depth_max, depth_quantization)
COMPRESSED_DEPTH_MAX = 10.0
COMPRESSED_DEPTH_QUANTIZATION = 100.0
OBJECT_DEPTH_M = (0.6, 3.0)
BACKGROUND_DEPTH_M = (3.5, 5.0)


@dataclass(frozen=True)
class RgbdSpec:
    robot: str
    camera: str
    width: int
    height: int
    depth_encoding: str = "16UC1"
    depth_transport: str = "raw"

    def namespace(self, prefix: str = "") -> str:
        return f"{prefix.rstrip('/')}/{self.robot}/{self.camera}"

    def color_topic(self, prefix: str = "") -> str:
        return f"{self.namespace(prefix)}/color/image_raw"

    def info_topic(self, prefix: str = "") -> str:
        return f"{self.namespace(prefix)}/color/camera_info"

    def depth_topic(self, prefix: str = "") -> str:
        base = f"{self.namespace(prefix)}/depth/image_raw"
        return base + "/compressedDepth" if self.depth_transport == "compressedDepth" else base

    def truth_topic(self, prefix: str = "") -> str:
        return f"{self.namespace(prefix)}/ground_truth_3d"

    @property
    def frame_id(self) -> str:
        return f"{self.robot}/{self.camera}_color_optical_frame"


def parse_rgbd(text: str) -> RgbdSpec:
    """'robot3/rgbd:640x480[:16UC1[:compressedDepth]]' -> RgbdSpec."""
    try:
        name, size, *rest = text.split(":")
        robot, camera = name.split("/")
        width, height = (int(v) for v in size.lower().split("x"))
        encoding = rest[0] if rest else "16UC1"
        transport = rest[1] if len(rest) > 1 else "raw"
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"RGB-D camera '{text}' is not ROBOT/CAMERA:WIDTHxHEIGHT[:DEPTH_ENCODING[:TRANSPORT]]"
        ) from None
    if encoding not in DEPTH_ENCODINGS or transport not in DEPTH_TRANSPORTS or len(rest) > 2:
        raise argparse.ArgumentTypeError(
            f"RGB-D camera '{text}': depth encoding one of {', '.join(DEPTH_ENCODINGS)}, "
            f"transport one of {', '.join(DEPTH_TRANSPORTS)}"
        )
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"RGB-D camera '{text}' has an empty size")
    return RgbdSpec(robot, camera, width, height, encoding, transport)


@dataclass(frozen=True)
class GroundTruth3D:
    """The objects of one RGB-D frame in the colour optical frame: centres [M, 3] and sizes
    [M, 3] in metres, class indices [M] into :data:`CLASS_NAMES`, their boxes [M, 4] (pixels)."""

    positions: np.ndarray
    sizes: np.ndarray
    classes: np.ndarray
    boxes: np.ndarray


def camera_matrix(width: int, height: int) -> np.ndarray:
    """The synthetic cameras' K: square pixels, focal length 0.9 x width, a principal point a
    little off the centre (so that a K ignored or misplaced shows)."""
    f = 0.9 * width
    return np.array(
        [
            [f, 0.0, (width - 1) / 2 + 0.03 * width],
            [0.0, f, (height - 1) / 2 - 0.02 * height],
            [0.0, 0.0, 1.0],
        ]
    )


class RgbdScene:
    """Colour frames (:class:`SyntheticScene`) with their aligned depth in metres and the 3D
    ground truth."""

    def __init__(self, spec: RgbdSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.colour = SyntheticScene(
            CameraSpec(spec.robot, spec.camera, spec.width, spec.height, "rgb8"), seed
        )
        self.k = camera_matrix(spec.width, spec.height)
        h, w = spec.height, spec.width
        near, far = BACKGROUND_DEPTH_M
        self.background = np.repeat(np.linspace(far, near, h, dtype=np.float32)[:, None], w, 1)
        self.background[:, : max(1, w // 25)] = np.nan  # the invalid band of a stereo camera

    def render(self, t: float) -> tuple[np.ndarray, np.ndarray, GroundTruth3D]:
        """(rgb8 pixels, depth in metres [H, W] float32 with NaN where invalid, ground truth)."""
        rgb, truth = self.colour.render(t)
        rng = np.random.default_rng([self.seed, int(round(t * 1e6))])
        depth = self.background.copy()
        k = self.k
        positions, sizes = [], []
        for x1, y1, x2, y2 in truth.boxes.astype(np.int64):
            z = float(rng.uniform(*OBJECT_DEPTH_M))
            patch = z * (1.0 + rng.normal(0.0, 0.002, size=(y2 - y1, x2 - x1)))
            holes = rng.random(patch.shape) < 0.02
            patch[holes] = np.nan
            depth[y1:y2, x1:x2] = patch
            u, v = (x1 + x2 - 1) / 2.0, (y1 + y2 - 1) / 2.0  # the centre pixel of the object
            positions.append(((u - k[0, 2]) * z / k[0, 0], (v - k[1, 2]) * z / k[1, 1], z))
            sizes.append(((x2 - x1) * z / k[0, 0], (y2 - y1) * z / k[1, 1], 0.0))
        depth[rng.random(depth.shape) < 0.01] = np.nan
        return (
            rgb,
            depth,
            GroundTruth3D(
                np.array(positions, np.float64).reshape(-1, 3),
                np.array(sizes, np.float64).reshape(-1, 3),
                truth.classes,
                truth.boxes,
            ),
        )


def depth_bytes(depth_m: np.ndarray, encoding: str) -> np.ndarray:
    """Depth in metres (NaN: none) as a 16UC1 (millimetres, 0: none) or 32FC1 image."""
    if encoding == "32FC1":
        return np.ascontiguousarray(depth_m, np.float32)
    mm = np.nan_to_num(np.rint(depth_m * 1000.0), nan=0.0)
    return np.clip(mm, 0, 65535).astype(np.uint16)


def compressed_depth(depth_m: np.ndarray, encoding: str) -> tuple[str, bytes]:
    """(format, data) as compressed_depth_image_transport's publisher writes them (PNG)."""
    import cv2

    params = (0.0, 0.0)
    if encoding == "32FC1":
        z0, dmax = COMPRESSED_DEPTH_QUANTIZATION, COMPRESSED_DEPTH_MAX
        a = np.float32(z0 * (z0 + 1.0))
        b = np.float32(1.0 - a / dmax)
        with np.errstate(invalid="ignore", divide="ignore"):
            keep = depth_m < dmax  # NaN compares false: 0, as there
            q = np.where(keep, a / depth_m.astype(np.float32) + b, 0.0)
        image = np.trunc(np.nan_to_num(q)).clip(0, 65535).astype(np.uint16)
        params = (float(a), float(b))
    else:
        image = depth_bytes(depth_m, "16UC1")
        image[image > np.uint16(COMPRESSED_DEPTH_MAX * 1000)] = 0
    ok, png = cv2.imencode(".png", image, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    if not ok:
        raise RuntimeError("cv2.imencode failed on a depth image")
    # ConfigHeader: int32 format (0: INV_DEPTH), float32 depthParam[2], little-endian
    header = struct.pack("<iff", 0, *params)
    return f"{encoding}; compressedDepth png", header + png.tobytes()


def camera_info_message(header, k: np.ndarray, width: int, height: int):
    from sensor_msgs.msg import CameraInfo

    msg = CameraInfo(header=header, width=width, height=height, distortion_model="plumb_bob")
    msg.d = [0.0] * 5
    msg.k = [float(v) for v in k.reshape(-1)]
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    msg.p = [float(v) for v in np.hstack([k, np.zeros((3, 1))]).reshape(-1)]
    return msg


def ground_truth_3d_message(header, truth: GroundTruth3D):
    """The 3D ground truth as the message type the node publishes 3D detections with."""
    from ..codec.detection3d import Detection3DResult, detections3d_message

    return detections3d_message(
        header,
        Detection3DResult(truth.positions, truth.sizes, np.ones(len(truth.classes)), truth.classes),
        list(CLASS_NAMES),
    )


class SyntheticRgbdCameras:
    """Publishes every RGB-D camera of ``specs`` from ``node`` once per :meth:`tick`."""

    def __init__(
        self,
        node,
        specs: list[RgbdSpec],
        *,
        prefix: str = "",
        jitter_ms: float = 0.0,
        unpaired: float = 0.0,
        seed: int = 100,
    ) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CameraInfo, CompressedImage, Image

        from ..codec.messages import DETECTIONS3D_TYPE

        self._node = node
        self._image, self._compressed = Image, CompressedImage
        self.specs = specs
        self.scenes = [RgbdScene(s, seed=seed + i) for i, s in enumerate(specs)]
        qos = qos_profile_sensor_data
        self.colour = [node.create_publisher(Image, s.color_topic(prefix), qos) for s in specs]
        self.info = [node.create_publisher(CameraInfo, s.info_topic(prefix), qos) for s in specs]
        self.depth = [
            node.create_publisher(
                CompressedImage if s.depth_transport == "compressedDepth" else Image,
                s.depth_topic(prefix),
                qos,
            )
            for s in specs
        ]
        self.truth = [
            node.create_publisher(DETECTIONS3D_TYPE, s.truth_topic(prefix), 100) for s in specs
        ]
        self.jitter_ns = int(jitter_ms * 1e6)
        self.unpaired = unpaired
        self._rng = np.random.default_rng(seed)
        self.sent = [0] * len(specs)
        self.left_out = [0] * len(specs)  # depth images and CameraInfos not sent
        self._t0 = time.monotonic()

    def _stamp(self, base_ns: int):
        from builtin_interfaces.msg import Time

        ns = base_ns + (
            int(self._rng.integers(-self.jitter_ns, self.jitter_ns + 1)) if self.jitter_ns else 0
        )
        return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)

    def tick(self) -> None:
        from std_msgs.msg import Header

        now_ns = self._node.get_clock().now().nanoseconds
        t = time.monotonic() - self._t0
        for i, (spec, scene) in enumerate(zip(self.specs, self.scenes)):
            rgb, depth_m, truth = scene.render(t)
            header = Header(frame_id=spec.frame_id)  # the capture time
            header.stamp.sec, header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
            leave_out = None
            if self.unpaired and self._rng.random() < self.unpaired:
                leave_out = "depth" if self._rng.random() < 0.5 else "info"
                self.left_out[i] += 1
            self.truth[i].publish(ground_truth_3d_message(header, truth))
            colour = self._image(
                header=header,
                height=spec.height,
                width=spec.width,
                encoding="rgb8",
                step=spec.width * 3,
            )
            colour.data = uint8_array(memoryview(rgb).cast("B"))
            self.colour[i].publish(colour)
            if leave_out != "info":
                self.info[i].publish(
                    camera_info_message(
                        Header(stamp=self._stamp(now_ns), frame_id=spec.frame_id),
                        scene.k,
                        spec.width,
                        spec.height,
                    )
                )
            if leave_out != "depth":
                depth_header = Header(stamp=self._stamp(now_ns), frame_id=spec.frame_id)
                if spec.depth_transport == "compressedDepth":
                    fmt, data = compressed_depth(depth_m, spec.depth_encoding)
                    msg = self._compressed(header=depth_header, format=fmt)
                    msg.data = uint8_array(data)
                else:
                    pixels = depth_bytes(depth_m, spec.depth_encoding)
                    msg = self._image(
                        header=depth_header,
                        height=spec.height,
                        width=spec.width,
                        encoding=spec.depth_encoding,
                        step=spec.width * pixels.itemsize,
                    )
                    msg.data = uint8_array(memoryview(pixels).cast("B"))
                self.depth[i].publish(msg)
            self.sent[i] += 1


def main(argv: list[str] | None = None) -> NoReturn:
    import rclpy
    from rclpy.node import Node

    argv = sys.argv if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--camera",
        action="append",
        type=parse_camera,
        default=None,
        help="ROBOT/CAMERA:WIDTHxHEIGHT[:ENCODING[:TRANSPORT]] (repeatable; "
        "TRANSPORT raw, jpeg or png)",
    )
    parser.add_argument(
        "--transport",
        choices=("raw", "compressed"),
        default="raw",
        help="cameras without a TRANSPORT: raw sensor_msgs/Image on .../image_raw, "
        "or CompressedImage on .../image_raw/compressed (--compressed-format)",
    )
    parser.add_argument(
        "--compressed-format",
        choices=("jpeg", "png"),
        default="jpeg",
        help="the codec of --transport compressed",
    )
    parser.add_argument("--jpeg-quality", type=int, default=75, help="JPEG quality, 1-100")
    parser.add_argument("--png-level", type=int, default=3, help="PNG compression level, 0-9")
    parser.add_argument(
        "--ground-truth-masks",
        action="store_true",
        help="also publish each frame's class mask on .../ground_truth_mask",
    )
    parser.add_argument(
        "--moving",
        action="store_true",
        help="objects move over the whole image, crossing each other and "
        "passing behind a pillar (short occlusions): for trackers",
    )
    parser.add_argument("--rate", type=float, default=30.0, help="frames per second per camera")
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="stop after this long (0: run until SIGINT or SIGTERM)",
    )
    parser.add_argument("--prefix", default="", help="namespace in front of every robot")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    parser.add_argument(
        "--rgbd",
        action="append",
        type=parse_rgbd,
        default=None,
        help="ROBOT/CAMERA:WIDTHxHEIGHT[:16UC1|32FC1[:raw|compressedDepth]] "
        "(repeatable): an RGB-D camera",
    )
    parser.add_argument(
        "--sync-jitter-ms",
        type=float,
        default=0.0,
        help="RGB-D: stamp depth and CameraInfo up to this far off the colour's",
    )
    parser.add_argument(
        "--unpaired",
        type=float,
        default=0.0,
        help="RGB-D: the fraction of frames sent without their depth image or CameraInfo",
    )
    args = parser.parse_args(strip_ros_args(argv)[1:])
    rgbd_specs = args.rgbd or []
    specs = args.camera or ([] if rgbd_specs else [parse_camera(c) for c in DEFAULT_CAMERAS])

    stop = init_ros(argv)
    watchdog = ExitWatchdog("synthetic_cameras")
    stop.on_repeat = watchdog.fire  # a second signal: out at once
    node = Node("synthetic_cameras")
    transport = args.compressed_format if args.transport == "compressed" else "raw"
    cameras = SyntheticCameras(
        node,
        specs,
        prefix=args.prefix,
        transport=transport,
        jpeg_quality=args.jpeg_quality,
        png_level=args.png_level,
        masks=args.ground_truth_masks,
        moving=args.moving,
    )
    if not args.quiet:
        for spec, pub, how in zip(specs, cameras.publishers, cameras.transports):
            print(
                f"synthetic_cameras: {pub.topic_name} {spec.width}x{spec.height} "
                f"{spec.encoding} {how} at {args.rate:g} Hz",
                flush=True,
            )
    rgbd = SyntheticRgbdCameras(
        node, rgbd_specs, prefix=args.prefix, jitter_ms=args.sync_jitter_ms, unpaired=args.unpaired
    )
    if not args.quiet:
        for spec in rgbd_specs:
            print(
                f"synthetic_cameras: RGB-D {spec.namespace(args.prefix)} {spec.width}x"
                f"{spec.height}, depth {spec.depth_encoding} {spec.depth_transport} at "
                f"{args.rate:g} Hz",
                flush=True,
            )
    period = 1.0 / args.rate
    start = next_tick = time.monotonic()
    try:
        while not stop.is_set():
            if args.seconds and time.monotonic() - start >= args.seconds:
                break
            watchdog.progress(STALL_S + period)
            cameras.tick()
            rgbd.tick()
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < -period:  # fell behind by more than a frame: do not burst
                next_tick = time.monotonic()
            elif delay > 0:
                stop.wait(delay)
    finally:
        watchdog.arm(STOP_S - 1.0)
        if not args.quiet:
            sent = ", ".join(
                [f"{s.robot}/{s.camera} {n}" for s, n in zip(specs, cameras.sent)]
                + [
                    f"{s.robot}/{s.camera} {n} (RGB-D, {left} without depth or CameraInfo)"
                    for s, n, left in zip(rgbd_specs, rgbd.sent, rgbd.left_out)
                ]
            )
            print(f"synthetic_cameras: sent {sent}", flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    watchdog.leave(0)  # the process ends here (ros_process.py)


if __name__ == "__main__":
    main()
