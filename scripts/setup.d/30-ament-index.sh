# Sourced by scripts/setup.sh. Registers triton_ros in .venv as colcon installs an ament_python
# package, so that `ros2 run triton_ros ...` and `ros2 launch triton_ros ...` (which look packages
# up in the ament index of AMENT_PREFIX_PATH) find it with AMENT_PREFIX_PATH=<repo>/.venv:
#   share/ament_index/resource_index/packages/triton_ros   the index marker
#   share/triton_ros/{package.xml,launch,config,model_repository}
#   lib/triton_ros/{inference_node,synthetic_cameras,triton-ros-server}
# The package is installed editable (pip -e), so share/ entries are links into this checkout,
# as `colcon build --symlink-install` makes them, and lib/ entries link to the console scripts
# pip wrote into .venv/bin. Redone when this step or the package's metadata change.
h=$( (cat "$ROOT/scripts/setup.d/30-ament-index.sh" "$ROOT/setup.py" "$ROOT/setup.cfg"; echo "$ROOT") |
     sha256sum | cut -d' ' -f1)
if step_needed ament_index "$h" || [ ! -e "$VENV/share/ament_index/resource_index/packages/triton_ros" ]; then
  echo "setup: registering triton_ros in the ament index of ${VENV#"$ROOT"/}"
  share="$VENV/share/triton_ros"
  lib="$VENV/lib/triton_ros"
  rm -rf "$share" "$lib"
  mkdir -p "$VENV/share/ament_index/resource_index/packages" "$share" "$lib"
  : > "$VENV/share/ament_index/resource_index/packages/triton_ros"
  for entry in package.xml launch config model_repository; do
    ln -s "$ROOT/$entry" "$share/$entry"
  done
  for exe in inference_node synthetic_cameras triton-ros-server; do
    if [ ! -x "$VENV/bin/$exe" ]; then
      echo "setup: $VENV/bin/$exe is missing (the editable install did not write it)" >&2
      exit 1
    fi
    ln -s "../../bin/$exe" "$lib/$exe"
  done
  step_done ament_index "$h"
fi
