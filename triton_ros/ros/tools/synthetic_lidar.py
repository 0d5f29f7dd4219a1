"""Synthetic multi-robot LiDARs: sensor_msgs/PointCloud2 streams with 3D ground truth.

``python -m triton_ros.ros.tools.synthetic_lidar [--lidar ROBOT[:LAYOUT]]... [--rate HZ]
[--beams 32] [--azimuths 1024]`` (installed as the ``synthetic_lidar`` console script)

Each LiDAR is a spinning sensor mounted :data:`MOUNT_M` above a flat ground: ``--beams``
elevations evenly from -25 to +10 degrees times ``--azimuths`` directions, ray-cast onto the
ground plane (z = -MOUNT_M in the sensor's frame) and a few box obstacles standing on it, out to
80 m, with Gaussian range noise (``--noise-m``, 0.02) and dropped returns (``--dropout``, 0.05).
Four boxes per robot (sizes from 1.2 m cubes to 4.5 m cars) 6 to 16 m away, one in each quadrant
so that none hides another, each turned 45 +- 20 degrees to the line of sight (two faces in
view: a single face leaves a box's depth unobservable) and sliding back and forth along its
heading. The cloud is published
on ``<prefix>/<robot>/lidar/points`` (sensor_data QoS, frame_id ``<robot>/lidar``, stamped with
the capture time) and its boxes on ``<prefix>/<robot>/lidar/ground_truth`` with the same header
(``vision_msgs/Detection3DArray`` where importable, else ``triton_ros_interfaces/Detections3D``;
centre, size, yaw as a quaternion, class ``obstacle``, score 1).

Field layouts (``LAYOUT``): ``velodyne`` (default: x, y, z, intensity FLOAT32, ring UINT16,
time FLOAT32, point_step 22; unorganised, dropped returns left out, is_dense true);
``f64pad`` (x, y, z, intensity FLOAT64 with 4 padding bytes after each, point_step 64, big
endian); ``organised`` (height = beams, width = azimuths, x, y, z FLOAT32 and intensity UINT8,
row_step padded by 16 bytes, dropped returns NaN, is_dense false).

Every robot's cloud of a round is made first, then all are sent together, stamped with the same
capture time. SIGINT or SIGTERM (or ``--seconds``) stops it; it prints how many clouds each robot
sent and
exits 0.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from ..ros_process import ExitWatchdog, init_ros, strip_ros_args

MOUNT_M = 1.8
MAX_RANGE_M = 80.0
LAYOUTS = ("velodyne", "f64pad", "organised")
SIZES = ((4.5, 1.9, 1.6), (2.0, 2.0, 1.2), (1.2, 1.2, 1.2), (3.0, 1.5, 2.2))
STOP_S = 10.0
STALL_S = 20.0
CLASS = "obstacle"

# PointField datatypes
INT8, UINT8, INT16, UINT16, INT32, UINT32, FLOAT32, FLOAT64 = range(1, 9)


@dataclass(frozen=True)
class LidarSpec:
    robot: str
    layout: str = "velodyne"

    def topic(self, prefix: str = "") -> str:
        return f"{prefix}/{self.robot}/lidar/points"

    def truth_topic(self, prefix: str = "") -> str:
        return f"{prefix}/{self.robot}/lidar/ground_truth"

    @property
    def frame_id(self) -> str:
        return f"{self.robot}/lidar"


def parse_lidar(text: str) -> LidarSpec:
    robot, _, layout = text.partition(":")
    layout = layout or "velodyne"
    if not robot or layout not in LAYOUTS:
        raise argparse.ArgumentTypeError(
            f"'{text}': ROBOT[:LAYOUT], LAYOUT one of {', '.join(LAYOUTS)}"
        )
    return LidarSpec(robot, layout)


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    z: float  # centre, sensor frame
    length: float
    width: float
    height: float
    yaw: float


class Scene:
    """One robot's boxes, moving with time (seeded)."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self._boxes = []
        for quadrant in range(4):
            bearing = math.radians(quadrant * 90 + 45 + rng.uniform(-20, 20))
            dist = rng.uniform(6.0, 16.0)
            size = SIZES[(quadrant + seed) % len(SIZES)]
            # turned 45 +- 20 degrees to the line of sight: two faces in view (one face alone
            # leaves the box's depth unobservable to any detector without a learned prior)
            yaw = bearing + math.radians(45 + rng.uniform(-20, 20) + 90 * rng.integers(4))
            self._boxes.append(
                (
                    dist * math.cos(bearing),
                    dist * math.sin(bearing),
                    size,
                    yaw,
                    rng.uniform(0, 2 * math.pi),
                )
            )

    def boxes(self, t: float) -> list[Box]:
        out = []
        for x, y, (length, width, height), yaw, phase in self._boxes:
            shift = 0.8 * math.sin(0.5 * t + phase)  # along the heading, +-0.8 m
            out.append(
                Box(
                    x + shift * math.cos(yaw),
                    y + shift * math.sin(yaw),
                    -MOUNT_M + height / 2,
                    length,
                    width,
                    height,
                    yaw,
                )
            )
        return out


