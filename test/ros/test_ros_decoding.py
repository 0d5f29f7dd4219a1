"""Detection and classification decoding, topic patterns, per-source flow control, parameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from triton_ros.core.errors import TritonRosError
from triton_ros.core.model_config import load_model_config
from triton_ros.ros.codec.classification import (
    ClassificationConfig,
    decode_classification,
    plan_classification,
)
from triton_ros.ros.codec.detection import DetectionConfig, decode_detections, nms, plan_detections
from triton_ros.ros.parameters import (
    BINDING_PARAMS,
    NODE_PARAMS,
    SYNC_MAPS,
    binding_config,
    check_value,
)
from triton_ros.settings import FLOAT_LIST, STR_LIST
from triton_ros.ros.codec.preprocess import PreprocessConfig, letterbox_for, plan_input
from triton_ros.ros.binding.source import Frame, Source
from triton_ros.ros.binding.topic_discovery import TopicMatcher


pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DETECTOR = load_model_config("detector", ROOT / "model_repository" / "detector")


def reference_nms(boxes, scores, threshold):
    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

    order, keep = list(np.argsort(-scores, kind="stable")), []
    while order:
        i = order.pop(0)
        keep.append(int(i))
        order = [j for j in order if iou(boxes[i], boxes[j]) <= threshold]
    return keep


def test_nms_equals_greedy_reference():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(1, 60))
        xy = rng.uniform(0, 100, (n, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(5, 50, (n, 2))], 1).astype(np.float32)
        scores = rng.random(n).astype(np.float32)
        assert list(nms(boxes, scores, 0.45)) == reference_nms(boxes, scores, 0.45)


def test_nms_is_class_wise_unless_agnostic():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert list(nms(boxes, scores, 0.5, np.array([0, 1]))) == [0, 1]
    assert list(nms(boxes, scores, 0.5, np.array([0, 0]))) == [0]
    assert list(nms(boxes, scores, 0.5)) == [0]


def _detector_plan(**overrides):
    input_plan = plan_input(PreprocessConfig(), DETECTOR.inputs[0], model="detector")
    labels = {"scores": [f"c{i}" for i in range(8)]}
    return plan_detections(DetectionConfig(**overrides), DETECTOR, labels, input_plan), input_plan


def test_raw_head_threshold_nms_topk_and_letterbox():
    plan, input_plan = _detector_plan(score_threshold=0.5, top_k=2)
    assert plan.layout == "boxes_scores" and plan.labels[3] == "c3"
    boxes = np.zeros((256, 4), np.float32)
    scores = np.zeros((256, 8), np.float32)
    boxes[0], scores[0, 3] = (10, 70, 50, 110), 0.9  # kept
    boxes[1], scores[1, 3] = (11, 71, 50, 110), 0.8  # same class, overlaps: suppressed
    boxes[2], scores[2, 5] = (11, 71, 50, 110), 0.7  # other class: kept by class-wise NMS
    boxes[3], scores[3, 1] = (100, 100, 120, 120), 0.6  # beyond top_k
    boxes[4], scores[4, 2] = (0, 0, 5, 5), 0.4  # under the threshold
    box, _, _ = letterbox_for(512, 384, input_plan)  # scale 0.5, pad_y 32
    result = decode_detections({"boxes": boxes, "scores": scores}, plan, box)
    assert list(result.classes) == [3, 5]
    np.testing.assert_allclose(result.scores, [0.9, 0.7], rtol=1e-6)
    np.testing.assert_allclose(result.boxes[0], [20, 76, 100, 156])


@pytest.mark.parametrize("layout", ["boxes_scores", "detections"])
def test_a_frame_without_detections_decodes_to_empty_arrays(layout):
    """Nothing over the threshold: empty results of the same types as a frame with detections."""
    plan, input_plan = _detector_plan(score_threshold=0.5)
    box, _, _ = letterbox_for(640, 480, input_plan)
    if layout == "detections":
        from dataclasses import replace

        decoded = replace(
            DETECTOR, outputs=(replace(DETECTOR.outputs[0], name="detections", dims=(100, 6)),)
        )
        plan = plan_detections(
            DetectionConfig(layout="detections", score_threshold=0.5), decoded, {}, input_plan
        )
        outputs = {"detections": np.zeros((100, 6), np.float32)}
    else:
        outputs = {"boxes": np.ones((256, 4), np.float32), "scores": np.zeros((256, 8), np.float32)}
    empty = decode_detections(outputs, plan, box)
    outputs = {k: v.copy() for k, v in outputs.items()}
    if layout == "detections":
        outputs["detections"][0] = (10, 40, 50, 90, 0.9, 2)
    else:
        outputs["boxes"][0], outputs["scores"][0, 2] = (10, 40, 50, 90), 0.9
    one = decode_detections(outputs, plan, box)
    assert len(empty) == 0 and len(one) == 1
    for name in ("boxes", "scores", "classes"):
        a, b = getattr(empty, name), getattr(one, name)
        assert a.dtype == b.dtype and a.shape[1:] == b.shape[1:]


def test_decoded_rows_padding_formats_and_boxes_in_the_padding():
    cfg = DetectionConfig(
        layout="detections", score_threshold=0.25, box_format="cxcywh", box_normalized=True
    )
    input_plan = plan_input(PreprocessConfig(), DETECTOR.inputs[0], model="detector")
    from dataclasses import replace

    decoded = replace(
        DETECTOR, outputs=(replace(DETECTOR.outputs[0], name="detections", dims=(100, 6)),)
    )
    plan = plan_detections(cfg, decoded, {}, input_plan)
    rows = np.zeros((100, 6), np.float32)
    rows[0] = (0.5, 0.5, 0.25, 0.25, 0.8, 2)  # centre of the input
    rows[1] = (0.5, 0.05, 0.2, 0.05, 0.9, 1)  # wholly in the top padding: not a detection
    box, _, _ = letterbox_for(512, 256, input_plan)  # scale 0.5, pad_y 64
    result = decode_detections({"detections": rows}, plan, box)
    assert len(result) == 1 and result.classes[0] == 2
    np.testing.assert_allclose(result.boxes[0], [192, 64, 320, 192])


def test_detection_plan_errors_name_the_outputs():
    with pytest.raises(TritonRosError, match="neither a decoded 'dets'"):
        _detector_plan(detections_output="dets", boxes_output="b")
    with pytest.raises(TritonRosError, match="no output 'nope'"):
        _detector_plan(layout="boxes_scores", scores_output="nope")


def test_classification_top_classes_softmax_and_names():
    from dataclasses import replace

    model = replace(DETECTOR, outputs=(replace(DETECTOR.outputs[0], name="logits", dims=(4,)),))
    plan = plan_classification(
        ClassificationConfig(class_count=2, softmax=True, class_names=("a", "b", "c", "d")),
        model,
        {},
    )
    result = decode_classification({"logits": np.array([1.0, 3.0, 2.0, 0.0])}, plan)
    assert list(result.classes) == [1, 2]
    e = np.exp([1.0, 3.0, 2.0, 0.0])
    np.testing.assert_allclose(result.scores, [e[1] / e.sum(), e[2] / e.sum()])


def test_topic_patterns_stay_within_name_segments():
    m = TopicMatcher(
        ["/robot*/camera*/image_raw", "/fleet/**/image_raw", "/cam[12]/image"],
        "sensor_msgs/msg/Image",
    )
    graph = [
        ("/robot2/camera_left/image_raw", ["sensor_msgs/msg/Image"]),
        ("/robot2/arm/camera/image_raw", ["sensor_msgs/msg/Image"]),
        ("/robot3/camera_x/image_raw", ["std_msgs/msg/String"]),
        ("/fleet/a/b/image_raw", ["sensor_msgs/msg/Image"]),
        ("/cam1/image", ["sensor_msgs/msg/Image"]),
        ("/cam3/image", ["sensor_msgs/msg/Image"]),
    ]
    assert m.select(graph) == [
        "/cam1/image",
        "/fleet/a/b/image_raw",
        "/robot2/camera_left/image_raw",
    ]


def test_source_keeps_k_in_flight_latest_wins_and_drops_stale():
    s = Source("/a", "/b", max_in_flight=1, max_age_ms=100, discovered=False)
    ms = 1_000_000
    f1, f2, f3 = (Frame(object(), 1000 * ms + i, 1000 * ms) for i in range(3))
    assert s.offer(f1, 1000 * ms) is f1  # starts
    assert s.offer(f2, 1000 * ms) is None  # waits
    assert s.offer(f3, 1000 * ms) is None  # replaces f2 (superseded)
    assert s.finish(1010 * ms) is f3  # f3 takes f1's place
    old = Frame(object(), 800 * ms, 1000 * ms)
    assert s.offer(old, 1000 * ms) is None  # 200 ms old: stale
    assert s.finish(1020 * ms) is None
    counters, in_flight, waiting = s.snapshot()
    assert (counters.received, counters.dropped_superseded, counters.dropped_stale) == (4, 1, 1)
    assert (in_flight, waiting) == (0, False)


def test_parameter_values_are_checked_and_coerced():
    spec = {s.name: s for s in BINDING_PARAMS}
    assert check_value("b.mean", [0, 1, 2], spec["mean"]) == (0.0, 1.0, 2.0)
    assert check_value("b.topics", "/cam/image", spec["topics"]) == ("/cam/image",)
    assert check_value("b.topics", None, spec["topics"]) == ()
    assert check_value("b.score_threshold", 1, spec["score_threshold"]) == 1.0
    with pytest.raises(TritonRosError, match="'b.format' must be one of"):
        check_value("b.format", "boxes", spec["format"])
    with pytest.raises(TritonRosError, match="'b.max_in_flight' must be an integer"):
        check_value("b.max_in_flight", 1.5, spec["max_in_flight"])
    raw = {s.name: s.default for s in BINDING_PARAMS}
    with pytest.raises(TritonRosError, match="'cams.model' is required"):
        binding_config("cams", raw)
    raw.update(model="detector", topic_patterns=["/r*/image"], output_topic_template="{nope}/x")
    with pytest.raises(TritonRosError, match=r"unknown field\(s\) \{nope\}"):
        binding_config("cams", raw)


def test_every_parameter_is_documented_in_config_inference_yaml():
    """config/inference.yaml lists every parameter with its default (five marked exceptions)
    under its first binding; its other bindings set only parameters of a binding."""
    doc = yaml.safe_load((ROOT / "config" / "inference.yaml").read_text())["/**"]["ros__parameters"]

    def flat(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from flat(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v

    others = doc["bindings"][1:]
    for other in others:
        for name, _ in flat(doc.pop(other)):
            assert name in {s.name for s in BINDING_PARAMS} or name.split(".")[0] in SYNC_MAPS, (
                f"{other}.{name}"
            )
    documented = dict(flat(doc))
    binding = doc["bindings"][0]
    expected = {s.name: s for s in NODE_PARAMS}
    expected.update({f"{binding}.{s.name}": s for s in BINDING_PARAMS})
    assert set(documented) == set(expected)
    not_default = {
        "bindings",
        f"{binding}.model",
        f"{binding}.topic_patterns",
        f"{binding}.score_threshold",
        f"{binding}.output_topic_template",
    }
    for name, spec in expected.items():
        value = documented[name]
        if spec.kind in (STR_LIST, FLOAT_LIST) and not isinstance(value, list):
            value = [value] if value not in ("", None) else []
        default = (
            spec.default
            if not isinstance(spec.default, str) or spec.kind != STR_LIST
            else ([spec.default] if spec.default else [])
        )
        if name in not_default:
            assert value != default, name
        else:
            assert value == default, name
