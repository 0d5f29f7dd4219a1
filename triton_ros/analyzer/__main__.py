"""``python -m triton_ros.analyzer``: the same as ``triton-ros-analyzer``."""

import sys

from .cli import main

sys.exit(main())
