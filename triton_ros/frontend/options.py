"""Every network endpoint's settings together: gRPC, HTTP/REST, metrics and Kafka, as the
``triton-ros-server`` flags and as the ROS node's parameters.

Each endpoint declares its own settings on its options class (:class:`GrpcOptions`,
:class:`HttpOptions`, :class:`MetricsOptions` here, :class:`KafkaOptions`; see
``triton_ros/settings.py``). This module lists them once (:data:`ENDPOINTS`), adds their flags
(:func:`add_arguments`), and builds :class:`EndpointOptions` from the flags
(:func:`options_from_args`) or from the node's parameter values (:func:`options_from_parameters`)
for :class:`~triton_ros.frontend.endpoints.Endpoints`. Flag names are tritonserver's where it has
the setting (``--http-max-input-size``, ``--grpc-use-ssl``, ``--grpc-keepalive-time``,
``--grpc-restricted-protocol``, ``--http-restricted-api``...); the limits tritonserver does not
have (request size, header and idle timeouts, connection counts) are ours, each with a default
that keeps one client from taking the process's memory or descriptors.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..settings import (
    Namer,
    add_flags,
    build,
    check_settings,
    flag_namer,
    flag_values,
    parameter_namer,
    parameters_of,
    setting,
    under,
)
from .grpc import options as grpc_options
from .grpc.options import GrpcOptions
from .http import options as http_options
from .http.options import HttpOptions
from .kafka import options as kafka_options
from .kafka.options import KafkaOptions
from .limits import ADDRESS_HELP, DEFAULT_ADDRESS, PORT_HELP

METRICS_FLAG_PREFIX, METRICS_PARAMETER_PREFIX = "--metrics-", "metrics."


@dataclass(frozen=True)
class MetricsOptions:
    """The Prometheus metrics endpoint (``/metrics``), served on the HTTP transport."""

    enable: bool = setting(
        True, "Run the Prometheus metrics endpoint (/metrics).", flag="--allow-metrics"
    )
    address: str = setting(
        DEFAULT_ADDRESS, ADDRESS_HELP.format("metrics"), flag_default=None
    )  # the server's: --http-address, as tritonserver
    port: int = setting(8002, PORT_HELP.format("metrics"), low=0, high=65535)
    max_connections: int = setting(
        64,
        "Connections the metrics endpoint holds at once; at the limit a scrape closes the "
        "idle or half-sent one waiting longest.",
        low=1,
        metavar="N",
    )
    interval_ms: float = setting(
        2000.0,
        "How often CPU, GPU and cache gauges are sampled, milliseconds.",
        parameter=False,
        low=0,
        above=True,
        metavar="MS",
    )
    allow_gpu_metrics: bool = setting(
        True,
        "Include GPU metrics (NVML) when a GPU exists.",
        flag="--allow-gpu-metrics",
        parameter=False,
    )
    allow_cpu_metrics: bool = setting(
        True,
        "Include CPU utilization and memory metrics.",
        flag="--allow-cpu-metrics",
        parameter=False,
    )
    header_timeout_s: float = 10.0  # the HTTP endpoint's
    idle_timeout_s: float = 60.0

    def validate(self, name: Namer | None = None) -> "MetricsOptions":
        check_settings(self, name or flag_namer(MetricsOptions, METRICS_FLAG_PREFIX))
        self.transport()
        return self

    def transport(self) -> HttpOptions:
        """The HTTP transport limits of the metrics port (scrapes have no body)."""
        return HttpOptions(
            max_input_size=1 << 16,
            max_request_size=1 << 16,
            header_timeout_s=self.header_timeout_s,
            idle_timeout_s=self.idle_timeout_s,
            max_connections=self.max_connections,
        ).validate()


@dataclass(frozen=True)
class EndpointOptions:
    """Everything :class:`~triton_ros.frontend.endpoints.Endpoints` starts, in one object."""

    grpc: GrpcOptions = field(default_factory=GrpcOptions)
    http: HttpOptions = field(default_factory=HttpOptions)
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    kafka: KafkaOptions = field(default_factory=KafkaOptions)  # off unless brokers are given
    exit_timeout_s: float = 30.0


# The endpoints' settings: (options class, ROS parameter prefix, flag prefix)
ENDPOINTS: tuple[tuple[type, str, str], ...] = (
    (GrpcOptions, grpc_options.PARAMETER_PREFIX, grpc_options.FLAG_PREFIX),
    (HttpOptions, http_options.PARAMETER_PREFIX, http_options.FLAG_PREFIX),
    (MetricsOptions, METRICS_PARAMETER_PREFIX, METRICS_FLAG_PREFIX),
    (KafkaOptions, kafka_options.PARAMETER_PREFIX, kafka_options.FLAG_PREFIX),
)


def parameters() -> tuple[Any, ...]:
    """The ROS parameters of every endpoint's settings (``grpc.port``, ``kafka.brokers``...)."""
    return tuple(s for cls, prefix, _ in ENDPOINTS for s in parameters_of(cls, prefix))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The endpoints' flags (``--allow-grpc``, ``--grpc-port``, ``--http-max-input-size``,
    ``--kafka-brokers``...)."""
    for cls, _, flag_prefix in ENDPOINTS:
        if cls is KafkaOptions:
            kafka_options.add_arguments(parser)
        else:
            add_flags(parser, cls, flag_prefix)


def options_from_args(args: argparse.Namespace) -> EndpointOptions:
    """EndpointOptions from parsed flags; INVALID_ARG names the flag."""

    def part(cls: type, prefix: str, **fields: Any) -> Any:
        name = flag_namer(cls, prefix)
        return build(cls, flag_values(args, cls, prefix), name, **fields).validate(name)

    http = part(HttpOptions, http_options.FLAG_PREFIX)
    metrics = part(
        MetricsOptions,
        METRICS_FLAG_PREFIX,
        header_timeout_s=http.header_timeout_s,
        idle_timeout_s=http.idle_timeout_s,
    )
    if args.metrics_address is None:
        metrics = replace(metrics, address=http.address)
    return EndpointOptions(
        grpc=part(GrpcOptions, grpc_options.FLAG_PREFIX),
        http=http,
        metrics=metrics,
        kafka=kafka_options.options_from_args(args),
        exit_timeout_s=args.exit_timeout_secs,
    )


def options_from_parameters(
    values: Mapping[str, Any], exit_timeout_s: float, kafka: KafkaOptions | None = None
) -> EndpointOptions:
    """EndpointOptions from the ROS node's parameter values (by full name: ``grpc.port``...);
    an endpoint's settings are checked when it is enabled; INVALID_ARG names the parameter.
    ``kafka``: the ``kafka.*`` parameters as read; the Kafka frontend runs when they give
    request topics (brokers alone serve the bindings' result mirrors)."""

    def part(cls: type, prefix: str, **fields: Any) -> Any:
        name: Namer = parameter_namer(cls, prefix)
        options = build(cls, under(values, prefix), name, **fields)
        return options.validate(name) if options.enable else options

    http = part(HttpOptions, http_options.PARAMETER_PREFIX)
    metrics = part(
        MetricsOptions,
        METRICS_PARAMETER_PREFIX,
        header_timeout_s=http.header_timeout_s,
        idle_timeout_s=http.idle_timeout_s,
    )
    kafka = kafka or KafkaOptions()
    return EndpointOptions(
        grpc=part(GrpcOptions, grpc_options.PARAMETER_PREFIX),
        http=http,
        metrics=metrics,
        kafka=kafka if kafka.enable and kafka.subscription() else KafkaOptions(),
        exit_timeout_s=exit_timeout_s,
    )
