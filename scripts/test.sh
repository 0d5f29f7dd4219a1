#!/usr/bin/env bash
# Set up the virtual environments (idempotent) and run the whole test suite on each supported
# Python that CI covers: CPython 3.11 in .venv/ and CPython 3.10 in .venv-py3.10/. The set-ups run
# one after the other; the suites then run side by side (each spends most of its wall time waiting
# on servers, nodes and timeouts, about a quarter of a core on average), so CI stays well inside
# 30 minutes. The first suite's output streams; the others' is printed, whole, when they end. Each
# suite gets its own ROS domain (TRITON_ROS_TEST_DOMAIN_ID) and picks free ports on its own.
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
venvs=()
wants=()
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
  venvs+=("$venv"); wants+=("$want")
done

run_suite() {  # run_suite VENV DOMAIN PYTEST-ARGS...: pytest's exit status, 5 (no tests) as 1
  local venv="$1" domain="$2"; shift 2
  TRITON_ROS_TEST_DOMAIN_ID="$domain" "$venv/bin/python" -m pytest "$@"
  local rc=$?
  # pytest exits 5 when it collected no test: that is a failure of the suite, not a pass.
  if [ $rc -eq 5 ]; then echo "test.sh: no tests were collected" >&2; rc=1; fi
  return $rc
}

base_domain=$(( (RANDOM % 90) + 1 ))
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
start=$SECONDS
pids=()
for i in "${!venvs[@]}"; do
  [ "$i" -eq 0 ] && continue
  ( run_suite "${venvs[$i]}" $((base_domain + i)) "$@" >"$logs/$i.log" 2>&1
    echo $? >"$logs/$i.rc"; echo $((SECONDS - start)) >"$logs/$i.secs" ) &
  pids+=($!)
done
if [ ${#venvs[@]} -gt 0 ]; then
  run_suite "${venvs[0]}" "$base_domain" "$@"
  rc=$?
  summary+=("CPython ${wants[0]}: $([ $rc -eq 0 ] && echo passed || echo "FAILED (pytest exit $rc)") in $((SECONDS - start)) s")
  [ $rc -eq 0 ] || status=1
fi
for pid in "${pids[@]}"; do wait "$pid"; done
for i in "${!venvs[@]}"; do
  [ "$i" -eq 0 ] && continue
  echo "test.sh: ===== CPython ${wants[$i]} (${venvs[$i]#"$ROOT"/}), run alongside =====" >&2
  cat "$logs/$i.log"
  rc=$(cat "$logs/$i.rc" 2>/dev/null || echo 1)
  summary+=("CPython ${wants[$i]}: $([ "$rc" -eq 0 ] && echo passed || echo "FAILED (pytest exit $rc)") in $(cat "$logs/$i.secs" 2>/dev/null || echo '?') s")
  [ "$rc" -eq 0 ] || status=1
done
printf 'test.sh: %s\n' "${summary[@]}" >&2
exit $status
