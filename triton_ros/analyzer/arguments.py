"""The analyzer's argparse types: every value a user types is checked where it is parsed, so
that a bad one is a usage error (exit 2, argparse's message naming the option) rather than a
traceback or a failure halfway through a sweep."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


def positive(kind):
    """An argparse type: a finite number above 0 (a negative or NaN budget is refused)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def number_list(kind, *, what: str, zero_allowed: bool):
    """An argparse type: a comma-separated list of finite numbers, each above 0 (or at least 0
    where ``zero_allowed``), for ``--rates 15,30`` and ``--max-queue-delay-microseconds
    0,1000``."""

    def parse(text: str) -> tuple:
        items = [item.strip() for item in text.split(",")]
        if not all(items):
            raise argparse.ArgumentTypeError(f"{what}: an empty item in {text!r}")
        out = []
        for item in items:
            try:
                value = kind(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{what}: not a number: {item!r}") from None
            if not math.isfinite(value) or value < 0 or (value == 0 and not zero_allowed):
                raise argparse.ArgumentTypeError(
                    f"{what}: {item} is out of range (each must be "
                    + (">= 0" if zero_allowed else "> 0")
                    + ")"
                )
            out.append(value)
        return tuple(out)

    parse.__name__ = what
    return parse


def existing_repository(text: str) -> Path:
    """An argparse type: a model repository that exists (a missing one is named missing)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"model repository '{text}' does not exist")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"model repository '{text}' is not a directory")
    return path


def existing_file(text: str) -> Path:
    """An argparse type: a file that exists."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"'{text}' does not exist or is not a file")
    return path


def size(text: str) -> tuple[int, int]:
    """An argparse type: WIDTHxHEIGHT, both above 0."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT (e.g. 640x480)") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: width and height must be > 0")
    return width, height


def ros_parameter(text: str) -> tuple[str, object]:
    """An argparse type: NAME:=VALUE, the value as YAML reads it (the params file's syntax)."""
    import yaml

    if ":=" not in text or not text.split(":=", 1)[0].strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:=VALUE")
    name, value = text.split(":=", 1)
    try:
        return name.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not YAML: {exc}") from None
