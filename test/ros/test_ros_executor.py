"""The node's executors (parameter ``executor``): frames keep flowing while a model loads.

Each executor the node can run is started in its own process with a camera bound to the bundled
detector; a Python model whose ``initialize`` takes seconds is then loaded through
``~/load_model`` from this process. While the load is under way, detections must keep arriving
and ``~/list_models`` must answer: a load never runs on the thread of the frames. ``auto`` is
the events executor where rclpy has one (Kilted), so both kinds are exercised here.
"""

from __future__ import annotations

import threading
import time

import pytest

from ros_env import TOKEN
from ros_probe import wait_until
from server_process import copy_models
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.ros.executor import events_executor_class, resolve_executor
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.synthetic_cameras import parse_camera


pytestmark = pytest.mark.system

LOAD_SECONDS = 4.0

SLOW_CONFIG = """name: "slow_load"
backend: "python"
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
"""
SLOW_MODEL = f"""import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        time.sleep({LOAD_SECONDS})

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())])
            for r in requests]
"""


def repository(dest):
    copy_models(dest, "detector")
    (dest / "slow_load" / "1").mkdir(parents=True)
    (dest / "slow_load" / "config.pbtxt").write_text(SLOW_CONFIG)
    (dest / "slow_load" / "1" / "model.py").write_text(SLOW_MODEL)
    return dest


def test_auto_is_events_where_rclpy_has_it_and_a_wrong_value_is_refused():
    expected = "events" if events_executor_class() is not None else "wait_set"
    assert resolve_executor("auto") == expected
    assert resolve_executor("wait_set") == "wait_set"
    with pytest.raises(TritonRosError) as err:
        resolve_executor("fast")
    assert err.value.code == StatusCode.INVALID_ARG and "'executor'" in err.value.message


@pytest.mark.parametrize("executor", ["auto", "wait_set"])
def test_frames_and_queries_are_served_while_a_slow_model_loads(
    executor, start_node, probe, tmp_path
):
    from triton_ros_interfaces.srv import ListModels, LoadModel

    kind = resolve_executor(executor)
    ns = f"/exe{TOKEN}{executor.replace('_', '')}"
    node = start_node(
        {
            "model_repository": str(repository(tmp_path / "models")),
            "startup_models": ["detector"],
            "executor": executor,
            "bindings": ["cam"],
            "cam": {"model": "detector", "topics": [f"{ns}/cam/image_raw"]},
        }
    )
    node.wait_ready(probe)
    assert (
        f"callbacks run on rclpy's {'events' if kind == 'events' else 'wait-set'} executor"
        in node.log()
    )
    rec = probe.subscribe(DETECTIONS_TYPE, f"{ns}/cam/detections")
    camera = probe.cameras(
        [parse_camera("exe/cam:320x240:rgb8")], rate=20.0, topics=[f"{ns}/cam/image_raw"]
    )
    try:
        rec.wait_for(3, what="detections before the load")
        answer: dict = {}
        loader = threading.Thread(
            target=lambda: answer.setdefault(
                "load", probe.call(LoadModel, node.service("load_model"), model_name="slow_load")
            )
        )
        loader.start()
        started = time.monotonic()
        wait_until(lambda: "loading model 'slow_load'" in node.log(), what="the load to begin")
        before = rec.count()
        # Half way through the load: frames were answered and a query is answered at once.
        time.sleep(LOAD_SECONDS / 2)
        during = rec.count() - before
        t0 = time.monotonic()
        listed = probe.call(ListModels, node.service("list_models"))
        list_seconds = time.monotonic() - t0
        still_loading = loader.is_alive()
        loader.join(timeout=60)
        assert answer["load"].success, answer["load"].message
        assert time.monotonic() - started >= LOAD_SECONDS * 0.9  # it really took that long
        assert still_loading, "the load ended before the checks made during it"
        assert during >= 10, f"only {during} detections in {LOAD_SECONDS / 2:.0f} s of loading"
        assert listed.success and list_seconds < 1.0, f"~/list_models took {list_seconds:.1f} s"
    finally:
        camera.stop()
