"""Triton's dynamic logging extension: read and change the server's log settings at run time.

Settings have Triton's names and types: ``log_file`` (string; cannot be changed over the network,
as in Triton), ``log_info``, ``log_warning``, ``log_error`` (bool), ``log_verbose_level``
(non-negative int) and ``log_format`` ("default" or "ISO8601"). They are applied to the
``triton_ros`` logger tree of Python's logging: the lowest enabled level becomes its level
(verbose > 0: DEBUG), and the handlers' timestamps follow ``log_format``. Both frontends (gRPC
``LogSettings``, HTTP ``/v2/logging``) call :class:`LogSettings` through the core server.
"""

from __future__ import annotations

import logging
import threading
from typing import Mapping

from .errors import invalid_arg, unsupported

LOGGER = "triton_ros"
FORMATS = ("default", "ISO8601")
_DATEFMT = {"default": "%m%d %H:%M:%S", "ISO8601": "%Y-%m-%dT%H:%M:%S"}
_BOOLS = ("log_info", "log_warning", "log_error")
MAX_VERBOSE_LEVEL = 2**31 - 1


class LogSettings:
    """The server's current log settings; :meth:`update` validates everything before applying."""

    def __init__(
        self,
        *,
        info: bool = True,
        warning: bool = True,
        error: bool = True,
        verbose_level: int = 0,
        log_format: str = "default",
    ) -> None:
        self._lock = threading.Lock()
        if not 0 <= verbose_level <= MAX_VERBOSE_LEVEL:
            raise invalid_arg(
                f"--log-verbose must be in [0, {MAX_VERBOSE_LEVEL}], got {verbose_level}"
            )
        self._values: dict[str, object] = {
            "log_file": "",
            "log_info": info,
            "log_warning": warning,
            "log_error": error,
            "log_verbose_level": verbose_level,
            "log_format": log_format,
        }

    def get(self) -> dict[str, object]:
        with self._lock:
            return dict(self._values)

    def update(self, changes: Mapping[str, object]) -> dict[str, object]:
        """Apply the given settings (Triton's names) and return all of them."""
        checked: dict[str, object] = {}
        for key, value in changes.items():
            if key == "log_file":
                raise unsupported("log file location can not be updated through network protocol")
            if key in _BOOLS:
                if not isinstance(value, bool):
                    raise invalid_arg(f"expect boolean for '{key}'")
            elif key == "log_verbose_level":
                # Triton's level is a uint32 on the wire and an int32 in the core: bounded, so
                # that what is accepted can always be answered (gRPC LogSettings, uint32_param).
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int)
                    or value < 0
                    or value > MAX_VERBOSE_LEVEL
                ):
                    raise invalid_arg(f"expect int32 for '{key}' in [0, {MAX_VERBOSE_LEVEL}]")
            elif key == "log_format":
                if not isinstance(value, str):
                    raise invalid_arg(f"expect string for '{key}'")
                if value not in FORMATS:
                    raise invalid_arg(f"invalid argument for log_format, got: {value}")
            else:
                raise invalid_arg(f"unknown log setting '{key}'")
            checked[key] = value
        with self._lock:
            self._values.update(checked)
            values = dict(self._values)
        self.apply(values)
        return values

    @staticmethod
    def python_level(values: Mapping[str, object]) -> int:
        """The lowest Python logging level the settings enable."""
        if int(values["log_verbose_level"]) > 0:
            return logging.DEBUG
        if values["log_info"]:
            return logging.INFO
        if values["log_warning"]:
            return logging.WARNING
        if values["log_error"]:
            return logging.ERROR
        return logging.CRITICAL + 1

    @staticmethod
    def apply(values: Mapping[str, object]) -> None:
        logger = logging.getLogger(LOGGER)
        logger.setLevel(LogSettings.python_level(values))
        datefmt = _DATEFMT[str(values["log_format"])]
        for handler in logging.getLogger().handlers + logger.handlers:
            if handler.formatter is not None:
                handler.formatter.datefmt = datefmt
