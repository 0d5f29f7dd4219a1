"""Model repository manager and model lifecycle (Triton's model_repository_manager/).

Serves the models found in one or more repositories (``<repo>/<model>/config.pbtxt`` and
numbered version directories), under Triton's model control modes:

- ``none``: every model is loaded at start; the load/unload API is refused.
- ``poll``: as ``none``, and the repositories are re-scanned every ``poll_secs`` seconds:
  new models load, removed ones unload, changed ones reload (the old versions serve until the
  new ones are ready).
- ``explicit``: only the ``startup_models`` (``*`` for all) load at start; the rest through
  :meth:`load` / :meth:`unload`.

Each model version has a state (READY, UNAVAILABLE, LOADING, UNLOADING) and a reason. A model
that fails to load is UNAVAILABLE with the error as its reason and never blocks the others.
Model names are single directory names: anything that could reach outside the repository
(``..``, a path separator) is refused.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from concurrent.futures import Future

from .backend_model import backend_auto_complete, backend_can_use_gpu
from .cache_manager import LocalCache
from .errors import (
    StatusCode,
    TritonRosError,
    UnknownModelError,
    as_triton_error,
    invalid_arg,
    unavailable,
    unknown_model,
)
from .infer_request import InferRequest
from .model import Model, ModelBase, ModelStopping
from .model_config import ModelConfig, load_model_config, parse_config_json, version_dirs

_log = logging.getLogger("triton_ros.repository")

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"
LOADING = "LOADING"
UNLOADING = "UNLOADING"
REASON_DUPLICATE = "model appears in two or more repositories"
CONTROL_MODES = ("none", "poll", "explicit")


@dataclass(frozen=True)
class RepositoryEntry:
    """One row of the repository index (RepositoryIndexResponse.ModelIndex)."""

    name: str
    version: str  # "" for a model with no version state
    state: str  # "" for a model never loaded
    reason: str = ""


@dataclass
class _ModelRecord:
    name: str
    path: Path | None = None
    config: ModelConfig | None = None
    versions: dict[int, ModelBase] = field(default_factory=dict)
    states: dict[int, tuple[str, str]] = field(default_factory=dict)  # version -> (state, reason)
    model_error: str = ""  # a failure before any version (config, files)
    signature: tuple = ()
    temp_dir: str | None = None
    overridden: bool = False  # the serving config came from the load API's ``config``
    lock: threading.Lock = field(default_factory=threading.Lock)


def check_model_name(name: str) -> None:
    """Refuse names that are empty or could escape the repository (ValidateModelName)."""
    trimmed = name.strip()
    if not trimmed:
        raise invalid_arg("Model name cannot be empty. Please enter a valid name to deploy.")
    if (
        trimmed in (".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
        or os.path.isabs(name)
    ):
        raise invalid_arg(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


def _signature(path: Path) -> tuple:
    """What changes when a model's files change (poll mode compares these)."""
    items = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for fname in sorted(filenames):
            full = os.path.join(dirpath, fname)
            try:
                st = os.stat(full)
            except OSError:
                continue
            items.append((os.path.relpath(full, path), st.st_mtime_ns, st.st_size))
    return tuple(items)


