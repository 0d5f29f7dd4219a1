"""A decoupled model: each request's responses are sent from a thread of its own, after execute
has returned; a cancelled request stops early and ends with a CANCELLED error."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            if values.shape != delays.shape:
                raise pb_utils.TritonModelException(
                    f"expected IN and DELAY shape to match, got {list(values.shape)} and "
                    f"{list(delays.shape)}."
                )
            thread = threading.Thread(
                target=self.respond,
                daemon=True,
                args=(request, request.get_response_sender(), values, delays),
            )
            thread.start()
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            time.sleep(int(wait[0]) / 1000)
        return None

    def respond(self, request, sender, values, delays):
        for index, (value, delay) in enumerate(zip(values, delays)):
            time.sleep(int(delay) / 1000)
            if request.is_cancelled():
                sender.send(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(
                            "request cancelled", pb_utils.TritonError.CANCELLED
                        )
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                return
            sender.send(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUT", np.array([value], np.int32)),
                        pb_utils.Tensor("IDX", np.array([index], np.uint32)),
                    ]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
