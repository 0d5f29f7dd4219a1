"""A CompressedImage publisher of its own process for the tests, encoding with Pillow (not the
node's decoder, simplejpeg, nor image_transport's OpenCV), with corrupt frames in the same stream.

``python test/ros/compressed_publisher.py --camera ROBOT/CAMERA:WxH:CODEC[:TOPIC] ... --rate HZ
--seconds S --corrupt-every N --prefix NS``

Each camera renders the synthetic scene (``synthetic_cameras``' own, so the ground truth is the
same) and publishes it on ``<prefix>/<robot>/<camera>/image_raw/compressed`` (or on ``TOPIC``
under the prefix) with the plain format image_transport's older publishers write (``jpeg`` or
``png``, JPEG quality 75), its ground truth on ``<prefix>/<robot>/<camera>/ground_truth`` first.
Every ``N``-th frame of a camera (``--corrupt-every``, 0: none; after ``--corrupt-after``
seconds, so that subscribers have found the topics) is corrupt instead, and has no
ground truth: a truncated or garbled image, an empty one, an unsupported format. At the end it
prints one JSON line: frames sent and corrupt frames sent per image topic.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image as PILImage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from triton_ros.ros.codec.messages import DETECTIONS_TYPE, uint8_array  # noqa: E402
from triton_ros.ros.ros_process import init_ros, strip_ros_args  # noqa: E402
from triton_ros.ros.tools.synthetic_cameras import (
    SyntheticScene,
    ground_truth_message,  # noqa: E402
    ground_truth_topic,
    parse_camera,
)

# What a corrupt frame is, in turn: (format, data made from a good encoding of the frame)
CORRUPTIONS = (
    ("truncated", lambda fmt, data: (fmt, data[: len(data) // 2])),
    (
        "garbled",
        lambda fmt, data: (
            fmt,
            data[:64]
            + bytes(
                np.random.default_rng(len(data)).integers(0, 256, len(data) - 64, dtype=np.uint8)
            ),
        ),
    ),
    ("empty", lambda fmt, data: (fmt, b"")),
    ("unsupported", lambda fmt, data: ("rgb8; tiff compressed ", data)),
    ("not an image", lambda fmt, data: (fmt, b"<html>not an image</html>" * 20)),
)


def encode(pixels: np.ndarray, codec: str) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, "JPEG" if codec == "jpeg" else "PNG", quality=75)
    return out.getvalue()


def main() -> int:
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage

    argv = sys.argv
    parser = argparse.ArgumentParser()
    parser.add_argument("--camera", action="append", required=True)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--corrupt-every", type=int, default=0)
    parser.add_argument(
        "--corrupt-after",
        type=float,
        default=0.0,
        help="seconds of good frames first (subscribers find the topics)",
    )
    parser.add_argument("--prefix", default="")
    args = parser.parse_args(strip_ros_args(argv)[1:])
    stop = init_ros(argv)
    node = Node("compressed_publisher")
    cameras = []
    for i, text in enumerate(args.camera):
        name, size, codec, *topic = text.split(":")
        spec = parse_camera(f"{name}:{size}:rgb8")
        image_topic = (
            f"{args.prefix}{topic[0]}" if topic else spec.topic(args.prefix) + "/compressed"
        )
        cameras.append(
            (
                spec,
                codec,
                image_topic,
                SyntheticScene(spec, seed=100 + i),
                node.create_publisher(CompressedImage, image_topic, qos_profile_sensor_data),
                node.create_publisher(
                    DETECTIONS_TYPE, ground_truth_topic(spec.topic(args.prefix)), 100
                ),
            )
        )
    sent = {c[2]: 0 for c in cameras}
    corrupt = {c[2]: 0 for c in cameras}
    t0 = next_tick = time.monotonic()
    try:
        while not stop.is_set() and not (args.seconds and time.monotonic() - t0 >= args.seconds):
            stamp = node.get_clock().now().to_msg()
            for spec, codec, topic, scene, pub, truth_pub in cameras:
                pixels, truth = scene.render(time.monotonic() - t0)
                msg = CompressedImage()
                msg.header.stamp = stamp
                msg.header.frame_id = spec.frame_id
                fmt, data = codec, encode(pixels, codec)
                sent[topic] += 1
                if (
                    args.corrupt_every
                    and sent[topic] % args.corrupt_every == 0
                    and time.monotonic() - t0 >= args.corrupt_after
                ):
                    _, damage = CORRUPTIONS[corrupt[topic] % len(CORRUPTIONS)]
                    fmt, data = damage(fmt, data)
                    corrupt[topic] += 1
                else:
                    truth_pub.publish(ground_truth_message(msg.header, truth))
                msg.format = fmt
                msg.data = uint8_array(data)
                pub.publish(msg)
            next_tick += 1.0 / args.rate
            stop.wait(max(0.0, next_tick - time.monotonic()))
    finally:
        print(json.dumps({"sent": sent, "corrupt": corrupt}), flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
