"""The node's health records as ROS messages: /diagnostics (rqt_runtime_monitor) and ~/status
(rqt_plot).

:func:`diagnostic_array` renders the reporter's records
(:mod:`~triton_ros.ros.monitoring.diagnostics`) as one ``diagnostic_msgs/DiagnosticStatus`` per
model and per binding; :func:`status_message` the same figures as
``triton_ros_interfaces/InferenceStatus``. :func:`key_value` is the one way a figure becomes a
diagnostic value (floats with three decimals).
"""
from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from triton_ros_interfaces.msg import BindingStatus, InferenceStatus, ModelStatus

from .diagnostics import BindingHealth, ModelHealth

def key_value(key: str, value) -> KeyValue:
    """A figure as a diagnostic value."""
    if isinstance(value, float):
        value = f"{value:.3f}"
    return KeyValue(key=key, value=str(value))


def diagnostic_array(stamp, node_name: str, models: list[ModelHealth],
                     bindings: list[BindingHealth]):
    """One DiagnosticStatus per model and per binding."""
    array = DiagnosticArray()
    array.header.stamp = stamp
    for m in models:
        status = DiagnosticStatus(level=bytes([m.level]), name=f"{node_name}: model {m.name}",
                                  message=m.message, hardware_id=node_name)
        status.values = [
            key_value("state", m.state), key_value("version", m.version),
            key_value("queue_depth", m.queue_depth), key_value("input_rate", m.input_rate),
            key_value("output_rate", m.output_rate), key_value("execution_rate", m.execution_rate),
            key_value("mean_batch_size", m.mean_batch_size),
            key_value("mean_batch_size_total", m.mean_batch_size_total),
            key_value("failures", m.failures), key_value("failures_total", m.failures_total),
            key_value("queue_ms", m.queue_ms), key_value("compute_ms", m.compute_ms),
            key_value("latency_p50_ms", m.latency_p50_ms),
            key_value("latency_p99_ms", m.latency_p99_ms),
        ]
        array.status.append(status)
    for b in bindings:
        status = DiagnosticStatus(level=bytes([b.level]), name=f"{node_name}: binding {b.name}",
                                  message=b.message, hardware_id=node_name)
        status.values = [
            key_value("model", b.model), key_value("sources", b.source_count),
            key_value("in_flight", b.in_flight), key_value("input_rate", b.input_rate),
            key_value("output_rate", b.output_rate), key_value("drop_rate", b.drop_rate),
            key_value("received", b.received), key_value("published", b.published),
            key_value("dropped_stale", b.dropped_stale),
            key_value("dropped_superseded", b.dropped_superseded),
            key_value("dropped_malformed", b.dropped_malformed),
            key_value("dropped_unavailable", b.dropped_unavailable),
            key_value("stamped_ahead", b.stamped_ahead), key_value("hedged", b.hedged),
            key_value("hedged_published", b.hedged_published),
            key_value("hedged_lost", b.hedged_lost), key_value("failed", b.failed),
            key_value("failed_plan", b.failed_plan),
            key_value("failed_preprocess", b.failed_preprocess),
            key_value("failed_inference", b.failed_inference),
            key_value("failed_decode", b.failed_decode),
            key_value("failed_publish", b.failed_publish),
            key_value("failed_internal", b.failed_internal),
            key_value("unmatched_too_old", b.unmatched_too_old),
            key_value("unmatched_no_partner", b.unmatched_no_partner),
            key_value("unmatched_queue_overflow", b.unmatched_queue_overflow),
            key_value("model_state", b.state),
            key_value("last_error", b.last_error),
            key_value("last_error_age_s", b.last_error_age_s),
            key_value("latency_p50_ms", b.latency_p50_ms),
            key_value("latency_p99_ms", b.latency_p99_ms),
            key_value("inference_p50_ms", b.inference_p50_ms),
            key_value("inference_p99_ms", b.inference_p99_ms),
            key_value("executor_lag_p50_ms", b.executor_lag_p50_ms),
            key_value("executor_lag_p99_ms", b.executor_lag_p99_ms),
        ] + [key_value(s.topic, f"in {s.input_rate:.1f}/s, out {s.output_rate:.1f}/s, dropped "
                          f"{s.dropped}"
                          + (f", unmatched {s.unmatched} ({s.unmatched_by_input})"
                             if s.unmatched else "")
                          + f" -> {s.output_topic}") for s in b.sources]
        array.status.append(status)
    return array


def status_message(stamp, models: list[ModelHealth], bindings: list[BindingHealth]):
    """The same figures as triton_ros_interfaces/InferenceStatus, for rqt_plot."""
    msg = InferenceStatus()
    msg.header.stamp = stamp
    msg.models = [ModelStatus(
        name=m.name, version=m.version, state=m.state, level=m.level, queue_depth=m.queue_depth,
        input_rate=m.input_rate, output_rate=m.output_rate, execution_rate=m.execution_rate,
        mean_batch_size=m.mean_batch_size, failures=m.failures, failures_total=m.failures_total,
        latency_p50_ms=m.latency_p50_ms, latency_p99_ms=m.latency_p99_ms) for m in models]
    msg.bindings = [BindingStatus(
        name=b.name, model=b.model, level=b.level, source_count=b.source_count,
        in_flight=b.in_flight, input_rate=b.input_rate, output_rate=b.output_rate,
        drop_rate=b.drop_rate, dropped_stale=b.dropped_stale,
        dropped_superseded=b.dropped_superseded, dropped_malformed=b.dropped_malformed,
        dropped_unavailable=b.dropped_unavailable, failed=b.failed,
        failed_plan=b.failed_plan, failed_preprocess=b.failed_preprocess,
        failed_inference=b.failed_inference, failed_decode=b.failed_decode,
        failed_publish=b.failed_publish, failed_internal=b.failed_internal,
        unmatched_too_old=b.unmatched_too_old, unmatched_no_partner=b.unmatched_no_partner,
        unmatched_queue_overflow=b.unmatched_queue_overflow,
        message=b.message, last_error=b.last_error, last_error_age_s=b.last_error_age_s,
        received=b.received,
        published=b.published, hedged=b.hedged, hedged_published=b.hedged_published,
        hedged_lost=b.hedged_lost, latency_p50_ms=b.latency_p50_ms,
        latency_p99_ms=b.latency_p99_ms, inference_p50_ms=b.inference_p50_ms,
        inference_p99_ms=b.inference_p99_ms) for b in bindings]
    return msg
