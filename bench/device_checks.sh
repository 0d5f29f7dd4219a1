#!/usr/bin/env bash
# All GPU checks in one run on a machine with an NVIDIA GPU (the device tool's H200: CUDA 13,
# cuda-bindings, CuPy, PyTorch, onnxruntime (CPU), pytest, no TensorRT): the checks under
# test/gpu/ (pytest, one module a check, TRITON_ROS_REQUIRE_GPU=1 so that a missing GPU fails
# them instead of skipping them) and the GPU batching benchmark (bench/gpu/batching.py). Wheels
# in .whl/ (made by bench/gpu/fetch_device_wheels.sh: grpcio, protobuf, tritonclient, PyYAML)
# are installed to /tmp/site first when present. Logs and results go to $OUT when set (else
# /tmp).
#
# Exit status: 0 only when every check passed; otherwise the number of failed checks (a check
# that cannot run, e.g. without a GPU, fails). Each check's own status is kept: nothing is
# filtered through a pipe that would replace it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUTDIR="${OUT:-/tmp}"
mkdir -p "$OUTDIR"
log="$OUTDIR/device_checks.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
failed=()
check() {  # check NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local part rc
  part=$(mktemp)
  say "== $name: $*"
  timeout "$limit" "$@" >"$part" 2>&1
  rc=$?
  tee -a "$log" <"$part"
  rm -f "$part"
  if [ "$rc" -eq 0 ]; then say "PASS $name"; else say "FAIL $name (exit status $rc)"; failed+=("$name"); fi
}
if ls .whl/*.whl >/dev/null 2>&1; then
  # --find-links: pip takes the wheels that fit this interpreter (.whl holds several versions)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --find-links .whl --target /tmp/site grpcio protobuf tritonclient PyYAML >>"$log" 2>&1 \
      && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 TRITON_ROS_REQUIRE_GPU=1
pytest=(python3 -m pytest -p no:cacheprovider -v -s)
check "GPU present (nvidia-smi -L)" 30 nvidia-smi -L
check "python packages" 60 python3 -c 'import numpy, google.protobuf, grpc, tritonclient.grpc; print("numpy", numpy.__version__, "protobuf", google.protobuf.__version__, "grpcio", grpc.__version__)'
check "TensorRT backend CUDA streams and buffers (test/gpu/test_gpu_cuda_streams.py)" 180 "${pytest[@]}" test/gpu/test_gpu_cuda_streams.py
check "core device handling (test/gpu/test_gpu_device_handling.py)" 180 "${pytest[@]}" test/gpu/test_gpu_device_handling.py
check "GPU metrics through NVML (test/gpu/test_gpu_metrics.py)" 120 "${pytest[@]}" test/gpu/test_gpu_metrics.py
check "PyTorch backend on the GPU (test/gpu/test_gpu_pytorch.py)" 300 "${pytest[@]}" test/gpu/test_gpu_pytorch.py
check "GPU batching benchmark (bench/gpu/batching.py)" 300 python3 -m bench.gpu.batching --seconds 4 --concurrency 1,8,32,64 --out "$OUTDIR/gpu-batching.md"
if [ "${#failed[@]}" -eq 0 ]; then
  say "device checks: all passed"
  exit 0
fi
say "device checks: ${#failed[@]} failed: ${failed[*]}"
exit "${#failed[@]}"
