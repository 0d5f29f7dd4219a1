#!/usr/bin/env bash
# Set up the virtual environments (idempotent) and run the whole test suite on each supported
# Python that CI covers: CPython 3.11 in .venv/ and CPython 3.10 in .venv-py3.10/, one after the
# other (the machine has two cores; the suites' timing margins assume they do not overlap).
# CI (.ci/run) runs exactly this. Exit status: non-zero when any suite (or set-up) fails.
#
#   ./scripts/test.sh                      the whole suite on 3.11, then on 3.10
#   ./scripts/test.sh --python 3.11 -k seeing -q    one Python (repeatable), pytest arguments after
#   TRITON_ROS_TEST_PYTHONS="3.12" ./scripts/test.sh   the same through the environment
#
# .venv/ (scripts/run.sh and the README use it) is created with the first Python of the list and
# serves whichever Python it has; every other one gets .venv-pyX.Y/. Arguments other than --python go to pytest unchanged.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

pythons=()
while [ $# -gt 0 ] && [ "$1" = "--python" ]; do
  [ $# -ge 2 ] || { echo "test.sh: --python needs a version such as 3.10" >&2; exit 2; }
  pythons+=("$2"); shift 2
done
if [ ${#pythons[@]} -eq 0 ]; then
  read -r -a pythons <<< "${TRITON_ROS_TEST_PYTHONS:-3.11 3.10}"
fi

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }

# Fast DDS needs a larger shared-memory segment for camera images (config/fastdds.xml).
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$ROOT/config/fastdds.xml}"

status=0
summary=()
for i in "${!pythons[@]}"; do
  want="${pythons[$i]}"
  # .venv/ serves the Python it already has, or the first one asked for when it does not exist.
  if [ -x "$ROOT/.venv/bin/python" ]; then
    if [ "$(version_of "$ROOT/.venv/bin/python")" = "$want" ]; then venv="$ROOT/.venv"
    else venv="$ROOT/.venv-py$want"; fi
  elif [ "$i" -eq 0 ]; then venv="$ROOT/.venv"
  else venv="$ROOT/.venv-py$want"; fi
  echo "test.sh: CPython $want in ${venv#"$ROOT"/}" >&2
  if ! TRITON_ROS_PYTHON="$want" TRITON_ROS_VENV="$venv" "$ROOT/scripts/setup.sh"; then
    echo "test.sh: setting up CPython $want failed" >&2
    summary+=("CPython $want: set-up FAILED"); status=1; continue
  fi
  got="$(version_of "$venv/bin/python")"
  if [ "$got" != "$want" ]; then
    echo "test.sh: ${venv#"$ROOT"/} has CPython $got, not $want (remove it to recreate it)" >&2
    summary+=("CPython $want: WRONG INTERPRETER ($got)"); status=1; continue
  fi
  start=$SECONDS
  "$venv/bin/python" -m pytest "$@"
  rc=$?
  # pytest exits 5 when it collected no test: that is a failure of the suite, not a pass.
  if [ $rc -eq 5 ]; then echo "test.sh: no tests were collected" >&2; rc=1; fi
  summary+=("CPython $want: $([ $rc -eq 0 ] && echo passed || echo "FAILED (pytest exit $rc)") in $((SECONDS - start)) s")
  [ $rc -eq 0 ] || status=1
done
printf 'test.sh: %s\n' "${summary[@]}" >&2
exit $status
