import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            marker = json.loads(request.parameters()).get("marker", "")
            threading.Thread(
                target=self.stream,
                daemon=True,
                args=(request, request.get_response_sender(), marker),
            ).start()
        return None

    def stream(self, request, sender, marker):
        count = 0
        while not request.is_cancelled() and count < 1500:
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUT", np.array([count], np.int32))]
                )
            )
            count += 1
            time.sleep(0.02)
        outcome = "cancelled" if request.is_cancelled() else "done"
        if marker:
            with open(marker, "w") as f:
                f.write(f"{outcome} {count}")
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