def ray_directions(beams: int, azimuths: int) -> np.ndarray:
    """[beams, azimuths, 3] unit vectors."""
    elev = np.radians(np.linspace(-25.0, 10.0, beams))[:, None]
    az = np.linspace(0, 2 * np.pi, azimuths, endpoint=False)[None, :]
    return np.stack(
        np.broadcast_arrays(
            np.cos(elev) * np.cos(az), np.cos(elev) * np.sin(az), np.sin(elev) + 0 * az
        ),
        axis=-1,
    )


def cast(dirs: np.ndarray, boxes: list[Box]) -> tuple[np.ndarray, np.ndarray]:
    """Ranges [...] of rays from the origin (inf: no return) and what each hit (0 ground,
    1 + i box i, -1 nothing)."""
    dz = dirs[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        rng = np.where(dz < 0, -MOUNT_M / dz, np.inf)
    hit = np.where(np.isfinite(rng), 0, -1)
    for i, b in enumerate(boxes):
        c, s = math.cos(-b.yaw), math.sin(-b.yaw)
        # the ray in the box's frame: origin o, direction d
        ox, oy, oz = c * -b.x - s * -b.y, s * -b.x + c * -b.y, -b.z
        dx = c * dirs[..., 0] - s * dirs[..., 1]
        dy = s * dirs[..., 0] + c * dirs[..., 1]
        near = np.full(dz.shape, -np.inf)
        far = np.full(dz.shape, np.inf)
        for o, d, half in ((ox, dx, b.length / 2), (oy, dy, b.width / 2), (oz, dz, b.height / 2)):
            with np.errstate(divide="ignore", invalid="ignore"):
                t1, t2 = (-half - o) / d, (half - o) / d
            lo, hi = np.minimum(t1, t2), np.maximum(t1, t2)
            lo = np.where(d == 0, np.where(abs(o) <= half, -np.inf, np.inf), lo)
            hi = np.where(d == 0, np.where(abs(o) <= half, np.inf, -np.inf), hi)
            near, far = np.maximum(near, lo), np.minimum(far, hi)
        inside = (near <= far) & (near > 0) & (near < rng)
        rng = np.where(inside, near, rng)
        hit = np.where(inside, 1 + i, hit)
    rng = np.where(rng <= MAX_RANGE_M, rng, np.inf)
    hit = np.where(np.isfinite(rng), hit, -1)
    return rng, hit


def layout_fields(layout: str):
    """(name, offset, datatype) of each field, point_step, big endian."""
    if layout == "velodyne":
        return (
            [
                ("x", 0, FLOAT32),
                ("y", 4, FLOAT32),
                ("z", 8, FLOAT32),
                ("intensity", 12, FLOAT32),
                ("ring", 16, UINT16),
                ("time", 18, FLOAT32),
            ],
            22,
            False,
        )
    if layout == "f64pad":
        return (
            [("x", 0, FLOAT64), ("y", 12, FLOAT64), ("z", 24, FLOAT64), ("intensity", 36, FLOAT64)],
            64,
            True,
        )
    return (
        [("x", 0, FLOAT32), ("y", 4, FLOAT32), ("z", 8, FLOAT32), ("intensity", 12, UINT8)],
        16,
        False,
    )


NUMPY = {
    INT8: "i1",
    UINT8: "u1",
    INT16: "i2",
    UINT16: "u2",
    INT32: "i4",
    UINT32: "u4",
    FLOAT32: "f4",
    FLOAT64: "f8",
}


def cloud_bytes(
    layout: str,
    xyz: np.ndarray,
    intensity: np.ndarray,
    ring: np.ndarray,
    tm: np.ndarray,
    width: int,
    height: int,
    row_pad: int = 0,
):
    """(fields, point_step, row_step, is_bigendian, data) of a cloud."""
    fields, step, big = layout_fields(layout)
    order = ">" if big else "<"
    dtype = np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [order + NUMPY[f[2]] for f in fields],
            "offsets": [f[1] for f in fields],
            "itemsize": step,
        }
    )
    pts = np.zeros(len(xyz), dtype)
    pts["x"], pts["y"], pts["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    pts["intensity"] = intensity
    if "ring" in dtype.names:
        pts["ring"], pts["time"] = ring, tm
    raw = pts.tobytes()
    row_step = width * step + row_pad
    if row_pad:
        rows = np.frombuffer(raw, np.uint8).reshape(height, width * step)
        raw = np.concatenate([rows, np.full((height, row_pad), 0xAB, np.uint8)], axis=1).tobytes()
    return fields, step, row_step, big, raw


class SyntheticLidars:
    def __init__(
        self,
        node,
        specs: list[LidarSpec],
        *,
        prefix: str = "",
        beams: int = 32,
        azimuths: int = 1024,
        noise_m: float = 0.02,
        dropout: float = 0.05,
        seed: int = 7,
        cycle: int = 0,
        rate: float = 10.0,
    ) -> None:
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2

        from ..codec.messages import DETECTIONS3D_TYPE

        self.node = node
        self.specs = specs
        self.dirs = ray_directions(beams, azimuths)
        self.beams, self.azimuths = beams, azimuths
        self.noise_m, self.dropout = noise_m, dropout
        self.scenes = [Scene(seed + 31 * i) for i in range(len(specs))]
        self.rng = np.random.default_rng(seed)
        self.clouds = [
            node.create_publisher(PointCloud2, s.topic(prefix), qos_profile_sensor_data)
            for s in specs
        ]
        self.truths = [
            node.create_publisher(DETECTIONS3D_TYPE, s.truth_topic(prefix), 50) for s in specs
        ]
        self.sent = [0] * len(specs)
        self.start = time.monotonic()
        self.cycle, self.rate = cycle, rate
        self._cached: dict = {}  # (robot, frame of the cycle) -> (cloud, boxes)

    def tick(self) -> None:
        from std_msgs.msg import Header

        stamp = self.node.get_clock().now().to_msg()
        t = time.monotonic() - self.start
        ready = []
        for i, spec in enumerate(self.specs):
            header = Header(stamp=stamp, frame_id=spec.frame_id)
            if self.cycle:  # the cycle's clouds made once, then sent again
                key = (i, self.sent[i] % self.cycle)
                if key not in self._cached:
                    boxes = self.scenes[i].boxes(key[1] / self.rate)
                    self._cached[key] = (self.cloud_message(header, spec.layout, boxes), boxes)
                cloud, boxes = self._cached[key]
                cloud.header = header
            else:
                boxes = self.scenes[i].boxes(t)
                cloud = self.cloud_message(header, spec.layout, boxes)
            ready.append((cloud, ground_truth_message(header, boxes)))
        # every sensor's cloud made first, then all sent at once (sensors synchronized, as a
        # fleet's clock-triggered LiDARs are)
        for i, (cloud, truth) in enumerate(ready):
            self.clouds[i].publish(cloud)
            self.truths[i].publish(truth)
            self.sent[i] += 1

    def cloud_message(self, header, layout: str, boxes: list[Box]):
        from sensor_msgs.msg import PointCloud2, PointField

        from ..codec.messages import uint8_array

        rng, hit = cast(self.dirs, boxes)
        noisy = rng + self.rng.normal(0, self.noise_m, rng.shape)
        dropped = self.rng.random(rng.shape) < self.dropout
        valid = np.isfinite(rng) & ~dropped
        with np.errstate(invalid="ignore"):
            xyz = (self.dirs * noisy[..., None]).astype(np.float32)
        intensity = np.where(hit > 0, 0.8, 0.2) * 255
        ring = np.broadcast_to(np.arange(self.beams)[:, None], rng.shape)
        tm = np.broadcast_to(np.linspace(0, 0.1, self.azimuths, endpoint=False)[None, :], rng.shape)
        if layout == "organised":
            xyz[~valid] = np.nan
            height, width, pad, dense = self.beams, self.azimuths, 16, False
            sel = np.ones(rng.shape, bool)
        else:
            sel = valid
            height, width, pad, dense = 1, int(valid.sum()), 0, True
        fields, step, row_step, big, raw = cloud_bytes(
            layout, xyz[sel], intensity[sel], ring[sel], tm[sel], width, height, pad
        )
        msg = PointCloud2(
            header=header,
            height=height,
            width=width,
            is_bigendian=big,
            point_step=step,
            row_step=row_step,
            is_dense=dense,
        )
        msg.fields = [PointField(name=n, offset=o, datatype=d, count=1) for n, o, d in fields]
        msg.data = uint8_array(raw)
        return msg


def ground_truth_message(header, boxes: list[Box]):
    from ..codec.messages import DETECTION3D_TYPE, DETECTION_RESULT_TYPE, DETECTIONS3D_TYPE

    msg = DETECTIONS3D_TYPE(header=header)
    for i, b in enumerate(boxes):
        det = DETECTION3D_TYPE(header=header, id=str(i))
        p = det.bbox.center.position
        p.x, p.y, p.z = b.x, b.y, b.z
        det.bbox.center.orientation.z = math.sin(b.yaw / 2)
        det.bbox.center.orientation.w = math.cos(b.yaw / 2)
        det.bbox.size.x, det.bbox.size.y, det.bbox.size.z = b.length, b.width, b.height
        hyp = DETECTION_RESULT_TYPE()
        hyp.hypothesis.class_id = CLASS
        hyp.hypothesis.score = 1.0
        det.results.append(hyp)
        msg.detections.append(det)
    return msg


def main(argv: list[str] | None = None) -> NoReturn:
    import rclpy
    from rclpy.node import Node

    argv = sys.argv if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lidar",
        action="append",
        type=parse_lidar,
        default=None,
        help="ROBOT[:LAYOUT] (repeatable; LAYOUT velodyne, f64pad, organised)",
    )
    parser.add_argument("--rate", type=float, default=10.0, help="clouds per second per LiDAR")
    parser.add_argument("--beams", type=int, default=32)
    parser.add_argument("--azimuths", type=int, default=1024)
    parser.add_argument("--noise-m", type=float, default=0.02, help="range noise (sigma), m")
    parser.add_argument("--dropout", type=float, default=0.05, help="fraction of returns lost")
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="stop after this long (0: run until SIGINT or SIGTERM)",
    )
    parser.add_argument(
        "--cycle",
        type=int,
        default=0,
        help="ray-cast this many scenes per "
        "robot once, then send them again in turn, freshly stamped (0: every "
        "cloud cast anew; for benchmarks, where casting would cost more than "
        "the node under test)",
    )
    parser.add_argument("--prefix", default="", help="namespace in front of every robot")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(strip_ros_args(argv)[1:])
    specs = args.lidar or [LidarSpec("robot1"), LidarSpec("robot2", "organised")]

    stop = init_ros(argv)
    watchdog = ExitWatchdog("synthetic_lidar")
    stop.on_repeat = watchdog.fire
    node = Node("synthetic_lidar")
    lidars = SyntheticLidars(
        node,
        specs,
        prefix=args.prefix,
        beams=args.beams,
        azimuths=args.azimuths,
        noise_m=args.noise_m,
        dropout=args.dropout,
        cycle=args.cycle,
        rate=args.rate,
    )
    if not args.quiet:
        for spec in specs:
            print(
                f"synthetic_lidar: {spec.topic(args.prefix)} {args.beams}x{args.azimuths} "
                f"{spec.layout} at {args.rate:g} Hz",
                flush=True,
            )
    period = 1.0 / args.rate
    start = next_tick = time.monotonic()
    try:
        while not stop.is_set():
            if args.seconds and time.monotonic() - start >= args.seconds:
                break
            watchdog.progress(STALL_S + period)
            lidars.tick()
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay < -period:
                next_tick = time.monotonic()
            elif delay > 0:
                stop.wait(delay)
    finally:
        watchdog.arm(STOP_S - 1.0)
        if not args.quiet:
            sent = ", ".join(f"{s.robot} {n}" for s, n in zip(specs, lidars.sent))
            print(f"synthetic_lidar: sent {sent}", flush=True)
        node.destroy_node()
        rclpy.try_shutdown()
    watchdog.leave(0)


if __name__ == "__main__":
    main()
