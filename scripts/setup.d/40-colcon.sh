# Sourced by scripts/setup.sh. Installs colcon (requirements-colcon.txt) into .venv, so that
# test/test_colcon_workflow.py can build and test this package in a colcon workspace with the
# environment's ROS 2 wheels standing in for an apt-installed ROS 2. Redone when the pins change.
h=$(stamp_of "$ROOT/requirements-colcon.txt" "$ROOT/scripts/setup.d/40-colcon.sh")
if step_needed colcon "$h"; then
  echo "setup: installing colcon"
  "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-colcon.txt" \
      -r "$ROOT/requirements-build.txt"
  step_done colcon "$h"
fi
