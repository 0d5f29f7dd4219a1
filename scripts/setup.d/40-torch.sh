# Sourced by scripts/setup.sh. Installs the PyTorch backend's optional dependency (torch, CPU
# build; requirements-torch.txt) so that its tests run: on CPython 3.11 on x86_64, where these
# machines' pip finds the torch==2.13.0+cpu wheel locally. Elsewhere (CPython 3.10: no CPU wheel
# is reachable, and PyPI's torch is the multi-gigabyte CUDA build) it is skipped and the PyTorch
# tests skip, saying why. TRITON_ROS_TORCH=0 skips it anywhere; TRITON_ROS_TORCH=1 makes a
# failed install fail the set-up (the default on CPython 3.11 x86_64).
py_tag="$("$VENV/bin/python" -c 'import sys, platform; print("%d.%d-%s" % (sys.version_info[:2] + (platform.machine(),)))')"
want_torch="${TRITON_ROS_TORCH:-}"
if [ -z "$want_torch" ]; then
  if [ "$py_tag" = "3.11-x86_64" ]; then want_torch=1; else want_torch=0; fi
fi
if [ "$want_torch" = "1" ]; then
  h=$(stamp_of "$ROOT/requirements-torch.txt" "$ROOT/scripts/setup.d/40-torch.sh")
  if step_needed torch "$h"; then
    echo "setup: installing torch for the PyTorch backend (requirements-torch.txt; about 2 minutes)"
    if ! "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-torch.txt"; then
      echo "setup: installing torch failed; set TRITON_ROS_TORCH=0 to set up without it (the" \
           "PyTorch backend's tests then skip)" >&2
      exit 1
    fi
    "$VENV/bin/python" -c "import torch" || { echo "setup: torch was installed but does not import" >&2; exit 1; }
    step_done torch "$h"
  fi
elif step_needed torch-skipped "$py_tag"; then
  echo "setup: torch is not installed for CPython $py_tag (no CPU wheel reachable here); the" \
       "PyTorch backend's tests skip (TRITON_ROS_TORCH=1 to try)"
  step_done torch-skipped "$py_tag"
fi
