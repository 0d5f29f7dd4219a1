"""Every test carries exactly one of the suite's markers (registered in setup.cfg):

- ``unit``: no processes, no sockets;
- ``integration``: real servers, brokers or processes over 127.0.0.1;
- ``system``: ROS nodes across processes, launch, colcon.

A module says which with ``pytestmark = pytest.mark.<kind>``, for all of its tests (the most
demanding of them decides: a module that starts one server is integration). The hook below, imported
by test/conftest.py, fails the collection, naming the tests, when a test carries none or more than
one: a new test cannot slip in unmarked, and ``pytest -m unit`` (or integration, system) always
selects a complete part of the suite.
"""

from __future__ import annotations

import pytest

KINDS = ("unit", "integration", "system")


def kinds_of(item) -> list[str]:
    """The suite markers a collected test carries, each once."""
    return sorted({mark.name for mark in item.iter_markers() if mark.name in KINDS})


def unmarked(items) -> list[str]:
    """``nodeid: what is wrong`` for every test without exactly one suite marker."""
    problems = []
    for item in items:
        kinds = kinds_of(item)
        if len(kinds) != 1:
            problems.append(f"{item.nodeid}: {' and '.join(kinds) if kinds else 'no marker'}")
    return problems


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected test is checked
def pytest_collection_modifyitems(session, config, items) -> None:
    problems = unmarked(items)
    if problems:
        shown = "\n  ".join(problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        raise pytest.UsageError(
            f"{len(problems)} test(s) without exactly one of the markers {', '.join(KINDS)} "
            f"(give the module `pytestmark = pytest.mark.<kind>`, see test/suite_markers.py):"
            f"\n  {shown}{more}"
        )
