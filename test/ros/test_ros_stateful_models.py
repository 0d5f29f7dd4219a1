"""Stateful models configured as Triton's docs describe them, bound by the node: each camera is
its own sequence. ``inference_node`` (its own process) binds two camera topics to each of two
Python models with ``sequence_batching`` and implicit state (a frame counter per sequence):
``counter_direct`` (direct strategy, a STRING CORRID, INT32 START/READY, max_batch_size 2) and
``counter_oldest`` (oldest strategy, a UINT64 CORRID, BOOL START, no batching). The model
answers each frame with one detection whose x1 is the sequence's frame count (0 on START): the
test process publishes frames on both cameras, interleaved, and checks that each camera counts
0, 1, 2, ... on its own, and that the CORRID each saw (the box's y1: its length, or its low
digits) is one per camera. A third model idles sequences out after 1 s: after a pause of 2 s the
node starts each camera's sequence again, and no frame is refused."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import NodeProcess, Probe, image_message, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.detection_metrics import message_boxes

pytestmark = pytest.mark.system

NS = f"/sm{TOKEN}"
FRAMES = 6
MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            count = get("COUNT_IN").astype(np.float32)
            ready = get("READY").reshape(-1).astype(bool)
            corrid = get("CORRID").reshape(-1)
            rows = np.zeros(count.shape[:-1] + (1, 6), np.float32)
            for b in range(rows.reshape(-1, 6).shape[0]):
                key = corrid[b]
                tag = len(key) if isinstance(key, bytes) else int(key) % 50
                n = count.reshape(-1)[b]
                rows.reshape(-1, 6)[b] = [n, tag, n + 1, tag + 1, 1.0 if ready[b] else 0.0, 0]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("detections", rows),
                pb_utils.Tensor("COUNT_OUT", count + ready.reshape(count.shape[:-1] + (1,)))]))
        return responses
"""
CONFIGS = {
    "counter_direct": """
name: "counter_direct"
backend: "python"
max_batch_size: 2
input [ { name: "images" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 64, 64 ] } ]
output [ { name: "detections" data_type: TYPE_FP32 dims: [ 1, 6 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
  state [ { input_name: "COUNT_IN" output_name: "COUNT_OUT" data_type: TYPE_FP32 dims: [ 1 ]
            initial_state: { name: "zero" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    "counter_oldest": """
name: "counter_oldest"
backend: "python"
max_batch_size: 0
input [ { name: "images" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 64, 64 ] } ]
output [ { name: "detections" data_type: TYPE_FP32 dims: [ 1, 6 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 4 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "COUNT_IN" output_name: "COUNT_OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
}
# The oldest model with an idle time of 1 s, bound without the node's own END of quiet sources
# (sequence_end_after_ms 0): after a pause of 2 s the model has released each camera's
# sequence, and the node starts it again (START) rather than being refused.
CONFIGS["counter_idle"] = (
    CONFIGS["counter_oldest"]
    .replace('"counter_oldest"', '"counter_idle"')
    .replace("60000000", "1000000")
)
PAUSE_S = 2.0


@pytest.mark.parametrize("model", list(CONFIGS))
def test_each_camera_is_its_own_sequence_of_a_stateful_model(tmp_path, model):
    repo = tmp_path / "repo"
    (repo / model / "1").mkdir(parents=True)
    (repo / model / "1" / "model.py").write_text(MODEL)
    (repo / model / "config.pbtxt").write_text(CONFIGS[model])
    topics = [f"{NS}/{model}/cam{i}/image_raw" for i in range(2)]
    params = {
        "model_repository": str(repo),
        "startup_models": [model],
        "bindings": ["b"],
        "b": {
            "model": model,
            "topics": topics,
            "max_age_ms": 0,
            "score_threshold": 0.5,
            "resize": "stretch",
            "nms": False,
            "sequence_end_after_ms": 0 if model == "counter_idle" else 2000,
        },
    }
    node = NodeProcess(params, tmp_path, name=f"inference_node_stateful_{TOKEN}")
    probe = Probe(f"probe_stateful_{TOKEN}")
    try:
        node.wait_ready(probe)
        results = [
            probe.subscribe(DETECTIONS_TYPE, t.rsplit("/", 1)[0] + "/detections") for t in topics
        ]
        publishers = [probe.image_publisher(t) for t in topics]
        for pub in publishers:
            wait_until(lambda p=pub: p.get_subscription_count() > 0, what="the subscription")
        pixels = np.zeros((64, 64, 3), np.uint8)
        rounds = 2 if model == "counter_idle" else 1
        for f in range(FRAMES * rounds):
            if f == FRAMES:
                time.sleep(PAUSE_S)  # past the model's idle time
            for i, pub in enumerate(publishers):
                sent = [0.0]  # when the frame was last sent

                def answered(i=i, pub=pub, n=f + 1, sent=sent) -> bool:
                    if results[i].count() >= n:
                        return True
                    if time.monotonic() - sent[0] > 3.0:  # best effort: a frame may be lost
                        sent[0] = time.monotonic()
                        pub.publish(
                            image_message(
                                pixels, "rgb8", f"cam{i}", probe.node.get_clock().now().to_msg()
                            )
                        )
                    return False

                wait_until(
                    answered, what=f"result {f + 1} of cam{i}; node log:\n{node.log()[-2000:]}"
                )
        tags = []
        for i, rec in enumerate(results):
            boxes = [message_boxes(m)[0] for m in rec.messages()]
            assert all(len(b) == 1 for b in boxes), boxes
            counts = [round(b[0, 0]) for b in boxes]
            if rounds == 2:  # counted again from START
                restart = counts.index(0, 1)
                first, counts = counts[:restart], counts[restart:]
                assert first == list(range(len(first))), (i, first)
                assert "must specify the START flag" not in node.log()  # none refused
            assert len(counts) >= FRAMES and counts == list(range(len(counts))), (i, counts)
            seen = {round(b[0, 1]) for b in boxes}
            assert len(seen) == 1, seen  # one CORRID a camera
            tags.append(seen.pop())
        if model == "counter_oldest":  # two IDs (their low digits)
            assert tags[0] != tags[1], tags
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)
