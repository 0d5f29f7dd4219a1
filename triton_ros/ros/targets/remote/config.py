"""A binding's remote settings: the endpoints' URLs, TLS files, the restricted-protocol header and
shared memory, parsed and checked at start; and the fixed timings of the endpoint pool.

URLs are ``grpc://``, ``grpcs://``, ``http://`` or ``https://`` with a host and a port and
nothing else; a URL holding credentials (``user:pass@``) is refused without being echoed, since
it holds a secret (the header value is never printed either: it is kept out of ``repr``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ....core.errors import invalid_arg

SCHEMES = {"grpc": ("grpc", False), "grpcs": ("grpc", True),
           "http": ("http", False), "https": ("http", True)}
SHARED_MEMORY_MODES = ("auto", "off")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")

# Timings of the endpoint pool (pool.py, model.py) and its clients (clients.py).
PROBE_BACKOFF_MIN_S = 0.25
PROBE_BACKOFF_MAX_S = 4.0
HEALTH_PERIOD_S = 2.0
PROBE_TIMEOUT_S = 2.0
INITIAL_ROUND_S = 3.0                 # start() waits this long at most for the first probes
FAILING_AFTER = 3                     # requests failed in a row that mark an endpoint down


@dataclass(frozen=True)
class RemoteConfig:
    """A binding's remote settings (parsed from its parameters)."""

    urls: tuple[str, ...]
    timeout_ms: int = 1000
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    header_key: str = ""
    header_value: str = field(default="", repr=False)     # a secret: never printed
    shared_memory: str = "auto"
    hedge_after_fraction: float = 0.25    # of timeout_ms; 0: no hedging (binding/source.py)

    @property
    def headers(self) -> dict[str, str] | None:
        """The header sent with every call (Triton's restricted protocols), if any."""
        return {self.header_key: self.header_value} if self.header_key else None


@dataclass(frozen=True)
class EndpointAddress:
    url: str                           # as given (checked to hold no credentials)
    protocol: str                      # "grpc" or "http"
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
        raise invalid_arg(f"server URL '{url}' must start with one of "
                          f"{', '.join(s + '://' for s in SCHEMES)}")
    if parts.username or parts.password:
        # never echo the URL: it holds a secret
        raise invalid_arg(f"a {parts.scheme}:// server URL must not hold credentials; use "
                          f"server_header_key/server_header_value")
    if not parts.hostname or port is None:
        raise invalid_arg(f"server URL '{url}' needs a host and a port ({parts.scheme}://host:port)")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise invalid_arg(f"server URL '{url}' must be {parts.scheme}://host:port (no path)")
    protocol, tls = SCHEMES[parts.scheme]
    return EndpointAddress(url, protocol, tls, parts.hostname, port)


def check_remote_config(config: RemoteConfig) -> None:
    """Validate a RemoteConfig at start (URLs, files, pairs); INVALID_ARG on the first problem."""
    addresses = [parse_url(u) for u in config.urls]
    if len(set(config.urls)) != len(config.urls):
        raise invalid_arg("server_urls lists an endpoint twice")
    for param, path in (("tls_ca_file", config.tls_ca_file), ("tls_cert_file", config.tls_cert_file),
                        ("tls_key_file", config.tls_key_file)):
        if path and not os.path.isfile(path):
            raise invalid_arg(f"parameter '{param}': no file '{path}'")
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        raise invalid_arg("tls_cert_file and tls_key_file go together (client certificate)")
    if (config.tls_ca_file or config.tls_cert_file) and not any(a.tls for a in addresses):
        raise invalid_arg("TLS files are set but no server URL uses grpcs:// or https://")
    if bool(config.header_key) != bool(config.header_value):
        raise invalid_arg("server_header_key and server_header_value go together")
    if config.shared_memory not in SHARED_MEMORY_MODES:
        raise invalid_arg(f"shared_memory must be one of {', '.join(SHARED_MEMORY_MODES)}")
    if config.timeout_ms <= 0:
        raise invalid_arg("server_timeout_ms must be positive")
    if not 0.0 <= config.hedge_after_fraction <= 1.0:
        raise invalid_arg(f"hedge_after_fraction must be within [0, 1], got "
                          f"{config.hedge_after_fraction:g} (0: no hedging)")
