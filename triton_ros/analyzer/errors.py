"""The analyzer's errors: what stopped a sweep, with the exit status the command returns."""

from __future__ import annotations

import enum


class ExitStatus(enum.IntEnum):
    """``triton-ros-analyzer``'s exit statuses (argparse's usage errors are 2)."""

    OK = 0  # the sweep finished and a recommendation was written
    FAILED = 1  # the sweep could not run (a tool is missing, the model never loaded)
    NO_RECOMMENDATION = 3  # the sweep finished, no configuration met the constraints


class AnalyzerError(Exception):
    """A failure that stops the analysis; the message says what to do about it."""

    status = ExitStatus.FAILED


class ToolNotFoundError(AnalyzerError):
    """perf_analyzer is not installed."""


class ServerStartError(AnalyzerError):
    """The server process exited, or did not listen, before it served the model."""


class ModelLoadError(AnalyzerError):
    """The server started but the model (a configuration of it) did not become READY."""

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"model '{model}' did not load: {reason}")
        self.reason = reason


class PerfAnalyzerError(AnalyzerError):
    """perf_analyzer failed for a reason other than an unstable measurement."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode
