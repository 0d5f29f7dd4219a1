"""Cameras tracked across processes, one sequence each: ``synthetic_cameras --moving`` (several
processes of their own) publishes moving objects that cross and pass behind a pillar, with their
ground-truth identities; ``inference_node`` (its own process) binds them to the bundled
``color_tracker`` (color_detector, then the stateful ``tracker``: one sequence per camera); the
test process pairs each detections message with the ground truth of the same frame and scores
the track IDs (CLEAR-MOT). Two cameras of two processes show the same scene and must keep
independent IDs; hostile sequence requests to the node's gRPC endpoint get Triton's statuses
and disturb no camera; a camera that goes away, or goes quiet, ends its sequence, and its slot
serves another; a reload of the tracker mid-sequence restarts the sequences."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ros_env import TOKEN
from ros_probe import ROOT, TIMEOUT, NodeProcess, Probe, wait_until
from triton_ros.ros.codec.messages import DETECTIONS_TYPE
from triton_ros.ros.tools.detection_metrics import FrameMatcher
from triton_ros.ros.tools.mot_metrics import message_ids, score_pairs
from triton_ros.ros.tools.synthetic_cameras import ground_truth_topic

pytestmark = pytest.mark.system

NS = f"/t{TOKEN}"
RATE = 8.0
MIN_FRAMES = 60  # frames scored per camera


def repository(dest):
    """The bundled models, and a copy of the tracker with two slots and a long idle time (so
    that only the node's END frees a slot)."""
    for name in ("color_detector", "tracker", "color_tracker"):
        shutil.copytree(ROOT / "model_repository" / name, dest / name)
    two = (ROOT / "model_repository" / "tracker" / "config.pbtxt").read_text()
    two = (
        two.replace('name: "tracker"', 'name: "tracker_two"')
        .replace("max_candidate_sequences: 64", "max_candidate_sequences: 2")
        .replace(
            "max_sequence_idle_microseconds: 10000000", "max_sequence_idle_microseconds: 600000000"
        )
    )
    shutil.copytree(ROOT / "model_repository" / "tracker", dest / "tracker_two")
    (dest / "tracker_two" / "config.pbtxt").write_text(two)
    ens = (ROOT / "model_repository" / "color_tracker" / "config.pbtxt").read_text()
    ens = ens.replace('name: "color_tracker"', 'name: "color_tracker_two"').replace(
        'model_name: "tracker"', 'model_name: "tracker_two"'
    )
    shutil.copytree(ROOT / "model_repository" / "color_tracker", dest / "color_tracker_two")
    (dest / "color_tracker_two" / "config.pbtxt").write_text(ens)
    return dest


def params(repo) -> dict:
    common = {"max_age_ms": 0, "score_threshold": 0.5}
    return {
        "model_repository": str(repo),
        "startup_models": ["color_tracker", "color_tracker_two"],
        "diagnostics_period_s": 0.5,
        "discovery_period_s": 0.3,
        "bindings": ["track", "slots"],
        "track": {
            "model": "color_tracker",
            "topic_patterns": [f"{NS}/trk/*/image_raw"],
            "forget_after_s": 60.0,
            "sequence_end_after_ms": 3000,
            **common,
        },
        "slots": {
            "model": "color_tracker_two",
            "topic_patterns": [f"{NS}/slot/*/image_raw"],
            "forget_after_s": 1.0,
            "sequence_end_after_ms": 0,
            **common,
        },
    }


class Pairs(FrameMatcher):
    """A FrameMatcher keeping the (ground truth, detections) pairs of one camera."""

    def __init__(self) -> None:
        super().__init__(on_pair=lambda truth, det: self._pairs.append((truth, det)))
        self._pairs: list = []

    def pairs(self) -> list:
        with self._lock:
            return list(self._pairs)


class Rig:
    """The node, the probe, and camera processes started and stopped by the tests."""

    def __init__(self, tmp) -> None:
        self.node = NodeProcess(
            params(repository(tmp / "repo")), tmp, name=f"inference_node_tracking_{TOKEN}"
        )
        self.probe = Probe(f"probe_tracking_{TOKEN}")
        self.cameras: dict[str, subprocess.Popen] = {}
        self.pairs: dict[str, Pairs] = {}
        self._lock = threading.Lock()

    def watch(self, robot: str, camera: str) -> Pairs:
        topic = f"{NS}/{robot}/{camera}/image_raw"
        pairs = Pairs()
        self.probe.node.create_subscription(
            DETECTIONS_TYPE, ground_truth_topic(topic), pairs.on_truth, 100
        )
        self.probe.node.create_subscription(
            DETECTIONS_TYPE, f"{NS}/{robot}/{camera}/detections", pairs.on_detections, 100
        )
        self.pairs[f"{robot}/{camera}"] = pairs
        return pairs

    def start(self, key: str, *cameras: str, seconds: float = 0.0) -> None:
        """One synthetic_cameras process of ``cameras`` (ROBOT/CAMERA:WxH:ENC)."""
        cmd = [
            sys.executable,
            "-m",
            "triton_ros.ros.tools.synthetic_cameras",
            "--moving",
            "--prefix",
            NS,
            "--rate",
            str(RATE),
            "--quiet",
        ]
        for c in cameras:
            cmd += ["--camera", c]
        if seconds:
            cmd += ["--seconds", str(seconds)]
        self.cameras[key] = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )

    def stop(self, key: str) -> None:
        proc = self.cameras.pop(key)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, out

    def close(self) -> None:
        for key in list(self.cameras):
            self.stop(key)
        self.probe.close()
        self.node.stop_and_check(signal.SIGINT)


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    rig = Rig(tmp_path_factory.mktemp("ros_tracking"))
    try:
        rig.node.wait_ready(rig.probe)
        for key in ("trk/same_a", "trk/same_b", "trk/mono", "slot/d", "slot/e"):
            rig.watch(*key.split("/"))
        # same_a and same_b: one scene (each process's first camera), two processes
        rig.start("a", "trk/same_a:640x480:rgb8")
        rig.start("b", "trk/same_b:640x480:rgb8", "trk/mono:424x240:mono8")
        rig.start("d", "slot/d:320x240:rgb8")
        rig.start("e", "slot/e:320x240:bgr8")
        yield rig
    finally:
        rig.close()


