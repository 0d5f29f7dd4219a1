"""Per-endpoint diagnostics of the remote models: one ``/diagnostics`` status per endpoint.

A status is named ``<node>: binding <binding> remote <model> <url>``: one binding's endpoint,
so that two bindings on the same URL (the same model, or another) are two statuses, and every
name in one DiagnosticArray is unique (tools that key statuses by name, such as
diagnostic_aggregator and rqt_robot_monitor, would flip between two of the same name). It sorts
next to the binding's own status (``<node>: binding <binding>``).

The :class:`EndpointReporter` turns each endpoint's growing counters
(:class:`~triton_ros.ros.targets.remote.pool.EndpointHealth`) into per-period figures: state and
level (OK when up; ERROR when mismatched or when no endpoint of the model is up; WARN when down
while another serves), requests per second and in total, round-trip percentiles, errors by kind,
and whether inputs go through shared memory. :func:`endpoint_statuses` renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticStatus

from ...monitoring.diagnostics import ERROR, OK, WARN
from ...monitoring.latency import percentiles_ms
from ...monitoring.messages import key_value
from .errors import ERROR_KINDS
from .model import RemoteModel
from .pool import MISMATCH, UP


@dataclass
class EndpointReport:
    """One endpoint over the last diagnostics period."""

    binding: str
    model: str
    version: int
    url: str
    state: str
    reason: str
    level: int  # 0 OK, 1 WARN, 2 ERROR (diagnostic_msgs levels)
    outstanding: int
    requests_per_s: float
    requests_total: int
    rtt_p50_ms: float
    rtt_p99_ms: float
    errors: dict[str, int]  # totals by kind
    shared_memory: bool


class EndpointReporter:
    """Turns the endpoints' growing counters into per-period figures (keeps the previous ones)."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str, str], int] = {}
        self._prev_ns = 0

    def report(self, models: list[RemoteModel], now_ns: int) -> list[EndpointReport]:
        period_s = (now_ns - self._prev_ns) / 1e9 if self._prev_ns else 0.0
        self._prev_ns = now_ns
        out = []
        for model in models:
            healths = model.endpoints()
            any_up = any(h.state == UP for h in healths)
            for h in healths:
                key = (model.binding, model.name, h.url)
                delta = h.requests - self._prev.get(key, 0)
                self._prev[key] = h.requests
                p50, p99 = percentiles_ms(h.latency)
                if h.state == UP:
                    level = OK
                elif h.state == MISMATCH or not any_up:
                    level = ERROR
                else:
                    level = WARN
                out.append(
                    EndpointReport(
                        model.binding,
                        model.name,
                        model.version,
                        h.url,
                        h.state,
                        h.reason,
                        level,
                        h.outstanding,
                        delta / period_s if period_s > 0 else 0.0,
                        h.requests,
                        p50,
                        p99,
                        {kind: h.errors.get(kind, 0) for kind in ERROR_KINDS},
                        h.shared_memory,
                    )
                )
        return out


def endpoint_status_name(node_name: str, binding: str, model: str, url: str) -> str:
    """The /diagnostics name of one binding's endpoint (module docstring)."""
    return f"{node_name}: binding {binding} remote {model} {url}"


def endpoint_statuses(node_name: str, reports: list[EndpointReport]) -> list[DiagnosticStatus]:
    """One diagnostic_msgs/DiagnosticStatus per endpoint of each remote model."""
    out = []
    for r in reports:
        message = r.state if r.state == UP else f"{r.state}: {r.reason}"
        status = DiagnosticStatus(
            level=bytes([r.level]),
            name=endpoint_status_name(node_name, r.binding, r.model, r.url),
            message=message,
            hardware_id=r.url,
        )
        status.values = [
            key_value("binding", r.binding),
            key_value("model", r.model),
            key_value("version", r.version),
            key_value("endpoint", r.url),
            key_value("state", r.state),
            key_value("outstanding", r.outstanding),
            key_value("requests_per_s", r.requests_per_s),
            key_value("requests_total", r.requests_total),
            key_value("rtt_p50_ms", r.rtt_p50_ms),
            key_value("rtt_p99_ms", r.rtt_p99_ms),
            key_value("shared_memory", r.shared_memory),
        ] + [key_value(f"errors_{kind}", n) for kind, n in r.errors.items()]
        out.append(status)
    return out
