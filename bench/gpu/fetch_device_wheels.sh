#!/usr/bin/env bash
# Wheels that bench/device_checks.sh installs on a GPU machine that lacks them (it may have no
# network): grpcio, protobuf, tritonclient and PyYAML, pinned as in requirements.txt, for
# CPython 3.10-3.12 on manylinux x86_64. They go to .whl/ (ignored by git); pass
# `carry: [".whl"]` to the device tool so that they travel with the working tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pin() { grep -E "^$1==" requirements.txt | head -1; }
mkdir -p .whl
for py in 310 311 312; do
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --python-version "$py" \
      -d .whl "$(pin grpcio)" "$(pin protobuf)" "$(pin PyYAML)"
done
python3 -m pip download -q --no-deps --only-binary=:all: -d .whl "$(pin 'tritonclient\[grpc,http\]' | sed 's/\[.*\]//')" \
  || python3 -m pip download -q --no-deps -d .whl "tritonclient==$(pin 'tritonclient\[grpc,http\]' | sed 's/.*==//')"
du -sh .whl
