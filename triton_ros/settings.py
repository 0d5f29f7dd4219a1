"""Settings, each declared once: on the field of the config class that holds it.

A part's config class is a frozen dataclass whose fields are its settings::

    @dataclass(frozen=True)
    class GrpcOptions:
        port: int = setting(8001, "Port of the grpc endpoint (0: any free port).",
                            low=0, high=65535)

The field gives the setting's name and type (its annotation: ``bool``, ``int``, ``float``,
``str``, ``tuple[str, ...]``, ``tuple[float, ...]`` or ``tuple[tuple[str, str], ...]`` for
KEY=VALUE pairs); :func:`setting` gives its default, help, choices and range. From that one
declaration come:

- the ``triton-ros-server`` flags (:func:`add_flags`, :func:`flag_values`);
- the node's ROS parameters: name, declared default, description and constraints
  (:func:`settings_of`; ``ros/parameters.py`` declares them with their descriptors);
- the typed config object (:func:`build`): parse (each value checked against its kind,
  choices and range), normalize, validate; an error is INVALID_ARG that names the setting as
  the user wrote it (``--grpc-port``, ``parameter 'grpc.port'``);
- the parameter reference, docs/parameters.md (``ros/tools/param_reference.py``).

A field that holds a setting declared by another part (the class names that every output
format reads, say) is marked :func:`shared`: it is given that setting's value, and is not
declared twice. Fields that are neither are the part's own, filled by its code.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

from .core.errors import invalid_arg

BOOL, INT, FLOAT, STR, STR_LIST, FLOAT_LIST, KEY_VALUES = (
    "bool",
    "int",
    "float",
    "str",
    "str_list",
    "float_list",
    "key_values",
)
# A field's annotation, as written (``from __future__ import annotations``) -> its kind
KINDS = {
    "bool": BOOL,
    "int": INT,
    "float": FLOAT,
    "str": STR,
    "tuple[str, ...]": STR_LIST,
    "tuple[float, ...]": FLOAT_LIST,
    "tuple[tuple[str, str], ...]": KEY_VALUES,
}
LIST_KINDS = (STR_LIST, FLOAT_LIST, KEY_VALUES)

_SETTING = "triton_ros.setting"
_SHARED = "triton_ros.shared"
_SAME = object()  # a flag's default: the setting's own

Namer = Callable[[str], str]  # a field's name -> the setting as the user wrote it


@dataclass(frozen=True)
class Setting:
    """One setting, as its field declares it."""

    field: str  # the config class's field
    name: str  # its parameter name, relative to the part's prefix
    kind: str
    default: Any  # as a ROS parameter is declared (lists as lists)
    help: str  # the parameter's description; the flag's help
    choices: tuple[str, ...] = ()
    low: float | None = None  # range, inclusive (above: low excluded)
    high: float | None = None
    above: bool = False
    flag: str | None = ""  # "": the part's flag prefix + name; None: no flag
    parameter: bool = True  # False: a flag of the server only
    flag_default: Any = _SAME  # the flag's default where tritonserver's differs
    metavar: str | None = None
    secret: bool = False  # never echoed in an error, kept out of repr

    @property
    def range_text(self) -> str:
        """The range in words ("" without one)."""
        if self.low is None and self.high is None:
            return ""
        if self.low is not None and self.high is not None:
            return f"within [{_number(self.low)}, {_number(self.high)}]"
        if self.high is not None:
            return f"at most {_number(self.high)}"
        if self.above:
            return "positive" if self.low == 0 else f"above {_number(self.low)}"
        if self.kind == INT and self.low in (0, 1):
            return "a positive integer" if self.low == 1 else "a non-negative integer"
        return f"at least {_number(self.low)}"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def setting(
    default: Any,
    help: str,
    *,
    choices: tuple[str, ...] = (),
    low: float | None = None,
    high: float | None = None,
    above: bool = False,
    name: str = "",
    flag: str | None = "",
    parameter: bool = True,
    flag_default: Any = _SAME,
    metavar: str | None = None,
    ros_default: Any = _SAME,
    secret: bool = False,
) -> Any:
    """A dataclass field that is a setting. ``default``: the value; a list for a list setting
    (the field holds a tuple). ``name``: the parameter's name where it is not the field's;
    ``flag``: the flag where it is not the prefix plus the name, None for none; ``parameter``
    False: a flag only; ``ros_default``: the value the ROS parameter is declared with, where
    it is not ``default``; ``secret``: kept out of the config's ``repr``."""
    spec = dict(
        default=default if ros_default is _SAME else ros_default,
        help=help,
        choices=tuple(choices),
        low=low,
        high=high,
        above=above,
        name=name,
        flag=flag,
        parameter=parameter,
        flag_default=flag_default,
        metavar=metavar,
        secret=secret,
    )
    value = tuple(default) if isinstance(default, list) else default
    return field(default=value, repr=not secret, metadata={_SETTING: spec})


