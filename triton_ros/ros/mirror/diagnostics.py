"""The Kafka mirrors on /diagnostics: one status per mirrored binding.

The :class:`MirrorReporter` turns each mirror's totals (:class:`~.kafka_mirror.MirrorFigures`)
into per-period figures: results offered and delivered per second, drops by reason (totals and
in the last period), results waiting, the Kafka client's errors. Level: OK; WARN when results
were dropped or the Kafka client reported errors (brokers away) in the last period; ERROR when
the mirror's thread is not running. :func:`mirror_statuses` renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticStatus

from ..monitoring.diagnostics import ERROR, OK, WARN
from ..monitoring.messages import key_value
from .kafka_mirror import DROP_REASONS, MirrorFigures


@dataclass
class MirrorReport:
    """One binding's mirror over the last diagnostics period."""

    figures: MirrorFigures
    level: int
    message: str
    offered_rate: float
    delivered_rate: float
    drop_rate: float


class MirrorReporter:
    """Keeps the previous totals; ``report`` gives the figures of the period since."""

    def __init__(self) -> None:
        self._prev: dict[str, MirrorFigures] = {}
        self._prev_ns = 0

    def report(self, mirrors: list[MirrorFigures], now_ns: int) -> list[MirrorReport]:
        period_s = (now_ns - self._prev_ns) / 1e9 if self._prev_ns else 0.0
        self._prev_ns = now_ns
        out = []
        for f in mirrors:
            prev = self._prev.get(f.binding)
            self._prev[f.binding] = f
            offered = f.offered - (prev.offered if prev else 0)
            delivered = f.delivered - (prev.delivered if prev else 0)
            drops = {r: f.drops[r] - (prev.drops[r] if prev else 0) for r in DROP_REASONS}
            client_errors = f.client_errors - (prev.client_errors if prev else 0)
            dropped = sum(drops.values())
            kafka = f"; Kafka: {f.kafka_error}" if f.kafka_error else ""
            if not f.running:
                level, message = ERROR, "the mirror's thread is not running; results are lost"
            elif dropped:
                reasons = ", ".join(f"{r} {n}" for r, n in drops.items() if n)
                level = WARN
                message = (
                    f"{dropped} results not mirrored in the last period ({reasons})"
                    + (f"; last: {f.last_error}" if f.last_error else "")
                    + kafka
                )
            elif client_errors:
                level = WARN
                message = (
                    f"Kafka client errors in the last period, {f.pending} results waiting{kafka}"
                )
            else:
                level, message = OK, f"mirroring to {f.topic}"
            rate = (lambda n: n / period_s) if period_s > 0 else (lambda n: 0.0)
            out.append(
                MirrorReport(f, level, message, rate(offered), rate(delivered), rate(dropped))
            )
        return out


def mirror_statuses(node_name: str, reports: list[MirrorReport]) -> list[DiagnosticStatus]:
    """One diagnostic_msgs/DiagnosticStatus per mirrored binding."""
    out = []
    for r in reports:
        f = r.figures
        status = DiagnosticStatus(
            level=bytes([r.level]),
            name=f"{node_name}: kafka mirror {f.binding}",
            message=r.message,
            hardware_id=f.brokers,
        )
        status.values = [
            key_value("binding", f.binding),
            key_value("topic", f.topic),
            key_value("key", f.key_template),
            key_value("brokers", f.brokers),
            key_value("offered", f.offered),
            key_value("delivered", f.delivered),
            key_value("pending", f.pending),
            key_value("offered_rate", r.offered_rate),
            key_value("delivered_rate", r.delivered_rate),
            key_value("drop_rate", r.drop_rate),
            key_value("dropped", sum(f.drops.values())),
            *(key_value(reason, f.drops[reason]) for reason in DROP_REASONS),
            key_value("client_errors", f.client_errors),
            key_value("last_error", f.last_error),
            key_value("kafka_error", f.kafka_error),
        ]
        out.append(status)
    return out
