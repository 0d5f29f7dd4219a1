"""The inference server's data plane: one object every frontend shares.

:class:`InferenceServer` wraps the model repository manager and answers the questions of the
KServe v2 protocol and Triton's extensions in the core's own types: liveness and readiness,
server and model metadata, configuration, statistics, the repository index, load and unload, and
inference; it owns the registry of client shared memory regions (``shared_memory``). The gRPC
endpoint, the HTTP endpoint and the ROS node are thin frontends over it, so a gRPC request and a
camera frame reach the same model's same dynamic batcher.

This module, like the whole core, imports neither rclpy nor grpc.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import __version__
from .cache_manager import CacheConfig, LocalCache, create_cache
from .errors import StoppingError, TritonRosError, invalid_arg
from .infer_request import InferRequest, InferResponse
from .infer_stats import EndpointStats, StatsSnapshot
from .log_settings import LogSettings
from .memory import IdleTrim, limit_malloc_arenas
from .metric_family import MetricSources
from .model import ModelBase
from .model_config import WILDCARD_DIM, ModelConfig
from .model_repository_manager import ModelRepositoryManager, RepositoryEntry
from .shared_memory_manager import SharedMemoryManager
from .tracer import TraceConfig, TraceManager

_log = logging.getLogger("triton_ros.server")

EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "system_shared_memory",
    "logging",
    "trace",
)


@dataclass(frozen=True)
class ServerOptions:
    """The server's settings; the CLI flags and the ROS node's parameters fill these."""

    model_repositories: tuple[str, ...]
    model_control_mode: str = "none"
    startup_models: tuple[str, ...] = ()
    strict_model_config: bool = False
    strict_readiness: bool = True
    repository_poll_secs: float = 15.0
    exit_timeout_secs: float = 30.0
    server_id: str = "triton"
    cache_config: CacheConfig | None = None  # --cache-config local,size=N
    allow_client_shm: bool = False  # --allow-client-shm (ours; tritonserver: on)
    log_info: bool = True  # --log-info
    log_warning: bool = True  # --log-warning
    log_error: bool = True  # --log-error
    log_verbose: int = 0  # --log-verbose
    log_format: str = "default"  # --log-format default|ISO8601
    trace_config: TraceConfig = TraceConfig()  # --trace-config (core/tracer.py)


@dataclass(frozen=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


@dataclass(frozen=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...] = field(default=EXTENSIONS)


class InferenceServer:
    """The shared core behind every frontend."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        limit_malloc_arenas()  # bounded RSS under concurrent load (core/memory.py)
        self.response_cache: LocalCache | None = create_cache(options.cache_config)
        self.repository = ModelRepositoryManager(
            options.model_repositories,
            control_mode=options.model_control_mode,
            startup_models=options.startup_models,
            strict_model_config=options.strict_model_config,
            poll_secs=options.repository_poll_secs,
            response_cache=self.response_cache,
        )
        # What the network endpoints end before a request reaches a model (metrics).
        self.endpoint_stats = EndpointStats()
        # Client shared memory regions, one registry for every frontend.
        self.shared_memory = SharedMemoryManager(allow_client_shm=options.allow_client_shm)
        # Metric families of frontends with counters of their own (the Kafka frontend)
        self.metric_sources = MetricSources()
        self.log_settings = LogSettings(
            info=options.log_info,
            warning=options.log_warning,
            error=options.log_error,
            verbose_level=options.log_verbose,
            log_format=options.log_format,
        )
        # Request tracing, one manager for every frontend and the ROS node (core/tracer.py).
        self.tracer = TraceManager(options.trace_config)
        self._started = False
        self._stopping = False
        self._lock = threading.Lock()
        # Requests received (approximate under concurrency: only whether it changes matters):
        # the idle trim hands freed memory back to the system once it stops changing.
        self._requests = 0
        self._idle_trim = IdleTrim(lambda: self._requests)

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self.repository.start()
        self._started = True
        self._idle_trim.start()

    def stop(self) -> None:
        """Refuse new work, let in-flight requests finish, unload every model."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._idle_trim.stop()
        self.repository.stop(timeout=self.options.exit_timeout_secs)
        self.shared_memory.close()
        self.tracer.close()  # after the last request: every trace is written

    # ---------------------------------------------------------------- health
    def is_live(self) -> bool:
        return not self._stopping

    def is_ready(self) -> bool:
        """Started, not stopping and, with strict readiness, every loaded model READY."""
        if not self._started or self._stopping:
            return False
        if not self.options.strict_readiness:
            return True
        return self.repository.all_live_models_ready()

    def model_ready(self, name: str, version: int = -1) -> bool:
        return self.repository.is_ready(name, version)

    # ---------------------------------------------------------------- metadata
    def metadata(self) -> ServerMetadata:
        return ServerMetadata(name=self.options.server_id, version=__version__)

    def get_model(self, name: str, version: int = -1) -> ModelBase:
        return self.repository.get_model(name, version)

    def model_config(self, name: str, version: int = -1) -> ModelConfig:
        return self.get_model(name, version).config

    def model_metadata(self, name: str, version: int = -1) -> ModelMetadata:
        model = self.get_model(name, version)
        config = model.config
        ready_versions = tuple(
            str(m.version)
            for m in self.repository.models(name)
            if self.repository.is_ready(name, m.version)
        )
        batch = (WILDCARD_DIM,) if config.max_batch_size > 0 else ()

        def tensors(items) -> tuple[TensorMetadata, ...]:
            return tuple(TensorMetadata(t.name, t.datatype, batch + tuple(t.dims)) for t in items)

        return ModelMetadata(
            name=config.name,
            versions=ready_versions or (str(model.version),),
            platform=config.platform or config.backend,
            inputs=tensors(config.inputs),
            outputs=tensors(config.outputs),
        )

    def model_statistics(self, name: str = "", version: int = -1) -> list[StatsSnapshot]:
        """Statistics of one model (a version or every ready one), or of every ready model. A
        model or version that is not ready is INVALID_ARG with Triton's messages (its
        statistics API answers so, where the other model APIs answer NOT_FOUND)."""
        if not name:
            if version != -1:
                raise invalid_arg("model version must not be given without a model name")
            return [m.stats.snapshot() for m in self.repository.ready_models()]
        models = [m for m in self.repository.ready_models() if m.name == name]
        if not models:
            raise invalid_arg(f"requested model '{name}' is not available")
        if version != -1:
            models = [m for m in models if m.version == version]
            if not models:
                raise invalid_arg(f"requested model version is not available for model '{name}'")
        return [m.stats.snapshot() for m in models]

    def repository_index(self, *, ready_only: bool = False) -> list[RepositoryEntry]:
        return self.repository.index(ready_only=ready_only)

    def trace_setting(
        self, model_name: str = "", changes: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Triton's trace extension: the trace setting in force globally ('') or for a model,
        after applying ``changes`` when given (core/tracer.py). A model must be ready, as in
        Triton ("Request for unknown model")."""
        if model_name and not self.repository.is_ready(model_name):
            raise invalid_arg(f"Request for unknown model : {model_name}")
        if changes:
            return self.tracer.update_setting(model_name, changes)
        return self.tracer.get_setting(model_name)

    def load_model(
        self, name: str, *, config_json: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        self.repository.load(name, config_json=config_json, files=files)

    def unload_model(self, name: str, *, unload_dependents: bool = False) -> None:
        self.repository.unload(name, unload_dependents=unload_dependents)

    # ---------------------------------------------------------------- inference
    def infer(self, request: InferRequest) -> Future:
        """Queue a request; the returned future gives its InferResponse or TritonRosError.

        Never raises: a bad request fails its own future and nothing else.
        """
        self._requests += 1
        if self._stopping:
            request.set_error(
                StoppingError("Server is stopping, no new inference requests are accepted")
            )
            return request.future
        if self.tracer.active and request.trace is None:
            request.trace = self.tracer.sample(
                request.model_name, caller_holds=request.caller_releases_trace
            )
        return self.repository.infer(request)

    def infer_sync(self, request: InferRequest, timeout: float | None = None) -> InferResponse:
        """Blocking helper for tests and tools."""
        return self.infer(request).result(timeout=timeout)


__all__ = [
    "InferenceServer",
    "ServerOptions",
    "ModelMetadata",
    "ServerMetadata",
    "TensorMetadata",
    "TritonRosError",
]
