# Sourced by scripts/setup.sh. Installs Triton's perf_analyzer (the C++ load generator shipped in
# the tritonclient 2.50.0 manylinux wheel; newer wheels need a newer glibc) into
# .venv/opt/perf_analyzer, with a wrapper at .venv/bin/perf_analyzer that sets its library path.
# It needs libb64 (from Debian, unpacked locally: no root needed) and libcudart.so.12 (the
# nvidia-cuda-runtime-cu12 wheel; no GPU needed). x86_64 only.
PA_VERSION=2.50.0
PA_DIR="$VENV/opt/perf_analyzer"
h="perf_analyzer-$PA_VERSION-1"
if [ "$(uname -m)" != "x86_64" ]; then
  echo "setup: perf_analyzer is only set up on x86_64 here (skipped)"
elif step_needed perf_analyzer "$h"; then
  echo "setup: installing perf_analyzer $PA_VERSION"
  tmp="$(mktemp -d)"
  "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: \
      --platform manylinux1_x86_64 --python-version 3.11 -d "$tmp" "tritonclient==$PA_VERSION"
  "$VENV/bin/python" - "$tmp" <<'PY'
import sys, zipfile, glob, os
tmp = sys.argv[1]
wheel = glob.glob(os.path.join(tmp, "tritonclient-*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/bin/perf_analyzer"))
    with open(os.path.join(tmp, "perf_analyzer"), "wb") as f:
        f.write(z.read(name))
PY
  # One apt at a time: scripts/test.sh sets up its Pythons side by side, and apt-get update
  # fails while another holds its lock.
  (
    flock 9
    (cd "$tmp" && apt-get download libb64-0d >/dev/null 2>&1) || {
      apt-get update >/dev/null 2>&1 || true
      (cd "$tmp" && apt-get download libb64-0d >/dev/null)
    }
  ) 9>"${TMPDIR:-/tmp}/triton_ros-setup-apt.lock"
  dpkg -x "$tmp"/libb64-0d_*.deb "$tmp/b64"
  mkdir -p "$PA_DIR/bin" "$PA_DIR/lib"
  install -m 755 "$tmp/perf_analyzer" "$PA_DIR/bin/perf_analyzer"
  cp -a "$tmp"/b64/usr/lib/*/libb64.so.0d* "$PA_DIR/lib/"
  "$VENV/bin/python" -m pip install -q nvidia-cuda-runtime-cu12==12.9.79
  cudart="$("$VENV/bin/python" -c 'import nvidia.cuda_runtime as m, os; print(os.path.join(list(m.__path__)[0], "lib"))')"
  cat > "$VENV/bin/perf_analyzer" <<WRAP
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$PA_DIR/lib:$cudart\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$PA_DIR/bin/perf_analyzer" "\$@"
WRAP
  chmod +x "$VENV/bin/perf_analyzer"
  rm -rf "$tmp"
  "$VENV/bin/perf_analyzer" --version >/dev/null 2>&1 || "$VENV/bin/perf_analyzer" -h >/dev/null 2>&1 || true
  step_done perf_analyzer "$h"
fi
