"""detector_preprocess: uint8 HWC RGB images -> float32 NCHW in [0, 1] (a Triton Python model)."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.model_config = json.loads(args["model_config"])
        output_config = pb_utils.get_output_config_by_name(self.model_config, "preprocessed")
        self.output_dtype = pb_utils.triton_string_to_numpy(output_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "images").as_numpy()  # [N,H,W,3]
            chw = images.transpose(0, 3, 1, 2).astype(self.output_dtype)
            chw /= np.float32(255.0)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("preprocessed", chw)])
            )
        return responses
