"""Backends as plugins: the example backend package (examples/triton_ros_example_backend) built
and installed by pip into a folder of its own, found by a real server through its entry point;
a backend directory (--backend-directory <dir>/<name>/backend.py); the built-in optional
frameworks (torch, OpenVINO) absent: everything else serves and their models say what to
install."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from model_factory import add_sub_graph, write_model
from server_process import ROOT

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "examples" / "triton_ros_example_backend"

REVERSE_BACKEND = '''
"""A backend directory's backend: OUTPUT0 is INPUT0's rows reversed along the last axis."""
import numpy as np
from triton_ros.core.backend_model import BackendModel, BatchedTensorInstance


class ReverseModel(BackendModel):
    def create_instance(self, *, name, kind, device_id):
        return ReverseInstance(self, name=name, kind=kind, device_id=device_id)


class ReverseInstance(BatchedTensorInstance):
    def run(self, inputs, output_names):
        return {"OUTPUT0": np.ascontiguousarray(inputs["INPUT0"][..., ::-1])}


BACKEND_MODEL = ReverseModel
'''


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory) -> Path:
    """The example package as pip builds and installs it (its own pyproject, its entry point in
    the installed metadata), into a folder the server gets on PYTHONPATH."""
    target = tmp_path_factory.mktemp("site")
    # a copy: setuptools writes build/ and *.egg-info into the folder it builds
    source = tmp_path_factory.mktemp("source") / EXAMPLE.name
    shutil.copytree(EXAMPLE, source)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        cwd=source.parent,
        timeout=240,
        env={**os.environ, "PIP_NO_CACHE_DIR": "1"},
    )
    assert list(target.glob("triton_ros_example_backend-*.dist-info/entry_points.txt"))
    return target


def index(server) -> dict[str, tuple[str, str]]:
    return {
        m.name: (m.state, m.reason) for m in server.client().get_model_repository_index().models
    }


def test_an_installed_package_and_a_backend_directory_serve_their_models(
    start_server, installed_example, tmp_path
):
    repo = tmp_path / "models"
    # no config.pbtxt: the plugin's auto_complete_config fills it
    (repo / "affine_auto" / "1").mkdir(parents=True)
    (repo / "affine_auto" / "1" / "affine.json").write_text('{"scale": 2.0, "offset": 1.0}')
    (repo / "affine_auto" / "config.pbtxt").write_text('backend: "example_affine"\n')
    (repo / "affine_param" / "1").mkdir(parents=True)
    (repo / "affine_param" / "1" / "affine.json").write_text('{"scale": 2.0, "offset": 0.5}')
    (repo / "affine_param" / "config.pbtxt").write_text(
        textwrap.dedent("""
        backend: "example_affine"
        max_batch_size: 4
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        parameters { key: "scale" value: { string_value: "-3" } }
        """)
    )
    (repo / "affine_broken" / "1").mkdir(parents=True)
    (repo / "affine_broken" / "1" / "affine.json").write_text('{"scale": "big"}')
    (repo / "affine_broken" / "config.pbtxt").write_text('backend: "example_affine"\n')
    (repo / "reversed" / "1").mkdir(parents=True)
    (repo / "reversed" / "config.pbtxt").write_text(
        textwrap.dedent("""
        backend: "reverse"
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
        """)
    )
    (repo / "unknown" / "1").mkdir(parents=True)
    (repo / "unknown" / "config.pbtxt").write_text('backend: "no_such_backend"\n')
    (repo / "broken_dir" / "1").mkdir(parents=True)
    (repo / "broken_dir" / "config.pbtxt").write_text('backend: "broken"\n')
    write_model(repo, "simple", add_sub_graph(), None)
    backends = tmp_path / "backends"
    (backends / "reverse").mkdir(parents=True)
    (backends / "reverse" / "backend.py").write_text(REVERSE_BACKEND)
    # the smallest backend of docs/backends.md, as the docs write it
    docs = (ROOT / "docs" / "backends.md").read_text()
    echo = next(block for block in docs.split("```python\n")[1:] if "class EchoModel" in block)
    (backends / "echo").mkdir(parents=True)
    (backends / "echo" / "backend.py").write_text(
        echo.split("```")[0] + "\n\nBACKEND_MODEL = EchoModel\n"
    )
    (repo / "echoed" / "1").mkdir(parents=True)
    (repo / "echoed" / "config.pbtxt").write_text(
        textwrap.dedent("""
        backend: "echo"
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] } ]
        """)
    )
    (backends / "broken").mkdir(parents=True)
    (backends / "broken" / "backend.py").write_text("import no_such_module_here\n")

    pythonpath = os.pathsep.join(
        filter(None, [str(installed_example), os.environ.get("PYTHONPATH", "")])
    )
    server = start_server(
        "--model-repository",
        str(repo),
        "--backend-directory",
        str(backends),
        env={"PYTHONPATH": pythonpath},
    )
    states = index(server)
    assert states["affine_auto"][0] == "READY"
    assert states["affine_param"][0] == "READY"
    assert states["reversed"][0] == "READY"
    assert states["echoed"][0] == "READY", states["echoed"]
    assert states["affine_broken"][0] == "UNAVAILABLE"
    assert "affine.json is not valid" in states["affine_broken"][1]
    assert states["unknown"][0] == "UNAVAILABLE"
    assert "unknown backend 'no_such_backend'" in states["unknown"][1]
    assert "triton_ros.backends" in states["unknown"][1] and str(backends) in states["unknown"][1]
    assert states["broken_dir"][0] == "UNAVAILABLE"
    assert "No module named 'no_such_module_here'" in states["broken_dir"][1]

    config = server.client().get_model_config("affine_auto").config
    assert config.max_batch_size == 8 and [i.name for i in config.input] == ["INPUT0"]

    x = np.array([[1.0, 2.0, -4.0], [0.0, 0.5, 8.0]], np.float32)
    for module, client in ((grpcclient, server.client()), (httpclient, server.http_client())):
        inp = module.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_array_equal(
            client.infer("affine_auto", [inp]).as_numpy("OUTPUT0"), x * 2 + 1
        )
        np.testing.assert_array_equal(
            client.infer("affine_param", [inp]).as_numpy("OUTPUT0"), x * -3 + 0.5
        )
        v = np.arange(10, dtype=np.int32).reshape(2, 5)
        inp = module.InferInput("INPUT0", list(v.shape), "INT32")
        inp.set_data_from_numpy(v)
        np.testing.assert_array_equal(
            client.infer("reversed", [inp]).as_numpy("OUTPUT0"), v[:, ::-1]
        )
    echo = np.array([1.5, -2.0], np.float32)
    inp = grpcclient.InferInput("INPUT0", [2], "FP32")
    inp.set_data_from_numpy(echo)
    np.testing.assert_array_equal(server.client().infer("echoed", [inp]).as_numpy("OUTPUT0"), echo)
    assert server.client().is_model_ready("simple")


BLOCKER = '''
"""Makes this interpreter behave as one without torch and openvino installed."""
import sys


class _Blocker:
    blocked = ("torch", "openvino")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


sys.meta_path.insert(0, _Blocker())
'''


def test_without_torch_and_openvino_everything_else_serves(start_server, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    repo = tmp_path / "models"
    write_model(repo, "simple", add_sub_graph(), None)
    (repo / "torch_model" / "1").mkdir(parents=True)
    (repo / "torch_model" / "1" / "model.pt").write_bytes(b"not read: torch is missing first")
    (repo / "torch_model" / "config.pbtxt").write_text(
        textwrap.dedent("""
        platform: "pytorch_libtorch"
        max_batch_size: 4
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """)
    )
    (repo / "ov_model" / "1").mkdir(parents=True)
    (repo / "ov_model" / "1" / "model.xml").write_text("<net/>")  # auto-complete needs openvino
    server = start_server(
        "--model-repository", str(repo), env={"PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    )
    states = index(server)
    assert states["torch_model"][0] == "UNAVAILABLE"
    assert "needs PyTorch, which is not installed" in states["torch_model"][1]
    assert "pip install 'triton_ros[torch]'" in states["torch_model"][1]
    assert states["ov_model"][0] == "UNAVAILABLE"
    assert "needs OpenVINO, which is not installed" in states["ov_model"][1]
    assert "pip install openvino" in states["ov_model"][1]
    a = np.ones((1, 4), np.float32)
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 4], "FP32"),
        grpcclient.InferInput("INPUT1", [1, 4], "FP32"),
    ]
    for i in inputs:
        i.set_data_from_numpy(a)
    np.testing.assert_array_equal(
        server.client().infer("simple", inputs).as_numpy("OUTPUT0"), a * 2
    )
    assert "Traceback" not in server.log()
    # the blocker did act: the server process never imported either framework
    assert "needs PyTorch" in server.log()


def test_the_registry_prefers_built_ins_and_checks_what_plugins_give(tmp_path):
    from triton_ros.core.backend_model import BackendRegistry, BackendModel
    from triton_ros.core.errors import StatusCode, TritonRosError

    registry = BackendRegistry()
    assert registry.find("onnxruntime").__name__ == "OnnxRuntimeModel"
    assert {"onnxruntime", "pytorch", "openvino", "python", "tensorrt"} <= set(registry.available())
    folder = tmp_path / "backends"
    (folder / "notaclass").mkdir(parents=True)
    (folder / "notaclass" / "backend.py").write_text("BACKEND_MODEL = 42\n")
    (folder / "noattr").mkdir(parents=True)
    (folder / "noattr" / "backend.py").write_text("x = 1\n")
    (folder / "good").mkdir(parents=True)
    (folder / "good" / "backend.py").write_text(REVERSE_BACKEND)
    registry.set_directories([folder])
    assert issubclass(registry.find("good"), BackendModel)
    assert registry.available()["good"].endswith("good/backend.py")
    for name, code, text in (
        ("notaclass", StatusCode.INVALID_ARG, "not a subclass"),
        ("noattr", StatusCode.INVALID_ARG, "defines no BACKEND_MODEL"),
        ("missing", StatusCode.UNSUPPORTED, "unknown backend 'missing'"),
        ("../x", StatusCode.INVALID_ARG, "is not valid"),
    ):
        with pytest.raises(TritonRosError) as err:
            registry.find(name)
        assert err.value.code == code and text in err.value.message, err.value


@pytest.mark.parametrize(
    "files, config, backend, platform, filename",
    [
        (["model.xml", "model.bin"], "", "openvino", "", "model.xml"),
        (["model.pt"], "", "pytorch", "pytorch_libtorch", "model.pt"),
        (["model.pt2"], "", "pytorch", "torch_aoti", "model.pt2"),
        (["model.onnx", "model.pt"], "", "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        (
            ["model.onnx"],
            'backend: "openvino"\ndefault_model_filename: "model.onnx"',
            "openvino",
            "",
            "model.onnx",
        ),
        ([], 'platform: "libtorch"', "pytorch", "libtorch", "model.pt"),
        (
            [],
            'platform: "tensorflow_savedmodel"',
            "tensorflow",
            "tensorflow_savedmodel",
            "model.savedmodel",
        ),
        (["model.graphdef"], "", "tensorflow", "tensorflow_graphdef", "model.graphdef"),
        (
            ["model.graphdef"],
            'backend: "tensorflow"',
            "tensorflow",
            "tensorflow_graphdef",
            "model.graphdef",
        ),
        (
            [],
            'backend: "tensorflow"\ndefault_model_filename: "model.savedmodel"',
            "tensorflow",
            "tensorflow_savedmodel",
            "model.savedmodel",
        ),
        (["model.tflite"], "", "tflite", "", "model.tflite"),
        ([], 'backend: "armnn_tflite"', "armnn_tflite", "", "model.tflite"),
    ],
)
def test_backend_fields_are_completed_from_the_files_as_triton_does(
    tmp_path, files, config, backend, platform, filename
):
    from triton_ros.core.model_config import auto_complete_backend_fields, parse_config_text

    (tmp_path / "1").mkdir()
    for name in files:
        (tmp_path / "1" / name).write_bytes(b"")
    proto = parse_config_text(config, model_name="m")
    auto_complete_backend_fields(proto, "m", tmp_path)
    assert (proto.backend, proto.platform, proto.default_model_filename) == (
        backend,
        platform,
        filename,
    )
