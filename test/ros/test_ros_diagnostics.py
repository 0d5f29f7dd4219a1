"""/diagnostics that tell the truth while a model is unloaded (issue 34, item 11), across processes.

One node binds ``color_detector`` three times (three cameras) and ``detector_pipeline`` (an
ensemble whose middle step is ``color_detector``) once; cameras publish to all four. Then
``color_detector`` is unloaded through ``~/unload_model``:

- its status names all three bindings that drop their frames (it named one);
- the ensemble stays READY in the repository index (the core keeps it so, and its requests fail
  at the missing step), but its model status is ERROR and names the missing step, and its
  binding is ERROR with that reason from the first diagnostics period after the unload (it was
  WARN for 8 s, publishing nothing);
- every status name is unique in every DiagnosticArray the node publishes.

Loaded again, everything is OK and publishing.
"""

from __future__ import annotations

import time

import pytest

from ros_env import TOKEN
from ros_probe import NodeProcess, Probe, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.synthetic_cameras import parse_camera

pytestmark = pytest.mark.system

NS = f"/d{TOKEN}"
PERIOD_S = 0.5
CAMERAS = {
    name: parse_camera(f"{name}/camera:320x240:rgb8")
    for name in ("front", "rear", "top", "pipeline")
}
OK, WARN, ERROR = b"\x00", b"\x01", b"\x02"


@pytest.fixture
def node(tmp_path):
    params = {
        "startup_models": ["*"],
        "diagnostics_period_s": PERIOD_S,
        "bindings": list(CAMERAS),
        **{
            name: {
                "model": "detector_pipeline" if name == "pipeline" else "color_detector",
                "topics": [spec.topic(NS)],
                "max_age_ms": 0,
            }
            for name, spec in CAMERAS.items()
        },
    }
    probe = Probe(f"probe_{TOKEN}_diag")
    node = NodeProcess(params, tmp_path, name=f"diag_node_{TOKEN}")
    try:
        node.wait_ready(probe)
        yield node, probe
    finally:
        probe.close()
        node.stop_and_check()


def statuses(array) -> dict:
    return {s.name: s for s in array.status}


def values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_an_unloaded_step_and_model_are_reported_as_they_are(node):
    from diagnostic_msgs.msg import DiagnosticArray
    from triton_ros_interfaces.srv import LoadModel, UnloadModel

    node, probe = node
    prefix = f"/{node.name}: "
    arrays = probe.subscribe(DiagnosticArray, "/diagnostics", qos=100)
    results = {
        name: probe.subscribe(DETECTIONS_TYPE, f"{NS}/{name}/camera/detections") for name in CAMERAS
    }
    rig = probe.cameras(list(CAMERAS.values()), prefix=NS, rate=5.0)
    try:
        for rec in results.values():
            rec.wait_for(2, what="detections on every camera")

        def ours(after_ns: int = 0):
            return [
                (m, t)
                for m, t in list(arrays.items)
                if t >= after_ns and any(s.name.startswith(prefix) for s in m.status)
            ]

        unloaded = probe.call(
            UnloadModel, node.service("unload_model"), model_name="color_detector"
        )
        assert unloaded.success, unloaded.message
        after = probe.now_ns()
        # the first array published a whole period after the unload answered
        first, _ = wait_until(
            lambda: ours(after + int(PERIOD_S * 1e9)), 30, "diagnostics after the unload"
        )[0]
        found = statuses(first)
        model = found[prefix + "model color_detector"]
        assert model.level == WARN and values(model)["state"] == "UNAVAILABLE"
        assert "unloaded; bindings 'front', 'rear', 'top' drop their frames" == model.message
        ensemble = found[prefix + "model detector_pipeline"]
        assert values(ensemble)["state"] == "READY"  # as the repository index says
        assert ensemble.level == ERROR, ensemble
        assert "step model 'color_detector' has no ready version" in ensemble.message
        pipeline = found[prefix + "binding pipeline"]
        assert pipeline.level == ERROR, pipeline
        assert pipeline.message.startswith(
            "model 'detector_pipeline' cannot serve: its step "
            "model 'color_detector' has no ready version"
        )
        for name in ("front", "rear", "top"):
            binding = found[prefix + f"binding {name}"]
            assert (
                binding.level == ERROR and "is not ready (UNAVAILABLE: unloaded)" in binding.message
            ), binding
        counts = {name: rec.count() for name, rec in results.items()}
        time.sleep(1.0)
        assert {name: rec.count() for name, rec in results.items()} == counts  # none served

        loaded = probe.call(LoadModel, node.service("load_model"), model_name="color_detector")
        assert loaded.success, loaded.message
        for name, rec in results.items():
            rec.wait_for(counts[name] + 2, what=f"detections of {name} after the load")
        again = probe.now_ns()
        latest, _ = wait_until(
            lambda: ours(again + int(PERIOD_S * 1e9)), 30, "diagnostics after the load"
        )[0]
        found = statuses(latest)
        assert found[prefix + "model color_detector"].level == OK
        assert found[prefix + "model detector_pipeline"].level == OK
        assert found[prefix + "binding pipeline"].level in (OK, WARN)  # WARN: its own drops
    finally:
        rig.stop()
    mine = ours()
    assert len(mine) > 5
    for array, _ in mine:
        names = [s.name for s in array.status]
        assert len(names) == len(set(names)), names
