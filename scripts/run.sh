#!/usr/bin/env bash
# Set up .venv/ (idempotent) and run the main job: serve the bundled model repository, drive it
# with the Triton client and perf_analyzer for a bounded time, print per-model statistics, stop.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
cd "$ROOT"
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$ROOT/config/fastdds.xml}"
exec "$ROOT/.venv/bin/python" -m triton_ros.demo "$@"
