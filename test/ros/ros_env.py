"""The ROS tests' own domain: set before any rclpy context exists (imported by their conftest).

Other programs may run ROS tests on this host at the same time, so every test process picks a
random ROS_DOMAIN_ID (or TRITON_ROS_TEST_DOMAIN_ID plus its xdist worker's number, see
processes.suite_domain: scripts/test.sh sets it so that the suites it runs side by side, and
their workers, never share a domain), keeps discovery on this host, and names its nodes and
topics with TOKEN.
"""

from __future__ import annotations

import os
import random
import secrets
from pathlib import Path

from processes import suite_domain  # test/: on sys.path through its conftest

ROOT = Path(__file__).resolve().parents[2]

_domain = suite_domain()
os.environ["ROS_DOMAIN_ID"] = str(
    _domain if _domain is not None else random.SystemRandom().randint(1, 100)
)
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))

TOKEN = secrets.token_hex(3)
