"""What went wrong with a remote request or probe: a Triton status code and a kind.

The kind says whose fault it was, and so what the pool does about it: :data:`ENDPOINT_FAILURES`
(no answer in time, unreachable) mark the endpoint down at once; the others are counted per
endpoint, and :data:`~triton_ros.ros.targets.remote.config.FAILING_AFTER` of them in a row mark
it down too. Each protocol's client classifies its own failures by status code or exception
type, never by message text (``ProtocolClient.classify``).
"""

from __future__ import annotations

from ....core.errors import StatusCode, TritonRosError

# Error kinds, counted per endpoint. Those in ENDPOINT_FAILURES mark the endpoint down.
TIMEOUT, UNREACHABLE, REJECTED, MODEL_ERROR, NO_ENDPOINT, CLIENT_ERROR = (
    "timeout",
    "unreachable",
    "rejected",
    "model_error",
    "no_endpoint",
    "client_error",
)
ENDPOINT_FAILURES = (TIMEOUT, UNREACHABLE)
# The kinds an endpoint's figures count (NO_ENDPOINT is no endpoint's).
ERROR_KINDS = (TIMEOUT, UNREACHABLE, REJECTED, MODEL_ERROR, CLIENT_ERROR)


class RemoteError(TritonRosError):
    """A remote request's failure: a Triton status code and what kind of failure it was."""

    def __init__(self, code: StatusCode, message: str, kind: str) -> None:
        super().__init__(code, message)
        self.kind = kind
