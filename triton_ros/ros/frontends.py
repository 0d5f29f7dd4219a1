"""The network endpoints the inference node runs next to its topics, all wired here.

Every endpoint serves the node's one :class:`~triton_ros.core.server.InferenceServer`, so a gRPC
request and a camera frame reach the same model's dynamic batcher. Each kind is a
:class:`FrontendSpec`: its parameter prefix, defaults and a factory that imports its transport only
when enabled. The node declares ``<prefix>.enable``, ``<prefix>.address`` and ``<prefix>.port`` for
every spec and starts the enabled ones in order (stopping them in reverse). Adding an endpoint
with the same ``start()`` / ``stop()`` shape is one more entry in :data:`FRONTENDS`: gRPC (8001),
HTTP/REST (8000) and Prometheus metrics (8002) are there, as in tritonserver.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Protocol

from ..core.server import InferenceServer

_log = logging.getLogger("triton_ros.frontends")


class Endpoint(Protocol):
    """What the node needs of an endpoint; ``port`` is the bound port after ``start()``."""

    port: int

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class FrontendSpec:
    name: str                          # parameter prefix and log name
    title: str
    enable: bool                       # default of <name>.enable
    port: int                          # default of <name>.port (Triton's port for it)
    factory: Callable[[InferenceServer, str, int], Endpoint]


@dataclass(frozen=True)
class FrontendConfig:
    """One endpoint's settings, from the node's parameters."""

    name: str
    enable: bool
    address: str
    port: int


def _grpc(core: InferenceServer, address: str, port: int) -> Endpoint:
    from ..frontend.grpc_server import GrpcServer
    return GrpcServer(core, address=address, port=port)


def _http(core: InferenceServer, address: str, port: int) -> Endpoint:
    from ..frontend.http_server import HttpServer
    return HttpServer(core, address=address, port=port)


def _metrics(core: InferenceServer, address: str, port: int) -> Endpoint:
    from ..frontend.metrics_server import MetricsServer
    return MetricsServer(core, address=address, port=port)


FRONTENDS: tuple[FrontendSpec, ...] = (
    FrontendSpec("grpc", "KServe v2 gRPC endpoint (inference.GRPCInferenceService)", True, 8001,
                 _grpc),
    FrontendSpec("http", "KServe v2 HTTP/REST endpoint", True, 8000, _http),
    FrontendSpec("metrics", "Prometheus metrics endpoint (/metrics)", True, 8002, _metrics),
)
DEFAULT_ADDRESS = "127.0.0.1"          # never expose an endpoint unless told to


class Frontends:
    """Starts the enabled endpoints over one core and stops them in reverse order."""

    def __init__(self, core: InferenceServer, configs: tuple[FrontendConfig, ...]) -> None:
        self._core = core
        self._configs = configs
        self._started: list[tuple[str, Endpoint]] = []

    def start(self) -> list[str]:
        """Start every enabled endpoint; return "name at address:port" lines. Raises on failure
        after stopping those already started."""
        specs = {spec.name: spec for spec in FRONTENDS}
        lines = []
        try:
            for cfg in self._configs:
                if not cfg.enable:
                    continue
                endpoint = specs[cfg.name].factory(self._core, cfg.address, cfg.port)
                endpoint.start()
                self._started.append((cfg.name, endpoint))
                lines.append(f"{specs[cfg.name].title} at {cfg.address}:{endpoint.port}")
        except BaseException:
            self.stop()
            raise
        return lines

    def stop(self) -> None:
        while self._started:
            name, endpoint = self._started.pop()
            try:
                endpoint.stop()
            except Exception as exc:  # stopping one endpoint must not keep the others running
                _log.warning("stopping the %s endpoint failed: %s", name, exc)
