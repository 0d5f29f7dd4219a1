import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            if not pb_utils.is_model_ready(name):
                pb_utils.load_model(model_name=name)
            ready = np.array([pb_utils.is_model_ready(name)], dtype=bool)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("READY", ready)])
            )
        return responses
