"""Benchmark: the node's preprocessing alone, CPU per frame, one source tree against another.

Each tree (``--tree LABEL:PATH``, the working tree by default) is timed in a process of its own
that imports ``triton_ros`` from that path, so two commits compare side by side in one run:
a 640x480 camera frame (rgb8 and bgr8) letterboxed into the model inputs below, through
``Preprocessor`` exactly as a binding calls it (the message's bytes in, a tensor out). Trees
alternate for ``--rounds`` rounds; the table gives each case's median over the rounds of the
CPU microseconds per frame (``time.process_time``, one OpenCV thread), and the ratio of the
first tree to the last.

    .venv/bin/python -m bench.ros.preprocess --tree before:/tmp/old --tree after:.

The table, with the machine and each tree's commit, goes to ``--out`` (default
bench/out/ros-preprocess.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT, commit, default_out, emit, machine_lines

# (label, input dims, data type, format)
INPUTS = (
    ("FP32 NCHW 256", (3, 256, 256), "FP32", "FORMAT_NCHW"),
    ("FP32 NCHW 640", (3, 640, 640), "FP32", "FORMAT_NCHW"),
    ("UINT8 NHWC 256", (256, 256, 3), "UINT8", "FORMAT_NHWC"),
)
ENCODINGS = ("rgb8", "bgr8")

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import cv2, numpy as np
cv2.setNumThreads(1)
from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.codec.preprocess import PreprocessConfig, Preprocessor, plan_input
frames, cases, distinct = int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
images = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8).tobytes() for _ in range(distinct)]
out = {}
for label, dims, datatype, fmt, encoding in cases:
    plan = plan_input(PreprocessConfig(), TensorConfig("x", datatype, tuple(dims), format=fmt),
                      model="m")
    pre = Preprocessor(plan)
    for i in range(20):
        pre(images[i % distinct], encoding, 480, 640, 1920)
    t0 = time.process_time()
    for i in range(frames):
        pre(images[i % distinct], encoding, 480, 640, 1920)
    out[f"{label} {encoding}"] = (time.process_time() - t0) / frames * 1e6
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tree",
        action="append",
        default=None,
        metavar="LABEL:PATH",
        help="a source tree to time (repeatable; default: this one)",
    )
    parser.add_argument("--frames", type=int, default=400, help="frames per case and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--distinct",
        type=int,
        default=1,
        help="distinct frames cycled through: 1 keeps the frame warm in the "
        "cache; 64 (59 MB) makes each frame arrive cold, as in the node",
    )
    parser.add_argument(
        "--out", default=default_out("ros-preprocess"), help="also write the table to this file"
    )
    args = parser.parse_args()
    trees = [t.split(":", 1) for t in (args.tree or [f"this:{ROOT}"])]
    cases = [(label, dims, dt, fmt, enc) for label, dims, dt, fmt in INPUTS for enc in ENCODINGS]
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    for r in range(args.rounds):
        for label, path in trees:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    CHILD,
                    str(Path(path).resolve()),
                    str(args.frames),
                    json.dumps(cases),
                    str(args.distinct),
                ],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            runs[label].append(json.loads(proc.stdout))
            print(f"round {r + 1} {label}: done", flush=True)

    names = list(runs[trees[0][0]][0])
    head = [label for label, _ in trees]
    lines = [
        "# Preprocessing alone: CPU per 640x480 frame (us)",
        "",
        f"`python -m bench.ros.preprocess {' '.join(sys.argv[1:])}`, run "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}.",
        "",
        machine_lines(),
        "",
        f"{args.frames} frames per case ({args.distinct} distinct), {args.rounds} "
        "alternating rounds, medians; trees: "
        + ", ".join(f"{label} = `{path}` ({commit(Path(path))})" for label, path in trees),
        "",
        "| case | " + " | ".join(head) + (" | first / last |" if len(head) > 1 else " |"),
        "|---|" + "---|" * (len(head) + (1 if len(head) > 1 else 0)),
    ]
    for name in names:
        values = [statistics.median([run[name] for run in runs[label]]) for label in head]
        row = f"| {name} | " + " | ".join(f"{v:.0f}" for v in values)
        lines.append(row + (f" | {values[0] / values[-1]:.2f}x |" if len(head) > 1 else " |"))
    return emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    sys.exit(main())
