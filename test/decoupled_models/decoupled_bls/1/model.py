import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "sync")
            bls = pb_utils.InferenceRequest(
                model_name="square_int32",
                requested_output_names=["OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
            )
            if mode == "coupled":
                answer = bls.exec()
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            if mode == "async":
                stream = await bls.async_exec(decoupled=True)
            else:
                stream = bls.exec(decoupled=True)
            count = total = empty = 0
            error = None
            for answer in stream:
                if answer.has_error():
                    error = answer.error()
                    break
                if not answer.output_tensors():
                    empty += 1  # the final flag came alone
                    continue
                count += 1
                total += int(pb_utils.get_output_tensor_by_name(answer, "OUT").as_numpy()[0])
            if error is not None:
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("COUNT", np.array([count], np.int32)),
                        pb_utils.Tensor("SUM", np.array([total], np.int32)),
                        pb_utils.Tensor("EMPTY", np.array([empty], np.int32)),
                    ]
                )
            )
        return responses
