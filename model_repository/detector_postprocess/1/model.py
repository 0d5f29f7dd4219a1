"""detector_postprocess: boxes [256,4] + scores [256,8] -> detections [100,6] (a Triton Python model).

Per image: every (box, class) pair whose score reaches ``score_threshold`` is a candidate; boxes
are clipped to the image; candidates are visited by descending score (ties: lower class id, then
lower box index) and a candidate is dropped when it overlaps an already kept box of the same
class with IoU > ``iou_threshold``. The kept ones fill the rows (x1, y1, x2, y2, score, class_id)
in that order; the remaining rows are zero.
"""
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _param(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return float(value) if value else default


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        output_config = pb_utils.get_output_config_by_name(self.model_config, "detections")
        self.max_detections = int(output_config["dims"][0])
        self.score_threshold = _param(self.model_config, "score_threshold", 0.25)
        self.iou_threshold = _param(self.model_config, "iou_threshold", 0.45)
        self.width = _param(self.model_config, "image_width", 256.0)
        self.height = _param(self.model_config, "image_height", 256.0)

    def execute(self, requests):
        responses = []
        for request in requests:
            boxes = pb_utils.get_input_tensor_by_name(request, "boxes").as_numpy()
            scores = pb_utils.get_input_tensor_by_name(request, "scores").as_numpy()
            if boxes.shape[0] != scores.shape[0]:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "boxes and scores have different batch sizes", pb_utils.TritonError.INVALID_ARG)))
                continue
            detections = np.stack([self.decode(b, s) for b, s in zip(boxes, scores)]) \
                if boxes.shape[0] else np.zeros((0, self.max_detections, 6), np.float32)
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("detections", detections)]))
        return responses

    def decode(self, boxes, scores):
        out = np.zeros((self.max_detections, 6), np.float32)
        box_index, class_id = np.nonzero(scores >= self.score_threshold)
        if box_index.size == 0:
            return out
        score = scores[box_index, class_id]
        order = np.lexsort((box_index, class_id, -score))
        box_index, class_id, score = box_index[order], class_id[order], score[order]
        clipped = np.empty((box_index.size, 4), np.float32)
        clipped[:, [0, 2]] = np.clip(boxes[box_index][:, [0, 2]], 0.0, self.width)
        clipped[:, [1, 3]] = np.clip(boxes[box_index][:, [1, 3]], 0.0, self.height)
        area = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
        alive = np.ones(box_index.size, bool)
        kept = []
        for i in range(box_index.size):
            if not alive[i]:
                continue
            kept.append(i)
            if len(kept) == self.max_detections:
                break
            rest = np.nonzero(alive[i + 1:] & (class_id[i + 1:] == class_id[i]))[0] + i + 1
            if rest.size == 0:
                continue
            w = np.minimum(clipped[i, 2], clipped[rest, 2]) - np.maximum(clipped[i, 0], clipped[rest, 0])
            h = np.minimum(clipped[i, 3], clipped[rest, 3]) - np.maximum(clipped[i, 1], clipped[rest, 1])
            inter = np.clip(w, 0, None) * np.clip(h, 0, None)
            union = area[i] + area[rest] - inter
            iou = np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)
            alive[rest[iou > self.iou_threshold]] = False
        kept = np.asarray(kept)
        out[:kept.size, :4] = clipped[kept]
        out[:kept.size, 4] = score[kept]
        out[:kept.size, 5] = class_id[kept]
        return out
