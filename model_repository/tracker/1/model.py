"""tracker: a multi-object tracker whose state is each sequence's implicit state (a Triton
Python model with ``sequence_batching``; model_repository/tracker/config.pbtxt).

Each camera is one sequence. Its tracks live in the state tensor TRACKS [16, 11] (one row per
track: id, centre x and y, width, height, velocity x and y in pixels per frame, frames missed,
class, frames seen, the largest side seen; id 0: a free row) and its next track ID in NEXT_ID [1];
the sequence
batcher hands them in with each request (zeros on START) and keeps what the model returns for
the camera's next frame, so that the cameras batched in one ``execute`` never see each other's
tracks and nothing is kept in the model between requests.

Per frame: every track is predicted one frame ahead (constant velocity), then matched to the
frame's detections of its class (score >= ``min_score``) greedily, best pair first: by IoU,
or, where the boxes do not overlap by ``iou_threshold`` (a fast object, one seen in part, or
back from behind something), by the closeness of the centres within ``distance_gate`` times the
largest side the track has shown (growing with the frames it was missed, plus its coasting), scored
below any
overlap of ``iou_threshold``; a matched track takes the detection's box and blends the step it made
into its velocity (``velocity_gain``; a step over half the track's size a frame is cut to that:
frames the node dropped make jumps); an unmatched track coasts on its velocity for up to
``max_misses`` frames (a short occlusion keeps its ID), then is dropped; an unmatched detection
starts a new track with the camera's next ID. Greedy matching rather than the Hungarian
algorithm: at most 16 x 6 pairs, gated by class, where the two agree but for contrived ties.
A request that is not READY (none here with the oldest strategy) passes its state on unchanged.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

# TRACKS columns
ID, CX, CY, W, H, VX, VY, MISSES, CLASS, HITS, SIZE = range(11)


def _param(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return float(value) if value else default


def _boxes(cx, cy, w, h):
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def iou(a, b):
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4] (xyxy)."""
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-9)


def step(tracks, next_id, rows, *, iou_threshold, min_score, max_misses, gain, gate):
    """One frame of one camera: (new tracks, new next_id, track id per row)."""
    tracks = tracks.copy()
    ids = np.zeros(rows.shape[0], np.int32)
    live = tracks[:, ID] > 0
    tracks[live, CX] += tracks[live, VX]  # predict
    tracks[live, CY] += tracks[live, VY]
    dets = np.nonzero(rows[:, 4] >= min_score)[0]
    live_rows = np.nonzero(live)[0]
    matched_tracks = set()
    matched_dets = set()
    if len(dets) and len(live_rows):
        t = tracks[live_rows]
        d = rows[dets]
        overlap = iou(_boxes(t[:, CX], t[:, CY], t[:, W], t[:, H]), d[:, :4])
        # Where boxes no longer overlap (a fast object, one reappearing from behind
        # something, or seen in part): closeness of the centres, in units of the gate.
        dx = (d[None, :, 0] + d[None, :, 2]) / 2 - t[:, None, CX]
        dy = (d[None, :, 1] + d[None, :, 3]) / 2 - t[:, None, CY]
        reach = (
            gate
            * (
                t[:, SIZE] * (1 + t[:, MISSES]) ** 0.5 + np.hypot(t[:, VX], t[:, VY]) * t[:, MISSES]
            )[:, None]
        )
        dist = np.hypot(dx, dy) / np.maximum(reach, 1e-6)
        near = iou_threshold * np.clip(1 - dist, 0, 1)
        # Last, for what is left: within three times the reach (frames the caller skipped
        # make jumps the track does not know of), below any nearer pair.
        far = 0.1 * iou_threshold * np.clip(1 - dist / 3, 0, 1)
        scores = np.maximum(overlap, np.maximum(near, far))
        scores[t[:, CLASS][:, None] != d[:, 5][None, :]] = -1.0
        order = np.argsort(-scores, axis=None, kind="stable")
        for flat in order:
            i, j = divmod(int(flat), len(dets))
            if scores[i, j] <= 0:
                break
            if i in matched_tracks or j in matched_dets:
                continue
            matched_tracks.add(i)
            matched_dets.add(j)
            row = live_rows[i]
            x1, y1, x2, y2 = rows[dets[j], :4]
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            prev_x = tracks[row, CX] - tracks[row, VX]  # where it was last frame
            prev_y = tracks[row, CY] - tracks[row, VY]
            steps = tracks[row, MISSES] + 1  # frames since it was last seen
            # The step it made, as a velocity; frames the caller skipped (a loaded node drops
            # frames) make a jump: at most half its size a frame is believed.
            limit = 0.5 * max(tracks[row, SIZE], 1.0)
            vx = np.clip((cx - prev_x) / steps, -limit, limit)
            vy = np.clip((cy - prev_y) / steps, -limit, limit)
            tracks[row, VX] += gain * (vx - tracks[row, VX])
            tracks[row, VY] += gain * (vy - tracks[row, VY])
            tracks[row, CX], tracks[row, CY] = cx, cy
            tracks[row, W], tracks[row, H] = x2 - x1, y2 - y1
            tracks[row, MISSES] = 0
            tracks[row, HITS] += 1
            tracks[row, SIZE] = max(tracks[row, SIZE], x2 - x1, y2 - y1)
            ids[dets[j]] = int(tracks[row, ID])
    for i, row in enumerate(live_rows):
        if i not in matched_tracks:
            tracks[row, MISSES] += 1
            if tracks[row, MISSES] > max_misses:
                tracks[row] = 0
    for j, det in enumerate(dets):
        if j in matched_dets:
            continue
        free = np.nonzero(tracks[:, ID] == 0)[0]
        if not len(free):  # table full: the detection goes untracked
            continue
        next_id += 1
        x1, y1, x2, y2 = rows[det, :4]
        tracks[free[0]] = 0
        tracks[free[0], [ID, CX, CY, W, H, CLASS, HITS, SIZE]] = [
            next_id,
            (x1 + x2) / 2,
            (y1 + y2) / 2,
            x2 - x1,
            y2 - y1,
            rows[det, 5],
            1,
            max(x2 - x1, y2 - y1),
        ]
        ids[det] = next_id
    return tracks, next_id, ids


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.options = dict(
            iou_threshold=_param(config, "iou_threshold", 0.05),
            min_score=_param(config, "min_score", 0.5),
            max_misses=int(_param(config, "max_misses", 15)),
            gain=_param(config, "velocity_gain", 0.5),
            gate=_param(config, "distance_gate", 1.5),
        )

    def execute(self, requests):
        responses = []
        for request in requests:

            def get(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy()

            rows = get("detections").astype(np.float32)  # [1, 6, 6]
            tracks = get("TRACKS_IN").astype(np.float32)  # [1, 16, 11]
            next_id = get("NEXT_ID_IN").astype(np.int32)  # [1, 1]
            ready = get("READY").reshape(-1)
            ids = np.zeros(rows.shape[:2], np.int32)
            tracks_out, next_out = tracks.copy(), next_id.copy()
            for b in range(rows.shape[0]):
                if not ready[b]:
                    continue
                tracks_out[b], n, ids[b] = step(
                    tracks[b], int(next_id[b, 0]), rows[b], **self.options
                )
                next_out[b, 0] = n
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("detections_out", rows),
                        pb_utils.Tensor("track_ids", ids),
                        pb_utils.Tensor("TRACKS_OUT", tracks_out),
                        pb_utils.Tensor("NEXT_ID_OUT", next_out),
                    ]
                )
            )
        return responses
