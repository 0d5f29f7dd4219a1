import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if (data < 0).any():
                responses.append(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(
                            "checked_double got a negative value", pb_utils.TritonError.INVALID_ARG
                        )
                    )
                )
            else:
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUTPUT", (data * 2).astype(np.int32))]
                    )
                )
        return responses
