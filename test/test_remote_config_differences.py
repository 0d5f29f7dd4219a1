"""Which configuration fields of two replicas differ, named with both values (issue 34, item 13).

A replica is compared with the reference in everything the node plans a binding from
(``ros/targets/spec.py``): ``max_batch_size``, each input's data type, dims, format and whether it
is optional, each output's data type and dims, and the outputs' labels.
"""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from triton_ros.core.model_config import ModelConfig, to_typed
from triton_ros.core.protos import model_config_pb2 as mc
from triton_ros.ros.targets.remote.planning import differences, signature

pytestmark = pytest.mark.unit

BASE_TEXT = """
name: "detector"
max_batch_size: 16
input [{ name: "images" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [3, 256, 256] }]
output [{ name: "boxes" data_type: TYPE_FP32 dims: [100, 4] },
        { name: "scores" data_type: TYPE_FP32 dims: [100, 8] }]
"""


def config(old: str = "", new: str = "", text: str = BASE_TEXT):
    """The base configuration with ``old`` replaced by ``new`` in its text, typed."""
    assert old in text
    return to_typed(text_format.Parse(text.replace(old, new, 1), mc.ModelConfig()))


BASE = config()


def diff(other: ModelConfig, labels=None, other_labels=None) -> list[str]:
    return differences(
        BASE, labels or {}, other, other_labels or {}, reference="grpc://a:1", here="grpc://b:1"
    )


def test_the_same_configuration_has_no_difference():
    assert diff(config()) == [] and signature(config()) == signature(BASE)


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (
            "max_batch_size: 16",
            "max_batch_size: 8",
            "max_batch_size: 16 at grpc://a:1, 8 at grpc://b:1",
        ),
        (
            "dims: [3, 256, 256]",
            "dims: [3, 320, 320]",
            "input 'images' dims: [3, 256, 256] at grpc://a:1, [3, 320, 320] at grpc://b:1",
        ),
        ("FORMAT_NCHW dims: [3, 256, 256]", "FORMAT_NHWC dims: [256, 256, 3]", None),
        (
            '"images" data_type: TYPE_FP32',
            '"images" data_type: TYPE_UINT8',
            "input 'images' datatype: FP32 at grpc://a:1, UINT8 at grpc://b:1",
        ),
        (
            "format: FORMAT_NCHW",
            "optional: true format: FORMAT_NCHW",
            "input 'images' optional: False at grpc://a:1, True at grpc://b:1",
        ),
        (
            """,
        { name: "scores" data_type: TYPE_FP32 dims: [100, 8] }""",
            "",
            "output 'scores': only at grpc://a:1",
        ),
        (
            "dims: [100, 4] }",
            'dims: [100, 4] }, { name: "extra" data_type: TYPE_FP32 dims: [1] }',
            "output 'extra': only at grpc://b:1",
        ),
    ],
)
def test_each_field_that_matters_is_named_with_both_values(old, new, expected):
    other = config(old, new)
    found = diff(other)
    if expected is None:  # NCHW -> NHWC: the format and the dims differ
        assert found == [
            "input 'images' dims: [3, 256, 256] at grpc://a:1, [256, 256, 3] at grpc://b:1",
            "input 'images' format: FORMAT_NCHW at grpc://a:1, FORMAT_NHWC at grpc://b:1",
        ]
    else:
        assert found == [expected]
    assert signature(other) != signature(BASE)


def test_labels_and_several_fields_at_once():
    other = config(
        "max_batch_size: 16",
        "max_batch_size: 1",
        text=BASE_TEXT.replace("dims: [100, 8]", "dims: [100, 80]"),
    )
    assert diff(other, {"scores": ["a", "b"]}, {"scores": ["a", "b", "c"]}) == [
        "max_batch_size: 16 at grpc://a:1, 1 at grpc://b:1",
        "output 'scores' dims: [100, 8] at grpc://a:1, [100, 80] at grpc://b:1",
        "labels of output 'scores': 2 at grpc://a:1, 3 at grpc://b:1",
    ]
    assert diff(BASE, {"scores": ["a"]}, {"scores": ["b"]}) == [
        "labels of output 'scores': other names at grpc://b:1"
    ]
    assert signature(BASE, {"scores": ["a"]}) != signature(BASE, {"scores": ["b"]})


def test_labels_one_replica_could_not_read_are_not_a_difference():
    """A replica whose labels could not be read (its classification request failed) is not
    'mismatch' for that: the labels are unknown there, not different."""
    assert diff(BASE, {"scores": ["a", "b"]}, {}) != []
    assert (
        differences(
            BASE,
            {},
            BASE,
            {"scores": ["a", "b"]},
            reference="grpc://a:1",
            here="grpc://b:1",
            unknown_labels=frozenset({"scores"}),
        )
        == []
    )
