"""Typed settings of the HTTP/REST endpoint: address, request sizes, timeouts, connections and
restricted APIs (also the transport limits of the metrics endpoint).

Each field of :class:`HttpOptions` is a setting (``triton_ros/settings.py``): the flag
``--http-<name>`` (or its own, e.g. ``--http-header-timeout-secs``) and the ROS parameter
``http.<name>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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

FLAG_PREFIX, PARAMETER_PREFIX = "--http-", "http."


@dataclass(frozen=True)
class HttpOptions:
    """The HTTP/REST endpoint: where it listens and what it holds each client to."""

    enable: bool = setting(True, "Run the KServe v2 HTTP/REST endpoint.", flag="--allow-http")
    address: str = setting(DEFAULT_ADDRESS, ADDRESS_HELP.format("http"))
    port: int = setting(8000, PORT_HELP.format("http"), low=0, high=65535)
    max_input_size: int = setting(
        1 << 26,
        "Largest JSON part of an HTTP inference request, bytes (--http-max-input-size).",
        low=1,
        metavar="BYTES",
    )
    max_request_size: int = setting(
        256 * MIB,
        "Largest HTTP request body, bytes, also after decompression; larger: 413.",
        low=1,
        metavar="BYTES",
    )
    header_timeout_s: float = setting(
        10.0,
        "A request head must arrive within this, seconds; else 408 and close.",
        flag="--http-header-timeout-secs",
        low=0,
        above=True,
    )
    idle_timeout_s: float = setting(
        60.0,
        "An idle keep-alive connection, or a stalled body, is closed after this, seconds.",
        flag="--http-idle-timeout-secs",
        low=0,
        above=True,
    )
    max_connections: int = setting(
        0,
        "Connections the HTTP endpoint holds at once; at the limit a new one closes (503) the "
        "one waiting longest without a request in progress (0: a quarter of the process's "
        "descriptor limit, at most 4096; --http-max-connections).",
        low=0,
        flag_default=None,
        metavar="N",
    )
    min_body_rate: int = setting(
        500,
        "After header_timeout_s a request body must have come at this many bytes a second, "
        "else 408 (0: no minimum; --http-min-body-rate).",
        low=0,
        metavar="BYTES_PER_SEC",
    )
    restricted_api: tuple[str, ...] = setting(
        [],
        "Restricted API groups, each '<apis>:<key>=<value>' as tritonserver's "
        "--http-restricted-api: requests need header <key>: <value>, else 403.",
        metavar="<apis>:<key>=<value>",
    )

    def __post_init__(self) -> None:
        if self.max_connections == 0:
            object.__setattr__(self, "max_connections", default_max_connections())

    @cached_property
    def restrictions(self) -> Restrictions:
        return parse_restrictions(self.restricted_api, "--http-restricted-api")

    def validate(self, name: Namer | None = None) -> "HttpOptions":
        """Check every setting; INVALID_ARG names it through ``name`` (the flags by default)."""
        name = name or flag_namer(HttpOptions, FLAG_PREFIX)
        check_settings(self, name)
        parse_restrictions(self.restricted_api, name("restricted_api"))
        return self
