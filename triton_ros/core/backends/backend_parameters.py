"""Reading a model's ``parameters`` (string values) as backends do: integers and booleans, a bad
value refused at load with INVALID_ARG naming the model and the key; and the line of a
framework's exception that a load or execute error shows. Shared by the backends that read
Triton's parameter names (ONNX Runtime, PyTorch, OpenVINO)."""

from __future__ import annotations

from ..errors import invalid_arg
from ..model_config import ModelConfig

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def parameter_int(config: ModelConfig, key: str, default: int) -> int:
    """The parameter as an integer, ``default`` when absent or empty."""
    value = config.parameters.get(key)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise invalid_arg(
            f"model '{config.name}': parameter '{key}' must be an integer, got '{value}'"
        ) from None


def parameter_bool(config: ModelConfig, key: str) -> bool | None:
    """The parameter as a boolean (true/false, 1/0, yes/no, on/off in any case), None when
    absent."""
    value = config.parameters.get(key)
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise invalid_arg(f"model '{config.name}': parameter '{key}' must be a boolean, got '{value}'")


def framework_message(exc: BaseException) -> str:
    """The last non-empty line of a framework's exception text (TorchScript and OpenVINO put
    their own traceback or call site first and the cause last), else the exception's type."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
