import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            value, start, corrid = (
                int(pb_utils.get_input_tensor_by_name(request, name).as_numpy()[0])
                for name in ("IN", "START", "CORRID")
            )
            sender = request.get_response_sender()
            for _ in range(value):
                sender.send(
                    pb_utils.InferenceResponse(
                        output_tensors=[
                            pb_utils.Tensor("OUT", np.array([value, start, corrid], np.int32))
                        ]
                    )
                )
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
