"""A metric family and its Prometheus text exposition (format 0.0.4), and the registry of
metric sources that parts other than the core add to every scrape (Triton's metric_family.cc).

Below the server (which holds the registry) and :mod:`metrics` (which reads the server).
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

_log = logging.getLogger("triton_ros.metrics")

COUNTER = "counter"
GAUGE = "gauge"


@dataclass
class Family:
    """One metric family: HELP and TYPE lines, then its samples."""

    name: str
    type: str
    help: str
    samples: list[tuple[dict[str, str], float | int]] = field(default_factory=list)

    def add(self, labels: dict[str, str], value: float | int) -> None:
        self.samples.append((labels, value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def render_families(families: Iterable[Family]) -> str:
    """The Prometheus text format: HELP, TYPE and one line per sample; labels sorted by name."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            if labels:
                text = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in sorted(labels.items()))
                lines.append(f"{family.name}{{{text}}} {format_value(value)}")
            else:
                lines.append(f"{family.name} {format_value(value)}")
    return "\n".join(lines) + "\n"


class MetricSources:
    """Metric families that parts other than the core add to every scrape, each by a callable
    registered under a name (the Kafka frontend's counters); a source that fails is logged and
    left out of that scrape, never failing it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, Callable[[], Iterable[Family]]] = {}

    def add(self, name: str, source: Callable[[], Iterable[Family]]) -> None:
        with self._lock:
            self._sources[name] = source

    def remove(self, name: str) -> None:
        with self._lock:
            self._sources.pop(name, None)

    def families(self) -> list[Family]:
        with self._lock:
            sources = list(self._sources.items())
        out: list[Family] = []
        for name, source in sources:
            try:
                out.extend(source())
            except Exception as exc:  # one broken source never fails a scrape
                _log.warning("metrics of %s left out of this scrape: %s", name, exc)
        return out
