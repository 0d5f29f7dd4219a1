"""A hostile sensor publisher of its own process for the tests: RGB-D namespaces and cameras that
are wrong in one way each, beside the ground truth of their good frames.

``python test/ros/hostile_sensors.py --prefix NS [--rate HZ] [--fault-period S]``

Namespaces (``<prefix>/<robot>/cam``, each with ``color/image_raw``, ``color/camera_info`` and a
depth topic, as ``synthetic_cameras --rgbd`` publishes them, 320x240, and the 3D ground truth of
every good frame on ``ground_truth_3d``):

- ``rsize``: depth 424x240 (and, every other frame, 640x480: the same aspect ratio) beside a
  320x240 colour image and CameraInfo: RealSense's ``depth/image_rect_raw`` instead of the
  aligned depth. Always.
- ``rinfo``: a CameraInfo of width 4294967295. Always.
- ``rfid``: the depth image's frame_id is another frame's. Always (the frames are good).
- ``rbomb``: compressedDepth; on each fault, the depth is a 1.75 MB PNG of 30000 x 30000 16-bit
  pixels (1.8 GB decoded).
- ``rfut`` and ``zfut``: on each fault, in turn: the whole set stamped in 2038, the whole set
  12 s ahead, the colour image alone 12 s ahead, the depth image alone in 2038, the colour
  image alone an hour ago, the CameraInfo alone 1 s after 1970.

Cameras (``<prefix>/plain/<camera>/image_raw[/compressed]``, 320x240 rgb8):

- ``bomb`` (CompressedImage): JPEG frames; on each fault, in turn, a PNG of 30000 x 30000 RGB
  pixels (2.7 GB decoded) or a JPEG whose frame header claims 30000 x 30000;
- ``zero``: every frame stamped 0; ``past``: every frame stamped -5 s (before 1970).

Faults start when a line ``faults`` arrives on stdin and stop at ``calm``, one fault every
``--fault-period`` seconds. Each fault is printed as it is sent (``fault <t> <what>``); at the
end one JSON line: good frames and faults sent per name.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from triton_ros.ros.codec.messages import DETECTIONS3D_TYPE, uint8_array  # noqa: E402
from triton_ros.ros.ros_process import init_ros, strip_ros_args  # noqa: E402
from triton_ros.ros.tools.synthetic_cameras import (
    RgbdScene,
    camera_info_message,  # noqa: E402
    compressed_depth,
    depth_bytes,
    ground_truth_3d_message,
    parse_rgbd,
)

WIDTH, HEIGHT = 320, 240
Y2038 = 2_145_916_800  # 2038-01-01, seconds
AHEAD_S = 12
STAMPS = (
    "set in 2038",
    "set 12 s ahead",
    "colour 12 s ahead",
    "depth in 2038",
    "colour an hour ago",
    "CameraInfo in 1970",
)


def png_bomb(width: int, height: int, channels: int, bits: int) -> bytes:
    """A valid PNG of ``width`` x ``height`` zero pixels, compressed by deflate's best ratio
    (about 1:1030): full-flushed blocks of zeros are byte-aligned and identical, so one is
    repeated; the Adler-32 of zeros is (length mod 65521) << 16 | 1."""
    total = (1 + width * channels * bits // 8) * height  # a filter byte per row
    chunk = 1 << 24
    block = zlib.compressobj(9, zlib.DEFLATED, -15)
    repeated = block.compress(bytes(chunk)) + block.flush(zlib.Z_FULL_FLUSH)
    count, rest = divmod(total, chunk)
    last = zlib.compressobj(9, zlib.DEFLATED, -15)
    deflate = repeated * count + last.compress(bytes(rest)) + last.flush()
    idat = b"\x78\xda" + deflate + struct.pack(">I", ((total % 65521) << 16) | 1)
    colour_type = {1: 0, 3: 2}[channels]

    def chunk_of(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload))
            + kind
            + payload
            + struct.pack(">I", zlib.crc32(kind + payload))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, bits, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk_of(b"IHDR", ihdr)
        + chunk_of(b"IDAT", idat)
        + chunk_of(b"IEND", b"")
    )


def jpeg_claiming(jpeg: bytes, width: int, height: int) -> bytes:
    i = next(i for i in range(2, len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] == 0xC0)
    return jpeg[: i + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + jpeg[i + 9 :]


class Namespace:
    """One RGB-D namespace's publishers and scene."""

    def __init__(self, node, prefix: str, robot: str, transport: str = "raw") -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CameraInfo, CompressedImage, Image

        self.spec = parse_rgbd(f"{robot}/cam:{WIDTH}x{HEIGHT}:16UC1:{transport}")
        self.scene = RgbdScene(self.spec, seed=zlib.crc32(robot.encode()) % 1000)
        qos = qos_profile_sensor_data
        self.node = node
        self.colour = node.create_publisher(Image, self.spec.color_topic(prefix), qos)
        self.info = node.create_publisher(CameraInfo, self.spec.info_topic(prefix), qos)
        self.depth = node.create_publisher(
            CompressedImage if transport == "compressedDepth" else Image,
            self.spec.depth_topic(prefix),
            qos,
        )
        self.truth = node.create_publisher(DETECTIONS3D_TYPE, self.spec.truth_topic(prefix), 100)
        self.good = 0

    def publish(
        self,
        now_ns: int,
        t: float,
        *,
        stamps=(None, None, None),
        depth_data=None,
        depth_size=None,
        info_width=None,
        depth_frame=None,
        truth=True,
    ) -> None:
        """One frame; ``stamps``: (colour, info, depth) stamps in ns overriding ``now_ns``."""
        from sensor_msgs.msg import CompressedImage, Image
        from std_msgs.msg import Header

        spec = self.spec
        rgb, depth_m, ground_truth = self.scene.render(t)

        def header(i: int, frame: str | None = None) -> Header:
            ns = stamps[i] if stamps[i] is not None else now_ns
            out = Header(frame_id=frame or spec.frame_id)
            out.stamp.sec, out.stamp.nanosec = divmod(ns, 1_000_000_000)
            return out

        if truth:
            self.truth.publish(ground_truth_3d_message(header(0), ground_truth))
            self.good += 1
        colour = Image(
            header=header(0), height=HEIGHT, width=WIDTH, encoding="rgb8", step=WIDTH * 3
        )
        colour.data = uint8_array(memoryview(np.ascontiguousarray(rgb)).cast("B"))
        info = camera_info_message(header(1), self.scene.k, WIDTH, HEIGHT)
        if info_width is not None:
            info.width = info_width
        if spec.depth_transport == "compressedDepth":
            fmt, data = compressed_depth(depth_m, "16UC1")
            depth = CompressedImage(header=header(2, depth_frame), format=fmt)
            depth.data = uint8_array(depth_data if depth_data is not None else data)
        else:
            if depth_size is not None:  # another camera's depth: another size
                import cv2

                depth_m = cv2.resize(depth_m, depth_size, interpolation=cv2.INTER_NEAREST)
            pixels = depth_bytes(depth_m, "16UC1")
            depth = Image(
                header=header(2, depth_frame),
                height=pixels.shape[0],
                width=pixels.shape[1],
                encoding="16UC1",
                step=pixels.shape[1] * 2,
            )
            depth.data = uint8_array(memoryview(np.ascontiguousarray(pixels)).cast("B"))
        self.info.publish(info)
        self.depth.publish(depth)
        self.colour.publish(colour)


def bad_stamps(kind: str, now_ns: int) -> tuple:
    y2038, ahead = Y2038 * 1_000_000_000, now_ns + AHEAD_S * 1_000_000_000
    return {
        "set in 2038": (y2038, y2038, y2038),
        "set 12 s ahead": (ahead, ahead, ahead),
        "colour 12 s ahead": (ahead, None, None),
        "depth in 2038": (None, None, y2038),
        "colour an hour ago": (now_ns - 3600 * 1_000_000_000, None, None),
        "CameraInfo in 1970": (None, 1_000_000_000, None),
    }[kind]


def main() -> int:
    import cv2
    import rclpy
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage, Image

    parser = argparse.ArgumentParser()
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--fault-period", type=float, default=2.0)
    args = parser.parse_args(strip_ros_args(sys.argv)[1:])
    stop = init_ros(sys.argv)
    node = Node("hostile_sensors")
    faulting = threading.Event()

    def control() -> None:
        for line in sys.stdin:
            if line.strip() == "faults":
                faulting.set()
            elif line.strip() == "calm":
                faulting.clear()

    threading.Thread(target=control, daemon=True).start()

    prefix = args.prefix
    spaces = {
        name: Namespace(node, prefix, name, "compressedDepth" if name == "rbomb" else "raw")
        for name in ("rsize", "rinfo", "rfid", "rbomb", "rfut", "zfut")
    }
    qos = qos_profile_sensor_data
    bomb_cam = node.create_publisher(
        CompressedImage, f"{prefix}/plain/bomb/image_raw/compressed", qos
    )
    zero_cam = node.create_publisher(Image, f"{prefix}/plain/zero/image_raw", qos)
    past_cam = node.create_publisher(Image, f"{prefix}/plain/past/image_raw", qos)
    depth_bomb = struct.pack("<iff", 0, 0.0, 0.0) + png_bomb(30000, 30000, 1, 16)
    colour_bombs = [png_bomb(30000, 30000, 3, 8)]
    frame = np.full((HEIGHT, WIDTH, 3), 90, np.uint8)
    frame[60:180, 100:220] = (200, 30, 30)
    _, jpeg = cv2.imencode(".jpg", frame)
    jpeg = jpeg.tobytes()
    colour_bombs.append(jpeg_claiming(jpeg, 30000, 30000))
    faults: dict[str, int] = {}
    period = 1.0 / args.rate
    t0 = next_tick = time.monotonic()
    next_fault = 0.0
    try:
        while not stop.is_set():
            now_ns = node.get_clock().now().nanoseconds
            t = time.monotonic() - t0
            fault = faulting.is_set() and t >= next_fault
            if fault:
                next_fault = t + args.fault_period
            spaces["rsize"].publish(
                now_ns,
                t,
                depth_size=(640, 480) if int(t * args.rate) % 2 else (424, 240),
                truth=False,
            )
            spaces["rinfo"].publish(now_ns, t, info_width=4294967295, truth=False)
            spaces["rfid"].publish(now_ns, t, depth_frame="rfid/cam_depth_optical_frame")
            what = []
            if fault:
                spaces["rbomb"].publish(now_ns, t, depth_data=depth_bomb, truth=False)
                what.append("rbomb: compressedDepth PNG 30000x30000")
            else:
                spaces["rbomb"].publish(now_ns, t)
            for name in ("rfut", "zfut"):
                if fault:
                    kind = STAMPS[faults.get(name, 0) % len(STAMPS)]
                    spaces[name].publish(now_ns, t, stamps=bad_stamps(kind, now_ns), truth=False)
                    faults[name] = faults.get(name, 0) + 1
                    what.append(f"{name}: {kind}")
                else:
                    spaces[name].publish(now_ns, t)
            msg = CompressedImage(format="rgb8; jpeg compressed bgr8")
            msg.header.frame_id = "plain/bomb"
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
            if fault:
                data = colour_bombs[faults.get("bomb", 0) % 2]
                msg.format = "rgb8; png compressed bgr8" if data[:4] == b"\x89PNG" else msg.format
                faults["bomb"] = faults.get("bomb", 0) + 1
                what.append(f"bomb: {msg.format.split(';')[1].split()[0]} 30000x30000")
            else:
                data = jpeg
            msg.data = uint8_array(data)
            bomb_cam.publish(msg)
            for publisher, sec, frame_id in (
                (zero_cam, 0, "plain/zero"),
                (past_cam, -5, "plain/past"),
            ):
                image = Image(height=HEIGHT, width=WIDTH, encoding="rgb8", step=WIDTH * 3)
                image.header.frame_id = frame_id
                image.header.stamp.sec = sec
                image.data = uint8_array(frame.tobytes())
                publisher.publish(image)
            if fault:
                faults["rbomb"] = faults.get("rbomb", 0) + 1
                print(f"fault {time.time():.3f} {'; '.join(what)}", flush=True)
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < -period:
                next_tick = time.monotonic()
            elif delay > 0:
                stop.wait(delay)
    finally:
        print(
            json.dumps({"good": {k: s.good for k, s in spaces.items()}, "faults": faults}),
            flush=True,
        )
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
