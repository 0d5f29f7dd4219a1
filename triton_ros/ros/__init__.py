"""The ROS 2 face of triton_ros: the ``inference_node`` and its tools.

Everything here may import rclpy; the inference core (:mod:`triton_ros.core`) never does.

gRPC's C core (grpcio, through absl) logs every failed TLS handshake of a channel at INFO
(``ssl_transport_security.cc ... Handshake failed``): about 4 lines a second for a ``grpcs://``
endpoint that speaks plaintext, none of them throttled, all of them in the node's log. The node
tells each endpoint's reason itself, throttled (targets/remote/pool.py), so its processes keep
only gRPC's errors: ``GRPC_VERBOSITY=ERROR`` unless the environment sets it (``INFO`` or
``DEBUG`` to see them again). gRPC reads it once, when grpc is first imported, which in the
node is after this package's ``__init__``.
"""

import os as _os

_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
