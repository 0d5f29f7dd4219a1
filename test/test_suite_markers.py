"""The suite's marker check (test/suite_markers.py), run by pytest itself on small test modules:
a test without a marker, or with two, fails the collection and is named; marked tests run, and
``-m`` selects by marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite_markers import KINDS

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.unit

CONFTEST = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from suite_markers import pytest_collection_modifyitems  # noqa: F401
"""


@pytest.fixture
def suite(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {k}: {k}\n" for k in KINDS))
    return pytester


def test_an_unmarked_test_fails_the_collection_and_is_named(suite):
    suite.makepyfile(
        test_marked="""
import pytest
pytestmark = pytest.mark.unit
def test_fine():
    pass
""",
        test_unmarked="""
def test_forgotten():
    pass
""",
    )
    result = suite.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*1 test(s) without exactly one of the markers*",
            "*test_unmarked.py::test_forgotten: no marker*",
        ]
    )
    # -m does not hide it: the check sees every collected test
    assert suite.runpytest("-m", "unit").ret == pytest.ExitCode.USAGE_ERROR


def test_two_markers_are_one_too_many(suite):
    suite.makepyfile(
        test_two="""
import pytest
pytestmark = pytest.mark.unit
@pytest.mark.system
def test_both():
    pass
"""
    )
    result = suite.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_two.py::test_both: system and unit*"])


def test_marked_tests_run_and_markers_select_them(suite):
    suite.makepyfile(
        test_kinds="""
import pytest
@pytest.mark.unit
def test_a_unit():
    pass
@pytest.mark.integration
def test_an_integration():
    pass
@pytest.mark.system
@pytest.mark.parametrize("n", [1, 2])
def test_a_system(n):
    pass
"""
    )
    suite.runpytest().assert_outcomes(passed=4)
    suite.runpytest("-m", "system").assert_outcomes(passed=2, deselected=2)
    suite.runpytest("-m", "not system").assert_outcomes(passed=2, deselected=2)
