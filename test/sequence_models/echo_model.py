"""A stateful Python model for the sequence batcher's tests (test/sequence_repository.py writes
it into every model it builds): each request's inputs come back as outputs named ``<input>_OUT``
(the control tensors the batcher added among them), with:

- BATCH: [its index in the executed batch, the batch's request count] (direct strategy: the slot's
  row; a not-ready null request fills a row it has no request for);
- IDS: "<correlation_id()>|<flags()>" (what pb_utils tells the model);
- with implicit state ACC (INT32) and BASE (INT64): OUTPUT = ACC + INPUT, ACC_NEXT = OUTPUT and
  BASE_NEXT = BASE + 1; without it, OUTPUT = INPUT.

Only the outputs a configuration lists (or a client asks for) leave the stub.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for index, request in enumerate(requests):
            tensors = {t.name(): t.as_numpy() for t in request.inputs()}
            outputs = [pb_utils.Tensor(f"{name}_OUT", value) for name, value in tensors.items()]
            rows = tensors["INPUT"].shape[0]
            outputs.append(
                pb_utils.Tensor(
                    "BATCH", np.tile(np.array([index, len(requests)], np.int32), (rows, 1))
                )
            )
            ids = f"{request.correlation_id()}|{request.flags()}".encode()
            outputs.append(pb_utils.Tensor("IDS", np.full((rows, 1), ids, dtype=object)))
            value = tensors["INPUT"]
            if "ACC" in tensors:
                value = tensors["ACC"] + value
                outputs.append(pb_utils.Tensor("ACC_NEXT", value.astype(np.int32)))
            if "BASE" in tensors:
                outputs.append(pb_utils.Tensor("BASE_NEXT", tensors["BASE"] + 1))
            outputs.append(pb_utils.Tensor("OUTPUT", value.astype(np.int32)))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
