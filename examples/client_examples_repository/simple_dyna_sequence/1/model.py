"""OUTPUT = READY * (INPUT + START + END * CORRID): the arithmetic of Triton's
simple_dyna_sequence example (CORRID, a UINT64, is cast to INT32 as that model casts it)."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            corrid = _tensor(request, "CORRID").astype(np.int32)
            value = _tensor(request, "READY") * (
                _tensor(request, "INPUT")
                + _tensor(request, "START")
                + _tensor(request, "END") * corrid
            )
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", value.astype(np.int32))]
                )
            )
        return responses
