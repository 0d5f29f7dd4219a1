"""Typed settings of the network endpoints: limits, timeouts, TLS and restricted APIs.

One set of options for ``triton-ros-server`` (flags, :func:`add_arguments`) and the ROS node
(parameters, ``ros/endpoint_parameters.py``): both build :class:`EndpointOptions` and hand it to
:class:`~triton_ros.frontend.endpoints.Endpoints`. Flag names are tritonserver's where it has the
setting (``--http-max-input-size``, ``--grpc-use-ssl``, ``--grpc-keepalive-time``,
``--grpc-restricted-protocol``, ``--http-restricted-api``...); the limits tritonserver does not
have (request size, header and idle timeouts, connection counts) are ours, each with a default
that keeps one client from taking the process's memory or descriptors.

Restrictions follow tritonserver: ``<api>[,<api>...]:<key>=<value>``, repeatable, an API in one
group at most; a restricted HTTP API needs the header ``<key>: <value>`` (else 403), a
restricted gRPC protocol the metadata ``triton-grpc-protocol-<key>: <value>`` (else
UNAVAILABLE).
"""
from __future__ import annotations

import argparse
import resource
from dataclasses import dataclass, field

from ..core.errors import invalid_arg
from .kafka import options as kafka_options
from .kafka.options import KafkaOptions

# Triton's API group names (RestrictedCategory in tritonserver's command line parser).
API_GROUPS = ("health", "metadata", "inference", "shared-memory", "model-config",
              "model-repository", "statistics", "trace", "logging")
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"

MIB = 1 << 20
#: Calls gRPC core may hold for the server before the application takes them (grpcio's
#: ``grpc.server.max_pending_requests``, soft and hard limit). grpcio's defaults (1000 and 3000)
#: made a burst of 2000 concurrent calls lose 5-8 % of them CANCELLED without details: grpc.aio
#: takes calls off gRPC core's queue one event-loop turn at a time, and past the soft limit core
#: cancels new calls at random (its "random early detection"). With this limit every call of
#: such a burst reaches the endpoint and is answered; only past 65536 calls waiting at once
#: does gRPC core cancel again (docs/server.md).
GRPC_PENDING_CALLS = 1 << 16


