#!/usr/bin/env bash
# All GPU checks in one run on a machine with an NVIDIA GPU (the device tool's H200: CUDA 13,
# cuda-bindings, onnxruntime (CPU), no TensorRT). Wheels in .whl/ (tritonclient, protobuf) are
# installed to /tmp/site first when present. Logs go to $OUT when set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
log="${OUT:-/tmp}/device_checks.log"
{
  nvidia-smi -L
  python3 -c 'import onnxruntime, numpy, google.protobuf as p; print("onnxruntime", onnxruntime.__version__, "numpy", numpy.__version__, "protobuf", p.__version__)'
  rc=0
  echo "== TensorRT backend CUDA streams and buffers (bench/gpu_check.py)"
  timeout 180 python3 bench/gpu_check.py --devices 0 --instances 2 || rc=1
  echo "== core device handling (bench/gpu_server_check.py)"
  timeout 180 python3 bench/gpu_server_check.py 2>&1 | grep -v "^I\|^W" || rc=1
  echo "== GPU metrics through NVML (bench/gpu_metrics_check.py)"
  timeout 120 python3 bench/gpu_metrics_check.py || rc=1
  echo "device checks exit status: $rc"
} 2>&1 | tee "$log"
