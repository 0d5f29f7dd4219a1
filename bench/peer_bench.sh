#!/usr/bin/env bash
# The standing comparison with real Triton, recorded in bench/RESULTS-peer.md with the machine.
#
#   bench/peer_bench.sh                 # ../shared/peer-bench/setup.sh first (once)
#   CONC=1,16 bench/peer_bench.sh       # fewer levels (passed on to the shared scripts)
#   EXTRA=0 bench/peer_bench.sh         # only the shared configuration
#
# 1. Runs the shared side-by-side pass unchanged (../shared/peer-bench/side_by_side.sh: raw
#    onnxruntime, PyTriton, triton-ros-server 2x1 and 1x2 on tinydet), so its figures stay
#    comparable with every other run of it.
# 2. Then this project's own configurations on the same model, input and load generator
#    (run_perf.sh): the uint8 NHWC variant of tinydet (camera pixels in, cast and layout in the
#    graph: 4x fewer bytes per request; PyTriton and triton-ros-server 2x1 both), with peak RSS.
# The results file gives the machine, the load average before and after, and every table.
set -u
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/.." && pwd)
PEER=${PEER_BENCH:-$ROOT/../shared/peer-bench}; [ -d "$PEER" ] || PEER=/work/shared/peer-bench
D=${PEER_DIR:-/tmp/peer}
R=${1:-$ROOT/bench/out/peer_$(date +%Y%m%d_%H%M%S)}; mkdir -p "$R"
OUTMD=${OUTMD:-$ROOT/bench/RESULTS-peer.md}
[ -x "$ROOT/.venv/bin/triton-ros-server" ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
[ -f "$D/models/tinydet.onnx" ] || { echo "run $PEER/setup.sh first" >&2; exit 2; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
(cd "$ROOT" && "$PEER/side_by_side.sh" "$ROOT" "$R/shared") 2>&1 | tee "$R/shared.log"
wait_ready() { for _ in $(seq 1 90); do curl -s -o /dev/null -w '%{http_code}' "$1" | grep -q 200 && return 0; kill -0 "$2" 2>/dev/null || return 1; sleep 1; done; return 1; }
stop_pid() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 1 40); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done; kill -KILL "$1"; }
if [ "${EXTRA:-1}" != 0 ]; then
  mkdir -p "$R/extra"
  "$D/venv-pt/bin/python" "$PEER/make_model.py" --uint8 --out "$R/extra/tinydet_u8.onnx" >/dev/null
  INPUT="$R/extra/u8_input.json"
  "$D/venv-pt/bin/python" "$PEER/make_input_json.py" --dtype uint8 --shape 224,224,3 --out "$INPUT" >/dev/null
  M="$R/extra/tinydet_u8.onnx"
  {
  echo "== extra: PyTriton, tinydet uint8 NHWC 224x224x3, max_batch 32, delay 2000us"
  "$D/venv-pt/bin/python" "$PEER/serve_pytriton.py" --model "$M" --name tinydet --max-batch 32 \
      --queue-delay-us 2000 --ort-threads 2 >"$R/extra/pytriton.log" 2>&1 & PT=$!
  wait_ready http://127.0.0.1:8000/v2/models/tinydet/ready $PT && \
    LABEL="PyTriton u8" OUTDIR="$R/extra/pytriton" "$PEER/run_perf.sh" 127.0.0.1:8001 tinydet "${CONC:-1,4,16,32}" --input-data "$INPUT"
  stop_pid $PT
  REPO="$R/extra/repo"; mkdir -p "$REPO/tinydet/1"; cp "$M" "$REPO/tinydet/1/model.onnx"
  printf '%s\n' 'name: "tinydet"' 'backend: "onnxruntime"' 'max_batch_size: 32' \
    'dynamic_batching { max_queue_delay_microseconds: 2000 }' \
    'instance_group [ { count: 2, kind: KIND_CPU } ]' \
    'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }' > "$REPO/tinydet/config.pbtxt"
  echo "== extra: triton-ros-server 2x1, tinydet uint8 NHWC 224x224x3, max_batch 32, delay 2000us"
  "$ROOT/.venv/bin/triton-ros-server" --model-repository="$REPO" --http-port=8000 --grpc-port=8001 \
      --metrics-port=8002 >"$R/extra/triton_ros.log" 2>&1 & TR=$!
  wait_ready http://127.0.0.1:8000/v2/models/tinydet/ready $TR && \
    LABEL="triton_ros 2x1 u8" OUTDIR="$R/extra/triton_ros" "$PEER/run_perf.sh" 127.0.0.1:8001 tinydet "${CONC:-1,4,16,32}" --input-data "$INPUT"
  grep -m1 VmHWM /proc/$TR/status 2>/dev/null | sed 's/^/server /'
  stop_pid $TR
  } 2>&1 | tee "$R/extra.log"
fi
{
  echo "# Peer benchmark: triton-ros-server beside real Triton (PyTriton) and raw onnxruntime"
  echo
  echo "\`bench/peer_bench.sh\` (the shared \`../shared/peer-bench/side_by_side.sh\` unchanged, then this"
  echo "project's extra configurations), run $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)."
  echo
  echo "Machine: $(uname -n), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores,"
  echo "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr). Load average (1/5/15 min) before: $LOAD0;"
  echo "after: $(cut -d' ' -f1-3 /proc/loadavg). perf_analyzer shares the cores with the server: read"
  echo "ratios within one run; the load1 column shows foreign load (above ~3 on 2 cores)."
  echo
  echo '```'
  grep -v "^# logs" "$R/shared.log"
  [ -f "$R/extra.log" ] && grep -v "^# logs" "$R/extra.log"
  echo '```'
} > "$OUTMD"
echo "results: $OUTMD (raw: $R)"
