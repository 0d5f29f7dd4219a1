"""What every endpoint holds its clients to: the loopback address unless told otherwise, the
connection limit and tritonserver's restricted APIs.

Restrictions follow tritonserver: ``<api>[,<api>...]:<key>=<value>``, repeatable, an API in one
group at most; a restricted HTTP API needs the header ``<key>: <value>`` (else 403), a
restricted gRPC protocol the metadata ``triton-grpc-protocol-<key>: <value>`` (else
UNAVAILABLE).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, field

from ..core.errors import invalid_arg

# Triton's API group names (RestrictedCategory in tritonserver's command line parser).
API_GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-"

MIB = 1 << 20
DEFAULT_ADDRESS = "127.0.0.1"  # never expose an endpoint unless told to
ADDRESS_HELP = "Address the {} endpoint binds (0.0.0.0: every interface)."
PORT_HELP = "Port of the {} endpoint (0: any free port, logged at start)."


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
            raise invalid_arg(
                f"{flag} expects '<apis>:<restricted-key>=<restricted-value>', got '{spec}'"
            )
        for api in (a.strip() for a in apis_text.split(",")):
            if api not in API_GROUPS:
                raise invalid_arg(
                    f"{flag}: unknown restricted API '{api}'; expected one of "
                    f"{', '.join(API_GROUPS)}"
                )
            if api in groups:
                raise invalid_arg(
                    f"restricted API '{api}' can not be specified in multiple "
                    f"config groups ({flag})"
                )
            groups[api] = (key.strip().lower(), value)
    return Restrictions(groups)
