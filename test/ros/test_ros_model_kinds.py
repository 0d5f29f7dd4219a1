"""Every model kind the core serves, bound from the node, with every output format that fits.

One inference node (its own process, real rclpy) binds ONNX (detector, classifier), Python
(py_vision: a decoded detections output and a class-score output, each with its own labels) and
ensemble models (the bundled detector_pipeline, and classify_pipeline with labels of its own) as
detections, classification and tensors. Each binding gets frames of known content from this
process and must publish results with the frame's header and the values the model computes.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from ros_env import ROOT, TOKEN
from ros_models import make_kinds_repository
from ros_probe import NodeProcess, Probe, image_message, stamp_ns, wait_until
from triton_ros.ros.codec.messages import CLASSIFICATION_TYPE, DETECTIONS_TYPE


pytestmark = pytest.mark.system

NS = f"/k{TOKEN}"
BUNDLED = ROOT / "model_repository"
DETECTOR_LABELS = tuple((BUNDLED / "detector" / "labels.txt").read_text().splitlines())
PIPELINE_LABELS = tuple((BUNDLED / "detector_pipeline" / "labels.txt").read_text().splitlines())

# binding -> (model, format, extra parameters)
BINDINGS = {
    "onnx_det": ("detector", "detections", {"score_threshold": 0.0, "top_k": 2}),
    "onnx_cls": ("classifier", "classification", {"class_count": 4}),
    "onnx_ten": ("detector", "tensors", {"outputs": ["boxes"]}),
    "py_det": ("py_vision", "detections", {"nms": False}),
    "py_cls": ("py_vision", "classification", {"classification_output": "probs", "class_count": 3}),
    "py_ten": ("py_vision", "tensors", {}),
    "onnx_b1": ("classifier_b1", "classification", {"class_count": 4}),
    "py_nb_det": ("py_vision_nb", "detections", {"nms": False}),
    "py_nb_ten": ("py_vision_nb", "tensors", {"outputs": ["probs"]}),
    "ens_det": ("detector_pipeline", "detections", {"nms": False}),
    "ens_cls": ("classify_pipeline", "classification", {"class_count": 4}),
    "ens_ten": ("detector_pipeline", "tensors", {}),
}


def topic(binding: str) -> str:
    return f"{NS}/{binding}/image_raw"


def out_topic(binding: str) -> str:
    return f"{NS}/{binding}/{BINDINGS[binding][1]}"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Start the node, publish frames of known content to every binding, return what came back."""
    from triton_ros_interfaces.msg import TensorList

    tmp = tmp_path_factory.mktemp("kinds")
    repo = make_kinds_repository(tmp / "models")
    params = {
        "model_repository": str(repo),
        "startup_models": ["*"],
        "diagnostics_period_s": 0.5,
        "bindings": list(BINDINGS),
    }
    for name, (model, fmt, extra) in BINDINGS.items():
        params[name] = {"model": model, "format": fmt, "topics": [topic(name)], **extra}
    node = NodeProcess(params, tmp, name=f"kinds_node_{TOKEN}")
    probe = Probe(f"kinds_probe_{TOKEN}")
    try:
        node.wait_ready(probe)
        types = {
            "detections": DETECTIONS_TYPE,
            "classification": CLASSIFICATION_TYPE,
            "tensors": TensorList,
        }
        recorders = {
            b: probe.subscribe(types[fmt], out_topic(b)) for b, (_, fmt, _) in BINDINGS.items()
        }
        publishers = {b: probe.image_publisher(topic(b)) for b in BINDINGS}
        sent: dict[str, set[int]] = {b: set() for b in BINDINGS}

        def publish_all():
            for b, pub in publishers.items():
                if recorders[b].count():
                    continue
                stamp = probe.node.get_clock().now().to_msg()
                sent[b].add(stamp_ns(stamp))
                pub.publish(image_message(FRAMES[b], "rgb8", f"{b}_frame", stamp))
            return all(r.count() for r in recorders.values())

        try:
            wait_until(publish_all, what="a result on every binding", interval=0.3)
        except AssertionError:
            missing = [b for b, r in recorders.items() if not r.count()]
            raise AssertionError(f"no result on {missing}:\n{node.log()}") from None
        yield {b: (r.messages()[0], sent[b]) for b, r in recorders.items()}, node
    finally:
        probe.close()
        node.stop_and_check(signal.SIGINT)


def _solid(h: int, w: int, rgb) -> np.ndarray:
    image = np.empty((h, w, 3), np.uint8)
    image[...] = rgb
    return image


PY_RGB = (200, 100, 50)
ENS_RGB = (10, 240, 100)
FRAMES = {
    "onnx_det": _solid(240, 320, (90, 90, 90)),
    "onnx_cls": _solid(32, 32, (250, 20, 30)),
    "onnx_ten": _solid(120, 160, (0, 0, 0)),
    "py_det": _solid(64, 64, PY_RGB),
    "py_cls": _solid(64, 64, PY_RGB),
    "py_ten": _solid(64, 64, PY_RGB),
    "onnx_b1": _solid(32, 32, (250, 20, 30)),
    "py_nb_det": _solid(64, 64, PY_RGB),
    "py_nb_ten": _solid(64, 64, PY_RGB),
    "ens_det": _solid(480, 640, (128, 64, 32)),
    "ens_cls": _solid(32, 32, ENS_RGB),
    "ens_ten": _solid(256, 256, (128, 64, 32)),
}


