#!/usr/bin/env python3
"""Benchmark: what each input kind costs the node per frame, with the GIL and without it.

``.venv/bin/python -m bench.sensors.codec [--seconds 4] [--out FILE]`` (py-spy:
``.venv/bin/pip install -r bench/requirements-bench.txt``)

In one process, side by side, on frames of the synthetic cameras (OpenCV's JPEG quality 75 and
PNG level 3, as image_transport's compressed publisher encodes them):

1. **Decoders** (the question of bench/DECISIONS.md, "JPEG decoder"): CPU per decode of a JPEG
   by OpenCV's ``cv2.imdecode``, simplejpeg and PyTurboJPEG (when importable; it needs the
   system's libturbojpeg), at full size and at 1/4; and two threads decoding flat out: CPU
   seconds per wall second of the two (2.0: both cores busy).
2. **Input kinds**: the node's whole per-frame path of each kind, from the serialized message
   (rclpy's CDR) to the model input (color_detector's FP32 256x256): raw ``sensor_msgs/Image``
   (rgb8), and ``CompressedImage`` JPEG and PNG, at 640x480 and 1920x1080 (the 1920x1080 JPEG
   decoded at 1/4). CPU per frame (the thread's CPU time), and **GIL-held time per frame**.
3. **Two decoder threads**: the JPEG kind's path on one thread and on two, CPU seconds per wall
   second of the decoding threads, beside two controls on the same host at the same time: a
   GIL-free C loop (OpenCV's blur of a large image; what the host lets two threads have) and a
   pure-Python loop (what the GIL lets them have).

**How GIL-held time is measured.** With py-spy (``bench/requirements-bench.txt``), which reads
CPython's own GIL state from outside the process, never pausing it (``--nonblocking``): while the
path runs flat out on a thread of its own for ``--seconds`` (nothing else in the process runs),
one py-spy samples the threads holding the GIL (``--gil``), another the threads running, both at
200 Hz. The path's GIL samples over its running samples is the share of its running time it
holds the GIL (both counts see the host's preemptions alike, so the share stands whatever the
load); times its CPU per frame (its thread's CPU time over the frames it made): GIL-held time
per frame. Two calibrations in the same run check the method: a pure-Python loop must come out
>= 0.8 held, OpenCV's blur (GIL-free C) <= 0.2.

Checks (exit status 1 when one fails): the calibrations; JPEG and PNG at 1920x1080 hold the
GIL for at most a third of their CPU (their decoding runs without it); the chosen decoder
(simplejpeg) decodes within 10 % of the fastest candidate; two JPEG threads get at least 80 %
of what two GIL-free threads get (and the controls tell one core from two: the GIL-free
threads get 1.2x the Python ones, else the host was too loaded to tell and the check fails).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bench.common import LOAD_AT_START, commit, emit_checked, machine

SIZES = ((640, 480), (1920, 1080))


def frames(width: int, height: int, count: int = 4):
    """``count`` synthetic RGB frames of one camera (different times: different pixels)."""
    from triton_ros.ros.tools.synthetic_cameras import SyntheticScene, parse_camera

    scene = SyntheticScene(parse_camera(f"b/c:{width}x{height}:rgb8"), seed=width)
    return [scene.render(0.37 * i)[0] for i in range(count)]


def serialized(kind: str, pixels: np.ndarray) -> bytes:
    """The frame as rclpy serializes the message a camera of ``kind`` publishes."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage, Image

    from triton_ros.ros.codec.messages import uint8_array
    from triton_ros.ros.tools.synthetic_cameras import compress

    h, w = pixels.shape[:2]
    if kind == "raw":
        msg = Image(
            height=h, width=w, encoding="rgb8", step=w * 3, data=uint8_array(pixels.tobytes())
        )
    else:
        fmt, data = compress(pixels, "rgb8", kind)
        msg = CompressedImage(format=fmt, data=uint8_array(data))
    msg.header.frame_id = "b/c_optical_frame"
    return serialize_message(msg)


