"""A pytest plugin (``-p declared_only``, with test/ on ``PYTHONPATH``): the tests run as in an
environment that holds only the project's declared dependencies, as the documented colcon
workspace does (docs/development.md: ``pip install -r requirements.txt`` beside an apt-installed
ROS 2, package.xml's test dependencies from rosdep).

Declared: the distributions of requirements.txt and requirements-build.txt (setuptools, which a
ROS 2 installation has), and what they require, recursively (their extras and markers
evaluated for this interpreter). Every other distribution installed in this environment (torch and
what it pulls in, the frameworks of requirements-frameworks.txt, the build tools of the
interface package, the Kafka test broker...) is hidden: importing one of its top-level modules
fails with ModuleNotFoundError and ``importlib.util.find_spec`` does not find it, as if it were
not installed. So a test that imports a package that is here only because something optional
pulled it in (sympy, through torch) fails as it fails in that workspace, instead of passing here.
The project's own packages (triton_ros, triton_ros_interfaces: a colcon workspace builds both)
stay importable.
"""

from __future__ import annotations

import importlib.machinery
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DECLARED_FILES = ("requirements.txt", "requirements-build.txt")
PROJECT = {"triton-ros", "triton-ros-interfaces"}  # this repository's own packages


def requirement_lines(path: Path) -> list[Requirement]:
    """The requirements of a pip requirements file (comments, options and blanks skipped)."""
    found = []
    for line in path.read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            found.append(Requirement(line))
        except InvalidRequirement as exc:
            raise AssertionError(f"{path.name}: {line!r}: {exc}") from None
    return found


def _wanted(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def declared_distributions(files=DECLARED_FILES) -> set[str]:
    """Canonical names of the declared distributions and of everything they require."""
    queue = [r for name in files for r in requirement_lines(ROOT / name) if _wanted(r, set())]
    names: set[str] = set()
    done: set[tuple[str, frozenset]] = set()
    while queue:
        requirement = queue.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in done:
            continue
        done.add(key)
        names.add(key[0])
        try:
            requires = metadata.distribution(requirement.name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for spec in requires:
            sub = Requirement(spec)
            if _wanted(sub, set(requirement.extras)):
                queue.append(sub)
    return names


def top_level_names(dist: metadata.Distribution) -> set[str]:
    """The top-level import names a distribution installs."""
    listed = dist.read_text("top_level.txt")
    if listed:
        return {name.strip() for name in listed.split() if name.strip()}
    names = set()
    for file in dist.files or []:
        parts = file.parts
        if (
            not parts
            or parts[0] in ("..", "__pycache__")
            or parts[0].endswith((".dist-info", ".egg-info", ".data", ".pth"))
        ):
            continue
        if len(parts) > 1:
            names.add(parts[0])
        elif parts[0].endswith((".py", ".so")):
            names.add(parts[0].split(".")[0])
    return names


def hidden_modules() -> dict[str, str]:
    """Top-level module -> the undeclared distribution that installs it (names a declared
    distribution also installs, e.g. a namespace package, are not hidden)."""
    declared = declared_distributions() | PROJECT
    hidden: dict[str, str] = {}
    kept: set[str] = set()
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"] or "")
        for module in top_level_names(dist):
            if name in declared:
                kept.add(module)
            else:
                hidden.setdefault(module, name)
    return {m: d for m, d in hidden.items() if m not in kept}


class _DeclaredOnlyFinder(importlib.machinery.PathFinder):
    """The standard path finder, blind to the hidden top-level modules."""

    hidden: dict[str, str] = {}

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in cls.hidden:
            return None
        return super().find_spec(fullname, path, target)


def pytest_configure(config) -> None:
    _DeclaredOnlyFinder.hidden = hidden_modules()
    for i, finder in enumerate(sys.meta_path):
        if finder is importlib.machinery.PathFinder:
            sys.meta_path[i] = _DeclaredOnlyFinder
            break
    else:
        raise AssertionError("no PathFinder in sys.meta_path to replace")


def pytest_report_header(config) -> str:
    shown = sorted(set(_DeclaredOnlyFinder.hidden.values()))
    return (
        f"declared_only: {len(shown)} undeclared distributions hidden: "
        f"{', '.join(shown[:40])}{' ...' if len(shown) > 40 else ''}"
    )