class ModelRepositoryManager:
    """Finds, loads, reloads and unloads models; answers which version serves a request."""

    def __init__(
        self,
        repositories: Iterable[str | os.PathLike],
        *,
        control_mode: str = "none",
        startup_models: Iterable[str] = (),
        strict_model_config: bool = False,
        poll_secs: float = 15.0,
        model_factory: Callable[..., ModelBase] | None = None,
        response_cache: LocalCache | None = None,
    ) -> None:
        if control_mode not in CONTROL_MODES:
            raise invalid_arg(
                f"unexpected model control mode '{control_mode}', expected one of "
                f"{', '.join(CONTROL_MODES)}"
            )
        self.repositories = [Path(r).resolve() for r in repositories]
        if not self.repositories:
            raise invalid_arg("at least one model repository is required (--model-repository)")
        self.control_mode = control_mode
        self.startup_models = list(startup_models)
        self.strict = strict_model_config
        self.poll_secs = poll_secs
        self._model_factory = model_factory
        self.response_cache = response_cache  # the server-wide cache (--cache-config), if any
        self._records: dict[str, _ModelRecord] = {}
        self._records_lock = threading.Lock()
        self._stop = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._loading = threading.local()  # per thread: ensembles whose dependencies load

    # ---------------------------------------------------------------- start / stop
    def start(self) -> None:
        """Load the models the control mode says to load at start."""
        for repo in self.repositories:
            if not repo.is_dir():
                raise invalid_arg(f"model repository '{repo}' does not exist or is not a directory")
        found = self._scan()
        if self.control_mode == "explicit":
            names = sorted(found) if "*" in self.startup_models else self.startup_models
        else:
            if self.startup_models:
                _log.warning("--load-model is ignored unless --model-control-mode=explicit")
            names = sorted(found)
        for name in self._dependency_order(names):
            try:
                self.load(name, _internal=True)
            except TritonRosError as exc:
                _log.error("failed to load '%s': %s", name, exc.message)
        if self.control_mode == "poll":
            self._poll_thread = threading.Thread(
                target=self._poll_loop, name="repository-poll", daemon=True
            )
            self._poll_thread.start()

    def stop(self, *, timeout: float | None = 30.0) -> None:
        """Stop polling and unload every model, letting in-flight requests finish."""
        self._stop.set()
        if self._poll_thread is not None:
            self._poll_thread.join(timeout=5.0)
        for name in self._unload_order():
            self._unload_record(name, reason="unloaded", timeout=timeout)

    def _unload_order(self) -> list[str]:
        """Ensembles before the models they compose, so that their in-flight requests finish."""
        deps = {
            name: {s.model_name for s in r.config.ensemble_steps} if r.config else set()
            for name, r in list(self._records.items())
        }
        order: list[str] = []
        remaining = list(deps)
        while remaining:
            free = [
                n for n in remaining if not any(n in deps[m] for m in remaining if m != n)
            ] or remaining[:1]
            order.extend(free)
            remaining = [n for n in remaining if n not in free]
        return order

    # ---------------------------------------------------------------- lookups
    def get_model(self, name: str, version: int = -1) -> ModelBase:
        """The version that serves a request (-1: the highest READY version)."""
        record = self._records.get(name)
        if record is None or (not record.states and not record.versions):
            raise unknown_model(name)
        if version == -1:
            for v in sorted(record.versions, reverse=True):
                if record.states.get(v, ("", ""))[0] == READY:
                    return record.versions[v]
            raise UnknownModelError(
                StatusCode.NOT_FOUND,
                f"Request for unknown model: '{name}' has no available versions",
            )
        if version not in record.states:
            raise UnknownModelError(
                StatusCode.NOT_FOUND,
                f"Request for unknown model: '{name}' version {version} is not found",
            )
        model = record.versions.get(version)
        if model is None or record.states[version][0] != READY:
            raise UnknownModelError(
                StatusCode.UNAVAILABLE,
                f"Request for unknown model: '{name}' version {version} is not at ready state",
            )
        return model

    def infer(self, request: InferRequest) -> Future:
        """Queue a request on the version that serves it; the future gives its InferResponse or
        TritonRosError. Never raises: a bad request fails its own future and nothing else."""
        try:
            model = self.get_model(request.model_name, request.model_version)
            try:
                model.enqueue(request)
            except ModelStopping:
                # Replaced (reload) or unloaded between lookup and enqueue: look up once more,
                # which finds the new version or raises the right "not ready" error.
                self.get_model(request.model_name, request.model_version).enqueue(request)
        except TritonRosError as exc:
            request.set_error(exc)
        except Exception as exc:  # never let a malformed request escape as a crash
            request.set_error(invalid_arg(f"malformed inference request: {exc}"))
        return request.future

    def is_ready(self, name: str, version: int = -1) -> bool:
        try:
            self.get_model(name, version)
            return True
        except TritonRosError:
            return False

    def all_live_models_ready(self) -> bool:
        """Triton's strict readiness, from memory (no disk scan): every model the server has
        tried to load has its versions READY, except versions unloaded on purpose; a model whose
        load failed before any version (config, files) is not ready. A load of a name that is in
        no repository leaves no record, so it cannot make the server unready."""
        for record in list(self._records.values()):
            states = list(record.states.values())
            if not states:
                if record.model_error:
                    return False
                continue
            if any(state != READY and reason != "unloaded" for state, reason in states):
                return False
        return True

    def ready_models(self) -> list[ModelBase]:
        out = []
        for record in list(self._records.values()):
            for v, model in sorted(record.versions.items()):
                if record.states.get(v, ("", ""))[0] == READY:
                    out.append(model)
        return out

    def models(self, name: str | None = None) -> list[ModelBase]:
        """Loaded versions (any state) of one model or of all."""
        records = [self._records.get(name)] if name else list(self._records.values())
        return [m for r in records if r for _, m in sorted(r.versions.items())]

    def index(self, *, ready_only: bool = False) -> list[RepositoryEntry]:
        """Every model in the repositories with its versions' states (RepositoryIndex)."""
        found = self._scan()
        entries: list[RepositoryEntry] = []
        names = sorted(set(found) | set(self._records))
        for name in names:
            paths = found.get(name, [])
            if len(paths) > 1:
                if not ready_only:
                    entries.append(RepositoryEntry(name, "", UNAVAILABLE, REASON_DUPLICATE))
                continue
            record = self._records.get(name)
            if record is None or (not record.states and not record.model_error):
                if not ready_only:
                    entries.append(RepositoryEntry(name, "", ""))
                continue
            if not record.states:
                if not ready_only:
                    entries.append(RepositoryEntry(name, "", UNAVAILABLE, record.model_error))
                continue
            for version, (state, reason) in sorted(record.states.items()):
                if not ready_only or state == READY:
                    entries.append(RepositoryEntry(name, str(version), state, reason))
        return entries

    # ---------------------------------------------------------------- load / unload
    def load(
        self,
        name: str,
        *,
        config_json: str | None = None,
        files: dict[str, bytes] | None = None,
        _internal: bool = False,
    ) -> None:
        """Load (or reload) a model; raise with the failure. The API's RepositoryModelLoad.

        Errors as tritonserver gives them: a ``config`` override that does not parse, or file
        overrides that cannot be written, are logged and answered INTERNAL "failed to load
        '<name>', failed to poll from model repository" (what Triton's model-control examples
        check); file paths that leave the model folder or collide are INVALID_ARG; a
        configuration the core does not serve keeps its UNSUPPORTED code. The temporary folder of
        file overrides is removed whatever happens, unless the model now serves from it.
        """
        if not _internal and self.control_mode != "explicit":
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")
        check_model_name(name)
        poll_failed = f"failed to load '{name}', failed to poll from model repository"
        override = None
        if config_json:
            try:
                override = parse_config_json(config_json, model_name=name)
            except TritonRosError as exc:
                _log.error("%s", exc.message)
                raise TritonRosError(StatusCode.INTERNAL, poll_failed) from None
        if files and override is None:
            raise invalid_arg(
                f"failed to load '{name}': file overrides require the 'config' parameter"
            )
        if files:
            _check_override_paths(name, files, poll_failed)
        record = self._record(name)
        with record.lock:
            if self._records.get(name) is not record:
                # A concurrent load of a name in no repository dropped this record: start over.
                return self.load(name, config_json=config_json, files=files, _internal=_internal)
            temp_dir = None
            if files:
                temp_dir = tempfile.mkdtemp(prefix=f"triton_ros_{name[:32]}_")
                path = Path(temp_dir) / name
                try:
                    _write_override_files(path, files, name)
                except OSError as exc:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                    # The cause goes to the log, without the server's temporary path.
                    _log.error(
                        "failed to write the file overrides of model '%s': %s",
                        name,
                        exc.strerror or type(exc).__name__,
                    )
                    raise TritonRosError(StatusCode.INTERNAL, poll_failed) from None
                except BaseException:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                    raise
            else:
                paths = self._scan().get(name, [])
                if not paths:
                    # Not in any repository: nothing was loaded, so nothing is remembered (Triton
                    # keeps no state for it, and the server stays ready).
                    self._forget_if_unused(record)
                    raise TritonRosError(StatusCode.INTERNAL, poll_failed)
                if len(paths) > 1:
                    record.model_error = REASON_DUPLICATE
                    raise invalid_arg(f"load failed for model '{name}': {REASON_DUPLICATE}")
                path = paths[0]

            try:
                signature = _signature(path)
                if (
                    not files
                    and override is None
                    and not record.overridden
                    and record.versions
                    and record.path == path
                    and record.signature == signature
                    and all(s == READY for s, _ in record.states.values())
                ):
                    return  # unchanged: Triton does not reload an unmodified model

                try:
                    config = load_model_config(
                        name,
                        path,
                        strict=self.strict,
                        override=override,
                        backend_auto_complete=_auto_complete_for,
                        backend_can_use_gpu=_can_use_gpu,
                    )
                    for warning in config.warnings:
                        _log.warning("%s", warning)
                    if config.response_cache and self.response_cache is None:
                        _log.warning(
                            "model '%s' enables response_cache but the server has no "
                            "cache (--cache-config local,size=N); its responses are not "
                            "cached",
                            name,
                        )
                    if config.is_ensemble:
                        self._load_dependencies(config)
                    self._load_versions(record, config, path, signature)
                except TritonRosError as exc:
                    if not record.versions:
                        record.model_error = exc.message
                    # Remember what failed so that polling retries only once the files change.
                    record.path, record.signature = path, signature
                    # Triton answers INVALID_ARG for a failed load; a feature the core does not
                    # serve stays UNSUPPORTED (docs/model_repository.md's promise).
                    code = (
                        StatusCode.UNSUPPORTED
                        if exc.code is StatusCode.UNSUPPORTED
                        else StatusCode.INVALID_ARG
                    )
                    message = exc.message
                    if temp_dir:  # a backend's message names files: not the server's temp path
                        message = message.replace(str(path), f"<file override of '{name}'>")
                        message = message.replace(temp_dir, "<file override>")
                    raise TritonRosError(
                        code, f"load failed for model '{name}': {message}"
                    ) from None
            except BaseException:
                if temp_dir and record.temp_dir != temp_dir:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                raise
            if record.temp_dir and record.temp_dir != temp_dir:
                shutil.rmtree(record.temp_dir, ignore_errors=True)
            record.temp_dir = temp_dir
            record.overridden = override is not None

    def _load_dependencies(self, config: ModelConfig) -> None:
        """Load the models an ensemble composes (explicit mode loads them with it, as Triton)."""
        chain: list[str] = self._loading.__dict__.setdefault("chain", [])
        for step in config.ensemble_steps:
            dep = step.model_name
            if dep == config.name or dep in chain:
                cycle = chain[chain.index(dep) :] if dep in chain else []
                raise invalid_arg(
                    "circular dependency between ensembles: "
                    + " -> ".join([*cycle, config.name, dep])
                )
            if self.is_ready(dep, step.model_version):
                continue
            error = ""
            chain.append(config.name)
            try:
                self.load(dep, _internal=True)
            except TritonRosError as exc:
                error = exc.message.removeprefix(f"load failed for model '{dep}': ")
            finally:
                chain.pop()
            if self.is_ready(dep, -1) and not self.is_ready(dep, step.model_version):
                raise invalid_arg(
                    f"ensemble '{config.name}' depends on '{dep}' whose required "
                    f"version {step.model_version} is not loaded."
                )
            if not self.is_ready(dep, step.model_version):
                message = (
                    f"ensemble '{config.name}' depends on '{dep}' which has no loaded version."
                )
                if error:
                    message += f" Model '{dep}' loading failed with error: {error}"
                raise invalid_arg(message)

    def _load_versions(
        self, record: _ModelRecord, config: ModelConfig, path: Path, signature: tuple
    ) -> None:
        available = version_dirs(path) if not config.is_ensemble else (version_dirs(path) or [1])
        versions = config.version_policy.select(available)
        if not versions:
            raise invalid_arg(
                f"at least one version must be available under the version policy "
                f"of model '{config.name}'"
            )
        new_models: dict[int, Model] = {}
        failures: list[str] = []
        for version in versions:
            record.states.setdefault(version, (LOADING, ""))
            if record.states[version][0] != READY:
                record.states[version] = (LOADING, "")
            try:
                model = self._create_model(config, version, path)
                model.load()
            except Exception as exc:  # one version's failure must not hide the others
                error = as_triton_error(exc)
                failures.append(f"version {version}: {error.message}")
                if version not in record.versions:
                    record.states[version] = (UNAVAILABLE, error.message)
                _log.error(
                    "failed to load '%s' version %d: %s", config.name, version, error.message
                )
                continue
            new_models[version] = model

        if not new_models and record.versions:
            # A failed reload leaves the versions that serve untouched (tritonserver keeps an
            # already-loaded model when its new configuration or files fail to load).
            raise TritonRosError(StatusCode.UNAVAILABLE, "; ".join(failures))
        # Swap: new versions serve from now on; old ones drain and unload. States first, so that a
        # lookup between the two steps still finds a READY version in whichever map it reads.
        old = record.versions
        for version in new_models:
            record.states[version] = (READY, "")
        record.versions = dict(new_models)
        for version, model in old.items():
            if version in new_models:
                model.unload(drain=True)
            else:
                record.states[version] = (UNLOADING, "")
                model.unload(drain=True)
                record.states[version] = (UNAVAILABLE, "unloaded")
        if not new_models:
            record.versions = {}
        record.config = config
        record.path = path
        record.signature = signature
        record.model_error = ""
        if failures:
            raise TritonRosError(StatusCode.UNAVAILABLE, "; ".join(failures))
        _log.info(
            "successfully loaded '%s' version%s %s",
            config.name,
            "s" if len(versions) > 1 else "",
            ",".join(map(str, versions)),
        )

    def _create_model(self, config: ModelConfig, version: int, path: Path) -> ModelBase:
        if self._model_factory is not None:
            model = self._model_factory(config, version=version, model_path=path, manager=self)
        elif config.is_ensemble:
            from .ensemble_scheduler import EnsembleModel

            model = EnsembleModel(config, version=version, model_path=path, manager=self)
        else:
            model = Model(
                config,
                version=version,
                model_path=path,
                server=self,
                response_cache=self.response_cache,
            )
        model.on_unavailable = lambda reason: self._version_failed(model, reason)
        return model

    def _version_failed(self, model: ModelBase, reason: str) -> None:
        """A loaded version stopped serving (every instance failed): report it UNAVAILABLE.
        No record lock: this runs on the failing model's own thread, which a load holding the
        lock may be waiting for."""
        record = self._records.get(model.name)
        if record is not None and record.versions.get(model.version) is model:
            record.states[model.version] = (UNAVAILABLE, reason)
            _log.error(
                "model '%s' version %d is unavailable: %s", model.name, model.version, reason
            )

    def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload every version of a model (RepositoryModelUnload)."""
        if self.control_mode != "explicit":
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")
        record = self._records.get(name)
        config = record.config if record else None
        self._unload_record(name, reason="unloaded")
        if unload_dependents and config is not None and config.is_ensemble:
            for step in config.ensemble_steps:
                self._unload_record(step.model_name, reason="unloaded")

    def _unload_record(self, name: str, *, reason: str, timeout: float | None = None) -> None:
        record = self._records.get(name)
        if record is None:
            return
        with record.lock:
            versions = record.versions
            record.versions = {}
            for version, model in sorted(versions.items()):
                record.states[version] = (UNLOADING, "")
                model.unload(drain=True, timeout=timeout)
                record.states[version] = (UNAVAILABLE, reason)
                _log.info("successfully unloaded '%s' version %d", name, version)
            # Versions that had failed to load are unloaded too (Triton: state "unloaded"), and
            # a load failure before any version is forgotten: an unload leaves nothing unready.
            for version, (state, _) in list(record.states.items()):
                if state != READY:
                    record.states[version] = (UNAVAILABLE, reason)
            record.model_error = ""
            if record.temp_dir:
                shutil.rmtree(record.temp_dir, ignore_errors=True)
                record.temp_dir = None
            record.signature = ()
            record.overridden = False

    # ---------------------------------------------------------------- repository scanning
    def _forget_if_unused(self, record: _ModelRecord) -> None:
        """Drop a record that holds nothing (no version, no state, no error)."""
        if record.versions or record.states or record.model_error or record.temp_dir:
            return
        with self._records_lock:
            if self._records.get(record.name) is record:
                del self._records[record.name]

    def _record(self, name: str) -> _ModelRecord:
        with self._records_lock:
            record = self._records.get(name)
            if record is None:
                record = self._records[name] = _ModelRecord(name)
            return record

    def _scan(self) -> dict[str, list[Path]]:
        """Model name -> directories holding it (more than one is a duplicate)."""
        found: dict[str, list[Path]] = {}
        for repo in self.repositories:
            try:
                entries = sorted(os.scandir(repo), key=lambda e: e.name)
            except OSError as exc:
                _log.error("cannot read model repository '%s': %s", repo, exc)
                continue
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                found.setdefault(entry.name, []).append(Path(entry.path))
        return found

    def _dependency_order(self, names: list[str]) -> list[str]:
        """Ensembles after the models they compose (their own loads pull those in anyway)."""
        plain, ensembles = [], []
        found = self._scan()
        for name in names:
            path = next(iter(found.get(name, [])), None)
            text = ""
            if path is not None and (path / "config.pbtxt").is_file():
                try:
                    text = (path / "config.pbtxt").read_text(encoding="utf-8", errors="replace")
                except OSError:
                    text = ""
            (ensembles if "ensemble_scheduling" in text else plain).append(name)
        return plain + ensembles

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_secs):
            try:
                self.poll_once()
            except Exception as exc:  # polling must survive a bad repository state
                _log.error("model repository poll failed: %s", exc)

    def poll_once(self) -> None:
        """One poll: load added and changed models, unload removed ones."""
        found = self._scan()
        for name in list(self._records):
            record = self._records[name]
            if name not in found and record.versions and not record.temp_dir:
                _log.info("model '%s' was removed from the repository; unloading", name)
                self._unload_record(name, reason="unloaded")
        for name in self._dependency_order(sorted(found)):
            record = self._records.get(name)
            paths = found[name]
            if len(paths) != 1:
                continue
            if (
                record is not None
                and record.path == paths[0]
                and record.signature == _signature(paths[0])
            ):
                continue
            try:
                self.load(name, _internal=True)
            except TritonRosError as exc:
                _log.error("poll: failed to load '%s': %s", name, exc.message)


_can_use_gpu = backend_can_use_gpu
_auto_complete_for = backend_auto_complete


#: The longest file name a component of an override path may have (Linux NAME_MAX).
NAME_MAX = 255


def _check_override_paths(name: str, files: dict[str, bytes], poll_failed: str) -> None:
    """Refuse ``file:`` override paths before anything is written: paths that leave the model
    folder or collide (one file where another needs a folder, or two spellings of one file) are
    INVALID_ARG; a component longer than NAME_MAX cannot be written (Triton: INTERNAL, "failed to
    poll from model repository"); messages never show server paths."""
    seen: dict[tuple[str, ...], str] = {}
    for rel in files:
        if not isinstance(rel, str) or not rel or "\x00" in rel:
            raise invalid_arg(f"failed to load '{name}': invalid file override path")
        shown = rel if len(rel) <= 80 else rel[:80] + "..."
        parts = tuple(p for p in rel.replace("\\", "/").split("/") if p not in ("", "."))
        if rel.startswith(("/", "\\")) or ".." in parts or not parts:
            raise invalid_arg(
                f"failed to load '{name}': file override '{shown}' is outside the model directory"
            )
        if any(len(p.encode("utf-8", "surrogatepass")) > NAME_MAX for p in parts):
            _log.error(
                "file override of model '%s' has a path component longer than %d bytes: %s",
                name,
                NAME_MAX,
                shown,
            )
            raise TritonRosError(StatusCode.INTERNAL, poll_failed)
        if parts in seen:
            raise invalid_arg(
                f"failed to load '{name}': file overrides '{seen[parts]}' and "
                f"'{shown}' name the same file"
            )
        seen[parts] = shown
    for parts, shown in seen.items():
        for i in range(1, len(parts)):
            if parts[:i] in seen:
                raise invalid_arg(
                    f"failed to load '{name}': file override '{seen[parts[:i]]}' "
                    f"is a file but '{shown}' needs it to be a folder"
                )


def _write_override_files(path: Path, files: dict[str, bytes], name: str) -> None:
    """Write the load API's ``file:<version>/<name>`` contents into a private model directory
    (paths already checked by :func:`_check_override_paths`)."""
    path.mkdir(parents=True)
    root = path.resolve()
    for rel, content in files.items():
        target = (path / rel).resolve()
        if root not in target.parents:
            raise invalid_arg(
                f"failed to load '{name}': a file override is outside the model directory"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