def kind_path(kind: str) -> Callable[[bytes], object]:
    """The node's per-frame path of a kind: serialized bytes -> (tensor, placement)."""
    from triton_ros.core.model_config import TensorConfig
    from triton_ros.ros.codec.registry import INPUT_KINDS

    codec = INPUT_KINDS["image" if kind == "raw" else "compressed"]
    tensor = TensorConfig(name="images", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW")
    encode = codec.encoder(codec.plan(codec.settings(), tensor, model="color_detector"))
    read, check = codec.reader(), codec.check

    def path(raw: bytes):
        msg = read(raw)
        check(msg)
        return encode(msg)

    return path


# --------------------------------------------------------------------------------------------
# Flat-out loops, and the GIL-held share sampled by py-spy
# --------------------------------------------------------------------------------------------


def run_for(seconds: float, work: Callable[[int], object], count: int) -> tuple[int, float]:
    """Call ``work(i)`` for ``seconds``; (calls, this thread's CPU seconds)."""
    n, c0, end = 0, time.thread_time(), time.monotonic() + seconds
    while time.monotonic() < end:
        work(n % count)
        n += 1
    return n, time.thread_time() - c0


def py_spy() -> str | None:
    path = Path(sys.executable).parent / "py-spy"
    return str(path) if path.exists() else shutil.which("py-spy")


def samples_of(raw: Path, thread: str) -> int:
    """Samples of the thread named ``thread`` in a py-spy raw file (``--threads``)."""
    count = 0
    for line in raw.read_text().splitlines():
        head, _, n = line.rpartition(" ")
        if head.split(";", 1)[0].endswith(f": {thread}"):
            count += int(n)
    return count


@dataclass
class Cost:
    cpu_us: float  # CPU per call
    gil_share: float  # of its running time, holding the GIL
    samples: tuple[int, int]  # (GIL samples, running samples)

    @property
    def gil_us(self) -> float:
        return self.gil_share * self.cpu_us


def cost(work: Callable[[int], object], count: int, seconds: float, tmp: Path) -> Cost:
    """CPU per call of ``work`` and its GIL-held share, sampled by two py-spy processes."""
    for i in range(min(count, 3)):  # warm caches, plans, buffers
        work(i)
    spies = []
    for gil in (True, False):
        out = tmp / f"spy-{gil}.txt"
        out.unlink(missing_ok=True)
        spies.append(
            (
                out,
                subprocess.Popen(
                    [
                        py_spy(),
                        "record",
                        "-p",
                        str(os.getpid()),
                        "-d",
                        str(int(seconds) + 1),
                        "-r",
                        "200",
                        "-f",
                        "raw",
                        "-o",
                        str(out),
                        "--nonblocking",
                        "--threads",
                    ]
                    + (["--gil"] if gil else []),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ),
            )
        )
    time.sleep(0.5)  # both attached
    result: list[tuple[int, float]] = []
    thread = threading.Thread(
        target=lambda: result.append(run_for(seconds, work, count)), name="kind_path"
    )
    thread.start()
    thread.join()
    for _, spy in spies:
        spy.wait(timeout=60)
    held, running = (samples_of(out, "kind_path") for out, _ in spies)
    n, cpu = result[0]
    return Cost(cpu / max(n, 1) * 1e6, min(1.0, held / max(running, 1)), (held, running))


def two_threads(work: Callable[[int], object], count: int, seconds: float) -> tuple[float, float]:
    """(CPU seconds per wall second of two threads running ``work`` flat out, calls per s)."""
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def one():
        r = run_for(seconds, work, count)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=one) for _ in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return sum(c for _, c in results) / wall, sum(n for n, _ in results) / wall


# --------------------------------------------------------------------------------------------


