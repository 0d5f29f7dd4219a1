#!/usr/bin/env bash
# The standing comparison with real Triton: writes every table with the machine and the commit to
# $OUTMD (default: bench/out/peer_<time>/results.md); bench/peer/README.md keeps the latest
# ratios, bench/peer/HISTORY.md one row a run.
#
#   bench/peer/run.sh                   # ../shared/peer-bench/setup.sh first (once)
#   CONC=1,16 bench/peer/run.sh         # fewer levels (passed on to the shared scripts)
#   EXTRA=0 bench/peer/run.sh           # only the shared configuration
#   EXTRAS="load" bench/peer/run.sh     # the shared configuration and the named extras only
#                                       # (u8, 448, 640, tiny16, seg, load; all by default)
#
# 1. Runs the shared side-by-side pass unchanged (../shared/peer-bench/side_by_side.sh: raw
#    onnxruntime, PyTriton, triton-ros-server 2x1 and 1x2 on tinydet), so its figures stay
#    comparable with every other run of it.
# 2. Then this project's own configurations on the same model, input and load generator
#    (run_perf.sh): the uint8 NHWC variant of tinydet (camera pixels in, cast and layout in the
#    graph: 4x fewer bytes per request) and tinydet at 448x448 (4x the pixels and bytes:
#    bench/peer/model_variant.py) and at 640x640 (8.2x: a YOLO-sized input, concurrency 1, 4 and
#    16: SIZE640_CONC), each on PyTriton and triton-ros-server 2x1 and 1x2, with
#    peak RSS; and a model with next to no compute (bench/peer/tiny_model.py: float32 [N,16],
#    one 16x16 MatMul) at concurrency 1, 16 and 64 (TINY_CONC), where each server's own
#    per-request path is what is measured; a model whose reply outweighs its request
#    (bench/peer/seg_model.py, `seg`: the shared input in, 1.6 MB of float32 masks out, little
#    compute) at concurrency 1, 4 and 16 (SEG_CONC). And (`load`) tinydet itself under loads the shared
#    pass does not reach: concurrency 64 and 128 (LOAD_CONC), and batch-4 requests (perf_analyzer
#    -b 4) at concurrency 1 and 8 (B4_CONC).
# The results file gives the machine, the load average before and after, and every table.
set -u
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$(cd "$HERE/../.." && pwd)
PEER=${PEER_BENCH:-$ROOT/../shared/peer-bench}; [ -d "$PEER" ] || PEER=/work/shared/peer-bench
D=${PEER_DIR:-/tmp/peer}
R=${1:-$ROOT/bench/out/peer_$(date +%Y%m%d_%H%M%S)}; mkdir -p "$R"
OUTMD=${OUTMD:-$R/results.md}
[ -x "$ROOT/.venv/bin/triton-ros-server" ] || { echo "run scripts/setup.sh first" >&2; exit 2; }
[ -f "$D/models/tinydet.onnx" ] || { echo "run $PEER/setup.sh first" >&2; exit 2; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
(cd "$ROOT" && "$PEER/side_by_side.sh" "$ROOT" "$R/shared") 2>&1 | tee "$R/shared.log"
wait_ready() { for _ in $(seq 1 90); do curl -s -o /dev/null -w '%{http_code}' "$1" | grep -q 200 && return 0; kill -0 "$2" 2>/dev/null || return 1; sleep 1; done; return 1; }
stop_pid() { kill -TERM "$1" 2>/dev/null; for _ in $(seq 1 40); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done; kill -KILL "$1"; }
# One extra configuration: PyTriton, then triton-ros-server as 2x1 and 1x2 (instances x ONNX
# Runtime threads, as the shared pass), on MODEL with INPUT.
extra_pair() {  # TAG MODEL INPUT DESCRIPTION [CONCURRENCIES [PERF_ANALYZER_ARGS...]]
  local tag=$1 model=$2 input=$3 desc=$4 conc=${5:-${CONC:-1,4,16,32}} PT TR N T repo
  shift 5 2>/dev/null || shift $#
  echo "== extra: PyTriton, $desc, max_batch 32, delay 2000us"
  "$D/venv-pt/bin/python" "$PEER/serve_pytriton.py" --model "$model" --name tinydet --max-batch 32 \
      --queue-delay-us 2000 --ort-threads 2 >"$R/extra/pytriton_$tag.log" 2>&1 & PT=$!
  wait_ready http://127.0.0.1:8000/v2/models/tinydet/ready $PT && \
    LABEL="PyTriton $tag" OUTDIR="$R/extra/pytriton_$tag" "$PEER/run_perf.sh" 127.0.0.1:8001 tinydet "$conc" --input-data "$input" "$@"
  stop_pid $PT
  for N in 2 1; do T=$((3 - N)); repo="$R/extra/repo_${tag}_${N}x$T"
    mkdir -p "$repo/tinydet/1"; cp "$model" "$repo/tinydet/1/model.onnx"
    printf '%s\n' 'name: "tinydet"' 'backend: "onnxruntime"' 'max_batch_size: 32' \
      'dynamic_batching { max_queue_delay_microseconds: 2000 }' \
      "instance_group [ { count: $N, kind: KIND_CPU } ]" \
      "parameters { key: \"intra_op_thread_count\" value: { string_value: \"$T\" } }" \
      > "$repo/tinydet/config.pbtxt"
    echo "== extra: triton-ros-server ${N}x$T, $desc, max_batch 32, delay 2000us"
    "$ROOT/.venv/bin/triton-ros-server" --model-repository="$repo" --http-port=8000 --grpc-port=8001 \
        --metrics-port=8002 >"$R/extra/triton_ros_${tag}_${N}x$T.log" 2>&1 & TR=$!
    wait_ready http://127.0.0.1:8000/v2/models/tinydet/ready $TR && \
      LABEL="triton_ros ${N}x$T $tag" OUTDIR="$R/extra/triton_ros_${tag}_${N}x$T" "$PEER/run_perf.sh" 127.0.0.1:8001 tinydet "$conc" --input-data "$input" "$@"
    grep -m1 VmHWM /proc/$TR/status 2>/dev/null | sed 's/^/server /'
    stop_pid $TR
  done
}
if [ "${EXTRA:-1}" != 0 ]; then
  mkdir -p "$R/extra"
  "$D/venv-pt/bin/python" "$PEER/make_model.py" --uint8 --out "$R/extra/tinydet_u8.onnx" >/dev/null
  "$D/venv-pt/bin/python" "$PEER/make_input_json.py" --dtype uint8 --shape 224,224,3 \
      --out "$R/extra/u8_input.json" >/dev/null
  for SIZE in 448 640; do
    (cd "$ROOT" && "$D/venv-pt/bin/python" -m bench.peer.model_variant \
        --model "$D/models/tinydet.onnx" --size $SIZE --out "$R/extra/tinydet_$SIZE.onnx" >/dev/null)
    "$D/venv-pt/bin/python" "$PEER/make_input_json.py" --shape 3,$SIZE,$SIZE \
        --out "$R/extra/${SIZE}_input.json" >/dev/null
  done
  (cd "$ROOT" && "$D/venv-pt/bin/python" -m bench.peer.tiny_model --out "$R/extra/tiny16.onnx" >/dev/null)
  (cd "$ROOT" && "$D/venv-pt/bin/python" -m bench.peer.seg_model --out "$R/extra/seg8.onnx" >/dev/null)
  "$D/venv-pt/bin/python" "$PEER/make_input_json.py" --shape 16 --out "$R/extra/tiny16_input.json" \
      >/dev/null
  want() { case " ${EXTRAS:-u8 448 640 tiny16 seg load} " in *" $1 "*) return 0;; esac; return 1; }
  {
  want u8 && extra_pair u8 "$R/extra/tinydet_u8.onnx" "$R/extra/u8_input.json" "tinydet uint8 NHWC 224x224x3"
  want 448 && extra_pair 448 "$R/extra/tinydet_448.onnx" "$R/extra/448_input.json" \
      "tinydet float32 NCHW 3x448x448 (4x the pixels)"
  want 640 && extra_pair 640 "$R/extra/tinydet_640.onnx" "$R/extra/640_input.json" \
      "tinydet float32 NCHW 3x640x640 (8.2x the pixels: a YOLO-sized input)" "${SIZE640_CONC:-1,4,16}"
  want tiny16 && extra_pair tiny16 "$R/extra/tiny16.onnx" "$R/extra/tiny16_input.json" \
      "tiny16 (float32 [16], one 16x16 MatMul: next to no compute)" "${TINY_CONC:-1,16,64}"
  want seg && extra_pair seg "$R/extra/seg8.onnx" "$D/models/tinydet_input.json" \
      "seg8 (the shared input; [8,224,224] float32 masks out: 1.6 MB a reply, little compute)" \
      "${SEG_CONC:-1,4,16}"
  want load && extra_pair load "$D/models/tinydet.onnx" "$D/models/tinydet_input.json" \
      "tinydet (the shared model and input) at high concurrency" "${LOAD_CONC:-64,128}"
  want load && extra_pair b4 "$D/models/tinydet.onnx" "$D/models/tinydet_input.json" \
      "tinydet (the shared model and input), batch-4 requests (-b 4)" "${B4_CONC:-1,8}" -b 4
  } 2>&1 | tee "$R/extra.log"
fi
{
  echo "# Peer benchmark: triton-ros-server beside real Triton (PyTriton) and raw onnxruntime"
  echo
  echo "\`bench/peer/run.sh\` (the shared \`../shared/peer-bench/side_by_side.sh\` unchanged, then this"
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
# The tables above are kept for the record even when a configuration failed; the exit status says
# so: every "== " configuration needs its table (a server that never became ready has none) and
# every perf_analyzer level its status "ok".
FAILED=$(cat "$R/shared.log" "$R/extra.log" 2>/dev/null | awk '
  function close_section() { if (section != "" && !table) print section ": no results" }
  /^== results/ { close_section(); section = ""; next }
  /^== / { close_section(); section = $0; table = 0; next }
  /^(conc|threads) / { table = 1; next }
  section !~ /raw onnxruntime/ && table && $1 ~ /^[0-9]+$/ && $10 != "ok" {
    print section ": concurrency " $1 " " $10 }
  END { close_section() }')
if [ -n "$FAILED" ]; then echo "FAILED:"; echo "$FAILED"; exit 1; fi
