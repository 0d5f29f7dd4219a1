# Sourced by scripts/setup.sh. Installs NVIDIA's tritonserver 2.51 (Python backend only, CPU) from
# the PyTriton wheel (nvidia-pytriton on PyPI) into .venv/opt/pytriton, for the tests that send the
# same requests to it and to triton-ros-server (test/tritonserver_process.py). The wheel is
# unpacked, not pip-installed: only its server (pytriton/tritonserver/) and the libraries it
# bundles (nvidia_pytriton.libs/), in the wheel's own layout (the binaries find the libraries by
# relative RPATH), so none of its dependencies (numpy<2, protobuf, tritonclient) touch .venv's
# pins. The Python backend's stub for this environment's Python is copied where the backend looks
# for it, as PyTriton does. The stub embeds this Python (its own libpython) and runs the models in
# a small venv of its own, .venv/opt/pytriton/venv, holding numpy 1.26 alone: the 2.51 stub is
# built against numpy 1 (with .venv's numpy 2 its output tensors come back empty). x86_64 with
# glibc >= 2.35 only (the wheel is manylinux_2_35_x86_64); elsewhere, or with
# TRITON_ROS_TRITONSERVER=0, it is skipped and the comparison tests skip, saying why. Redone when
# the pins, this step or the Python change; about 5 s.
PYTRITON_PIN="nvidia-pytriton==0.7.0"       # tritonserver 2.51.0
PYTRITON_NUMPY_PIN="numpy==1.26.4"          # what PyTriton 0.7.0 pins (numpy<2)
PYTRITON_DIR="$VENV/opt/pytriton"
py_version="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
if [ "${TRITON_ROS_TRITONSERVER:-1}" = "0" ]; then
  if step_needed tritonserver-skipped off; then
    echo "setup: tritonserver is not installed (TRITON_ROS_TRITONSERVER=0); the comparison" \
         "tests with it skip"
    step_done tritonserver-skipped off
  fi
elif [ "$(uname -m)" != "x86_64" ] || [ -z "$glibc" ] || \
     [ "$(printf '%s\n2.35\n' "$glibc" | sort -V | head -1)" != "2.35" ]; then
  if step_needed tritonserver-skipped "$(uname -m)-$glibc"; then
    echo "setup: tritonserver is not installed ($(uname -m), glibc ${glibc:-unknown}: the" \
         "PyTriton wheel needs x86_64 and glibc >= 2.35); the comparison tests with it skip"
    step_done tritonserver-skipped "$(uname -m)-$glibc"
  fi
else
  h=$( (echo "$PYTRITON_PIN $PYTRITON_NUMPY_PIN $py_version"
        cat "$ROOT/scripts/setup.d/50-tritonserver.sh") | sha256sum | cut -d' ' -f1)
  if step_needed tritonserver "$h"; then
    echo "setup: installing tritonserver 2.51 ($PYTRITON_PIN, unpacked into" \
         "${PYTRITON_DIR#"$ROOT"/})"
    tmp="$(mktemp -d)"
    "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: \
        --platform manylinux_2_35_x86_64 -d "$tmp" "$PYTRITON_PIN"
    rm -rf "$PYTRITON_DIR"
    "$VENV/bin/python" - "$tmp" "$PYTRITON_DIR" "$py_version" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest, version = sys.argv[1:]
wheel = glob.glob(os.path.join(tmp, "nvidia_pytriton-*.whl"))[0]
stubs = "pytriton/tritonserver/python_backend_stubs/"
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(("pytriton/tritonserver/", "nvidia_pytriton.libs/")):
            continue
        if name.startswith(stubs) and not name.startswith(f"{stubs}{version}/"):
            continue
        if name.startswith("nvidia_pytriton.libs/libpython3-"):   # the 3.13 stub's own
            continue
        path = z.extract(info, dest)
        if not info.is_dir():
            os.chmod(path, 0o755)
stub = os.path.join(dest, stubs, version, "triton_python_backend_stub")
if not os.path.exists(stub):
    sys.exit(f"setup: the PyTriton wheel has no Python backend stub for Python {version}")
shutil.copy2(stub, os.path.join(dest, "pytriton/tritonserver/backends/python"))
PY
    rm -rf "$tmp"
    "$VENV/bin/python" -m venv --without-pip "$PYTRITON_DIR/venv"
    "$VENV/bin/python" -m pip install -q --no-deps --only-binary=:all: \
        --target "$PYTRITON_DIR/venv/lib/python$py_version/site-packages" "$PYTRITON_NUMPY_PIN"
    # --help exits 1; what it prints says whether the binary and its libraries load
    usage="$("$PYTRITON_DIR/pytriton/tritonserver/bin/tritonserver" --help 2>&1 || true)"
    if [[ "$usage" != *"Usage: tritonserver"* ]]; then
      echo "$usage" | tail -5 >&2
      echo "setup: tritonserver at $PYTRITON_DIR does not run" >&2
      exit 1
    fi
    step_done tritonserver "$h"
  fi
fi
