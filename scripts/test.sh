#!/usr/bin/env bash
# Set up .venv/ (idempotent) and run the whole test suite. CI (.ci/run) runs exactly this.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" || exit 1
cd "$ROOT"
# Fast DDS needs a larger shared-memory segment for camera images (config/fastdds.xml).
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$ROOT/config/fastdds.xml}"
"$ROOT/.venv/bin/python" -m pytest "$@"
rc=$?
# pytest exits 5 when it collected no test: that is a failure of the suite, not a pass.
if [ $rc -eq 5 ]; then echo "test.sh: no tests were collected" >&2; exit 1; fi
exit $rc