def wait_pairs(rig, key: str, n: int, since: int = 0) -> list:
    pairs = rig.pairs[key]
    wait_until(
        lambda: len(pairs.pairs()) >= since + n,
        TIMEOUT * 2,
        f"{n} scored frames of {key}; node log:\n{rig.node.log()[-3000:]}",
    )
    return pairs.pairs()


def assert_tracked(pairs: list, what: str) -> None:
    mot = score_pairs(pairs)
    assert mot.objects > 0, what
    assert mot.mota >= 0.9 and mot.switches_per_100 <= 1.0, f"{what}: {mot.summary()}"


def test_each_camera_is_tracked_and_two_showing_one_scene_keep_independent_ids(rig):
    for key in ("trk/same_a", "trk/same_b", "trk/mono"):
        assert_tracked(wait_pairs(rig, key, MIN_FRAMES), key)
    # The same scene in two cameras (two processes): each camera's tracks are numbered on their
    # own, from 1, as if it were alone (a table shared between cameras would number on).
    ids = {}
    for key in ("trk/same_a", "trk/same_b"):
        ids[key] = sorted(
            {int(i) for _, det in rig.pairs[key].pairs()[:MIN_FRAMES] for i in message_ids(det)}
        )
        assert ids[key][0] == 1, (key, ids[key])
    assert ids["trk/same_a"] == ids["trk/same_b"], ids


