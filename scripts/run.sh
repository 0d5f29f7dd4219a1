#!/usr/bin/env bash
# Set up .venv/ (idempotent) and run the main job: the ROS 2 inference node on the bundled detector,
# fed by synthetic robots' cameras (2 robots x 2 cameras at 30 Hz, four resolutions) and a gRPC
# client at once, showing live detections and per-model statistics for a bounded time (default
# 20 s; --seconds N), then stopping everything cleanly. Extra arguments go to the demo
# (python -m triton_ros.ros.tools.demo --help). The server-only demo is python -m triton_ros.demo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
# Fast DDS needs a larger shared-memory segment for camera images (config/fastdds.xml).
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$ROOT/config/fastdds.xml}"
exec "$ROOT/.venv/bin/python" -m triton_ros.ros.tools.demo "$@"
