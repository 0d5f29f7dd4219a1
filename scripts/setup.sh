#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv/ at the repository root.
#
# Idempotent: each step records a stamp of its inputs and is skipped when they have not changed,
# so a second run takes about a second. Everything comes from PyPI (and Debian apt for the
# optional perf_analyzer library); nothing else is reached.
#
# CPython 3.10, 3.11 or 3.12 (the ROS 2 PyPI wheels exist for each; Jetsons with JetPack 6 run
# 3.10, Ubuntu 24.04 runs 3.12). Environment:
#   TRITON_ROS_PYTHON=3.10 | /path/to/python   the interpreter (default: python3, else the
#                                              first of python3.11, python3.12, python3.10)
#   TRITON_ROS_VENV=/path                      the virtual environment (default: <repo>/.venv)
# A version number is looked up on PATH and in pyenv's versions (~/.pyenv/versions/X.Y.*).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TRITON_ROS_VENV:-$ROOT/.venv}"
STAMPS="$VENV/.stamps"

supported() {  # supported PYTHON: CPython 3.10-3.12?
  "$1" -c 'import sys, platform
sys.exit(0 if platform.python_implementation() == "CPython" and (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' \
    >/dev/null 2>&1
}

candidates_for() {  # candidates_for X.Y: interpreters that may be CPython X.Y
  echo "python$1"
  local root="${PYENV_ROOT:-$HOME/.pyenv}"
  ls -d "$root"/versions/"$1".*/bin/"python$1" 2>/dev/null | sort -rV || true
  echo "/usr/bin/python$1"
}

find_python() {
  local want="${TRITON_ROS_PYTHON:-}" candidates=()
  if [ -n "$want" ]; then
    if [[ "$want" =~ ^3\.[0-9]+$ ]]; then
      mapfile -t candidates < <(candidates_for "$want")
    else
      candidates=("$want")
    fi
  else
    candidates=(python3)
    for v in 3.11 3.12 3.10; do mapfile -t -O "${#candidates[@]}" candidates < <(candidates_for "$v"); done
  fi
  for py in "${candidates[@]}"; do
    if command -v "$py" >/dev/null 2>&1 && supported "$py"; then
      if [ -n "$want" ] && [[ "$want" =~ ^3\.[0-9]+$ ]] && \
         [ "$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" != "$want" ]; then
        continue
      fi
      command -v "$py"; return 0
    fi
  done
  echo "setup: no CPython ${want:-3.10-3.12} found (tried: ${candidates[*]}); the ROS 2 PyPI" \
       "wheels exist for CPython 3.10, 3.11 and 3.12: install one (e.g. apt-get install" \
       "python3-venv) or set TRITON_ROS_PYTHON to its path" >&2
  return 1
}

stamp_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }

step_needed() {  # step_needed NAME HASH
  [ "$(cat "$STAMPS/$1" 2>/dev/null)" != "$2" ]
}
step_done() { mkdir -p "$STAMPS"; echo "$2" > "$STAMPS/$1"; }

if [ -x "$VENV/bin/python" ] && ! supported "$VENV/bin/python"; then
  echo "setup: $VENV has $("$VENV/bin/python" --version 2>&1), not CPython 3.10-3.12: remove it" \
       "(rm -rf $VENV) and run again" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python)"
  echo "setup: creating $VENV with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv "$VENV"
fi

# requirements-build.txt: the build tools of this environment only (setuptools < 80, which
# colcon's symlink install needs), kept out of requirements.txt for apt-installed ROS 2 users.
h=$(stamp_of "$ROOT/requirements.txt" "$ROOT/requirements-build.txt")
if step_needed requirements "$h"; then
  echo "setup: installing requirements"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements.txt" -r "$ROOT/requirements-build.txt"
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
