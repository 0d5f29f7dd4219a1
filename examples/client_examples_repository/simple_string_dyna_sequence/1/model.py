"""An INT32 accumulator per sequence, as Triton's dyna_sequence test backend keeps one: START sets
it to the sum of INPUT, later requests add INPUT, END adds the correlation ID (a decimal string);
every READY request answers the accumulator. The oldest strategy keeps each sequence on one
instance, so the instance's own table holds it."""

import numpy as np
import triton_python_backend_utils as pb_utils


def _tensor(request, name):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        self.accumulators = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            if not _tensor(request, "READY").any():
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUTPUT", np.zeros([1, 1], np.int32))]
                    )
                )
                continue
            corrid = _tensor(request, "CORRID").reshape(-1)[0]
            key = corrid.decode() if isinstance(corrid, bytes) else str(corrid)
            total = int(_tensor(request, "INPUT").sum())
            if not _tensor(request, "START").any():
                total += self.accumulators.get(key, 0)
            if _tensor(request, "END").any():
                try:
                    total += int(key)
                except ValueError:
                    responses.append(
                        pb_utils.InferenceResponse(
                            error=pb_utils.TritonError(f"correlation ID '{key}' is not an integer")
                        )
                    )
                    self.accumulators.pop(key, None)
                    continue
                self.accumulators.pop(key, None)
            else:
                self.accumulators[key] = total
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT", np.full([1, 1], total, np.int32))]
                )
            )
        return responses
