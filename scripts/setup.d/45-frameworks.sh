# Sourced by scripts/setup.sh. Installs the optional frameworks of the TensorFlow, LiteRT and
# forest (FIL) backends (tensorflow-cpu, ai-edge-litert, xgboost-cpu, lightgbm, treelite,
# scikit-learn; requirements-frameworks.txt) so that their tests run: on CPython 3.11 on x86_64
# only, as torch, to keep one copy of about 1.7 GB in CI (docs/backends.md has the time it adds).
# Elsewhere it is skipped and those tests skip, saying why; the server serves every other model
# without them. TRITON_ROS_FRAMEWORKS=0 skips it anywhere; TRITON_ROS_FRAMEWORKS=1 installs them
# on any Python (a failed install then fails the set-up, as it does by default on 3.11 x86_64).
py_tag="$("$VENV/bin/python" -c 'import sys, platform; print("%d.%d-%s" % (sys.version_info[:2] + (platform.machine(),)))')"
want_frameworks="${TRITON_ROS_FRAMEWORKS:-}"
if [ -z "$want_frameworks" ]; then
  if [ "$py_tag" = "3.11-x86_64" ]; then want_frameworks=1; else want_frameworks=0; fi
fi
if [ "$want_frameworks" = "1" ]; then
  h=$(stamp_of "$ROOT/requirements-frameworks.txt" "$ROOT/scripts/setup.d/45-frameworks.sh")
  if step_needed frameworks "$h"; then
    echo "setup: installing TensorFlow, LiteRT, XGBoost, LightGBM, Treelite, scikit-learn" \
         "(requirements-frameworks.txt; about 25 s, 1.7 GB)"
    if ! "$VENV/bin/python" -m pip install -q -r "$ROOT/requirements-frameworks.txt"; then
      echo "setup: installing the frameworks failed; set TRITON_ROS_FRAMEWORKS=0 to set up" \
           "without them (the TensorFlow, LiteRT and FIL backends' tests then skip)" >&2
      exit 1
    fi
    "$VENV/bin/python" -c "import tensorflow, ai_edge_litert, xgboost, lightgbm, treelite, sklearn" \
      2>/dev/null || { echo "setup: the frameworks were installed but do not import" >&2; exit 1; }
    step_done frameworks "$h"
  fi
elif step_needed frameworks-skipped "$py_tag"; then
  echo "setup: TensorFlow, LiteRT and the forest libraries are not installed for CPython" \
       "$py_tag (installed for 3.11 only); their backends' tests skip" \
       "(TRITON_ROS_FRAMEWORKS=1 to install them)"
  step_done frameworks-skipped "$py_tag"
fi
