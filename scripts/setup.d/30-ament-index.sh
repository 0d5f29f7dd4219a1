# Sourced by scripts/setup.sh. Registers triton_ros in .venv as `colcon build --symlink-install`
# installs an ament_python package, so that `ros2 run triton_ros ...` and `ros2 launch triton_ros
# ...` (which look packages up in the ament index of AMENT_PREFIX_PATH) find it with
# AMENT_PREFIX_PATH=<repo>/.venv:
#   share/ament_index/resource_index/packages/triton_ros   the index marker
#   share/triton_ros/{package.xml,launch/,config/,model_repository/}
#   lib/triton_ros/{inference_node,synthetic_cameras,triton-ros-server,triton-ros-analyzer}
# share/ holds exactly setup.py's data_files (read from setup.py as colcon reads it: setup()
# called with its arguments captured), each a link to its file in this checkout inside real
# directories, as colcon's symlink_data makes them. Not links to whole directories: ros2launch
# finds a launch file by walking the package's share directory with os.walk, which does not
# enter a linked directory. An edit to a file shows at once; a file added or removed is picked
# up by the next scripts/setup.sh (the file list is part of this step's stamp). lib/ entries link
# to the console scripts pip wrote into .venv/bin. Redone when this step, the package's
# metadata, the list of data files or the package step change.
data_files=$(cd "$ROOT" && "$VENV/bin/python" - <<'PY'
import runpy

import setuptools

captured = {}
setuptools.setup = lambda **kwargs: captured.update(kwargs)
runpy.run_path("setup.py", run_name="__main__")
for destination, sources in captured.get("data_files", []):
    for source in sources:
        print(f"{destination}\t{source}")
PY
)
h=$( (cat "$ROOT/scripts/setup.d/30-ament-index.sh" "$ROOT/setup.py" "$ROOT/setup.cfg" \
          "$ROOT/package.xml" "$STAMPS/package" 2>/dev/null; echo "$ROOT"; echo "$data_files") |
     sha256sum | cut -d' ' -f1)
marker="$VENV/share/ament_index/resource_index/packages/triton_ros"
if step_needed ament_index "$h" || [ ! -e "$marker" ]; then
  echo "setup: registering triton_ros in the ament index of ${VENV#"$ROOT"/}"
  lib="$VENV/lib/triton_ros"
  rm -rf "$VENV/share/triton_ros" "$lib" "$marker"
  mkdir -p "$lib"
  while IFS=$'\t' read -r destination source; do
    [ -n "$source" ] || continue
    if [ ! -f "$ROOT/$source" ]; then
      echo "setup: setup.py's data file $source is not a file" >&2
      exit 1
    fi
    mkdir -p "$VENV/$destination"
    ln -sfn "$ROOT/$source" "$VENV/$destination/$(basename "$source")"
  done <<< "$data_files"
  for entry in share/ament_index/resource_index/packages/triton_ros share/triton_ros/package.xml \
               share/triton_ros/launch/inference.launch.py; do
    if [ ! -e "$VENV/$entry" ]; then
      echo "setup: $VENV/$entry is missing (setup.py's data_files do not install it)" >&2
      exit 1
    fi
  done
  for exe in inference_node synthetic_cameras triton-ros-server triton-ros-analyzer; do
    if [ ! -x "$VENV/bin/$exe" ]; then
      echo "setup: $VENV/bin/$exe is missing (the editable install did not write it)" >&2
      exit 1
    fi
    ln -s "../../bin/$exe" "$lib/$exe"
  done
  step_done ament_index "$h"
fi
