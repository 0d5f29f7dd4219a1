"""The bundled tracker (model_repository/tracker, color_tracker) through the core, and the
CLEAR-MOT counts that score it (triton_ros/ros/tools/mot_metrics.py).

- CLEAR-MOT against sequences counted by hand: misses, false positives, an ID switch, a kept
  correspondence that wins over a better overlap, MOTA.
- The tracker on ``synthetic_cameras``' moving scenes (crossings, a pillar that hides objects
  for a few frames), frame by frame through ``color_tracker``, at 30 and 8 frames per second,
  and at 8 with jumps of up to a second (frames a loaded node drops): MOTA >= 0.9 and at most 1 ID
  switch per 100 object-frames for every camera.
- Many cameras in one batch give, to the bit, what each camera gives alone: the same frames sent
  together (the sequence batcher puts the cameras' requests in one batch, checked in the
  statistics) and one camera at a time.
"""

from __future__ import annotations

import shutil
from concurrent.futures import wait
from pathlib import Path

import pytest

from triton_ros.core.infer_request import InferRequest
from triton_ros.core.model_config import TensorConfig
from triton_ros.ros.tools.mot_metrics import ClearMot

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
CAMERAS = ("r/a:640x480:rgb8", "r/b:320x240:bgr8", "r/c:424x240:mono8", "r/d:848x480:rgb8")


def box(x, y, w=10, h=10):
    return (x, y, x + w, y + h)


def test_clear_mot_counts_as_by_hand():
    mot = ClearMot()
    mot.update([box(0, 0), box(50, 50)], [1, 2], [box(0, 0), box(51, 50)], ["a", "b"])
    mot.update([box(1, 0), box(52, 50)], [1, 2], [box(1, 0)], ["a"])  # 2 missed
    mot.update(
        [box(2, 0), box(53, 50)], [1, 2], [box(2, 0), box(53, 50), box(90, 90)], ["a", "c", "x"]
    )  # 2: a; x: FP
    mot.update([box(3, 0)], [1], [box(3, 0)], ["b"])  # 1 switches a->b
    assert (mot.objects, mot.matches, mot.misses, mot.false_positives, mot.id_switches) == (
        7,
        6,
        1,
        1,
        2,
    )
    assert mot.mota == pytest.approx(1 - 4 / 7)
    # a kept correspondence wins over a better overlap with another track
    kept = ClearMot()
    kept.update([box(0, 0)], [1], [box(0, 0)], ["a"])
    kept.update([box(0, 0)], [1], [box(1, 0), box(0, 0)], ["a", "b"])
    assert (kept.id_switches, kept.false_positives) == (0, 1)


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    from triton_ros.core.server import InferenceServer, ServerOptions

    repo = tmp_path_factory.mktemp("tracker_repo")
    for name in ("color_detector", "tracker", "color_tracker"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    server = InferenceServer(ServerOptions((str(repo),), model_control_mode="explicit"))
    server.start()
    server.load_model("color_tracker")
    yield server
    server.stop()


def camera_frames(index: int, text: str, frames: int, rate: float):
    """(model inputs, letterbox, ground truth) of each frame of camera ``text``."""
    from triton_ros.ros.codec.preprocess import PreprocessConfig, plan_input, preprocess
    from triton_ros.ros.tools.synthetic_cameras import MovingScene, parse_camera

    plan = plan_input(
        PreprocessConfig(),
        TensorConfig(name="images", datatype="FP32", dims=(3, 256, 256), format="FORMAT_NCHW"),
        model="color_tracker",
    )
    spec = parse_camera(text)
    scene = MovingScene(spec, index)
    out = []
    for f in range(frames):
        pixels, truth = scene.render(f / rate)
        tensor, letterbox = preprocess(pixels, spec.encoding, plan)
        out.append((tensor[None], letterbox, truth))
    return out


def request(sequence_id: int, tensor, start: bool, end: bool = False) -> InferRequest:
    return InferRequest(
        model_name="color_tracker",
        inputs={"images": tensor},
        sequence_id=sequence_id,
        sequence_start=start,
        sequence_end=end,
    )


@pytest.mark.parametrize("rate,skipping", [(30.0, False), (8.0, False), (8.0, True)])
def test_the_tracker_meets_its_targets_on_moving_scenes(core, rate, skipping):
    """``skipping``: the tracker sees some frames only, as a loaded node sends them (it drops
    frames): one in ten makes a jump of 2 to 9 frames (up to a second)."""
    import numpy as np

    frames = int(20 * rate)  # 20 s of each camera
    rng = np.random.default_rng(7)
    for index, text in enumerate(CAMERAS):
        mot = ClearMot()
        seen = list(enumerate(camera_frames(index, text, frames, rate)))
        if skipping:
            kept, f = [], 0
            while f < frames:
                kept.append(seen[f])
                f += 1 if rng.random() > 0.1 else int(rng.integers(2, 10))
            seen = kept
        for f, (tensor, letterbox, truth) in seen:
            r = request(100 + index, tensor, f == 0, f == seen[-1][0])
            core.infer(r)
            out = r.future.result(30).outputs
            rows, ids = out["detections"][0], out["track_ids"][0]
            keep = rows[:, 4] > 0.5
            mot.update(truth.boxes, truth.ids, letterbox.to_source(rows[keep, :4]), ids[keep])
        assert mot.objects > len(seen), text  # the scene has objects, and they are scored
        assert mot.mota >= 0.9 and mot.switches_per_100 <= 1.0, f"{text}: {mot.summary()}"


def test_many_cameras_in_one_batch_equal_each_camera_alone_to_the_bit(core):
    frames = 40
    cameras = [camera_frames(i, text, frames, 15.0) for i, text in enumerate(CAMERAS * 2)]

    def executions() -> dict[int, int]:
        stats = core.model_statistics("tracker")[0]
        return {b.batch_size: b.compute_infer.count for b in stats.batch_stats}

    alone = []
    for c, frames_of in enumerate(cameras):  # one camera at a time
        outs = []
        for f, (tensor, _, _) in enumerate(frames_of):
            r = request(1000 + c, tensor, f == 0, f == frames - 1)
            core.infer(r)
            outs.append(r.future.result(30).outputs)
        alone.append(outs)
    before = executions()
    together = [[] for _ in cameras]
    for f in range(frames):  # every camera's frame f at once
        requests = [
            request(2000 + c, frames_of[f][0], f == 0, f == frames - 1)
            for c, frames_of in enumerate(cameras)
        ]
        for r in requests:
            core.infer(r)
        wait([r.future for r in requests], timeout=60)
        for c, r in enumerate(requests):
            together[c].append(r.future.result(0).outputs)
    after = executions()
    batched = sum(n - before.get(size, 0) for size, n in after.items() if size > 1)
    assert batched > 0, (before, after)  # the cameras did share batches
    for c in range(len(cameras)):
        for f in range(frames):
            for name in ("detections", "track_ids"):
                a, b = alone[c][f][name], together[c][f][name]
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (c, f, name)
