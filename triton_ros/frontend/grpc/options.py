"""Typed settings of the gRPC endpoint: address, message size, keepalive, connection timeouts,
TLS and restricted protocols.

Each field of :class:`GrpcOptions` is a setting (``triton_ros/settings.py``): the flag
``--grpc-<name>`` (or tritonserver's own name for it, e.g. ``--grpc-keepalive-time``) and the ROS
parameter ``grpc.<name>``. Keepalive fields and defaults are tritonserver's (gRPC's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ...core.errors import invalid_arg
from ...settings import Namer, check_settings, flag_namer, setting
from ..limits import (
    ADDRESS_HELP,
    DEFAULT_ADDRESS,
    MIB,
    PORT_HELP,
    Restrictions,
    default_max_connections,
    parse_restrictions,
)

FLAG_PREFIX, PARAMETER_PREFIX = "--grpc-", "grpc."
#: Calls gRPC core may hold for the server before the application takes them (grpcio's
#: ``grpc.server.max_pending_requests``, soft and hard limit): beyond it gRPC core cancels new
#: calls at random, without details (docs/server.md, "gRPC under bursts of calls").
GRPC_PENDING_CALLS = 1 << 16


@dataclass(frozen=True)
class GrpcOptions:
    """The gRPC endpoint's construction: where it listens, message size, keepalive, connection
    limits, TLS, restrictions."""

    enable: bool = setting(
        True,
        "Run the KServe v2 gRPC endpoint (inference.GRPCInferenceService).",
        flag="--allow-grpc",
    )
    address: str = setting(DEFAULT_ADDRESS, ADDRESS_HELP.format("grpc"))
    port: int = setting(8001, PORT_HELP.format("grpc"), low=0, high=65535)
    max_message_size: int = setting(
        256 * MIB,
        "Largest gRPC message received or sent, bytes; larger: RESOURCE_EXHAUSTED.",
        low=1,
        metavar="BYTES",
    )
    keepalive_time_ms: int = setting(
        7_200_000,
        "tritonserver --grpc-keepalive-time.",
        flag="--grpc-keepalive-time",
        low=0,
        metavar="MS",
    )
    keepalive_timeout_ms: int = setting(
        20_000,
        "tritonserver --grpc-keepalive-timeout.",
        flag="--grpc-keepalive-timeout",
        low=0,
        metavar="MS",
    )
    keepalive_permit_without_calls: bool = setting(
        False, "Allow keepalive pings on a connection without calls.", parameter=False
    )
    http2_max_pings_without_data: int = setting(
        2,
        "Pings sent without data before one must be received.",
        parameter=False,
        low=0,
        metavar="N",
    )
    http2_min_recv_ping_interval_without_data_ms: int = setting(
        300_000,
        "Least time between pings without data a client may send, milliseconds.",
        flag="--grpc-http2-min-recv-ping-interval-without-data",
        parameter=False,
        low=0,
        metavar="MS",
    )
    http2_max_ping_strikes: int = setting(
        2,
        "Pings too early before the connection is closed (0: any number).",
        parameter=False,
        low=0,
        metavar="N",
    )
    handshake_timeout_s: float = setting(
        10.0,
        "A new gRPC connection must complete its setup within this, seconds.",
        flag="--grpc-handshake-timeout-secs",
        low=0,
        above=True,
    )
    idle_timeout_s: float = setting(
        300.0,
        "A gRPC connection without calls this long gets GOAWAY, seconds (0: never).",
        flag="--grpc-idle-timeout-secs",
        low=0,
    )
    max_connections: int = setting(
        0,
        "Connections the gRPC endpoint holds at once, more are closed when accepted (0: a "
        "quarter of the process's descriptor limit, at most 4096; --grpc-max-connections).",
        low=0,
        flag_default=None,
        metavar="N",
    )
    use_ssl: bool = setting(False, "Serve gRPC over TLS (tritonserver --grpc-use-ssl).")
    use_ssl_mutual: bool = setting(
        False, "TLS with client certificates signed by grpc.root_cert (--grpc-use-ssl-mutual)."
    )
    server_cert: str = setting("", "PEM server certificate (--grpc-server-cert).", metavar="PATH")
    server_key: str = setting("", "PEM server key (--grpc-server-key).", metavar="PATH")
    root_cert: str = setting(
        "", "PEM root certificate for client certificates (--grpc-root-cert).", metavar="PATH"
    )
    restricted_protocol: tuple[str, ...] = setting(
        [],
        "Restricted protocol groups, each '<protocols>:<key>=<value>' as tritonserver's "
        "--grpc-restricted-protocol: calls need metadata triton-grpc-protocol-<key>: "
        "<value>.",
        metavar="<protocols>:<key>=<value>",
    )
    max_concurrent_rpcs: int | None = None

    def __post_init__(self) -> None:
        if self.max_connections == 0:
            object.__setattr__(self, "max_connections", default_max_connections())
        if self.use_ssl_mutual:
            object.__setattr__(self, "use_ssl", True)

    @cached_property
    def restrictions(self) -> Restrictions:
        return parse_restrictions(self.restricted_protocol, "--grpc-restricted-protocol")

    def validate(self, name: Namer | None = None) -> "GrpcOptions":
        """Check every setting; INVALID_ARG names it through ``name`` (the flags by default)."""
        name = name or flag_namer(GrpcOptions, FLAG_PREFIX)
        check_settings(self, name)
        parse_restrictions(self.restricted_protocol, name("restricted_protocol"))
        if self.use_ssl:
            if not self.server_cert or not self.server_key:
                raise invalid_arg(
                    f"{name('use_ssl')} needs {name('server_cert')} and {name('server_key')}"
                )
            if self.use_ssl_mutual and not self.root_cert:
                raise invalid_arg(f"{name('use_ssl_mutual')} needs {name('root_cert')}")
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
            (
                "grpc.http2.min_recv_ping_interval_without_data_ms",
                self.http2_min_recv_ping_interval_without_data_ms,
            ),
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