def shared(default: Any) -> Any:
    """A field given the value of the setting of its name that another part declares."""
    return field(default=default, metadata={_SHARED: True})


@lru_cache(maxsize=None)
def settings_of(cls: type) -> tuple[Setting, ...]:
    """The settings a config class declares, in field order."""
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SETTING)
        if spec is None:
            continue
        kind = KINDS.get(str(f.type))
        if kind is None:
            raise TypeError(
                f"{cls.__name__}.{f.name}: a setting's annotation is one of "
                f"{', '.join(KINDS)} (with 'from __future__ import annotations'), "
                f"not {f.type}"
            )
        spec = dict(spec)
        out.append(Setting(field=f.name, name=spec.pop("name") or f.name, kind=kind, **spec))
    return tuple(out)


def parameters_of(cls: type, prefix: str = "") -> tuple[Setting, ...]:
    """The ROS parameters of ``cls``'s settings (those that have one), each named in full:
    ``prefix`` + its name."""
    return tuple(
        dataclasses.replace(s, name=prefix + s.name) for s in settings_of(cls) if s.parameter
    )


def under(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The values whose full name starts with ``prefix``, by the rest of their name."""
    return {n[len(prefix) :]: v for n, v in values.items() if n.startswith(prefix)}


def shared_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` given another part's setting of the same name."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get(_SHARED))


# --------------------------------------------------------------------------------------------
# Checking a value
# --------------------------------------------------------------------------------------------


def check(s: Setting, value: Any, where: str, *, ranges: bool = True) -> Any:
    """``value`` as the field holds it (lists as tuples), or INVALID_ARG: "``where`` must be
    ...". Lenient where a params file is: an integer for a float, one string for a list of
    strings, a number for a list of numbers, ``[]`` of any type (or no value) for an empty
    list. ``ranges`` False: the kind and choices only (a part checks its ranges when it is
    built, where it is used)."""

    def bad(expected: str):
        got = "" if s.secret else f", got {value!r}"
        return invalid_arg(f"{where} must be {expected}{got}")

    kind = s.kind
    if value is None and kind in LIST_KINDS:
        value = []  # YAML "[]" arrives as a parameter of no type
    if kind == BOOL:
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif kind == FLOAT:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        value = float(value)
    elif kind == STR:
        if not isinstance(value, str):
            raise bad("a string")
        if s.choices and value not in s.choices:
            raise bad(f"one of {', '.join(s.choices)}")
    elif kind in (STR_LIST, KEY_VALUES):
        item = (str, tuple) if kind == KEY_VALUES else str  # pairs already read
        if isinstance(value, str):
            value = (value,) if value else ()
        elif isinstance(value, (list, tuple)) and all(isinstance(v, item) for v in value):
            value = tuple(value)
        elif hasattr(value, "__len__") and len(value) == 0:  # [] of any array type
            value = ()
        else:
            raise bad("a list of strings")
        if kind == KEY_VALUES:
            value = tuple(key_value(item, where) for item in value)
    elif kind == FLOAT_LIST:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = (float(value),)
        else:
            try:
                items = list(value)
            except TypeError:
                raise bad("a list of numbers") from None
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
                raise bad("a list of numbers")
            value = tuple(float(v) for v in items)
        if not value:
            raise bad("a non-empty list of numbers")
    if ranges and kind in (INT, FLOAT) and not _in_range(s, value):
        raise bad(s.range_text)
    return value


def _in_range(s: Setting, value: float) -> bool:
    if s.low is not None and (value <= s.low if s.above else value < s.low):
        return False
    return s.high is None or value <= s.high


def key_value(item: Any, where: str) -> tuple[str, str]:
    """``KEY=VALUE`` -> (KEY, VALUE), stripped; a pair given as such is kept."""
    if isinstance(item, tuple):
        return item
    key, sep, value = str(item).partition("=")
    if not sep or not key.strip():
        raise invalid_arg(f"{where} expects KEY=VALUE, got '{item}'")
    return key.strip(), value.strip()


# --------------------------------------------------------------------------------------------
# The typed config object
# --------------------------------------------------------------------------------------------


def build(cls: type, values: Mapping[str, Any], name: Namer, /, **fields: Any) -> Any:
    """``cls`` from ``values`` by parameter name (relative): each setting checked (a missing
    one has its default), each shared field given the value of its name, ``fields`` as given.
    Errors name the setting through ``name`` (a field's name -> ``--flag`` or ``parameter
    'x.y'``); the class's own checks across settings (its ``validate``) are the caller's to
    run, with the same ``name``."""
    kwargs: dict[str, Any] = {}
    for s in settings_of(cls):
        if s.name in values:
            kwargs[s.field] = check(s, values[s.name], name(s.field))
    for f in shared_fields(cls):
        if f in values:
            value = values[f]
            kwargs[f] = tuple(value) if isinstance(value, list) else value
    kwargs.update(fields)
    return cls(**kwargs)


def check_settings(config: Any, name: Namer) -> None:
    """Check every setting a config object holds against its declaration (kind, choices,
    range), however the object was made; INVALID_ARG names the first bad one."""
    for s in settings_of(type(config)):
        check(s, getattr(config, s.field), name(s.field))


def defaults(cls: type) -> dict[str, Any]:
    """The settings' defaults by parameter name, as checked values."""
    return {s.name: check(s, s.default, s.name) for s in settings_of(cls)}


def parameter_namer(cls: type, prefix: str) -> Namer:
    """Name a field of ``cls`` as its ROS parameter: ``parameter 'grpc.port'``."""
    names = {s.field: s.name for s in settings_of(cls)}
    return lambda f: f"parameter '{prefix}{names.get(f, f)}'"


def flag_namer(cls: type, prefix: str) -> Namer:
    """Name a field of ``cls`` as its flag: ``--grpc-port``."""
    flags = {s.field: flag_of(s, prefix) for s in settings_of(cls)}
    return lambda f: flags.get(f) or f


# --------------------------------------------------------------------------------------------
# Flags (triton-ros-server)
# --------------------------------------------------------------------------------------------


def flag_of(s: Setting, prefix: str) -> str | None:
    """The setting's flag: its own, else ``prefix`` + its name with dashes; None: none."""
    if s.flag is None:
        return None
    return s.flag or prefix + s.name.replace("_", "-")


def dest_of(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def parse_bool(text: str) -> bool:
    """A flag's boolean, as tritonserver reads it."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def parse_int(text: str) -> int:
    """A flag's integer: decimal digits, with '-' for a negative one (``0x2``, ``0_2``,
    ``+2``, `` 2`` are refused, as tritonserver refuses them)."""
    digits = text[1:] if text.startswith("-") else text
    if not digits.isascii() or not digits.isdigit():
        raise argparse.ArgumentTypeError(f"expected a decimal integer, got '{text}'")
    return int(text)


def _help(s: Setting) -> str:
    text = s.help.rstrip(".")
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        text = text[0].lower() + text[1:]
    default = s.default if s.flag_default is _SAME else s.flag_default
    if "default" not in text and default not in ("", None, []):
        text += f" (default {default})"
    return text.replace("%", "%%")


def add_flags(parser: argparse.ArgumentParser | Any, cls: type, prefix: str) -> None:
    """The flags of ``cls``'s settings (those that have one) on ``parser`` (or a group)."""
    for s in settings_of(cls):
        flag = flag_of(s, prefix)
        if flag is None:
            continue
        default = s.default if s.flag_default is _SAME else s.flag_default
        kwargs: dict[str, Any] = dict(default=default, help=_help(s), dest=dest_of(flag))
        if s.metavar:
            kwargs["metavar"] = s.metavar
        if s.kind in LIST_KINDS:
            kwargs.update(action="append", default=[])
            kwargs.setdefault("metavar", "KEY=VALUE" if s.kind == KEY_VALUES else "VALUE")
            if s.kind == FLOAT_LIST:
                kwargs["type"] = float
        elif s.kind == BOOL:
            kwargs.update(type=parse_bool)
            kwargs.setdefault("metavar", "BOOL")
        elif s.kind == INT:
            kwargs["type"] = parse_int
        elif s.kind == FLOAT:
            kwargs["type"] = float
        elif s.choices:
            kwargs["choices"] = s.choices
        parser.add_argument(flag, **kwargs)


def flag_values(args: argparse.Namespace, cls: type, prefix: str) -> dict[str, Any]:
    """The parsed flags of ``cls``'s settings, by parameter name; a flag not given that has no
    default of its own (None, or an empty list for a setting with a default) is left out, so
    that the setting's default applies."""
    out = {}
    for s in settings_of(cls):
        flag = flag_of(s, prefix)
        if flag is None:
            continue
        value = getattr(args, dest_of(flag))
        if value is None or (s.kind in LIST_KINDS and value == [] and s.default):
            continue
        out[s.name] = value
    return out
