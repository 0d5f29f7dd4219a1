"""The scratch repository a profile writes its configurations into; the user's is only read.

:class:`ScratchRepository` copies the profiled model's directory (and, for an ensemble, the
models its steps name, recursively) out of the user's repositories into a private folder. Each
configuration is written there as the model's config.pbtxt, from the user's own configuration
(parsed with the core's ``parse_config_text``) with the swept fields changed, in protobuf text
format (the core's ``model_config_to_text``). A model without config.pbtxt starts from an empty
configuration, which the server auto-completes as it would the user's.

Configuration variants are named as model_analyzer names them: ``<model>_config_default`` for the
user's configuration, ``<model>_config_<n>`` for the others.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..core.model_config import CONFIG_FILENAME, model_config_to_text, parse_config_text
from ..core.protos import model_config_pb2 as mc
from .errors import AnalyzerError


def variant_name(model: str, index: int | None) -> str:
    """model_analyzer's name of a configuration variant (None: the user's configuration)."""
    return f"{model}_config_default" if index is None else f"{model}_config_{index}"


def find_model_dir(repositories: list[Path], model: str) -> Path:
    """The model's directory in the first repository that has it (tritonserver's lookup)."""
    found = [repo / model for repo in repositories if (repo / model).is_dir()]
    if not found:
        raise AnalyzerError(
            f"model '{model}' is not in the model repository "
            f"({', '.join(str(r) for r in repositories)})"
        )
    if len(found) > 1:
        raise AnalyzerError(
            f"model '{model}' is in more than one repository: {', '.join(str(p) for p in found)}"
        )
    return found[0]


def read_user_config(model_dir: Path) -> mc.ModelConfig:
    """The model's config.pbtxt as written (not completed): what variants are made from."""
    path = model_dir / CONFIG_FILENAME
    if not path.is_file():
        return mc.ModelConfig()
    return parse_config_text(
        path.read_text(encoding="utf-8"), model_name=model_dir.name, source=str(path)
    )


def config_text(proto: mc.ModelConfig, header: str = "") -> str:
    """config.pbtxt text of ``proto``; ``header`` lines become comments above it."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comments + model_config_to_text(proto)


class ScratchRepository:
    """A private model repository under ``root`` with copies of the models a profile needs."""

    def __init__(self, repositories: list[Path], model: str, root: Path) -> None:
        self.repositories = [Path(r) for r in repositories]
        self.model = model
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        source = find_model_dir(self.repositories, model)
        self.user_config = read_user_config(source)
        self._user_file = (
            (source / CONFIG_FILENAME).read_bytes()
            if (source / CONFIG_FILENAME).is_file()
            else None
        )
        self.models: list[str] = []
        self._copy(model)

    def _copy(self, name: str) -> None:
        if name in self.models:
            return
        source = find_model_dir(self.repositories, name)
        shutil.copytree(
            source, self.root / name, symlinks=False, ignore=shutil.ignore_patterns("__pycache__")
        )
        self.models.append(name)
        config = read_user_config(source)
        for step in config.ensemble_scheduling.step:  # an ensemble needs its steps' models
            self._copy(step.model_name)

    @property
    def config_path(self) -> Path:
        return self.root / self.model / CONFIG_FILENAME

    def write_config(self, proto: mc.ModelConfig) -> None:
        """Make ``proto`` the profiled model's configuration in the scratch repository."""
        self.config_path.write_text(config_text(proto), encoding="utf-8")

    def restore_user_config(self) -> None:
        """Put the model's own config.pbtxt (as the user wrote it, or none) back."""
        if self._user_file is None:
            self.config_path.unlink(missing_ok=True)
        else:
            self.config_path.write_bytes(self._user_file)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
