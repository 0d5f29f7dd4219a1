"""The node's network endpoints as ROS parameters, mapped onto the one endpoint assembly.

The endpoints themselves (gRPC 8001, HTTP/REST 8000, Prometheus metrics 8002, and the Kafka
frontend when ``kafka.brokers`` and request topics are given: :mod:`.kafka_parameters`), their
options, start order and shutdown order are ``triton_ros.frontend.endpoints`` /
``triton_ros.frontend.options``, shared with ``triton-ros-server``; this module only declares
their parameters (:data:`ENDPOINT_PARAMS`: name, default, kind, description, mirroring
tritonserver's flags: ``grpc.use_ssl`` is ``--grpc-use-ssl``, ``http.restricted_api`` is
``--http-restricted-api``, ``kafka.brokers`` is ``--kafka-brokers``...) and turns the values into
:class:`~triton_ros.frontend.options.EndpointOptions` (:func:`endpoint_options`).
"""
from __future__ import annotations

from typing import Any

from ..core.errors import invalid_arg
from ..frontend.kafka.options import KafkaOptions
from ..frontend.options import (EndpointConfig, EndpointOptions, GrpcOptions, HttpOptions,
                                MetricsOptions, default_max_connections, parse_restrictions)
from .kafka_parameters import KAFKA_PARAMS, frontend_options

DEFAULT_ADDRESS = "127.0.0.1"          # never expose an endpoint unless told to

_ADDRESS = "Address the {} endpoint binds (0.0.0.0: every interface)."
_PORT = "Port of the {} endpoint (0: any free port, logged at start)."
_G, _H, _M = GrpcOptions(), HttpOptions(), MetricsOptions()

# (name, default, kind, description); kinds as in ros/parameters.py
ENDPOINT_PARAMS: tuple[tuple[str, Any, str, str], ...] = (
    ("grpc.enable", True, "bool",
     "Run the KServe v2 gRPC endpoint (inference.GRPCInferenceService)."),
    ("grpc.address", DEFAULT_ADDRESS, "str", _ADDRESS.format("grpc")),
    ("grpc.port", 8001, "int", _PORT.format("grpc")),
    ("grpc.max_message_size", _G.max_message_size, "int",
     "Largest gRPC message received or sent, bytes; larger: RESOURCE_EXHAUSTED."),
    ("grpc.keepalive_time_ms", _G.keepalive_time_ms, "int", "tritonserver --grpc-keepalive-time."),
    ("grpc.keepalive_timeout_ms", _G.keepalive_timeout_ms, "int",
     "tritonserver --grpc-keepalive-timeout."),
    ("grpc.handshake_timeout_s", _G.handshake_timeout_s, "float",
     "A new gRPC connection must complete its setup within this, seconds."),
    ("grpc.idle_timeout_s", _G.idle_timeout_s, "float",
     "A gRPC connection without calls this long gets GOAWAY, seconds (0: never)."),
    ("grpc.max_connections", 0, "int",
     "Connections the gRPC endpoint holds at once, more are closed when accepted (0: a "
     "quarter of the process's descriptor limit, at most 4096; --grpc-max-connections)."),
    ("grpc.use_ssl", False, "bool", "Serve gRPC over TLS (tritonserver --grpc-use-ssl)."),
    ("grpc.use_ssl_mutual", False, "bool",
     "TLS with client certificates signed by grpc.root_cert (--grpc-use-ssl-mutual)."),
    ("grpc.server_cert", "", "str", "PEM server certificate (--grpc-server-cert)."),
    ("grpc.server_key", "", "str", "PEM server key (--grpc-server-key)."),
    ("grpc.root_cert", "", "str", "PEM root certificate for client certificates "
                                  "(--grpc-root-cert)."),
    ("grpc.restricted_protocol", [], "str_list",
     "Restricted protocol groups, each '<protocols>:<key>=<value>' as tritonserver's "
     "--grpc-restricted-protocol: calls need metadata triton-grpc-protocol-<key>: <value>."),
    ("http.enable", True, "bool", "Run the KServe v2 HTTP/REST endpoint."),
    ("http.address", DEFAULT_ADDRESS, "str", _ADDRESS.format("http")),
    ("http.port", 8000, "int", _PORT.format("http")),
    ("http.max_input_size", _H.max_input_size, "int",
     "Largest JSON part of an HTTP inference request, bytes (--http-max-input-size)."),
    ("http.max_request_size", _H.max_request_size, "int",
     "Largest HTTP request body, bytes, also after decompression; larger: 413."),
    ("http.header_timeout_s", _H.header_timeout_s, "float",
     "A request head must arrive within this, seconds; else 408 and close."),
    ("http.idle_timeout_s", _H.idle_timeout_s, "float",
     "An idle keep-alive connection, or a stalled body, is closed after this, seconds."),
    ("http.max_connections", 0, "int",
     "Connections the HTTP endpoint holds at once; at the limit a new one closes (503) the one "
     "waiting longest without a request in progress (0: a quarter of the process's "
     "descriptor limit, at most 4096; --http-max-connections)."),
    ("http.min_body_rate", _H.min_body_rate, "int",
     "After header_timeout_s a request body must have come at this many bytes a second, else "
     "408 (0: no minimum; --http-min-body-rate)."),
    ("http.restricted_api", [], "str_list",
     "Restricted API groups, each '<apis>:<key>=<value>' as tritonserver's "
     "--http-restricted-api: requests need header <key>: <value>, else 403."),
    ("metrics.enable", True, "bool", "Run the Prometheus metrics endpoint (/metrics)."),
    ("metrics.address", DEFAULT_ADDRESS, "str", _ADDRESS.format("metrics")),
    ("metrics.port", 8002, "int", _PORT.format("metrics")),
    ("metrics.max_connections", _M.max_connections, "int",
     "Connections the metrics endpoint holds at once; at the limit a scrape closes the idle or "
     "half-sent one waiting longest."),
    *KAFKA_PARAMS,                     # kafka.brokers ... (frontend/kafka/options.py)
)


