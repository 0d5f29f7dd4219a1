"""A binding's remote settings: the endpoints' URLs, TLS files, the restricted-protocol header and
shared memory, parsed and checked at start; and the fixed timings of the endpoint pool.

URLs are ``grpc://``, ``grpcs://``, ``http://`` or ``https://`` with a host and a port and
nothing else; a URL holding credentials (``user:pass@``) is refused without being echoed, since
it holds a secret (the header value is never printed either: it is kept out of ``repr``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from ....core.errors import invalid_arg
from ....settings import Namer, build, check_settings, parameter_namer, setting

SCHEMES = {
    "grpc": ("grpc", False),
    "grpcs": ("grpc", True),
    "http": ("http", False),
    "https": ("http", True),
}
SHARED_MEMORY_MODES = ("auto", "off")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")

# Timings of the endpoint pool (pool.py, model.py) and its clients (clients.py).
PROBE_BACKOFF_MIN_S = 0.25
PROBE_BACKOFF_MAX_S = 4.0
HEALTH_PERIOD_S = 2.0
PROBE_TIMEOUT_S = 2.0
INITIAL_ROUND_S = 3.0  # start() waits this long at most for the first probes
FAILING_AFTER = 3  # requests failed in a row that mark an endpoint down


@dataclass(frozen=True)
class RemoteConfig:
    """A binding's remote settings: each field is a setting, the binding's parameter named as
    given (``<binding>.server_urls``...)."""

    urls: tuple[str, ...] = setting(
        [],
        "KServe v2 endpoints serving the model (tritonserver, KServe, triton-ros-server): "
        "grpc://host:port, grpcs://host:port, http://host:port or https://host:port. Each "
        "frame goes to the healthy endpoint with the fewest outstanding requests; a failing "
        "endpoint is probed again with backoff. Empty: the node's embedded core.",
        name="server_urls",
    )
    timeout_ms: int = setting(
        1000,
        "With server_urls: per-request timeout, milliseconds; an endpoint that does not "
        "answer in time is marked down (the frame is retried once on another endpoint if "
        "time is left).",
        name="server_timeout_ms",
        low=1,
    )
    hedge_after_fraction: float = setting(
        0.25,
        "With two or more server_urls: when a topic's frames in flight (max_in_flight) "
        "have had no answer for this fraction of server_timeout_ms (a hung endpoint), a "
        "newer frame is sent at once to another endpoint that is up and not stalled "
        "instead of waiting or being dropped (one such hedged frame in flight per topic; "
        "counted as hedged, hedged_published, hedged_lost in /diagnostics). 0: no "
        "hedging; at most 1.",
        low=0.0,
        high=1.0,
    )
    tls_ca_file: str = setting(
        "",
        "With grpcs:// or https:// URLs: PEM file of the CA that signed the servers' "
        "certificates; empty: the system's CAs.",
    )
    tls_cert_file: str = setting(
        "",
        "With grpcs:// or https:// URLs: PEM client certificate (mutual TLS), with tls_key_file.",
    )
    tls_key_file: str = setting("", "PEM private key of tls_cert_file.")
    header_key: str = setting(
        "",
        "Header sent with every remote call, for Triton's restricted protocols "
        "(tritonserver --grpc-restricted-protocol / --http-restricted-api key=value).",
        name="server_header_key",
    )
    header_value: str = setting(
        "",
        "Value of server_header_key (a secret: never logged or shown in diagnostics; "
        "readable through the parameter services: prefer server_header_value_env).",
        name="server_header_value",
        secret=True,
    )
    header_value_env: str = setting(
        "",
        "Name of an environment variable of the node's process holding the value of "
        "server_header_key, so that the secret is in no parameter; wins over "
        "server_header_value.",
        name="server_header_value_env",
    )
    shared_memory: str = setting(
        "auto",
        "With server_urls: auto sends inputs through system shared memory to endpoints "
        "on this host that accept it (127.0.0.1, localhost, ::1), else over the wire; "
        "off: always over the wire.",
        choices=SHARED_MEMORY_MODES,
    )

    @property
    def headers(self) -> dict[str, str] | None:
        """The header sent with every call (Triton's restricted protocols), if any."""
        return {self.header_key: self.header_value} if self.header_key else None

    def validate(self, name: Namer | None = None) -> "RemoteConfig":
        """Check the settings at start (URLs, files, pairs); INVALID_ARG on the first problem,
        naming the setting through ``name`` (a field's name -> how it was given; by default
        the parameter's name without the binding's)."""
        name = name or parameter_namer(RemoteConfig, "")
        check_settings(self, name)
        addresses = [parse_url(u) for u in self.urls]
        if len(set(self.urls)) != len(self.urls):
            raise invalid_arg(f"{name('urls')} lists an endpoint twice")
        for f in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
            path = getattr(self, f)
            if path and not os.path.isfile(path):
                raise invalid_arg(f"{name(f)}: no file '{path}'")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise invalid_arg(
                f"{name('tls_cert_file')} and {name('tls_key_file')} go together "
                f"(client certificate)"
            )
        if (self.tls_ca_file or self.tls_cert_file) and not any(a.tls for a in addresses):
            raise invalid_arg("TLS files are set but no server URL uses grpcs:// or https://")
        if bool(self.header_key) != bool(self.header_value):
            raise invalid_arg(f"{name('header_key')} and {name('header_value')} go together")
        return self


def remote_config(values: Mapping[str, Any], binding: str) -> RemoteConfig | None:
    """A binding's remote settings from its parameter values (relative names), with the header
    value read from ``server_header_value_env`` where that is set; None without server URLs.
    INVALID_ARG names the parameter."""
    name = parameter_namer(RemoteConfig, f"{binding}.")
    header_value = values.get("server_header_value", "")
    env = values.get("server_header_value_env", "")
    if env:
        header_value = os.environ.get(env, "")
        if not header_value:
            raise invalid_arg(
                f"{name('header_value_env')}: the environment variable '{env}' is not set or empty"
            )
    if not values.get("server_urls"):
        return None
    return build(RemoteConfig, values, name, header_value=header_value).validate(name)


@dataclass(frozen=True)
class EndpointAddress:
    url: str  # as given (checked to hold no credentials)
    protocol: str  # "grpc" or "http"
    tls: bool
    host: str
    port: int

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS


def parse_url(url: str) -> EndpointAddress:
    """``grpc://host:port`` etc. -> EndpointAddress; INVALID_ARG naming what is wrong."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise invalid_arg(f"server URL '{url}' is not a URL: {exc}") from None
    if parts.scheme not in SCHEMES:
        raise invalid_arg(
            f"server URL '{url}' must start with one of {', '.join(s + '://' for s in SCHEMES)}"
        )
    if parts.username or parts.password:
        # never echo the URL: it holds a secret
        raise invalid_arg(
            f"a {parts.scheme}:// server URL must not hold credentials; use "
            f"server_header_key/server_header_value"
        )
    if not parts.hostname or port is None:
        raise invalid_arg(
            f"server URL '{url}' needs a host and a port ({parts.scheme}://host:port)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise invalid_arg(f"server URL '{url}' must be {parts.scheme}://host:port (no path)")
    protocol, tls = SCHEMES[parts.scheme]
    return EndpointAddress(url, protocol, tls, parts.hostname, port)


def check_remote_config(config: RemoteConfig) -> None:
    """Validate a RemoteConfig made by hand (settings named by their field)."""
    config.validate()
