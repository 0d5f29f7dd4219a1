"""TensorRT backend: the engine-independent logic on a hand-built engine description (TensorRT
cannot run on this machine), and a real server refusing a plan cleanly without TensorRT."""

from __future__ import annotations

import enum
from types import SimpleNamespace

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc

from server_process import copy_models
from simple_model import simple_array, simple_inputs
from triton_ros.core.backends.tensorrt_backend import (
    ProfileShapes,
    auto_complete_from_engine,
    binding_plan,
    check_config,
    describe_engine,
    engine_max_batch_size,
    instance_profiles,
    select_profile,
)
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.model_config import load_model_config


pytestmark = pytest.mark.integration


class Mode(enum.Enum):
    INPUT = 1
    OUTPUT = 2


class DType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT32 = 3


class EngineLike:
    """The named-tensor surface of a tensorrt.ICudaEngine, as plain data."""

    def __init__(self, tensors, profiles):
        self._tensors = tensors  # name -> (Mode, DType, shape)
        self._profiles = profiles  # [ {name: (min, opt, max)} ]
        self.num_io_tensors = len(tensors)
        self.num_optimization_profiles = len(profiles)

    def get_tensor_name(self, index):
        return list(self._tensors)[index]

    def get_tensor_mode(self, name):
        return self._tensors[name][0]

    def get_tensor_dtype(self, name):
        return self._tensors[name][1]

    def get_tensor_shape(self, name):
        return self._tensors[name][2]

    def is_shape_inference_io(self, name):
        return False

    def get_tensor_profile_shape(self, name, profile):
        return self._profiles[profile][name]


def detector_engine() -> EngineLike:
    """A detector plan with two profiles: batch 1..4 and 5..16."""
    return EngineLike(
        {
            "images": (Mode.INPUT, DType.FLOAT, (-1, 3, 256, 256)),
            "boxes": (Mode.OUTPUT, DType.FLOAT, (-1, 256, 4)),
            "scores": (Mode.OUTPUT, DType.HALF, (-1, 256, 8)),
        },
        [
            {"images": ((1, 3, 256, 256), (2, 3, 256, 256), (4, 3, 256, 256))},
            {"images": ((5, 3, 256, 256), (8, 3, 256, 256), (16, 3, 256, 256))},
        ],
    )


def config(tmp_path, text: str):
    model = tmp_path / "trt"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(text)
    return load_model_config("trt", model, strict=True)


CONFIG = """
name: "trt"
platform: "tensorrt_plan"
max_batch_size: 16
input [ { name: "images", data_type: TYPE_FP32, dims: [ 3, 256, 256 ] } ]
output [
  { name: "boxes", data_type: TYPE_FP32, dims: [ 256, 4 ] },
  { name: "scores", data_type: TYPE_FP16, dims: [ 256, 8 ] }
]
"""


def test_describe_engine_reads_tensors_and_profiles():
    desc = describe_engine(detector_engine())
    assert [(t.name, t.is_input, t.datatype, t.shape) for t in desc.tensors] == [
        ("images", True, "FP32", (-1, 3, 256, 256)),
        ("boxes", False, "FP32", (-1, 256, 4)),
        ("scores", False, "FP16", (-1, 256, 8)),
    ]
    assert desc.profiles[1]["images"] == ProfileShapes(
        (5, 3, 256, 256), (8, 3, 256, 256), (16, 3, 256, 256)
    )
    assert engine_max_batch_size(desc) == 16


def test_old_tensorrt_without_named_tensors_is_refused():
    with pytest.raises(TritonRosError) as info:
        describe_engine(SimpleNamespace(num_bindings=3))
    assert info.value.code == StatusCode.UNSUPPORTED


def test_matching_configuration_is_accepted(tmp_path):
    check_config(config(tmp_path, CONFIG), describe_engine(detector_engine()))


@pytest.mark.parametrize(
    "change,message",
    [
        (
            ("TYPE_FP16, dims: [ 256, 8 ]", "TYPE_FP32, dims: [ 256, 8 ]"),
            "unexpected datatype TYPE_FP16 for output 'scores', expecting TYPE_FP32",
        ),
        (
            ("dims: [ 256, 4 ]", "dims: [ 128, 4 ]"),
            "output 'boxes' dims [256, 4] don't match configuration dims [128, 4]",
        ),
        (('name: "images"', 'name: "image"'), "unexpected inference input 'image'"),
        (
            ("max_batch_size: 16", "max_batch_size: 32"),
            "max_batch_size 32 but the engine's optimization profiles allow at most 16",
        ),
    ],
)
def test_mismatching_configuration_is_refused(tmp_path, change, message):
    with pytest.raises(TritonRosError) as info:
        check_config(config(tmp_path, CONFIG.replace(*change)), describe_engine(detector_engine()))
    assert message in info.value.message