def _port(values: dict, name: str) -> int:
    if not 0 <= values[name] <= 65535:
        raise invalid_arg(f"parameter '{name}' must be a port number, got {values[name]}")
    return values[name]


def endpoint_options(values: dict[str, Any], exit_timeout_s: float,
                     kafka: KafkaOptions | None = None) -> EndpointOptions:
    """EndpointOptions from the node's checked parameter values; INVALID_ARG names a bad one.
    ``kafka``: the ``kafka.*`` parameters read (kafka_parameters.kafka_options); the Kafka
    frontend runs when they give brokers and request topics."""
    def cfg(kind: str) -> EndpointConfig:
        return EndpointConfig(values[f"{kind}.enable"], values[f"{kind}.address"],
                              _port(values, f"{kind}.port"))

    use_ssl_mutual = values["grpc.use_ssl_mutual"]
    grpc = GrpcOptions(
        max_message_size=values["grpc.max_message_size"],
        keepalive_time_ms=values["grpc.keepalive_time_ms"],
        keepalive_timeout_ms=values["grpc.keepalive_timeout_ms"],
        handshake_timeout_s=values["grpc.handshake_timeout_s"],
        idle_timeout_s=values["grpc.idle_timeout_s"],
        max_connections=values["grpc.max_connections"] or default_max_connections(),
        use_ssl=values["grpc.use_ssl"] or use_ssl_mutual, use_ssl_mutual=use_ssl_mutual,
        server_cert=values["grpc.server_cert"], server_key=values["grpc.server_key"],
        root_cert=values["grpc.root_cert"],
        restrictions=parse_restrictions(values["grpc.restricted_protocol"],
                                        "grpc.restricted_protocol"))
    http = HttpOptions(
        max_input_size=values["http.max_input_size"],
        max_request_size=values["http.max_request_size"],
        header_timeout_s=values["http.header_timeout_s"],
        idle_timeout_s=values["http.idle_timeout_s"],
        max_connections=values["http.max_connections"] or default_max_connections(),
        min_body_rate=values["http.min_body_rate"],
        restrictions=parse_restrictions(values["http.restricted_api"], "http.restricted_api"))
    metrics = MetricsOptions(header_timeout_s=http.header_timeout_s,
                             idle_timeout_s=http.idle_timeout_s,
                             max_connections=values["metrics.max_connections"])
    if cfg("grpc").enable:
        grpc.validate()
    if cfg("http").enable:
        http.validate()
    if cfg("metrics").enable:
        metrics.transport()
    return EndpointOptions(grpc=cfg("grpc"), http=cfg("http"), metrics=cfg("metrics"),
                           grpc_options=grpc, http_options=http, metrics_options=metrics,
                           kafka=frontend_options(kafka or KafkaOptions()),
                           exit_timeout_s=exit_timeout_s)