def check_header(binding: str, msg, sent: set[int]) -> None:
    assert msg.header.frame_id == f"{binding}_frame"
    assert stamp_ns(msg.header.stamp) in sent


def test_every_binding_of_every_model_kind_publishes_with_the_frames_header(results):
    msgs, _ = results
    for binding, (msg, sent) in msgs.items():
        check_header(binding, msg, sent)


def test_onnx_model_kinds(results):
    msgs, _ = results
    det = msgs["onnx_det"][0]
    assert len(det.detections) == 2
    for d in det.detections:
        assert d.results[0].hypothesis.class_id in DETECTOR_LABELS
        assert 0 <= d.bbox.center.position.x <= 320 and 0 <= d.bbox.center.position.y <= 240
    cls = msgs["onnx_cls"][0]
    assert [r.class_id for r in cls.results] == ["red", "bias", "blue", "green"]
    ten = msgs["onnx_ten"][0]
    assert [(t.name, t.datatype, list(t.shape)) for t in ten.tensors] == [
        ("boxes", "FP32", [1, 256, 4])
    ]
    assert (ten.model_name, ten.model_version) == ("detector", 1)


def test_python_model_detections_classification_and_tensors(results):
    msgs, _ = results
    mean = sum(PY_RGB) / 3 / 255
    det = msgs["py_det"][0]
    assert len(det.detections) == 1  # padding rows (score 0) are dropped
    d = det.detections[0]
    assert d.results[0].hypothesis.class_id == "one"  # py_vision's labels.txt
    assert d.results[0].hypothesis.score == pytest.approx(mean, abs=1e-5)
    assert (
        d.bbox.center.position.x,
        d.bbox.center.position.y,
        d.bbox.size_x,
        d.bbox.size_y,
    ) == pytest.approx((32.0, 32.0, 32.0, 32.0))
    cls = msgs["py_cls"][0]
    assert [r.class_id for r in cls.results] == ["red", "green", "blue"]  # colours.txt
    assert [r.score for r in cls.results] == pytest.approx([c / 255 for c in PY_RGB], abs=1e-4)
    ten = msgs["py_ten"][0]
    assert (ten.model_name, ten.model_version) == ("py_vision", 1)
    shapes = {t.name: (t.datatype, list(t.shape)) for t in ten.tensors}
    assert shapes == {"detections": ("FP32", [1, 4, 6]), "probs": ("FP32", [1, 3])}
    probs = np.frombuffer(bytes(next(t for t in ten.tensors if t.name == "probs").data), "<f4")
    assert probs == pytest.approx([c / 255 for c in PY_RGB], abs=1e-4)  # float32 sums


def test_models_without_batching(results):
    msgs, _ = results
    # ONNX with a fixed leading batch of one ([1, 3, 32, 32]): the same answer as batching
    assert (
        [r.class_id for r in msgs["onnx_b1"][0].results]
        == [r.class_id for r in msgs["onnx_cls"][0].results]
        == ["red", "bias", "blue", "green"]
    )
    # Python without a batch dimension anywhere
    det = msgs["py_nb_det"][0]
    assert len(det.detections) == 1 and det.detections[0].results[0].hypothesis.class_id == "one"
    assert det.detections[0].bbox.size_x == pytest.approx(32.0)
    ten = msgs["py_nb_ten"][0]
    assert [(t.name, list(t.shape)) for t in ten.tensors] == [("probs", [3])]  # as the model has it


def test_ensembles_detections_classification_and_tensors(results):
    msgs, _ = results
    det = msgs["ens_det"][0]
    for d in det.detections:  # the pipeline's own labels.txt
        assert d.results[0].hypothesis.class_id in PIPELINE_LABELS
        assert 0 <= d.bbox.center.position.x <= 640 and 0 <= d.bbox.center.position.y <= 480
    cls = msgs["ens_cls"][0]
    # classify_pipeline's own labels (R, G, B, bias), not those of its step (red, green, ...)
    assert [r.class_id for r in cls.results] == ["G", "bias", "B", "R"]
    assert [r.score for r in cls.results] == pytest.approx(
        [240 / 255, 0.5, 100 / 255, 10 / 255], abs=1e-5
    )
    ten = msgs["ens_ten"][0]
    assert (ten.model_name, ten.model_version) == ("detector_pipeline", 1)
    assert [(t.name, t.datatype, list(t.shape)) for t in ten.tensors] == [
        ("detections", "FP32", [1, 100, 6])
    ]


def test_the_plans_name_each_model_kind(results):
    _, node = results
    log = node.log()
    for binding, platform in (
        ("onnx_det", "onnxruntime"),
        ("py_det", "python"),
        ("ens_det", "ensemble"),
        ("ens_cls", "ensemble"),
    ):
        assert f"binding '{binding}': model '{BINDINGS[binding][0]}' version 1 ({platform}" in log
    # nothing failed on the way
    assert not [line for line in log.splitlines() if "binding '" in line and "failed" in line]
