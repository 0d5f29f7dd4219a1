"""A binding's counters are declared once (monitoring/counters.py: SourceCounters) and shown the
same everywhere: under the same names in /diagnostics and in ~/status
(triton_ros_interfaces/BindingStatus, as rosidl generated it), with the same values."""

from __future__ import annotations

from dataclasses import fields

import pytest

from triton_ros.ros.monitoring.counters import COUNTERS, FAIL_REASONS, REPORTED, SourceCounters
from triton_ros.ros.monitoring.diagnostics import OK, BindingHealth
from triton_ros.ros.monitoring.messages import diagnostic_array, status_message

pytestmark = pytest.mark.unit


def health() -> BindingHealth:
    """A binding whose every counter has a value of its own."""
    b = BindingHealth(name="cams", model="m", level=OK, message="ok")
    for value, name in enumerate(COUNTERS, start=1):
        setattr(b, name, value)
    return b


def test_every_counter_is_reported_once_and_failed_is_their_total():
    assert set(REPORTED) == set(COUNTERS) | {"failed"}
    assert len(REPORTED) == len(set(REPORTED))
    assert REPORTED.index("failed") == REPORTED.index(FAIL_REASONS[0]) - 1
    b = health()
    assert b.failed == sum(getattr(b, name) for name in FAIL_REASONS)


def test_the_health_record_holds_no_counter_of_its_own():
    own = {f.name for f in fields(BindingHealth)} - {f.name for f in fields(SourceCounters)}
    assert not own & set(REPORTED), own & set(REPORTED)


def test_diagnostics_and_status_show_every_counter_by_its_name():
    from triton_ros_interfaces.msg import BindingStatus

    b = health()
    (status,) = diagnostic_array(None, "node", [], [b]).status
    shown = {kv.key: kv.value for kv in status.values}
    message = status_message(None, [], [b]).bindings[0]
    assert set(REPORTED) <= set(BindingStatus.get_fields_and_field_types())
    for name in REPORTED:
        assert shown[name] == str(getattr(b, name)), name
        assert getattr(message, name) == getattr(b, name), name
