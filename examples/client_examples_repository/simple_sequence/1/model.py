"""OUTPUT = READY * (INPUT + START): the arithmetic of Triton's simple_sequence example."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = _tensor(request, "READY") * (
                _tensor(request, "INPUT") + _tensor(request, "START")
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", value.astype(np.int32))]
                )
            )
        return responses
