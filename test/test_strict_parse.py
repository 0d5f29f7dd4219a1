"""The one strict size parser of the core (triton_ros.core.strict_parse)."""

from __future__ import annotations

import pytest

from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.strict_parse import MAX_SIZE, parse_size, require_size


pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text,value", [("0", 0), ("2", 2), ("0002", 2), (b"17", 17), (str(MAX_SIZE), MAX_SIZE)]
)
def test_decimal_ascii_digits_parse(text, value):
    assert parse_size(text, "size") == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0_2",
        "0x2",
        "0o2",
        "0b1",
        "+2",
        "-2",
        " 2",
        "2 ",
        "2.0",
        "1e3",
        "\uff12",
        "\u0662",
        "inf",
        "nan",
        str(MAX_SIZE + 1),
        "9" * 5000,
        b"\xff2",
        b"0_2",
    ],
)
def test_everything_python_int_would_also_accept_is_refused(text):
    with pytest.raises(TritonRosError) as info:
        parse_size(text, "chunk size")
    assert info.value.code is StatusCode.INVALID_ARG
    assert "chunk size" in info.value.message
    assert len(info.value.message) < 200  # a 5000-digit value is not echoed back


def test_maximum_is_enforced():
    assert parse_size("10", "x", maximum=10) == 10
    with pytest.raises(TritonRosError):
        parse_size("11", "x", maximum=10)


@pytest.mark.parametrize("value", [True, False, -1, 2.0, None, [1], MAX_SIZE + 1, "0x2"])
def test_require_size_refuses_non_sizes(value):
    with pytest.raises(TritonRosError) as info:
        require_size(value, "byte_size")
    assert info.value.code is StatusCode.INVALID_ARG


def test_require_size_accepts_ints_and_strict_strings():
    assert require_size(5, "x") == 5
    assert require_size("5", "x") == 5


@pytest.mark.parametrize("text,value", [("", -1), ("-1", -1), ("0", 0), ("17", 17)])
def test_model_versions(text, value):
    from triton_ros.core.strict_parse import parse_model_version

    assert parse_model_version(text) == value


@pytest.mark.parametrize("text", ["0x1", "1e3", " 1", "+1", "-2", "1_0", "9" * 400, "one"])
def test_hostile_model_versions_are_invalid(text):
    from triton_ros.core.strict_parse import parse_model_version

    with pytest.raises(TritonRosError) as info:
        parse_model_version(text)
    assert info.value.code is StatusCode.INVALID_ARG
    assert "must be integral" in info.value.message
