"""The node's health records as ROS messages: /diagnostics (rqt_runtime_monitor) and ~/status
(rqt_plot).

:func:`diagnostic_array` renders the reporter's records
(:mod:`~triton_ros.ros.monitoring.diagnostics`) as one ``diagnostic_msgs/DiagnosticStatus`` per
model and per binding; :func:`status_message` the same figures as
``triton_ros_interfaces/InferenceStatus``; a binding's counters are :data:`~.counters.REPORTED`,
by name in both. :func:`key_value` is the one way a figure becomes a diagnostic value (floats
with three decimals).
"""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from triton_ros_interfaces.msg import BindingStatus, InferenceStatus, ModelStatus

from .counters import REPORTED
from .diagnostics import BindingHealth, ModelHealth


def key_value(key: str, value) -> KeyValue:
    """A figure as a diagnostic value."""
    if isinstance(value, float):
        value = f"{value:.3f}"
    return KeyValue(key=key, value=str(value))


def diagnostic_array(
    stamp, node_name: str, models: list[ModelHealth], bindings: list[BindingHealth]
):
    """One DiagnosticStatus per model and per binding."""
    array = DiagnosticArray()
    array.header.stamp = stamp
    for m in models:
        status = DiagnosticStatus(
            level=bytes([m.level]),
            name=f"{node_name}: model {m.name}",
            message=m.message,
            hardware_id=node_name,
        )
        status.values = [
            key_value("state", m.state),
            key_value("version", m.version),
            key_value("queue_depth", m.queue_depth),
            key_value("input_rate", m.input_rate),
            key_value("output_rate", m.output_rate),
            key_value("execution_rate", m.execution_rate),
            key_value("mean_batch_size", m.mean_batch_size),
            key_value("mean_batch_size_total", m.mean_batch_size_total),
            key_value("failures", m.failures),
            key_value("failures_total", m.failures_total),
            key_value("queue_ms", m.queue_ms),
            key_value("compute_ms", m.compute_ms),
            key_value("latency_p50_ms", m.latency_p50_ms),
            key_value("latency_p99_ms", m.latency_p99_ms),
        ]
        array.status.append(status)
    for b in bindings:
        status = DiagnosticStatus(
            level=bytes([b.level]),
            name=f"{node_name}: binding {b.name}",
            message=b.message,
            hardware_id=node_name,
        )
        status.values = (
            [
                key_value("model", b.model),
                key_value("sources", b.source_count),
                key_value("in_flight", b.in_flight),
                key_value("input_rate", b.input_rate),
                key_value("output_rate", b.output_rate),
                key_value("drop_rate", b.drop_rate),
                *(key_value(name, getattr(b, name)) for name in REPORTED),
                key_value("model_state", b.state),
                key_value("last_error", b.last_error),
                key_value("last_error_age_s", b.last_error_age_s),
                key_value("latency_p50_ms", b.latency_p50_ms),
                key_value("latency_p99_ms", b.latency_p99_ms),
                key_value("inference_p50_ms", b.inference_p50_ms),
                key_value("inference_p99_ms", b.inference_p99_ms),
                key_value("executor_lag_p50_ms", b.executor_lag_p50_ms),
                key_value("executor_lag_p99_ms", b.executor_lag_p99_ms),
            ]
            + [
                key_value(
                    s.topic,
                    f"in {s.input_rate:.1f}/s, out {s.output_rate:.1f}/s, dropped "
                    f"{s.dropped}"
                    + (f", unmatched {s.unmatched} ({s.unmatched_by_input})" if s.unmatched else "")
                    + f" -> {s.output_topic}",
                )
                for s in b.sources
            ]
            + [
                key_value(f"last_error {topic}", f"{text} ({age:.1f} s ago)")
                for topic, text, age in b.topic_errors
            ]
        )
        array.status.append(status)
    return array


def status_message(stamp, models: list[ModelHealth], bindings: list[BindingHealth]):
    """The same figures as triton_ros_interfaces/InferenceStatus, for rqt_plot."""
    msg = InferenceStatus()
    msg.header.stamp = stamp
    msg.models = [
        ModelStatus(
            name=m.name,
            version=m.version,
            state=m.state,
            level=m.level,
            queue_depth=m.queue_depth,
            input_rate=m.input_rate,
            output_rate=m.output_rate,
            execution_rate=m.execution_rate,
            mean_batch_size=m.mean_batch_size,
            failures=m.failures,
            failures_total=m.failures_total,
            latency_p50_ms=m.latency_p50_ms,
            latency_p99_ms=m.latency_p99_ms,
        )
        for m in models
    ]
    msg.bindings = [
        BindingStatus(
            name=b.name,
            model=b.model,
            level=b.level,
            source_count=b.source_count,
            in_flight=b.in_flight,
            input_rate=b.input_rate,
            output_rate=b.output_rate,
            drop_rate=b.drop_rate,
            message=b.message,
            last_error=b.last_error,
            last_error_age_s=b.last_error_age_s,
            latency_p50_ms=b.latency_p50_ms,
            latency_p99_ms=b.latency_p99_ms,
            inference_p50_ms=b.inference_p50_ms,
            inference_p99_ms=b.inference_p99_ms,
            **{name: getattr(b, name) for name in REPORTED},
        )
        for b in bindings
    ]
    return msg