def default_max_connections() -> int:
    """Connections one endpoint accepts at once by default: a quarter of the descriptors this
    process may open (three endpoints, and room left for model files, sockets and pipes), at
    most 4096, at least 8."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(8, min(4096, (soft - 64) // 4))


@dataclass(frozen=True)
class Restrictions:
    """API group -> (header key, expected value). Empty: nothing is restricted."""

    groups: dict[str, tuple[str, str]] = field(default_factory=dict)

    def get(self, api: str) -> tuple[str, str] | None:
        return self.groups.get(api)

    def __bool__(self) -> bool:
        return bool(self.groups)


def parse_restrictions(specs: list[str] | tuple[str, ...], flag: str) -> Restrictions:
    """Parse ``<apis>:<key>=<value>`` specs as tritonserver does; INVALID_ARG names the flag."""
    groups: dict[str, tuple[str, str]] = {}
    for spec in specs:
        apis_text, sep, kv = spec.partition(":")
        key, sep2, value = kv.partition("=")
        if not sep or not sep2 or not apis_text or not key.strip():
            raise invalid_arg(f"{flag} expects '<apis>:<restricted-key>=<restricted-value>', "
                              f"got '{spec}'")
        for api in (a.strip() for a in apis_text.split(",")):
            if api not in API_GROUPS:
                raise invalid_arg(f"unknown restricted {flag} API '{api}'; expected one of "
                                  f"{', '.join(API_GROUPS)}")
            if api in groups:
                raise invalid_arg(f"restricted API '{api}' can not be specified in multiple "
                                  f"config groups ({flag})")
            groups[api] = (key.strip().lower(), value)
    return Restrictions(groups)


@dataclass(frozen=True)
class HttpOptions:
    """The HTTP/REST endpoint (also used, for its transport limits, by the metrics endpoint)."""

    max_input_size: int = 1 << 26          # --http-max-input-size: JSON part of a request
    max_request_size: int = 256 * MIB      # whole body, after decompression too
    header_timeout_s: float = 10.0         # a request head must arrive within this
    idle_timeout_s: float = 60.0           # idle keep-alive connection, or a stalled body
    max_connections: int = field(default_factory=default_max_connections)
    restrictions: Restrictions = field(default_factory=Restrictions)
    # --http-min-body-rate: after header_timeout_s, a body arriving slower (bytes a second, on
    # average since its head) gets 408; 0: no minimum (docs/server.md)
    min_body_rate: int = 500

    def validate(self) -> "HttpOptions":
        _positive_int(self.max_input_size, "--http-max-input-size")
        _positive_int(self.max_request_size, "--http-max-request-size")
        _positive_int(self.max_connections, "max connections")
        if isinstance(self.min_body_rate, bool) or not isinstance(self.min_body_rate, int) \
                or self.min_body_rate < 0:
            raise invalid_arg(f"--http-min-body-rate must be a non-negative integer, got "
                              f"{self.min_body_rate!r}")
        for value, name in ((self.header_timeout_s, "header timeout"),
                            (self.idle_timeout_s, "idle timeout")):
            if not value > 0:
                raise invalid_arg(f"the HTTP {name} must be > 0 seconds, got {value}")
        return self


@dataclass(frozen=True)
class GrpcOptions:
    """gRPC server construction: message size, keepalive, connection timeouts, TLS, restrictions.
    Keepalive fields and defaults are tritonserver's (gRPC's own defaults)."""

    max_message_size: int = 256 * MIB      # receive and send
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    handshake_timeout_s: float = 10.0      # a new connection must finish its HTTP/2 (TLS) setup
    idle_timeout_s: float = 300.0          # connection without calls is sent GOAWAY (0: never)
    max_connections: int = field(default_factory=default_max_connections)
    max_concurrent_rpcs: int | None = None
    use_ssl: bool = False
    use_ssl_mutual: bool = False
    server_cert: str = ""
    server_key: str = ""
    root_cert: str = ""
    restrictions: Restrictions = field(default_factory=Restrictions)

    def validate(self) -> "GrpcOptions":
        _positive_int(self.max_message_size, "--grpc-max-message-size")
        _positive_int(self.max_connections, "--grpc-max-connections")
        if self.use_ssl or self.use_ssl_mutual:
            if not self.server_cert or not self.server_key:
                raise invalid_arg("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
            if self.use_ssl_mutual and not self.root_cert:
                raise invalid_arg("--grpc-use-ssl-mutual needs --grpc-root-cert")
        return self

    def channel_options(self) -> list[tuple[str, int]]:
        options = [
            ("grpc.max_receive_message_length", self.max_message_size),
            ("grpc.max_send_message_length", self.max_message_size),
            ("grpc.so_reuseport", 0),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.http2_max_pings_without_data),
            ("grpc.http2.min_recv_ping_interval_without_data_ms",
             self.http2_min_recv_ping_interval_without_data_ms),
            ("grpc.http2.max_ping_strikes", self.http2_max_ping_strikes),
            ("grpc.server_handshake_timeout_ms", int(self.handshake_timeout_s * 1000)),
            # gRPC core closes connections past this quota as soon as they are accepted
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.server.max_pending_requests", GRPC_PENDING_CALLS),
            ("grpc.server.max_pending_requests_hard_limit", GRPC_PENDING_CALLS),
        ]
        if self.idle_timeout_s > 0:
            options.append(("grpc.max_connection_idle_ms", int(self.idle_timeout_s * 1000)))
        return options


@dataclass(frozen=True)
class MetricsOptions:
    interval_ms: float = 2000.0
    allow_gpu_metrics: bool = True
    allow_cpu_metrics: bool = True
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 60.0
    max_connections: int = 64

    def transport(self) -> HttpOptions:
        """The HTTP transport limits of the metrics port (scrapes have no body)."""
        return HttpOptions(max_input_size=1 << 16, max_request_size=1 << 16,
                           header_timeout_s=self.header_timeout_s,
                           idle_timeout_s=self.idle_timeout_s,
                           max_connections=self.max_connections).validate()


@dataclass(frozen=True)
class EndpointConfig:
    enable: bool
    address: str
    port: int


@dataclass(frozen=True)
class EndpointOptions:
    """Everything :class:`~triton_ros.frontend.endpoints.Endpoints` starts, in one object."""

    grpc: EndpointConfig = EndpointConfig(True, "127.0.0.1", 8001)
    http: EndpointConfig = EndpointConfig(True, "127.0.0.1", 8000)
    metrics: EndpointConfig = EndpointConfig(True, "127.0.0.1", 8002)
    grpc_options: GrpcOptions = field(default_factory=GrpcOptions)
    http_options: HttpOptions = field(default_factory=HttpOptions)
    metrics_options: MetricsOptions = field(default_factory=MetricsOptions)
    kafka: KafkaOptions = field(default_factory=KafkaOptions)   # off unless brokers are given
    exit_timeout_s: float = 30.0


def _positive_int(value: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise invalid_arg(f"{name} must be a positive integer, got {value!r}")


# ------------------------------------------------------------------------------------------
# Command line (triton-ros-server)
# ------------------------------------------------------------------------------------------

def strict_uint(text: str) -> int:
    """A decimal size: digits only (``0x2``, ``0_2``, ``+2``, `` 2`` are refused)."""
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative decimal integer, got '{text}'")
    return int(text)


def add_arguments(p: argparse.ArgumentParser, parse_bool) -> None:
    """The endpoint flags beyond address/port/allow-*: limits, keepalive, TLS, restrictions."""
    d, g, m = HttpOptions(), GrpcOptions(), MetricsOptions()
    p.add_argument("--http-max-input-size", type=strict_uint, default=d.max_input_size,
                   metavar="BYTES",
                   help="largest JSON part of an HTTP inference request (default 64 MiB)")
    p.add_argument("--http-max-request-size", type=strict_uint, default=d.max_request_size,
                   metavar="BYTES", help="largest HTTP request body, also after decompression; "
                                         "larger ones get 413 (default 256 MiB)")
    p.add_argument("--http-header-timeout-secs", type=float, default=d.header_timeout_s,
                   help="a request head must arrive within this; else the connection is "
                        "closed with 408 (default 10)")
    p.add_argument("--http-idle-timeout-secs", type=float, default=d.idle_timeout_s,
                   help="an idle keep-alive connection, or a body that stalls this long, is "
                        "closed (default 60)")
    p.add_argument("--http-max-connections", type=strict_uint, default=None, metavar="N",
                   help="connections the HTTP endpoint holds at once; at the limit a new one "
                        "closes (503) the connection that has waited longest without a request "
                        "in progress, or gets 503 itself when every one has (default: a quarter "
                        f"of the descriptor limit, now {default_max_connections()})")
    p.add_argument("--http-min-body-rate", type=strict_uint, default=d.min_body_rate,
                   metavar="BYTES_PER_SEC",
                   help="after --http-header-timeout-secs, a request body must have arrived at "
                        "this many bytes a second on average, else 408 and close (default 500; "
                        "0: no minimum)")
    p.add_argument("--http-restricted-api", action="append", default=[],
                   metavar="<apis>:<key>=<value>",
                   help="restrict HTTP API groups (" + ", ".join(API_GROUPS) + ") to requests "
                        "with header <key>: <value> (403 otherwise); repeatable")
    p.add_argument("--grpc-max-message-size", type=strict_uint, default=g.max_message_size,
                   metavar="BYTES", help="largest gRPC message received or sent; larger get "
                                         "RESOURCE_EXHAUSTED (default 256 MiB)")
    p.add_argument("--grpc-keepalive-time", type=strict_uint, default=g.keepalive_time_ms,
                   metavar="MS")
    p.add_argument("--grpc-keepalive-timeout", type=strict_uint, default=g.keepalive_timeout_ms,
                   metavar="MS")
    p.add_argument("--grpc-keepalive-permit-without-calls", type=parse_bool,
                   default=g.keepalive_permit_without_calls, metavar="BOOL")
    p.add_argument("--grpc-http2-max-pings-without-data", type=strict_uint,
                   default=g.http2_max_pings_without_data, metavar="N")
    p.add_argument("--grpc-http2-min-recv-ping-interval-without-data", type=strict_uint,
                   default=g.http2_min_recv_ping_interval_without_data_ms, metavar="MS")
    p.add_argument("--grpc-http2-max-ping-strikes", type=strict_uint,
                   default=g.http2_max_ping_strikes, metavar="N")
    p.add_argument("--grpc-handshake-timeout-secs", type=float, default=g.handshake_timeout_s,
                   help="a new gRPC connection must complete its setup within this (default 10)")
    p.add_argument("--grpc-idle-timeout-secs", type=float, default=g.idle_timeout_s,
                   help="a gRPC connection without calls this long gets GOAWAY (default 300; "
                        "0: never)")
    p.add_argument("--grpc-max-connections", type=strict_uint, default=None, metavar="N",
                   help="connections the gRPC endpoint holds at once; more are closed when "
                        "accepted (default as --http-max-connections)")
    p.add_argument("--grpc-use-ssl", type=parse_bool, default=False, metavar="BOOL",
                   help="serve gRPC over TLS (needs --grpc-server-cert and --grpc-server-key)")
    p.add_argument("--grpc-use-ssl-mutual", type=parse_bool, default=False, metavar="BOOL",
                   help="TLS with client certificates signed by --grpc-root-cert")
    p.add_argument("--grpc-server-cert", default="", metavar="PATH")
    p.add_argument("--grpc-server-key", default="", metavar="PATH")
    p.add_argument("--grpc-root-cert", default="", metavar="PATH")
    p.add_argument("--grpc-restricted-protocol", action="append", default=[],
                   metavar="<protocols>:<key>=<value>",
                   help="restrict gRPC protocol groups to calls with metadata "
                        "triton-grpc-protocol-<key>: <value> (UNAVAILABLE otherwise); repeatable")
    p.add_argument("--metrics-max-connections", type=strict_uint, default=m.max_connections,
                   metavar="N", help="connections the metrics endpoint holds at once; at the "
                                     "limit a scrape closes the idle or half-sent connection "
                                     "that has waited longest (default 64)")
    kafka_options.add_arguments(p, parse_bool)


def options_from_args(args: argparse.Namespace) -> EndpointOptions:
    """EndpointOptions from parsed flags; INVALID_ARG for inconsistent ones."""
    http = HttpOptions(
        max_input_size=args.http_max_input_size, max_request_size=args.http_max_request_size,
        header_timeout_s=args.http_header_timeout_secs, idle_timeout_s=args.http_idle_timeout_secs,
        max_connections=(args.http_max_connections if args.http_max_connections is not None
                         else default_max_connections()),
        min_body_rate=args.http_min_body_rate,
        restrictions=parse_restrictions(args.http_restricted_api, "--http-restricted-api"),
    ).validate()
    grpc = GrpcOptions(
        max_message_size=args.grpc_max_message_size,
        keepalive_time_ms=args.grpc_keepalive_time,
        keepalive_timeout_ms=args.grpc_keepalive_timeout,
        keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
        http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
        http2_min_recv_ping_interval_without_data_ms=(
            args.grpc_http2_min_recv_ping_interval_without_data),
        http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
        handshake_timeout_s=args.grpc_handshake_timeout_secs,
        idle_timeout_s=args.grpc_idle_timeout_secs,
        max_connections=(args.grpc_max_connections if args.grpc_max_connections is not None
                         else default_max_connections()),
        use_ssl=args.grpc_use_ssl or args.grpc_use_ssl_mutual,
        use_ssl_mutual=args.grpc_use_ssl_mutual,
        server_cert=args.grpc_server_cert, server_key=args.grpc_server_key,
        root_cert=args.grpc_root_cert,
        restrictions=parse_restrictions(args.grpc_restricted_protocol,
                                        "--grpc-restricted-protocol"),
    ).validate()
    metrics = MetricsOptions(interval_ms=args.metrics_interval_ms,
                             allow_gpu_metrics=args.allow_gpu_metrics,
                             allow_cpu_metrics=args.allow_cpu_metrics,
                             header_timeout_s=args.http_header_timeout_secs,
                             idle_timeout_s=args.http_idle_timeout_secs,
                             max_connections=args.metrics_max_connections)
    metrics.transport()
    return EndpointOptions(
        grpc=EndpointConfig(args.allow_grpc, args.grpc_address, args.grpc_port),
        http=EndpointConfig(args.allow_http, args.http_address, args.http_port),
        metrics=EndpointConfig(args.allow_metrics, args.metrics_address or args.http_address,
                               args.metrics_port),
        grpc_options=grpc, http_options=http, metrics_options=metrics,
        kafka=kafka_options.options_from_args(args),
        exit_timeout_s=args.exit_timeout_secs)
