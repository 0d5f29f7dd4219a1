"""A plain parser of the Prometheus text exposition format (0.0.4) for the tests.

Strict on purpose: every sample must belong to a family declared by a ``# TYPE`` line before it,
names and label names must be valid, label values must be properly quoted and escaped, values must
parse as floats and no series may appear twice. Anything else raises ``ValueError``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


@dataclass
class MetricFamily:
    name: str
    type: str = "untyped"
    help: str = ""
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)

    def value(self, **labels: str) -> float:
        return self.samples[tuple(sorted(labels.items()))]

    def get(self, default: float | None = None, **labels: str) -> float | None:
        return self.samples.get(tuple(sorted(labels.items())), default)

    def by(self, label: str, **fixed: str) -> dict[str, float]:
        """Values keyed by one label, among the samples that match ``fixed``."""
        out = {}
        for key, value in self.samples.items():
            d = dict(key)
            if all(d.get(k) == v for k, v in fixed.items()) and label in d:
                out[d[label]] = value
        return out


def _parse_labels(text: str, pos: int) -> tuple[dict[str, str], int]:
    labels: dict[str, str] = {}
    while True:
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if text[pos] == "}":
            return labels, pos + 1
        m = _LABEL.match(text, pos)
        if not m:
            raise ValueError(f"bad label name at {pos} in {text!r}")
        name = m.group(0)
        pos = m.end()
        if text[pos : pos + 2] != '="':
            raise ValueError(f'expected =" after label {name} in {text!r}')
        pos += 2
        value = []
        while True:
            ch = text[pos]
            if ch == "\\":
                nxt = text[pos + 1]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt))
                if value[-1] is None:
                    raise ValueError(f"bad escape in {text!r}")
                pos += 2
            elif ch == '"':
                pos += 1
                break
            else:
                value.append(ch)
                pos += 1
        if name in labels:
            raise ValueError(f"label {name} repeated in {text!r}")
        labels[name] = "".join(value)
        if text[pos] == ",":
            pos += 1
        elif text[pos] != "}":
            raise ValueError(f"expected , or }} in {text!r}")


def parse(text: str) -> dict[str, MetricFamily]:
    families: dict[str, MetricFamily] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not _NAME.fullmatch(name):
                    raise ValueError(f"bad metric name in {line!r}")
                fam = families.setdefault(name, MetricFamily(name))
                if parts[1] == "TYPE":
                    kind = parts[3].strip() if len(parts) > 3 else ""
                    if kind not in _TYPES:
                        raise ValueError(f"bad type in {line!r}")
                    if fam.samples:
                        raise ValueError(f"TYPE after samples in {line!r}")
                    fam.type = kind
                else:
                    fam.help = parts[3] if len(parts) > 3 else ""
            continue
        m = _NAME.match(line)
        if not m:
            raise ValueError(f"bad sample line {line!r}")
        name = m.group(0)
        pos = m.end()
        labels: dict[str, str] = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos + 1)
        rest = line[pos:].split()
        if len(rest) not in (1, 2):
            raise ValueError(f"bad sample value in {line!r}")
        value = float(rest[0].replace("+Inf", "inf").replace("-Inf", "-inf"))
        base = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in families:
                base = name[: -len(suffix)]
        fam = families.get(base)
        if fam is None or fam.type == "untyped" and base not in families:
            raise ValueError(f"sample of undeclared family {line!r}")
        key = tuple(sorted(labels.items()))
        if key in fam.samples:
            raise ValueError(f"duplicate series {line!r}")
        if math.isnan(value) and fam.type == "counter":
            raise ValueError(f"NaN counter {line!r}")
        fam.samples[key] = value
    return families


def scrape(url: str, timeout: float = 30.0) -> dict[str, MetricFamily]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        content_type = response.headers.get("Content-Type", "")
        assert content_type.startswith("text/plain"), content_type
        return parse(response.read().decode("utf-8"))
