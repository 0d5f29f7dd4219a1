"""Model output -> the top classes of one image (numpy only, no rclpy).

The binding's classification output (a score or logit vector per image) is optionally passed
through a softmax, and its ``class_count`` best classes are kept, best first, with names from the
binding's ``class_names`` or the output's ``label_filename``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ..core.errors import invalid_arg
from .target.spec import ModelSpec


@dataclass(frozen=True)
class ClassificationResult:
    """The top classes of one image, best first."""

    classes: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class ClassificationConfig:
    output: str = ""                   # "": the model's only (or first) output
    class_count: int = 5
    softmax: bool = False
    class_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassificationPlan:
    config: ClassificationConfig
    output: str
    labels: tuple[str, ...]


def plan_classification(config: ClassificationConfig, model: ModelSpec,
                        labels: Mapping[str, Sequence[str]]) -> ClassificationPlan:
    output = config.output or model.outputs[0].name
    if model.output(output) is None:
        raise invalid_arg(f"model '{model.name}' has no output '{output}'")
    chosen = config.class_names or tuple(labels.get(output, ()))
    return ClassificationPlan(config=config, output=output, labels=tuple(chosen))


def decode_classification(outputs: Mapping[str, np.ndarray],
                          plan: ClassificationPlan) -> ClassificationResult:
    scores = np.asarray(outputs[plan.output], np.float64).reshape(-1)
    if plan.config.softmax:
        e = np.exp(scores - np.max(scores))
        scores = e / np.sum(e)
    k = min(plan.config.class_count, scores.shape[0]) if plan.config.class_count > 0 \
        else scores.shape[0]
    order = np.argsort(-scores, kind="stable")[:k]
    return ClassificationResult(classes=order, scores=scores[order])
