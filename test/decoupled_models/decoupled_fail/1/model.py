import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "")
            sender = request.get_response_sender()
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUT", np.array([1], np.int32))]
                )
            )
            if mode == "raise":
                raise pb_utils.TritonModelException("the model failed on purpose")
            if mode == "crash":
                time.sleep(0.2)  # the first response leaves before the process dies
                os._exit(3)
            if mode == "twice":
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                try:
                    sender.send(
                        pb_utils.InferenceResponse(
                            output_tensors=[pb_utils.Tensor("OUT", np.array([2], np.int32))]
                        )
                    )
                except pb_utils.TritonModelException as exc:
                    pb_utils.Logger.log_info(f"decoupled_fail: {exc}")
            if mode not in ("abandon", "twice"):
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