def decoders() -> dict[str, Callable]:
    """name -> decode(jpeg bytes, reduction 1 or 4) of each candidate that imports."""
    import cv2
    import simplejpeg

    flags = {1: cv2.IMREAD_COLOR, 4: cv2.IMREAD_REDUCED_COLOR_4}
    out = {
        "cv2.imdecode": lambda d, f: cv2.imdecode(np.frombuffer(d, np.uint8), flags[f]),
        "simplejpeg": lambda d, f: (
            simplejpeg.decode_jpeg(d, "RGB")
            if f == 1
            else simplejpeg.decode_jpeg(d, "RGB", min_factor=f, min_width=1, min_height=1)
        ),
    }
    try:
        from turbojpeg import TJPF_RGB, TurboJPEG

        tj = TurboJPEG()
        out["PyTurboJPEG"] = lambda d, f: tj.decode(
            d, pixel_format=TJPF_RGB, scaling_factor=None if f == 1 else (1, f)
        )
    except Exception as exc:  # not installed, or no libturbojpeg
        out["PyTurboJPEG"] = exc
    return out


def main() -> int:
    import cv2

    from triton_ros.ros.tools.synthetic_cameras import compress

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="per kind and size, and per decoder"
    )
    parser.add_argument("--two-thread-s", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3, help="of the two-thread comparison")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    cv2.setNumThreads(1)  # one thread each, as in the node's workers
    if py_spy() is None:
        raise SystemExit("py-spy is needed: .venv/bin/pip install -r bench/requirements-bench.txt")
    tmp = Path(tempfile.mkdtemp(prefix="bench-sensors-"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    failures: list[str] = []
    lines = [
        f"# Input kinds: CPU and GIL-held time per frame ({started}, {commit()})",
        "",
        machine(),
        f"load average at start: {' '.join(LOAD_AT_START)}",
        "",
    ]

    # 1. decoders ---------------------------------------------------------------------------
    lines += [
        "## JPEG decoders (quality 75, OpenCV-encoded synthetic frames)",
        "",
        "| decoder | 640x480 us | 1920x1080 us | 1920x1080 at 1/4 us | 2 threads, 640x480: "
        "CPU s per wall s |",
        "|---|---|---|---|---|",
    ]
    jpegs = {size: [compress(p, "rgb8", "jpeg")[1] for p in frames(*size)] for size in SIZES}
    speed: dict[str, float] = {}
    for name, decode in decoders().items():
        if isinstance(decode, Exception):
            lines.append(f"| {name} | not measured: {type(decode).__name__}: {decode} | | | |")
            continue
        row = []
        for size, factor in (((640, 480), 1), ((1920, 1080), 1), ((1920, 1080), 4)):
            data = jpegs[size]
            n, c = run_for(args.seconds / 2, lambda i: decode(data[i], factor), len(data))
            row.append(c / n * 1e6)
        data = jpegs[(640, 480)]
        both, _ = two_threads(lambda i: decode(data[i], 1), len(data), args.two_thread_s)
        speed[name] = row[0] + row[1]
        lines.append(f"| {name} | {row[0]:.0f} | {row[1]:.0f} | {row[2]:.0f} | {both:.2f} |")
    fastest = min(speed, key=speed.get)
    if speed["simplejpeg"] > 1.10 * speed[fastest]:
        failures.append(
            f"simplejpeg decodes {speed['simplejpeg'] / speed[fastest]:.2f}x slower "
            f"than {fastest}: revisit bench/DECISIONS.md"
        )

    # 2. input kinds ------------------------------------------------------------------------
    python_loop = lambda i: sum(range(2000))  # noqa: E731
    big = np.zeros((540, 960, 3), np.uint8)
    blur = lambda i: cv2.blur(big, (5, 5))  # noqa: E731 (GIL-free, ~1 ms)
    calib = {
        "pure Python loop": cost(python_loop, 1, args.seconds, tmp),
        "cv2.blur 960x540 (GIL-free C)": cost(blur, 1, args.seconds, tmp),
    }
    lines += [
        "",
        "## The node's per-frame path of each input kind (serialized message -> "
        "color_detector's FP32 3x256x256 input)",
        "",
        "| kind | size | CPU us/frame | GIL-held us/frame | GIL-held share (py-spy samples "
        "GIL/running) |",
        "|---|---|---|---|---|",
    ]
    for name, c in calib.items():
        lines.append(
            f"| calibration: {name} | - | {c.cpu_us:.0f} | {c.gil_us:.0f} | "
            f"{c.gil_share:.2f} ({c.samples[0]}/{c.samples[1]}) |"
        )
    if calib["pure Python loop"].gil_share < 0.8:
        failures.append(
            f"py-spy sees a pure-Python loop hold the GIL only "
            f"{calib['pure Python loop'].gil_share:.0%} of its running time"
        )
    if calib["cv2.blur 960x540 (GIL-free C)"].gil_share > 0.2:
        failures.append(
            f"py-spy sees OpenCV's blur hold the GIL "
            f"{calib['cv2.blur 960x540 (GIL-free C)'].gil_share:.0%} of its time"
        )
    per_kind: dict[tuple[str, tuple[int, int]], Cost] = {}
    for size in SIZES:
        pixels = frames(*size)
        for kind in ("raw", "jpeg", "png"):
            data = [serialized(kind, p) for p in pixels]
            path = kind_path(kind)
            c = per_kind[(kind, size)] = cost(lambda i: path(data[i]), len(data), args.seconds, tmp)
            label = {
                "raw": "Image rgb8",
                "jpeg": "CompressedImage JPEG",
                "png": "CompressedImage PNG",
            }[kind]
            note = " (decoded at 1/4)" if kind == "jpeg" and size[0] == 1920 else ""
            lines.append(
                f"| {label}{note} | {size[0]}x{size[1]} | {c.cpu_us:.0f} | "
                f"{c.gil_us:.0f} | {c.gil_share:.2f} ({c.samples[0]}/{c.samples[1]}) |"
            )
    for kind in ("jpeg", "png"):
        c = per_kind[(kind, (1920, 1080))]
        if c.gil_us > c.cpu_us / 3:
            failures.append(
                f"{kind} at 1920x1080 holds the GIL {c.gil_us:.0f} of its {c.cpu_us:.0f} us a frame"
            )

    # 3. two decoder threads ----------------------------------------------------------------
    data = [serialized("jpeg", p) for p in frames(640, 480)]
    path = kind_path("jpeg")
    jpeg_work = lambda i: path(data[i])  # noqa: E731
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.rounds):  # alternating: the host's load moves
        one_n, one_c = run_for(args.two_thread_s, jpeg_work, len(data))
        for name, result in (
            ("JPEG 640x480 path, 1 thread", (one_c / args.two_thread_s, one_n / args.two_thread_s)),
            ("JPEG 640x480 path, 2 threads", two_threads(jpeg_work, len(data), args.two_thread_s)),
            ("control: cv2.blur 960x540, 2 threads", two_threads(blur, 1, args.two_thread_s)),
            ("control: pure Python, 2 threads", two_threads(python_loop, 1, args.two_thread_s)),
        ):
            runs.setdefault(name, []).append(result)
    rows = {
        name: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
        for name, rs in runs.items()
    }
    lines += [
        "",
        f"## Two decoder threads (medians of {args.rounds} alternating rounds)",
        "",
        "| threads | CPU s per wall s | frames (calls) per s |",
        "|---|---|---|",
    ]
    for name, (cores, rate) in rows.items():
        lines.append(f"| {name} | {cores:.2f} | {rate:.0f} |")
    jpeg2 = rows["JPEG 640x480 path, 2 threads"][0]
    free2 = rows["control: cv2.blur 960x540, 2 threads"][0]
    py2 = rows["control: pure Python, 2 threads"][0]
    if free2 < 1.2 * py2:
        failures.append(
            f"the host gave two GIL-free threads {free2:.2f} cores against "
            f"{py2:.2f} for two Python threads: too loaded to tell"
        )
    elif jpeg2 < 0.8 * free2:
        failures.append(
            f"two JPEG threads used {jpeg2:.2f} cores where two GIL-free threads used {free2:.2f}"
        )
    shutil.rmtree(tmp, ignore_errors=True)
    return emit_checked(lines, failures, args.out)


if __name__ == "__main__":
    sys.exit(main())
