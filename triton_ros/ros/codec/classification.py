"""The ``classification`` output format: model output -> the top classes of one image.

The binding's classification output (a score or logit vector per image) is optionally passed
through a softmax, and its ``class_count`` best classes are kept, best first, with names from the
binding's ``class_names`` or the output's ``label_filename``. Decoding is numpy; the classes are
published as ``vision_msgs/Classification`` (or the package's fallback, :mod:`.messages`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ...core.errors import invalid_arg
from ...settings import setting, shared
from ..targets.spec import ModelSpec
from .base import FrameOutputs, InputPlan, OutputFormat
from .messages import CLASSIFICATION_TYPE, HYPOTHESIS_TYPE, label_of


@dataclass(frozen=True)
class ClassificationResult:
    """The top classes of one image, best first."""

    classes: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class ClassificationConfig:
    """The classification format's settings; ``class_names`` is the binding's."""

    output: str = setting(
        "",
        "Output holding class scores; empty: the model's first output.",
        name="classification_output",
    )
    class_count: int = setting(5, "Classes published per image, best first (0: all).", low=0)
    softmax: bool = setting(False, "Apply a softmax to the scores (the model gives logits).")
    class_names: tuple[str, ...] = shared(())


@dataclass(frozen=True)
class ClassificationPlan:
    config: ClassificationConfig
    output: str
    labels: tuple[str, ...]

    @property
    def requested(self) -> tuple[str, ...]:
        return (self.output,)


def plan_classification(
    config: ClassificationConfig, model: ModelSpec, labels: Mapping[str, Sequence[str]]
) -> ClassificationPlan:
    output = config.output or model.outputs[0].name
    if model.output(output) is None:
        raise invalid_arg(f"model '{model.name}' has no output '{output}'")
    chosen = config.class_names or tuple(labels.get(output, ()))
    return ClassificationPlan(config=config, output=output, labels=tuple(chosen))


def decode_classification(
    outputs: Mapping[str, np.ndarray], plan: ClassificationPlan
) -> ClassificationResult:
    scores = np.asarray(outputs[plan.output], np.float64).reshape(-1)
    if plan.config.softmax:
        e = np.exp(scores - np.max(scores))
        scores = e / np.sum(e)
    k = (
        min(plan.config.class_count, scores.shape[0])
        if plan.config.class_count > 0
        else scores.shape[0]
    )
    order = np.argsort(-scores, kind="stable")[:k]
    return ClassificationResult(classes=order, scores=scores[order])


def classification_message(header, result: ClassificationResult, labels: Sequence[str]):
    """One image's top classes as a Classification (or the fallback) with ``header``."""
    msg = CLASSIFICATION_TYPE(header=header)
    for index, score in zip(result.classes, result.scores):
        msg.results.append(
            HYPOTHESIS_TYPE(class_id=label_of(int(index), labels), score=float(score))
        )
    return msg


class ClassificationFormat(OutputFormat):
    """``format: classification``."""

    name = "classification"
    settings = ClassificationConfig

    def message_class(self) -> type:
        return CLASSIFICATION_TYPE

    def plan(
        self, settings: ClassificationConfig, spec: ModelSpec, input_plan: InputPlan
    ) -> ClassificationPlan:
        return plan_classification(settings, spec, spec.labels)

    def decode(self, plan: ClassificationPlan, frame: FrameOutputs):
        return classification_message(
            frame.header, decode_classification(frame.outputs, plan), plan.labels
        )


CLASSIFICATION = ClassificationFormat()
