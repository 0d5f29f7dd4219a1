import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            calls = [
                pb_utils.InferenceRequest(
                    model_name="add_sub", inputs=[in_0, in_1], requested_output_names=[name]
                )
                for name in ("OUTPUT0", "OUTPUT1")
            ]
            added, subtracted = await asyncio.gather(*[c.async_exec() for c in calls])
            for response in (added, subtracted):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
            total = (
                pb_utils.get_output_tensor_by_name(added, "OUTPUT0").as_numpy()
                * pb_utils.get_output_tensor_by_name(subtracted, "OUTPUT1").as_numpy()
            )
            out = pb_utils.Tensor.from_dlpack("OUTPUT", pb_utils.Tensor("tmp", total).to_dlpack())
            request.get_response_sender().send(
                pb_utils.InferenceResponse(output_tensors=[out]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
