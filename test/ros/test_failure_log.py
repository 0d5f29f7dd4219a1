"""FailureLog: the first failure of a kind is logged at once, later ones at most once per period
with the number suppressed meanwhile; the last error is kept (Python's logging as the logger)."""

from __future__ import annotations

import logging
import re
import time

import pytest

from triton_ros.ros.monitoring.failures import FailureLog


pytestmark = pytest.mark.unit


def test_first_at_once_then_throttled_with_a_count(caplog):
    log = FailureLog(logging.getLogger("failure_log_test"), every_ns=300_000_000)
    with caplog.at_level(logging.WARNING, logger="failure_log_test"):
        assert log.report("infer", "failed_inference", "boom 1")
        for i in range(2, 5):
            assert not log.report("infer", "failed_inference", f"boom {i}")
        assert log.report("other", "failed_decode", "bad shape")  # another kind: at once
        assert log.report("stale:/a", "dropped_stale", "old frame", level="warn", summary="old")
        time.sleep(0.35)
        assert log.report("infer", "failed_inference", "boom 5")
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[:3] == [("ERROR", "boom 1"), ("ERROR", "bad shape"), ("WARNING", "old frame")]
    assert len(lines) == 4 and lines[3][0] == "ERROR"
    assert re.fullmatch(r"boom 5 \[3 more like this in the last 0\.\d s\]", lines[3][1]), lines[3]
    assert log.last.text == "boom 5" and log.last.reason == "failed_inference"
    assert log.last_stale.summary == "old" and log.last.age_s() >= 0
