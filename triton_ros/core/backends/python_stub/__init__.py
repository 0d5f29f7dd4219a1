"""The Python backend's stub process (Triton's ``triton_python_backend_stub``).

Every instance of a Python model runs in its own ``python -m triton_ros.core.backends.python_stub``
process. :mod:`.ipc` is the wire both sides speak (JSON control frames over a socket, tensors in
shared memory); ``lib/`` holds ``triton_python_backend_utils`` and is the only directory the stub
adds to ``sys.path``, so that models ``import triton_python_backend_utils as pb_utils`` unchanged.

This package must stay light: the stub imports it before every model, so nothing here imports
the inference server.
"""

from pathlib import Path

LIB_DIR = Path(__file__).resolve().parent / "lib"
