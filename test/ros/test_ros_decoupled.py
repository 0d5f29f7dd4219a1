"""A binding to a decoupled model publishes each response as it arrives, with the frame's
header: ``inference_node`` (its own process) binds a camera topic to a decoupled Python model
that answers each frame with three responses, 300 ms apart (one detection each, further right
each time), then the final flag alone; the test process publishes frames and checks, for each,
three detections messages with the frame's stamp and frame_id, in the order sent, received
spread over the model's sending (so not held back to the end), and the frame counted once as
published in the node's ~/status."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import NodeProcess, Probe, image_message, stamp_ns, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.detection_metrics import message_boxes

pytestmark = pytest.mark.system

TOPIC = f"/d{TOKEN}/cam/image_raw"
GAP_S = 0.3
MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for k in range(3):
                if k:
                    time.sleep(%(gap)s)
                row = np.array([[[8 + 16 * k, 8, 16 + 16 * k, 16, 1.0, 0]]], np.float32)
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("detections", row)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
""" % {"gap": GAP_S}
CONFIG = """
name: "three_answers"
backend: "python"
max_batch_size: 4
model_transaction_policy { decoupled: true }
input [ { name: "images" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 64, 64 ] } ]
output [ { name: "detections" data_type: TYPE_FP32 dims: [ 1, 6 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def test_each_response_of_a_decoupled_model_is_published_as_it_arrives(tmp_path):
    (tmp_path / "repo" / "three_answers" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "three_answers" / "1" / "model.py").write_text(MODEL)
    (tmp_path / "repo" / "three_answers" / "config.pbtxt").write_text(CONFIG)
    params = {
        "model_repository": str(tmp_path / "repo"),
        "startup_models": ["three_answers"],
        "bindings": ["stream"],
        "stream": {
            "model": "three_answers",
            "topics": [TOPIC],
            "max_age_ms": 0,
            "score_threshold": 0.5,
            "resize": "stretch",
        },
    }
    node = NodeProcess(params, tmp_path, name=f"inference_node_decoupled_{TOKEN}")
    probe = Probe(f"probe_decoupled_{TOKEN}")
    try:
        node.wait_ready(probe)
        results = probe.subscribe(DETECTIONS_TYPE, TOPIC.rsplit("/", 1)[0] + "/detections")
        publisher = probe.image_publisher(TOPIC)
        wait_until(lambda: publisher.get_subscription_count() > 0, what="the node's subscription")
        pixels = np.zeros((64, 64, 3), np.uint8)
        sent = {}  # stamp -> frame_id
        for i in range(3):
            last = [0.0]

            def answered(n=3 * (i + 1), i=i, last=last) -> bool:
                if results.count() >= n:
                    return True
                if time.monotonic() - last[0] > 3.0:  # best effort: a frame may be lost
                    last[0] = time.monotonic()
                    stamp = probe.node.get_clock().now().to_msg()
                    sent[stamp_ns(stamp)] = f"cam{i}"
                    publisher.publish(image_message(pixels, "rgb8", f"cam{i}", stamp))
                return False

            wait_until(answered, what=f"{3 * (i + 1)} results")
        with results.lock:
            items = list(results.items)
        answered_stamps = sorted({stamp_ns(m.header.stamp) for m, _ in items})
        assert len(items) == 9 and len(answered_stamps) == 3, answered_stamps
        for stamp in answered_stamps:
            mine = [(m, t) for m, t in items if stamp_ns(m.header.stamp) == stamp]
            assert len(mine) == 3 and all(m.header.frame_id == sent[stamp] for m, _ in mine)
            xs = [message_boxes(m)[0][0, 0] for m, _ in mine]
            assert xs == sorted(xs) and xs[0] < xs[1] < xs[2], xs  # in the order sent
            spread = (mine[-1][1] - mine[0][1]) / 1e9
            assert spread >= 1.5 * GAP_S, spread  # each as it came, not at once
        from triton_ros_interfaces.msg import InferenceStatus

        status = probe.subscribe(InferenceStatus, f"/{node.name}/status")
        # The frames count once each, as published.
        wait_until(
            lambda: (
                status.last() is not None
                and any(b.published == len(answered_stamps) for b in status.last().bindings)
            ),
            what=f"{len(answered_stamps)} frames published in ~/status",
        )
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)
