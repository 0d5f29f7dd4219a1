"""The binding's model seam (triton_ros.ros.targets) over the real embedded core: ONNX,
Python and ensemble models described alike (labels included), typed errors, version changes."""

from __future__ import annotations


import numpy as np
import pytest

from ros_env import ROOT
from server_process import copy_models
from triton_ros.core.errors import StatusCode, TritonRosError
from triton_ros.core.server import InferenceServer, ServerOptions
from triton_ros.ros.targets.local import LocalModelTarget
from triton_ros.ros.targets.spec import ModelSpec, ModelTarget


pytestmark = pytest.mark.integration

BUNDLED = ROOT / "model_repository"
DETECTOR_LABELS = tuple((BUNDLED / "detector" / "labels.txt").read_text().splitlines())
PIPELINE_LABELS = tuple((BUNDLED / "detector_pipeline" / "labels.txt").read_text().splitlines())


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    repo = copy_models(
        tmp_path_factory.mktemp("target_models"),
        "detector",
        "color_detector",
        "detector_pipeline",
        "detector_preprocess",
        "detector_postprocess",
        "simple",
    )
    server = InferenceServer(
        ServerOptions(
            model_repositories=(str(repo),),
            model_control_mode="explicit",
            startup_models=("detector_pipeline", "detector", "simple"),
        )
    )
    server.start()
    yield server
    server.stop()


def test_every_model_kind_is_described_alike(core):
    onnx = LocalModelTarget(core, "detector")
    python = LocalModelTarget(core, "detector_preprocess")
    ensemble = LocalModelTarget(core, "detector_pipeline")
    for target in (onnx, python, ensemble):
        assert isinstance(target, ModelTarget)
        assert target.state().ready and target.state().state == "READY"

    spec = onnx.describe()
    assert isinstance(spec, ModelSpec)
    assert (spec.name, spec.version, spec.max_batch_size) == ("detector", 1, 16)
    assert spec.input("images").format == "FORMAT_NCHW" and spec.input("images").dims == (
        3,
        256,
        256,
    )
    assert spec.labels_of("scores") == DETECTOR_LABELS and spec.labels_of("boxes") == ()

    spec = python.describe()
    assert spec.platform == "python" and spec.output("preprocessed").datatype == "FP32"
    assert spec.labels == {}  # a Python model without label files

    spec = ensemble.describe()
    assert spec.platform == "ensemble"
    assert spec.input("images").datatype == "UINT8" and spec.input("images").format == "FORMAT_NHWC"
    assert spec.output("detections").dims == (100, 6)
    # an ensemble's own label_filename, read in the same one place as a plain model's
    assert spec.labels_of("detections") == PIPELINE_LABELS != DETECTOR_LABELS
    # the same object while the same version serves: the binding re-plans only on a change
    assert ensemble.describe() is spec


def test_infer_returns_a_future_with_the_outputs(core):
    target = LocalModelTarget(core, "detector_pipeline")
    images = np.zeros((1, 256, 256, 3), np.uint8)
    result = target.infer({"images": images}, outputs=("detections",)).result(timeout=60)
    assert (result.model_name, result.model_version) == ("detector_pipeline", 1)
    assert list(result.outputs) == ["detections"] and result.outputs["detections"].shape == (
        1,
        100,
        6,
    )


def test_a_bad_request_fails_its_future_with_a_typed_error(core):
    target = LocalModelTarget(core, "detector")
    future = target.infer({"images": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(TritonRosError) as info:
        future.result(timeout=60)
    assert info.value.code == StatusCode.INVALID_ARG


def test_unknown_and_unloaded_models_raise_typed_errors(core):
    with pytest.raises(TritonRosError) as info:
        LocalModelTarget(core, "no_such_model").describe()
    assert info.value.code == StatusCode.NOT_FOUND
    assert not LocalModelTarget(core, "no_such_model").state().ready

    target = LocalModelTarget(core, "simple")
    before = target.describe()
    core.unload_model("simple")
    with pytest.raises(TritonRosError) as info:
        target.describe()
    assert info.value.code == StatusCode.UNAVAILABLE and "unloaded" in info.value.message
    state = target.state()
    assert (state.ready, state.state, state.reason) == (False, "UNAVAILABLE", "unloaded")
    future = target.infer(
        {"INPUT0": np.zeros((1, 16), np.int32), "INPUT1": np.zeros((1, 16), np.int32)}
    )
    with pytest.raises(TritonRosError) as info:
        future.result(timeout=60)
    assert info.value.code in (StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND)

    core.load_model("simple")
    after = target.describe()
    assert after is not before and after.version == before.version  # a reloaded version: new spec


def _ensemble_over_detector(name: str, label_filename: str = "") -> str:
    """An ensemble of one step, the bundled detector, passing its boxes and scores on."""
    labels = f'\n    label_filename: "{label_filename}"' if label_filename else ""
    return f"""name: "{name}"
platform: "ensemble"
max_batch_size: 16
input [ {{ name: "images"  data_type: TYPE_FP32  dims: [ 3, 256, 256 ] }} ]
output [
  {{ name: "boxes"  data_type: TYPE_FP32  dims: [ 256, 4 ] }},
  {{
    name: "class_scores"
    data_type: TYPE_FP32
    dims: [ 256, 8 ]{labels}
  }}
]
ensemble_scheduling {{ step [ {{
  model_name: "detector"  model_version: -1
  input_map {{ key: "images"  value: "images" }}
  output_map {{ key: "boxes"  value: "boxes" }}
  output_map {{ key: "scores"  value: "class_scores" }}
}} ] }}
"""


@pytest.fixture(scope="module")
def labels_core(tmp_path_factory):
    """Ensembles over the detector: one without label files of its own, one whose label file is
    a link leading outside its folder."""
    root = tmp_path_factory.mktemp("labels")
    repo = copy_models(root / "repo", "detector")
    (repo / "from_step").mkdir()
    (repo / "from_step" / "config.pbtxt").write_text(_ensemble_over_detector("from_step"))
    (repo / "outside").mkdir()
    (repo / "outside" / "config.pbtxt").write_text(_ensemble_over_detector("outside", "labels.txt"))
    (root / "secret.txt").write_text("not a label file\n")
    (repo / "outside" / "labels.txt").symlink_to(root / "secret.txt")
    server = InferenceServer(
        ServerOptions(
            model_repositories=(str(repo),),
            model_control_mode="explicit",
            startup_models=("detector", "from_step"),
        )
    )
    server.start()
    yield server
    server.stop()


def test_an_ensemble_takes_the_labels_of_the_step_that_produces_its_output(labels_core):
    # the core's model object carries them (read once, confined, by the step's model) ...
    assert labels_core.get_model("from_step").labels == {"class_scores": list(DETECTOR_LABELS)}
    # ... and the target describes the ensemble with them, read nowhere else
    spec = LocalModelTarget(labels_core, "from_step").describe()
    assert spec.labels_of("class_scores") == DETECTOR_LABELS and spec.labels_of("boxes") == ()


def test_a_label_file_outside_the_model_folder_is_refused_as_by_the_core(labels_core):
    with pytest.raises(TritonRosError) as info:
        labels_core.load_model("outside")
    assert "outside the model's folder" in info.value.message
    target = LocalModelTarget(labels_core, "outside")
    with pytest.raises(TritonRosError) as info:
        target.describe()
    assert info.value.code == StatusCode.UNAVAILABLE
    state = target.state()
    assert not state.ready and "outside the model's folder" in state.reason