def test_auto_complete_fills_io_and_batching():
    proto = mc.ModelConfig(name="trt", platform="tensorrt_plan")
    warnings = auto_complete_from_engine(proto, describe_engine(detector_engine()))
    assert proto.max_batch_size == 4 and proto.HasField("dynamic_batching") and warnings
    assert [(i.name, list(i.dims), mc.DataType.Name(i.data_type)) for i in proto.input] == [
        ("images", [3, 256, 256], "TYPE_FP32")
    ]
    assert [(o.name, list(o.dims)) for o in proto.output] == [
        ("boxes", [256, 4]),
        ("scores", [256, 8]),
    ]


def test_profile_selection_follows_the_batch_shape():
    desc = describe_engine(detector_engine())
    assert select_profile(desc, (0, 1), {"images": (3, 3, 256, 256)}) == 0
    assert select_profile(desc, (0, 1), {"images": (12, 3, 256, 256)}) == 1
    assert select_profile(desc, (1, 0), {"images": (4, 3, 256, 256)}) == 0
    with pytest.raises(TritonRosError) as info:
        select_profile(desc, (0,), {"images": (8, 3, 256, 256)})
    assert "fit no optimization profile" in info.value.message
    assert "profile 0: images [1, 3, 256, 256]..[4, 3, 256, 256]" in info.value.message


def test_instance_profiles_default_to_all_and_are_checked():
    desc = describe_engine(detector_engine())
    assert instance_profiles(desc, ()) == (0, 1)
    assert instance_profiles(desc, (1,)) == (1,)
    with pytest.raises(TritonRosError):
        instance_profiles(desc, (2,))


def test_binding_plan_sizes_every_buffer():
    desc = describe_engine(detector_engine())
    plan = binding_plan(
        desc, {"images": (5, 3, 256, 256)}, {"boxes": (5, 256, 4), "scores": (5, 256, 8)}
    )
    assert [(b.name, b.is_input, b.shape, b.nbytes) for b in plan] == [
        ("images", True, (5, 3, 256, 256), 5 * 3 * 256 * 256 * 4),
        ("boxes", False, (5, 256, 4), 5 * 256 * 4 * 4),
        ("scores", False, (5, 256, 8), 5 * 256 * 8 * 2),
    ]
    with pytest.raises(TritonRosError) as info:
        binding_plan(desc, {"images": (5, 3, 256, 256)}, {"boxes": (-1, 4), "scores": (5, 256, 8)})
    assert info.value.code == StatusCode.UNSUPPORTED


def test_plan_without_tensorrt_fails_to_load_and_the_rest_serves(start_server, tmp_path):
    repo = copy_models(tmp_path / "models", "simple")
    (repo / "plan" / "1").mkdir(parents=True)
    (repo / "plan" / "1" / "model.plan").write_bytes(b"not a real engine")
    (repo / "plan" / "config.pbtxt").write_text(CONFIG.replace('"trt"', '"plan"'))
    server = start_server("--model-repository", str(repo))
    client = server.client()
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert index["plan"].state == "UNAVAILABLE"
    assert "TensorRT is not available" in index["plan"].reason
    assert client.is_model_ready("simple")
    data = simple_array()
    np.testing.assert_array_equal(
        client.infer("simple", simple_inputs(grpcclient, data)).as_numpy("OUTPUT0"), 2 * data
    )


def test_tensorrt_parameters_are_checked_and_unread_ones_named(caplog):
    from triton_ros.core.backends.tensorrt_backend import check_parameters

    def config(**params):
        return SimpleNamespace(name="trt", parameters=params)

    with caplog.at_level("WARNING"):
        check_parameters(config(execution_context_allocation_strategy="STATIC"))
    assert not caplog.records
    with caplog.at_level("WARNING"):
        check_parameters(
            config(
                execution_context_allocation_strategy="ON_PROFILE_CHANGE",
                execution_policy="BLOCKING",
            )
        )
    messages = [r.getMessage() for r in caplog.records]
    assert any("'ON_PROFILE_CHANGE' is not supported" in m for m in messages), messages
    assert any("'execution_policy' are not read by the tensorrt backend" in m for m in messages), (
        messages
    )
    with pytest.raises(TritonRosError) as info:
        check_parameters(config(execution_context_allocation_strategy="DYNAMIC"))
    assert info.value.code == StatusCode.INVALID_ARG
    assert "'STATIC' or 'ON_PROFILE_CHANGE', got 'DYNAMIC'" in info.value.message


def test_a_bad_tensorrt_parameter_is_named_even_without_tensorrt(tmp_path):
    from triton_ros.core.server import InferenceServer, ServerOptions

    (tmp_path / "trt" / "1").mkdir(parents=True)
    (tmp_path / "trt" / "1" / "model.plan").write_bytes(b"not a real engine")
    (tmp_path / "trt" / "config.pbtxt").write_text(
        CONFIG + 'parameters { key: "execution_context_allocation_strategy" '
        'value: { string_value: "DYNAMIC" } }\n'
    )
    core = InferenceServer(ServerOptions((str(tmp_path),), model_control_mode="explicit"))
    core.start()
    try:
        with pytest.raises(TritonRosError) as info:
            core.load_model("trt")
    finally:
        core.stop()
    assert info.value.code == StatusCode.INVALID_ARG
    assert "execution_context_allocation_strategy" in info.value.message