def test_hostile_sequence_requests_get_tritons_status_and_disturb_no_camera(rig):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    before = {k: len(rig.pairs[k].pairs()) for k in ("trk/same_a", "trk/mono")}
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{rig.node.grpc_port}")
    x = grpcclient.InferInput("images", [1, 3, 256, 256], "FP32")
    x.set_data_from_numpy(np.full((1, 3, 256, 256), 0.5, np.float32))

    def infer(**kwargs):
        return client.infer("color_tracker", [x], **kwargs)

    def refused(**kwargs) -> InferenceServerException:
        with pytest.raises(InferenceServerException) as info:
            infer(**kwargs)
        return info.value

    error = refused(sequence_id=987654321)  # unknown, no START
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify the START flag" in error.message()
    infer(sequence_id=55, sequence_start=True)
    infer(sequence_id=55, sequence_end=True)
    error = refused(sequence_id=55, sequence_end=True)  # END twice
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "must specify the START flag" in error.message()
    error = refused(sequence_id="h" * 100_000, sequence_start=True)  # a huge string ID
    assert error.status() == "StatusCode.UNIMPLEMENTED"  # tritonserver's UNSUPPORTED
    assert "cannot be longer than 128 characters" in error.message()
    longest = "h" * 128  # the longest it takes: a key
    infer(sequence_id=longest, sequence_start=True)
    infer(sequence_id=longest, sequence_end=True)
    error = refused(sequence_id=0)  # no ID at all
    assert "correlation ID" in error.message()

    # A flood of new sequences past the model's 64 slots: those that find none wait in the
    # backlog, and fail UNAVAILABLE when their timeout expires; the cameras' sequences keep
    # their slots.
    def start(i: int) -> str:
        try:
            infer(sequence_id=10_000 + i, sequence_start=True, timeout=300_000)
            return "OK"
        except InferenceServerException as exc:
            return exc.status()

    with ThreadPoolExecutor(80) as pool:
        statuses = list(pool.map(start, range(80)))
    # Some found no slot and were refused, none got another error. (How many got one depends
    # on the host: on a slow one the first of them idle past the tracker's 10 s and free their
    # slots while the flood still runs, as Triton's batcher releases idle sequences.)
    assert "StatusCode.UNAVAILABLE" in statuses, statuses
    assert set(statuses) <= {"OK", "StatusCode.UNAVAILABLE"}, statuses
    for i, status in enumerate(statuses):  # end those that got a slot
        if status == "OK":
            try:
                infer(sequence_id=10_000 + i, sequence_end=True)
            except InferenceServerException as exc:  # released after idling meanwhile
                assert exc.status() == "StatusCode.INVALID_ARGUMENT", exc
                assert "must specify the START flag" in exc.message(), exc
    client.close()
    for key, n in before.items():  # undisturbed, and still served
        pairs = wait_pairs(rig, key, 20, since=n)
        assert_tracked(pairs, f"{key} across the hostile requests")


def test_a_camera_that_goes_away_ends_its_sequence_and_its_slot_is_reused(rig):
    wait_pairs(rig, "slot/d", 5)
    before_e = len(wait_pairs(rig, "slot/e", 5))
    rig.stop("d")  # its robot goes away: unbound, END
    wait_until(
        lambda: f"of {NS}/slot/d/image_raw ends (unbound)" in rig.node.log(),
        TIMEOUT,
        f"the END of slot/d's sequence; node log:\n{rig.node.log()[-3000:]}",
    )
    # Two slots and a model idle time of ten minutes: only that END lets a third camera in.
    rig.watch("slot", "f")
    rig.start("f", "slot/f:320x240:rgb8")
    wait_pairs(rig, "slot/f", 10)
    assert_tracked(rig.pairs["slot/f"].pairs(), "slot/f in the freed slot")
    assert_tracked(wait_pairs(rig, "slot/e", 10, since=before_e), "slot/e meanwhile")


def test_a_camera_that_goes_quiet_ends_its_sequence_and_starts_anew(rig):
    rig.watch("trk", "quiet")
    rig.start("quiet", "trk/quiet:320x240:rgb8")
    first = wait_pairs(rig, "trk/quiet", 5)
    rig.stop("quiet")  # stopped publishing; still bound
    wait_until(
        lambda: (
            f"of {NS}/trk/quiet/image_raw ends (no frame for over "
            f"sequence_end_after_ms 3000)" in rig.node.log()
        ),
        TIMEOUT,
        f"the END of the quiet camera's sequence; node log:\n{rig.node.log()[-3000:]}",
    )
    time.sleep(0.5)
    n = len(rig.pairs["trk/quiet"].pairs())
    assert n >= len(first)
    rig.start("quiet", "trk/quiet:320x240:rgb8")  # back: a new sequence, numbered from 1
    later = wait_pairs(rig, "trk/quiet", 30, since=n)[n:]
    first_ids = [
        int(i)
        for i in message_ids(
            sorted(later, key=lambda p: (p[0].header.stamp.sec, p[0].header.stamp.nanosec))[0][1]
        )
    ]
    assert first_ids and min(first_ids) == 1, first_ids
    assert_tracked(later, "trk/quiet after it came back")


def test_a_reload_of_the_tracker_mid_sequence_restarts_the_sequences(rig):
    import tritonclient.grpc as grpcclient

    n = len(rig.pairs["trk/mono"].pairs())
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{rig.node.grpc_port}")
    client.load_model("tracker")  # a new tracker: it knows no sequence
    client.close()
    # Triton's new version refuses a sequence it does not know without START: the node starts
    # each camera's sequence again at its next frame, and tracking goes on from there.
    later = wait_pairs(rig, "trk/mono", 20, since=n)[n + 3 :]
    assert_tracked(later, "trk/mono after the reload")
