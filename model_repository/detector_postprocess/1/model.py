"""detector_postprocess: class_detections [C,6] -> detections [100,6] (a Triton Python model).

Per image: the rows (x1, y1, x2, y2, score, class_id) of ``color_detector`` (one per class) whose
score reaches ``score_threshold`` are kept, their boxes clipped to the image, sorted by
descending score (ties: lower class id) and written to the first rows of the output; the
remaining rows are zero.
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
        self.score_threshold = _param(self.model_config, "score_threshold", 0.5)
        self.width = _param(self.model_config, "image_width", 256.0)
        self.height = _param(self.model_config, "image_height", 256.0)

    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "class_detections").as_numpy()
            detections = (
                np.stack([self.decode(r) for r in rows])
                if rows.shape[0]
                else np.zeros((0, self.max_detections, 6), np.float32)
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("detections", detections)]
                )
            )
        return responses

    def decode(self, rows):
        out = np.zeros((self.max_detections, 6), np.float32)
        kept = rows[rows[:, 4] >= self.score_threshold]
        kept = kept[np.lexsort((kept[:, 5], -kept[:, 4]))][: self.max_detections]
        kept[:, [0, 2]] = np.clip(kept[:, [0, 2]], 0.0, self.width)
        kept[:, [1, 3]] = np.clip(kept[:, [1, 3]], 0.0, self.height)
        out[: kept.shape[0]] = kept
        return out
