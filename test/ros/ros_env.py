"""The ROS tests' own domain: set before any rclpy context exists (imported by their conftest).

Other programs may run ROS tests on this host at the same time, so every test session picks a
random ROS_DOMAIN_ID (or TRITON_ROS_TEST_DOMAIN_ID, which scripts/test.sh sets so that the suites
it runs side by side never share a domain), keeps discovery on this host, and names its nodes and
topics with TOKEN.
"""
from __future__ import annotations

import os
import random
import secrets
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

os.environ["ROS_DOMAIN_ID"] = (os.environ.get("TRITON_ROS_TEST_DOMAIN_ID")
                               or str(random.SystemRandom().randint(1, 100)))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(ROOT / "config" / "fastdds.xml"))

TOKEN = secrets.token_hex(3)
