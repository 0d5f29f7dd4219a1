"""Backend parameters of the model configuration: the ONNX Runtime backend honours those Triton's
onnxruntime_backend reads and refuses their bad values at load time (not at the first request);
the Python backend warns about the ones it cannot honour."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from model_factory import identity_graph, write_model
from triton_ros.core.backends.onnxruntime_backend import INTRA_OP_SPIN_US, _deprecated_cuda_options
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.server import InferenceServer, ServerOptions


pytestmark = pytest.mark.integration


def config_text(parameters: dict[str, str]) -> str:
    lines = [
        'backend: "onnxruntime"',
        "max_batch_size: 8",
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]',
        "instance_group [ { count: 1 kind: KIND_CPU } ]",
    ]
    lines += [
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
        for k, v in parameters.items()
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def server(explicit_core):
    return explicit_core


def load(server, name: str, parameters: dict[str, str]):
    write_model(server.repo_path, name, identity_graph("FP32", ["N", 4]), config_text(parameters))
    server.load_model(name)
    return server.get_model(name)


def test_session_entries_and_arena_shrinkage_reach_onnxruntime(server):
    model = load(
        server,
        "tuned",
        {
            "session.use_device_allocator_for_initializers": "1",
            "session.intra_op.allow_spinning": "0",
            "memory.enable_memory_arena_shrinkage": "cpu:0",
        },
    )
    (instance,) = model.instances
    options = instance.session.get_session_options()
    assert options.get_session_config_entry("session.use_device_allocator_for_initializers") == "1"
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert (
        instance._run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage")
        == "cpu:0"
    )
    # the run option is accepted by ONNX Runtime on a real run, and the values are exact
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = instance.run({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"]
    np.testing.assert_array_equal(out, x)


def test_without_the_parameters_onnxruntime_keeps_its_defaults(server):
    # (but for the intra-op spin duration: see the test below)
    model = load(server, "plain", {})
    (instance,) = model.instances
    assert instance._run_options is None
    with pytest.raises(RuntimeError, match="does not have configuration"):
        instance.session.get_session_options().get_session_config_entry(
            "session.intra_op.allow_spinning"
        )


def test_idle_intra_op_threads_spin_briefly_unless_the_model_says_otherwise(server):
    spin = "session.intra_op.spin_duration_us"
    (plain,) = load(server, "plain", {}).instances
    assert plain.session.get_session_options().get_session_config_entry(spin) == str(
        INTRA_OP_SPIN_US
    )
    (longer,) = load(server, "longer", {spin: "5000"}).instances
    assert longer.session.get_session_options().get_session_config_entry(spin) == "5000"
    # a model that turns spinning off gets no spin duration of ours beside it
    (off,) = load(server, "off", {"session.intra_op.allow_spinning": "0"}).instances
    with pytest.raises(RuntimeError, match="does not have configuration"):
        off.session.get_session_options().get_session_config_entry(spin)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    for instance in (plain, longer, off):
        np.testing.assert_array_equal(instance.run({"INPUT0": x}, ["OUTPUT0"])["OUTPUT0"], x)


@pytest.mark.parametrize(
    "parameters, words",
    [
        (
            {"memory.enable_memory_arena_shrinkage": "banana"},
            "memory.enable_memory_arena_shrinkage",
        ),
        (
            {"memory.enable_memory_arena_shrinkage": "cpu:0;"},
            "memory.enable_memory_arena_shrinkage",
        ),
        ({"session.intra_op.allow_spinning": "yes"}, "session.intra_op.allow_spinning"),
        (
            {"session.use_device_allocator_for_initializers": "true"},
            "session.use_device_allocator_for_initializers",
        ),
    ],
)
def test_bad_values_fail_the_load_with_the_parameter_named(server, parameters, words):
    with pytest.raises(TritonRosError) as err:
        load(server, "bad", parameters)
    assert words in err.value.message
    assert err.value.code is StatusCode.INVALID_ARG
    assert not server.model_ready("bad")


def test_deprecated_cuda_keys_map_to_provider_options_as_triton_does():
    def config(**params):
        return SimpleNamespace(name="m", parameters=params)

    assert _deprecated_cuda_options(config()) == {}
    assert _deprecated_cuda_options(
        config(
            cudnn_conv_algo_search="1",
            gpu_mem_limit="4294967296",
            arena_extend_strategy="1",
            do_copy_in_default_stream="0",
        )
    ) == {
        "cudnn_conv_algo_search": "HEURISTIC",
        "gpu_mem_limit": "4294967296",
        "arena_extend_strategy": "kSameAsRequested",
        "do_copy_in_default_stream": "0",
    }
    assert (
        _deprecated_cuda_options(config(cudnn_conv_algo_search="2"))["cudnn_conv_algo_search"]
        == "DEFAULT"
    )
    for bad, words in (
        (dict(cudnn_conv_algo_search="3"), "cudnn_conv_algo_search value '3'"),
        (dict(arena_extend_strategy="2"), "arena_extend_strategy value '2'"),
        (dict(gpu_mem_limit="lots"), "invalid parameter 'gpu_mem_limit' of model 'm'"),
        (dict(gpu_mem_limit="-1"), "invalid parameter 'gpu_mem_limit'"),
        (dict(do_copy_in_default_stream="maybe"), "must be a boolean"),
    ):
        with pytest.raises(TritonRosError) as err:
            _deprecated_cuda_options(config(**bad))
        assert err.value.code is StatusCode.INVALID_ARG
        assert words in err.value.message


def test_python_backend_parameters_it_cannot_honour_are_warned_about(tmp_path, caplog):
    """Triton's Python backend reads EXECUTION_ENV_PATH and FORCE_CPU_ONLY_INPUT_TENSORS; here
    the stub runs in the server's environment with CPU tensors, and the log says so."""
    import shutil

    source = Path(__file__).parent / "python_models" / "add_sub"
    shutil.copytree(source, tmp_path / "add_sub")
    config = tmp_path / "add_sub" / "config.pbtxt"
    config.write_text(
        config.read_text()
        + """
parameters { key: "EXECUTION_ENV_PATH"
             value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }
parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }
"""
    )
    core = InferenceServer(ServerOptions((str(tmp_path),), model_control_mode="explicit"))
    core.start()
    try:
        with caplog.at_level("WARNING"):
            core.load_model("add_sub")
        assert core.model_ready("add_sub")
    finally:
        core.stop()
    messages = [r.getMessage() for r in caplog.records]
    assert any("EXECUTION_ENV_PATH is ignored" in m for m in messages), messages
    assert any("FORCE_CPU_ONLY_INPUT_TENSORS 'no' is ignored" in m for m in messages), messages


def test_parameters_the_onnxruntime_backend_does_not_read_are_named_in_a_warning(server, caplog):
    with caplog.at_level("WARNING"):
        load(
            server,
            "typo",
            {
                "intra_op_threads": "2",
                "intra_op_thread_count": "1",
                "session.intra_op.allow_spinning": "1",
            },
        )
    warnings = [
        r.getMessage() for r in caplog.records if "not read by the onnxruntime" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert "'intra_op_threads'" in warnings[0]
    assert "'intra_op_thread_count'" not in warnings[0].split(" are not read")[0]
    assert "session.intra_op.allow_spinning" not in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING"):
        load(server, "clean", {"intra_op_thread_count": "1"})
    assert not [r for r in caplog.records if "not read by the onnxruntime" in r.getMessage()]
