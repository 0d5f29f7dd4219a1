#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv/ at the repository root.
#
# Idempotent: each step records a stamp of its inputs and is skipped when they have not changed,
# so a second run takes about a second. Everything comes from PyPI (and Debian apt for the
# optional perf_analyzer library); nothing else is reached.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
STAMPS="$VENV/.stamps"

find_python() {
  # The ROS 2 wheels are built for CPython 3.11.
  for py in "${TRITON_ROS_PYTHON:-}" python3.11 python3; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 && \
       "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "setup: CPython 3.11 is required (the ROS 2 PyPI wheels are built for it)" >&2
  return 1
}

stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }

step_needed() {  # step_needed NAME HASH
  [ "$(cat "$STAMPS/$1" 2>/dev/null)" != "$2" ]
}
step_done() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python)"
  echo "setup: creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi

h=$(stamp_of "$ROOT/requirements.txt")
if step_needed requirements "$h"; then
  echo "setup: installing requirements"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements.txt"
  step_done requirements "$h"
fi

h=$(stamp_of "$ROOT/setup.py" "$ROOT/setup.cfg" "$ROOT/package.xml")
if step_needed package "$h"; then
  echo "setup: installing triton_ros (editable)"
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"
  step_done package "$h"
fi

# Further steps (interface package, tools) live in scripts/setup.d/*.sh, sourced in order so that
# they share step_needed/step_done and the variables above.
for part in "$ROOT"/scripts/setup.d/*.sh; do
  [ -e "$part" ] || continue
  # shellcheck source=/dev/null
  source "$part"
done
