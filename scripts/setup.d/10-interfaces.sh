# Sourced by scripts/setup.sh. Builds the interface package triton_ros_interfaces (ament_cmake,
# rosidl: messages and services of the ROS node) and installs it into the .venv prefix, where the
# venv's python imports it with no environment variables. Rebuilt only when its sources, the
# pinned build wheels or this step change. Needs cmake (Debian's, else the PyPI wheel) and a C++
# compiler (Debian's g++).
IFACE_SRC="$ROOT/triton_ros_interfaces"
IFACE_BUILD="$VENV/build/triton_ros_interfaces"
h=$( (cd "$ROOT" && find triton_ros_interfaces -type f | LC_ALL=C sort | xargs cat;
      cat requirements-interfaces.txt scripts/setup.d/10-interfaces.sh) | sha256sum | cut -d' ' -f1)
if step_needed interfaces "$h"; then
  echo "setup: building triton_ros_interfaces into ${VENV#"$ROOT"/} (about a minute)"
  if ! command -v c++ >/dev/null 2>&1; then
    echo "setup: a C++ compiler is needed to build triton_ros_interfaces (apt-get install g++)" >&2
    exit 1
  fi
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-interfaces.txt"
  CMAKE="$(command -v cmake || true)"
  if [ -z "$CMAKE" ]; then
    "$VENV/bin/python" -m pip install -q cmake==3.31.6
    CMAKE="$VENV/bin/cmake"
  fi
  rm -rf "$IFACE_BUILD"
  log="$VENV/build/triton_ros_interfaces.log"
  mkdir -p "$IFACE_BUILD"
  # AMENT_PREFIX_PATH (build time only) lets ament find the wheels' packages in the venv prefix.
  if ! ( export AMENT_PREFIX_PATH="$VENV" PATH="$VENV/bin:$PATH"
         "$CMAKE" -S "$IFACE_SRC" -B "$IFACE_BUILD" -DCMAKE_INSTALL_PREFIX="$VENV" \
             -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$VENV/bin/python" \
             -DBUILD_TESTING=OFF &&
         "$CMAKE" --build "$IFACE_BUILD" -j "$(nproc)" &&
         "$CMAKE" --install "$IFACE_BUILD" ) >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "setup: building triton_ros_interfaces failed (full log: $log)" >&2
    exit 1
  fi
  "$VENV/bin/python" -c "import triton_ros_interfaces.msg, triton_ros_interfaces.srv" || {
    echo "setup: triton_ros_interfaces was built but does not import" >&2; exit 1; }
  step_done interfaces "$h"
fi
