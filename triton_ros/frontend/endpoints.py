"""The one assembly of network endpoints over a core, used by ``triton-ros-server`` and the ROS
node alike: same options (:class:`~triton_ros.frontend.options.EndpointOptions`), same start
order (gRPC, HTTP, metrics, as tritonserver prints them) and same shutdown order:

1. :meth:`Endpoints.stop_protocols`: gRPC and HTTP stop accepting requests and give in-flight
   ones ``exit_timeout_s`` to finish;
2. the caller stops the core (models unload);
3. :meth:`Endpoints.stop`: the metrics endpoint stops last, scrapeable until the models are gone.

Each transport is imported only when enabled, so the core never needs grpc or aiohttp.
Start failures raise :class:`EndpointStartError` (typed, with the endpoint's name and address)
after stopping the endpoints already started.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ..core.server import InferenceServer
from .options import EndpointOptions

_log = logging.getLogger("triton_ros.frontends")


class Endpoint(Protocol):
    """What the assembly needs of an endpoint; ``port`` is the bound port after ``start()``."""

    port: int
    target: str

    def start(self) -> None: ...

    def stop(self, grace: float = 5.0) -> None: ...


@dataclass(frozen=True)
class EndpointKind:
    name: str  # "grpc", "http", "metrics": option and parameter prefix
    title: str  # what the node logs
    banner: str  # what tritonserver prints once it listens


KINDS: tuple[EndpointKind, ...] = (
    EndpointKind(
        "grpc",
        "KServe v2 gRPC endpoint (inference.GRPCInferenceService)",
        "Started GRPCInferenceService at {}",
    ),
    EndpointKind("http", "KServe v2 HTTP/REST endpoint", "Started HTTPService at {}"),
    EndpointKind(
        "metrics", "Prometheus metrics endpoint (/metrics)", "Started Metrics Service at {}"
    ),
    EndpointKind(
        "kafka",
        "Kafka frontend (KServe v2 requests from Kafka topics)",
        "Started KafkaService at {}",
    ),
)


class EndpointStartError(Exception):
    """An endpoint could not start (its address is taken, a certificate is unreadable...)."""

    def __init__(self, kind: str, target: str, cause: BaseException) -> None:
        super().__init__(f"failed to start {kind} endpoint at {target}: {cause}")
        self.kind = kind
        self.target = target
        self.cause = cause


def _create(kind: str, core: InferenceServer, options: EndpointOptions) -> Endpoint:
    if kind == "grpc":
        from .grpc.grpc_server import GrpcServer

        cfg = options.grpc
        return GrpcServer(core, address=cfg.address, port=cfg.port, options=cfg)
    if kind == "http":
        from .http.http_server import HttpServer

        cfg = options.http
        return HttpServer(core, address=cfg.address, port=cfg.port, options=cfg)
    if kind == "kafka":
        from .kafka.kafka_server import KafkaServer

        return KafkaServer(core, options.kafka)
    from .metrics_server import MetricsServer

    cfg = options.metrics
    return MetricsServer(core, address=cfg.address, port=cfg.port, options=cfg)


class Endpoints:
    """Starts the enabled endpoints over one core; stops them in tritonserver's order."""

    def __init__(self, core: InferenceServer, options: EndpointOptions) -> None:
        self._core = core
        self.options = options
        self.started: dict[str, Endpoint] = {}

    def start(self) -> list[tuple[EndpointKind, Endpoint]]:
        """Start every enabled endpoint, in order; on failure stop those already started and
        raise :class:`EndpointStartError`."""
        out = []
        for kind in KINDS:
            cfg = getattr(self.options, kind.name)
            if not cfg.enable:
                continue
            target = f"{cfg.address}:{cfg.port}" if kind.name != "kafka" else cfg.brokers
            try:
                endpoint = _create(kind.name, self._core, self.options)
                target = endpoint.target
                endpoint.start()
            except Exception as exc:
                self.stop()
                raise EndpointStartError(kind.name, target, exc) from exc
            self.started[kind.name] = endpoint
            out.append((kind, endpoint))
        return out

    def stop_protocols(self) -> None:
        """Stop gRPC, HTTP and Kafka: no new requests, in-flight ones get ``exit_timeout_s``."""
        for name in ("grpc", "http", "kafka"):
            self._stop(name, self.options.exit_timeout_s)

    def stop(self) -> None:
        """Stop every endpoint still running (the metrics endpoint last)."""
        self.stop_protocols()
        self._stop("metrics", 5.0)

    def _stop(self, name: str, grace: float) -> None:
        endpoint = self.started.pop(name, None)
        if endpoint is None:
            return
        try:
            endpoint.stop(grace=grace)
        except Exception as exc:  # stopping one endpoint must not keep the others running
            _log.warning("stopping the %s endpoint failed: %s", name, exc)
