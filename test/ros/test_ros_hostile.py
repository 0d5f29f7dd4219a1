"""Malformed and hostile sensor_msgs/Image messages sent to a real inference_node over real ROS 2.

Each case publishes one hostile frame on a bound topic and asserts what the node must do with it:
count it as malformed (``dropped_malformed`` on ``~/status``) with its cause in the log, or, for
frames that are odd but valid, publish a result. Then a normal frame on the same topic must be
answered, so that a case that broke the binding, the node or its model fails. The node must exit
0 without a traceback at the end (module fixture).
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from ros_env import TOKEN
from ros_models import make_repository
from ros_probe import NodeProcess, Probe, image_message, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE, uint8_array


pytestmark = pytest.mark.system

NS = f"/h{TOKEN}"
GOOD = np.full((48, 64, 3), 90, np.uint8)


class Env:
    def __init__(self, node: NodeProcess, probe: Probe) -> None:
        from triton_ros_interfaces.msg import InferenceStatus

        self.node = node
        self.probe = probe
        self.status = probe.subscribe(InferenceStatus, f"/{node.name}/status")
        self._pubs: dict[str, object] = {}
        self._results: dict[str, object] = {}

    def topic(self, case: str) -> tuple[object, object]:
        """The publisher and the result recorder of a case's own camera (each source logs its
        first malformed frame, then at most one line per 5 s: one camera per case)."""
        i = CASES.index(case)
        if case not in self._pubs:
            self._pubs[case] = self.probe.image_publisher(f"{NS}/c{i}/image_raw")
            self._results[case] = self.probe.subscribe(DETECTIONS_TYPE, f"{NS}/c{i}/detections")
        return self._pubs[case], self._results[case]

    def binding(self):
        msg = self.status.last()
        return next((b for b in msg.bindings if b.name == "hostile"), None) if msg else None

    def counter(self, name: str) -> int:
        b = self.binding()
        return getattr(b, name) if b is not None else -1

    def stamp(self):
        return self.probe.node.get_clock().now().to_msg()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ros_hostile")
    repo = make_repository(tmp / "models")
    topics = [f"{NS}/c{i}/image_raw" for i in range(len(CASES))]
    params = {
        "model_repository": str(repo),
        "startup_models": ["detector"],
        "diagnostics_period_s": 0.25,
        "bindings": ["hostile"],
        "hostile": {
            "model": "detector",
            "topics": topics,
            "score_threshold": 0.0,
            "max_age_ms": 10000,
            "input_depth": 10,
        },
    }
    node = NodeProcess(params, tmp, name=f"inference_node_hostile_{TOKEN}")
    probe = Probe(f"probe_hostile_{TOKEN}")
    try:
        node.wait_ready(probe)
        e = Env(node, probe)
        wait_until(lambda: e.binding() is not None, what="the binding's status")
        yield e
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)


def assert_good_frame_answered(env: Env, case: str) -> None:
    """A normal frame right after the hostile one, on the same camera, gets its detections."""
    pub, results = env.topic(case)
    before = results.count()
    frame_id = f"good_{before}"

    def attempt():
        pub.publish(image_message(GOOD, "rgb8", frame_id, env.stamp()))
        return any(m.header.frame_id == frame_id for m in results.messages()[before:])

    wait_until(attempt, what="a good frame's detections", interval=0.5)
    assert env.node.proc.poll() is None


def _msg(encoding="rgb8", height=48, width=64, step=None, data_len=None, pixels=GOOD):
    msg = image_message(pixels, "rgb8", "hostile", None or _zero_stamp())
    msg.encoding = encoding
    msg.height, msg.width = height, width
    if step is not None:
        msg.step = step
    if data_len is not None:
        msg.data = uint8_array(bytes(data_len))
    return msg


def _zero_stamp():
    from builtin_interfaces.msg import Time

    return Time()


MALFORMED = {
    "unknown encoding": (_msg(encoding="yuv9000"), "unsupported encoding 'yuv9000'"),
    "empty encoding": (_msg(encoding=""), "unsupported encoding ''"),
    "16-bit mono": (_msg(encoding="mono16"), "unsupported encoding 'mono16'"),
    "bayer": (_msg(encoding="bayer_rggb8"), "unsupported encoding 'bayer_rggb8'"),
    "long encoding": (_msg(encoding="x" * 5000), "unsupported encoding"),
    "zero width": (_msg(width=0), "empty image"),
    "zero height": (_msg(height=0), "empty image"),
    "huge dims, small data": (_msg(height=65535, width=65535, step=65535 * 3), "fewer than step"),
    "max uint32 dims": (
        _msg(height=2**32 - 1, width=2**32 - 1, step=2**32 - 1),
        "smaller than width x channels",
    ),
    "step lies high": (_msg(step=2**32 - 1), "fewer than step"),
    "step lies low": (_msg(step=64 * 3 - 1), "smaller than width x channels"),
    "step zero": (_msg(step=0), "smaller than width x channels"),
    "data one byte short": (_msg(data_len=48 * 64 * 3 - 1), "fewer than step"),
    "no data": (_msg(data_len=0), "fewer than step"),
    "mono-sized data labelled rgb8": (_msg(data_len=48 * 64, step=64), "smaller than width"),
}


VALID_ODD = {
    "1x1 image": _msg(height=1, width=1, step=3, data_len=3),
    "padded rows (step > width x 3)": _msg(step=64 * 3 + 13, data_len=(64 * 3 + 13) * 48),
    "trailing bytes after the image": _msg(data_len=48 * 64 * 3 + 1000),
    "big-endian flag on 8-bit data": (lambda m: (setattr(m, "is_bigendian", 1), m)[1])(_msg()),
    "1x4000 sliver": _msg(height=1, width=4000, step=12000, data_len=12000),
    "mono8": _msg(encoding="mono8", step=64, data_len=48 * 64),
    "bgra8": _msg(encoding="bgra8", step=256, data_len=48 * 256),
}
CASES = [*MALFORMED, *VALID_ODD, "burst"]


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_image_is_counted_logged_and_the_next_frame_served(env, case):
    msg, reason = MALFORMED[case]
    pub, _ = env.topic(case)
    before = env.counter("dropped_malformed")
    assert before >= 0

    def counted():
        msg.header.stamp = env.stamp()
        pub.publish(msg)
        return env.counter("dropped_malformed") > before

    wait_until(counted, what=f"'{case}' counted as malformed", interval=0.5)
    wait_until(lambda: reason in env.node.log(), what=f"the cause of '{case}' in the log")
    assert_good_frame_answered(env, case)


@pytest.mark.parametrize("case", list(VALID_ODD))
def test_odd_but_valid_image_is_published(env, case):
    msg = VALID_ODD[case]
    pub, results = env.topic(case)
    frame_id = f"odd_{CASES.index(case)}"
    msg.header.frame_id = frame_id
    before = results.count()

    def published():
        msg.header.stamp = env.stamp()
        pub.publish(msg)
        return any(m.header.frame_id == frame_id for m in results.messages()[before:])

    wait_until(published, what=f"the result of '{case}'", interval=0.5)
    assert_good_frame_answered(env, case)


def test_a_burst_of_hostile_frames_costs_no_good_frame_and_logs_are_throttled(env):
    """200 malformed frames interleaved with good ones on one camera: every good one is still
    answered, and the log gets a few lines, not one per frame."""
    bad = MALFORMED["step lies high"][0]
    pub, _ = env.topic("burst")
    before = env.counter("dropped_malformed")
    lines_before = env.node.log().count("malformed image on")
    for _i in range(10):
        for _ in range(20):
            bad.header.stamp = env.stamp()
            pub.publish(bad)
        assert_good_frame_answered(env, "burst")
    # Best-effort QoS with a depth of 10 may lose part of a burst before the node sees it.
    wait_until(lambda: env.counter("dropped_malformed") >= before + 10, what="the burst counted")
    assert env.node.log().count("malformed image on") - lines_before < 20


# -------------------------------------------------------------------------------------------
# Model control through the node's services
# -------------------------------------------------------------------------------------------


def _detector_config(**changes) -> str:
    import json
    from triton_ros.core.model_config import load_model_config, model_config_to_json
    from ros_env import ROOT

    config = load_model_config("detector", ROOT / "model_repository" / "detector")
    value = json.loads(model_config_to_json(config.proto))
    for key, item in changes.items():
        if key == "label_filename":
            value["output"][0]["label_filename"] = item
        else:
            if key == "sequence_batching":
                value.pop("dynamic_batching", None)  # one scheduling choice at a time
            value[key] = item
    return json.dumps(value)


HOSTILE_LOADS = {
    "unknown name": ("no_such_model", "", "failed to poll from model repository"),
    "path traversal name": ("../detector", "", "path traversal"),
    "empty name": ("", "", "cannot be empty"),
    "unparsable config": ("detector", "{not json", "failed to poll from model repository"),
    "config of the wrong type": ("detector", "[1, 2]", "failed to poll from model repository"),
    "label file /etc/passwd": ("detector", "label_filename:/etc/passwd", "label_filename"),
    "label file ../": ("detector", "label_filename:../x.txt", "label_filename"),
    "iterative sequence": (
        "detector",
        "sequence_batching",
        "sequence_batching.iterative_sequence is not supported",
    ),
}
CASES.extend(f"load {case}" for case in HOSTILE_LOADS)


@pytest.mark.parametrize("case", list(HOSTILE_LOADS))
def test_hostile_load_request_fails_cleanly_and_frames_keep_flowing(env, case):
    from triton_ros_interfaces.srv import ListModels, LoadModel

    name, config, fragment = HOSTILE_LOADS[case]
    if config.startswith("label_filename:"):
        config = _detector_config(label_filename=config.split(":", 1)[1])
    elif config == "sequence_batching":
        config = _detector_config(sequence_batching={"iterative_sequence": True})
    response = env.probe.call(
        LoadModel, env.node.service("load_model"), model_name=name, config=config
    )
    assert not response.success
    assert fragment in response.message, response.message
    listed = env.probe.call(ListModels, env.node.service("list_models"), ready_only=True)
    assert listed.success and "detector" in {m.name for m in listed.models}
    assert_good_frame_answered(env, f"load {case}")


def test_statistics_with_a_hostile_version_fail_cleanly(env):
    from triton_ros_interfaces.srv import GetModelStatistics

    for version in ("0x1", "1e3", " 1", "-2", "9" * 400):
        response = env.probe.call(
            GetModelStatistics,
            env.node.service("get_model_statistics"),
            model_name="detector",
            model_version=version,
        )
        assert not response.success and "version" in response.message
    response = env.probe.call(
        GetModelStatistics,
        env.node.service("get_model_statistics"),
        model_name="detector",
        model_version="",
    )
    assert response.success and response.model_stats[0].name == "detector"
