"""Synthetic multi-robot cameras: sensor_msgs/Image streams for demos, tests and benchmarks.

``python -m triton_ros.ros.synthetic_cameras [--camera ROBOT/CAMERA:WxH[:ENCODING]]... [--rate HZ]``

Each camera publishes ``<prefix>/<robot>/<camera>/image_raw`` with the sensor_data QoS and
frame_id ``<robot>/<camera>_optical_frame``: a gradient background with a few coloured boxes
moving across it. All cameras of the process are triggered together at ``--rate`` (like a
hardware-synchronized rig) and stamped with the capture time. Without ``--camera`` it runs two
robots with two cameras each, all of different resolutions and encodings. SIGINT or SIGTERM (or
``--seconds``) stops it; it prints how many frames each camera sent and exits 0.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from .output_messages import uint8_array
from .preprocess import ENCODINGS
from .ros_process import init_ros, strip_ros_args

DEFAULT_CAMERAS = (
    "robot1/camera_front:640x480:rgb8",
    "robot1/camera_rear:320x240:bgr8",
    "robot2/camera_front:848x480:rgb8",
    "robot2/camera_rear:424x240:mono8",
)


@dataclass(frozen=True)
class CameraSpec:
    robot: str
    camera: str
    width: int
    height: int
    encoding: str = "rgb8"

    def topic(self, prefix: str = "") -> str:
        return f"{prefix.rstrip('/')}/{self.robot}/{self.camera}/image_raw"

    @property
    def frame_id(self) -> str:
        return f"{self.robot}/{self.camera}_optical_frame"


def parse_camera(text: str) -> CameraSpec:
    """'robot1/camera_front:640x480[:rgb8]' -> CameraSpec."""
    try:
        name, size, *rest = text.split(":")
        robot, camera = name.split("/")
        width, height = (int(v) for v in size.lower().split("x"))
        encoding = rest[0] if rest else "rgb8"
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"camera '{text}' is not ROBOT/CAMERA:WIDTHxHEIGHT[:ENCODING]") from None
    if encoding not in ENCODINGS:
        raise argparse.ArgumentTypeError(f"encoding '{encoding}' is not one of "
                                         f"{', '.join(ENCODINGS)}")
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"camera '{text}' has an empty size")
    return CameraSpec(robot, camera, width, height, encoding)


class SyntheticScene:
    """Frames of one camera: a fixed background and boxes moving at constant speeds."""

    def __init__(self, spec: CameraSpec, seed: int) -> None:
        rng = np.random.default_rng(seed)
        h, w = spec.height, spec.width
        channels = ENCODINGS[spec.encoding][0]
        ys = np.linspace(40, 200, h, dtype=np.float32)[:, None, None]
        xs = np.linspace(0, 80, w, dtype=np.float32)[None, :, None]
        tint = rng.uniform(0.6, 1.0, size=(1, 1, channels)).astype(np.float32)
        self.background = ((ys + xs) * tint).clip(0, 255).astype(np.uint8)
        self.boxes = []
        for _ in range(3):
            bw, bh = int(rng.uniform(0.1, 0.3) * w), int(rng.uniform(0.15, 0.4) * h)
            colour = rng.integers(0, 256, size=channels, dtype=np.uint8)
            speed = rng.uniform(-0.3, 0.3, size=2) * np.array([w, h])
            start = rng.uniform(0, 1, size=2) * np.array([w - bw, h - bh])
            self.boxes.append((bw, bh, colour, speed, start))
        self.width, self.height = w, h

    def frame(self, t: float) -> np.ndarray:
        img = self.background.copy()
        for bw, bh, colour, speed, start in self.boxes:
            span = np.array([self.width - bw, self.height - bh], np.float64)
            pos = np.abs(((start + speed * t) % (2 * span)) - span)   # bounces off the borders
            x, y = int(pos[0]), int(pos[1])
            img[y:y + bh, x:x + bw] = colour
        return img


class SyntheticCameras:
    """Publishes every camera of ``specs`` from ``node`` once per :meth:`tick`."""

    def __init__(self, node, specs: list[CameraSpec], *, prefix: str = "") -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        self._node = node
        self._image_type = Image
        self.specs = specs
        self.scenes = [SyntheticScene(s, seed=i) for i, s in enumerate(specs)]
        self.publishers = [node.create_publisher(Image, s.topic(prefix), qos_profile_sensor_data)
                           for s in specs]
        self.sent = [0] * len(specs)
        self._t0 = time.monotonic()

    def tick(self) -> None:
        stamp = self._node.get_clock().now().to_msg()
        t = time.monotonic() - self._t0
        for i, (spec, scene, pub) in enumerate(zip(self.specs, self.scenes, self.publishers)):
            pixels = scene.frame(t)
            msg = self._image_type()
            msg.header.stamp = stamp
            msg.header.frame_id = spec.frame_id
            msg.height, msg.width = spec.height, spec.width
            msg.encoding = spec.encoding
            msg.step = spec.width * ENCODINGS[spec.encoding][0]
            msg.data = uint8_array(pixels.tobytes())
            pub.publish(msg)
            self.sent[i] += 1


def main(argv: list[str] | None = None) -> int:
    import rclpy
    from rclpy.node import Node

    argv = sys.argv if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--camera", action="append", type=parse_camera, default=None,
                        help="ROBOT/CAMERA:WIDTHxHEIGHT[:ENCODING] (repeatable)")
    parser.add_argument("--rate", type=float, default=30.0, help="frames per second per camera")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: run "
                        "until SIGINT or SIGTERM)")
    parser.add_argument("--prefix", default="", help="namespace in front of every robot")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(strip_ros_args(argv)[1:])
    specs = args.camera or [parse_camera(c) for c in DEFAULT_CAMERAS]

    stop = init_ros(argv)
    node = Node("synthetic_cameras")
    cameras = SyntheticCameras(node, specs, prefix=args.prefix)
    if not args.quiet:
        for spec in specs:
            print(f"synthetic_cameras: {spec.topic(args.prefix)} {spec.width}x{spec.height} "
                  f"{spec.encoding} at {args.rate:g} Hz", flush=True)
    period = 1.0 / args.rate
    start = next_tick = time.monotonic()
    try:
        while not stop.is_set():
            if args.seconds and time.monotonic() - start >= args.seconds:
                break
            cameras.tick()
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < -period:               # fell behind by more than a frame: do not burst
                next_tick = time.monotonic()
            elif delay > 0:
                stop.wait(delay)
    finally:
        if not args.quiet:
            sent = ", ".join(f"{s.robot}/{s.camera} {n}" for s, n in zip(specs, cameras.sent))
            print(f"synthetic_cameras: sent {sent}", flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
