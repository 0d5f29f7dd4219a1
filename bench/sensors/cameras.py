#!/usr/bin/env python3
"""The benchmark's cameras: synthetic frames rendered and encoded once, published in a loop.

``python -m bench.sensors.cameras --cameras 8 --size 640x480 --transport jpeg --rate 30``

Each camera renders ``--loop`` frames of its synthetic scene at start (and encodes them as
image_transport's compressed publisher does, with OpenCV: ``rgb8; jpeg compressed bgr8``, quality
75, or PNG) and then publishes them in turn at ``--rate`` with fresh stamps, on
``/bench/cam<i>/image_raw`` (raw ``sensor_msgs/Image``) or ``/bench/cam<i>/image_raw/compressed``:
publishing costs a copy per frame, not a render and an encoding, so that on a 2-core host the
cameras leave the node the CPU it would have beside real cameras. All cameras are triggered
together. SIGINT stops it; it prints the frames sent and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time


def topic(i: int, transport: str) -> str:
    base = f"/bench/cam{i}/image_raw"
    return base if transport == "raw" else base + "/compressed"


def main() -> int:
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage, Image

    from triton_ros.ros.codec.messages import uint8_array
    from triton_ros.ros.ros_process import init_ros, strip_ros_args
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, compress, parse_camera

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cameras", type=int, default=8)
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--transport", choices=("raw", "jpeg", "png"), default="jpeg")
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--loop", type=int, default=30, help="distinct frames per camera")
    args = parser.parse_args(strip_ros_args(sys.argv)[1:])
    stop = init_ros(sys.argv)
    node = Node("bench_cameras")
    msgs, pubs = [], []
    for i in range(args.cameras):
        spec = parse_camera(f"bench/cam{i}:{args.size}:rgb8")
        scene = SyntheticScene(spec, seed=i)
        frames = []
        for k in range(args.loop):
            pixels, _ = scene.render(k / args.rate)
            if args.transport == "raw":
                msg = Image(
                    height=spec.height,
                    width=spec.width,
                    encoding="rgb8",
                    step=spec.width * 3,
                    data=uint8_array(pixels.tobytes()),
                )
            else:
                fmt, data = compress(pixels, "rgb8", args.transport)
                msg = CompressedImage(format=fmt, data=uint8_array(data))
            msg.header.frame_id = spec.frame_id
            frames.append(msg)
        msgs.append(frames)
        pubs.append(
            node.create_publisher(
                Image if args.transport == "raw" else CompressedImage,
                topic(i, args.transport),
                qos_profile_sensor_data,
            )
        )
    print(
        f"bench_cameras: {args.cameras} x {args.size} {args.transport} at {args.rate:g} Hz",
        flush=True,
    )
    sent, period = 0, 1.0 / args.rate
    next_tick = time.monotonic()
    try:
        while not stop.is_set():
            stamp = node.get_clock().now().to_msg()
            for frames, pub in zip(msgs, pubs):
                msg = frames[sent % args.loop]
                msg.header.stamp = stamp
                pub.publish(msg)
            sent += 1
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < -period:  # fell behind: do not burst
                next_tick = time.monotonic()
            elif delay > 0:
                stop.wait(delay)
    finally:
        print(f"bench_cameras: sent {sent} frames per camera", flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
