"""A binding: input topics -> one model input -> one output topic per input topic.

A :class:`Binding` owns its sources (one per input topic: explicit ``topics`` bound at start,
and topics matching ``topic_patterns`` bound and unbound as the graph changes), their
subscriptions and publishers. It talks to its model only through a
:class:`~triton_ros.ros.targets.spec.ModelTarget` (the embedded core's model of any kind, or a
remote one), so ONNX, Python and ensemble models are fed and read alike, and to its messages
only through its input kind and output format (:mod:`~triton_ros.ros.codec`). Each frame goes
through:

1. the input callback (executor thread): the serialized message read without a copy of its
   pixels (the input kind's reader; typed messages with ``serialized_images`` false), checked
   (malformed inputs are counted, logged and dropped) and the source's flow control
   (:class:`~triton_ros.ros.binding.source.Source`);
2. still in the callback (node parameter ``preprocess_in_callback``, the default: the pixels
   were just copied in by this thread and are still in the CPU's cache, where a worker would
   read them cold after a hand-off, ``bench/RESULTS-ros.md``), or on a worker thread:
   encoding into the model's input (for images: preprocessing) and ``target.infer``, which only
   queues - one request per frame, so the model's dynamic batcher batches frames of every
   source (and gRPC requests) together;
3. a worker thread again when the response arrives: decoding by the output format
   (detections, classification or tensors), publication with the input's header, then the
   source's next waiting frame.

How to encode and decode is resolved once per serving model version
(:class:`~triton_ros.ros.binding.plan.ModelPlan`, built from the target's
:class:`~triton_ros.ros.targets.spec.ModelSpec`), so a reloaded model with another input size is
picked up at its first frame.

No failure on a frame's path is silent: whatever goes wrong (the plan, preprocessing, inference,
decoding, publishing, or an unexpected exception anywhere) is counted by reason
(:data:`~triton_ros.ros.monitoring.counters.FAIL_REASONS`), logged at once and then throttled
with a count (:class:`~triton_ros.ros.monitoring.failures.FailureLog`), and shown on the
binding's ``/diagnostics`` status with the last error text. The line is logged (and the last
error set) before the count moves, so whoever sees a count in ``/diagnostics`` or ``~/status``
finds its cause already there. The source's in-flight slot is always released, so the next
frame runs. Stale frames are explained (age, topic, likely cause) the same way, as warnings,
just after the source counts them (it decides staleness under its lock and logs outside it).
The binding's figures go to the diagnostics reporter once a period (:meth:`Binding.figures`).
"""
from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Executor, Future
from typing import Any, Callable

from rclpy.clock import ClockType
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from ...core.errors import StatusCode, TritonRosError, as_triton_error
from ..codec.base import FrameOutputs, MalformedInput
from ..codec.registry import input_kind, output_format
from ..monitoring.diagnostics import BindingFigures, SourceFigures
from ..monitoring.executor_lag import ExecutorLag
from ..monitoring.failures import (BACKLOG_CAUSE, NO_BACKLOG, STALE_CAUSES, WAITED_CAUSE,
                                   FailureLog)
from ..monitoring.latency import LatencyWindow
from ..monitoring.counters import SourceCounters
from ..parameters import BindingConfig
from ..targets.spec import ModelSpec, ModelTarget, TargetState
from .plan import ModelPlan, build_plan
from .source import Frame, Source
from .topic_discovery import TopicMatcher

# Inference errors that mean "the model is not serving now" (dropped_unavailable, a warning),
# not "this frame failed" (failed_inference, an error).
UNAVAILABLE_CODES = (StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND)
# A traced frame's own activities around the core's (docs/tracing.md): received by the input
# callback, preprocessed (submitted), result decoding started, message published.
TRACE_RECEIVED, TRACE_PREPROCESS_END, TRACE_PUBLISH_START, TRACE_PUBLISH_END = (
    "ROS_FRAME_RECEIVED", "ROS_PREPROCESS_END", "ROS_PUBLISH_START", "ROS_PUBLISH_END")


def stale_cause(age_ns: int, backlog_ns: int, max_age_ms: int, waited: bool) -> tuple[str, str]:
    """Why a frame went stale: (kind, the cause as told). ``waited``: it arrived fresh and aged
    in the source's slot, behind frames in the model. Else it arrived stale: if the node's own
    backlog (``backlog_ns``, how far behind its executor is: monitoring/executor_lag.py)
    explains its age (without it the frame was younger than max_age_ms), the node is behind;
    if not, it was already old when it reached the node (a publisher's clock, a bag without
    --clock). Not measured (-1): both are possible, and said so."""
    if waited:
        return "waited", WAITED_CAUSE
    if backlog_ns < 0:
        return "arrived", STALE_CAUSES + NO_BACKLOG
    reached_ns = age_ns - backlog_ns           # its age without the node's own backlog
    if reached_ns <= max_age_ms * 1_000_000:
        return "backlog", (f"{BACKLOG_CAUSE} (the node was {backlog_ns / 1e6:.0f} ms behind; "
                           f"without that the frame was {reached_ns / 1e6:.0f} ms old)")
    return "arrived", (f"it was {reached_ns / 1e9:.3f} s old even without the node's own "
                       f"backlog ({backlog_ns / 1e6:.0f} ms): {STALE_CAUSES}")


class Binding:
    """Runtime of one binding inside the node."""

    def __init__(self, config: BindingConfig, *, node, target: ModelTarget, workers: Executor,
                 callback_group, model_latency: LatencyWindow | None = None,
                 serialized_images: bool = True, preprocess_in_callback: bool = True,
                 executor_lag: ExecutorLag | None = None) -> None:
        self.config = config
        # How far behind the node's executor is (None: not measured): explains stale frames.
        self._lag = executor_lag
        self._node = node
        self.target = target
        self._workers = workers
        # Preprocess in the image callback: the frame was just copied in by this thread, so its
        # pixels are still in the cache (on a worker they arrive cold, after a hand-off).
        self._inline = preprocess_in_callback
        # The model's latency as this node's frames see it (request -> response), for its
        # /diagnostics record; shared by the bindings of one model.
        self._model_latency = model_latency if model_latency is not None else LatencyWindow()
        self._group = callback_group
        self._log = node.get_logger()
        self._input = input_kind(config.input_kind)
        self._output = output_format(config.format)
        self._matcher = (TopicMatcher(config.topic_patterns, self._input.ros_type)
                         if config.topic_patterns else None)
        reliability = {"best_effort": ReliabilityPolicy.BEST_EFFORT,
                       "reliable": ReliabilityPolicy.RELIABLE}
        self._input_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.input_depth,
                                     reliability=reliability[config.input_reliability])
        self._output_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.output_depth,
                                      reliability=reliability[config.output_reliability])
        self._sources: dict[str, Source] = {}
        self._sources_lock = threading.Lock()
        self.retired = SourceCounters()        # totals of unbound sources, kept for the totals
        self._plan: ModelPlan | None = None
        self._plan_error: tuple[ModelSpec, TritonRosError] | None = None
        self._plan_lock = threading.Lock()
        self.failures = FailureLog(self._log)
        self._stopped = False
        # Serialized subscriptions, read without a copy of the pixels (codec/serialized_image.py)
        self._reader: Callable[[Any], Any] | None = None
        if serialized_images:
            try:
                self._reader = self._input.reader()
            except ImportError as exc:         # rosbags missing (an apt-installed ROS 2)
                self._log.warning(f"binding '{config.name}': serialized_images is true but "
                                  f"{exc}; images arrive as typed messages (pip install "
                                  f"rosbags, or set serialized_images false)")

    # ---------------------------------------------------------------- sources
    def start(self) -> None:
        for topic in self.config.topics:
            self.add_source(topic, discovered=False)

    def sources(self) -> list[Source]:
        with self._sources_lock:
            return list(self._sources.values())

    def output_topic(self, topic: str) -> str:
        namespace, _, basename = topic.rpartition("/")
        return self.config.output_topic_template.format(
            namespace=namespace, topic=topic, basename=basename,
            output_name=self.config.output_name, binding=self.config.name,
            model=self.config.model)

    def add_source(self, topic: str, *, discovered: bool) -> Source | None:
        with self._sources_lock:
            if topic in self._sources or self._stopped:
                return None
            output = self.output_topic(topic)
            if output == topic:
                self._log.error(f"binding '{self.config.name}': output topic of '{topic}' is the "
                                f"input topic itself; check output_topic_template")
                return None
            source = Source(topic, output, max_in_flight=self.config.max_in_flight,
                            max_age_ms=self.config.max_age_ms, discovered=discovered,
                            on_stale=self._on_stale, hedge_after_ms=self._hedge_after_ms(),
                            can_hedge=getattr(self.target, "can_hedge", None))
            source.last_seen_publisher_ns = time.monotonic_ns()
            source.publisher = self._node.create_publisher(self._output.message_class(), output,
                                                           self._output_qos)
            source.output_topic = getattr(source.publisher, "topic_name", output)
            source.subscription = self._node.create_subscription(
                self._input.message_class(), topic, lambda msg, s=source: self._on_input(s, msg),
                self._input_qos,
                callback_group=self._group, raw=self._reader is not None)
            self._sources[topic] = source
        how = "found" if discovered else "bound"
        self._log.info(f"binding '{self.config.name}': {how} {topic} -> {source.output_topic} "
                       f"(model '{self.config.model}')")
        return source

    def _hedge_after_ms(self) -> float:
        """When a source hedges (source.py): remote targets of two endpoints or more only."""
        remote = self.config.remote
        if remote is None or len(remote.urls) < 2:
            return 0.0
        return remote.hedge_after_fraction * remote.timeout_ms

    def remove_source(self, topic: str) -> None:
        with self._sources_lock:
            source = self._sources.pop(topic, None)
        if source is None:
            return
        self._node.destroy_subscription(source.subscription)
        self._node.destroy_publisher(source.publisher)
        counters, _, _ = source.snapshot()
        with self._sources_lock:
            self.retired.add(counters)
        self._log.info(f"binding '{self.config.name}': {topic} has had no publisher for "
                       f"{self.config.forget_after_s:g} s; unbound (received {counters.received}, "
                       f"published {counters.published}, dropped {counters.dropped})")

    def discover(self, topics_and_types, publisher_count: Callable[[str], int]) -> None:
        """Bind new topics matching the patterns; unbind found topics whose robot went away."""
        if self._matcher is None or self._stopped:
            return
        now = time.monotonic_ns()
        for topic in self._matcher.select(topics_and_types):
            if topic not in self._sources:
                self.add_source(topic, discovered=True)
        forget_ns = int(self.config.forget_after_s * 1e9)
        for source in self.sources():
            if not source.discovered:
                continue
            if publisher_count(source.topic) > 0:
                source.last_seen_publisher_ns = now
            elif forget_ns and now - source.last_seen_publisher_ns > forget_ns:
                self.remove_source(source.topic)

    def stop(self) -> None:
        """Take no new frames; frames in the model still finish and publish."""
        self._stopped = True

    def in_flight(self) -> int:
        """Frames of this binding in its model now."""
        return sum(source.snapshot()[1] for source in self.sources())

    def figures(self) -> BindingFigures:
        """This binding's figures for the diagnostics reporter. Drains the latency windows: the
        node calls it once per diagnostics period."""
        now = time.monotonic_ns()
        sources = []
        for source in self.sources():
            counters, in_flight, _ = source.snapshot()
            sources.append(SourceFigures(source.topic, source.output_topic, counters, in_flight,
                                         source.stalled_for_ns(now), source.e2e_latency.drain(),
                                         source.infer_latency.drain()))
        with self._sources_lock:
            retired = self.retired.copy()
        try:
            state = self.target.state()
        except Exception as exc:               # a target that cannot even say: not ready
            state = TargetState(False, "UNKNOWN", f"{type(exc).__name__}: {exc}")
        config = self.config
        return BindingFigures(
            name=config.name, model=config.model, location=self.target.location,
            max_age_ms=config.max_age_ms, inputs=config.topics + config.topic_patterns,
            sources=tuple(sources), retired=retired, last_error=self.failures.last,
            last_stale=self.failures.last_stale, model_ready=state.ready,
            model_state=state.state, model_reason=state.reason)

    # ---------------------------------------------------------------- per frame
    def _now_ns(self) -> int:
        """Now on the node's clock: ROS time (the /clock topic) with use_sim_time, else the
        system clock; header stamps are compared with it."""
        return self._node.get_clock().now().nanoseconds

    def _on_input(self, source: Source, msg) -> None:
        if self._stopped:
            return
        frame = None
        try:
            now = self._now_ns()
            try:
                if self._reader is not None:
                    msg = self._reader(msg)
                self._input.check(msg)
            except MalformedInput as exc:
                header = getattr(msg, "header", None)     # None: the bytes did not deserialize
                which = "" if header is None else f" (frame_id '{header.frame_id}')"
                self.failures.report(
                    f"malformed:{source.topic}", "dropped_malformed",
                    f"binding '{self.config.name}': malformed {self._input.name} on "
                    f"{source.topic}{which}: "
                    f"{exc}; dropped (counted as dropped_malformed in /diagnostics)", level="warn")
                source.count_malformed()
                return
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            frame = source.offer(Frame(msg, stamp, now, time.monotonic_ns()), now)
            if frame is not None:
                start, frame = frame, None     # _run / _submit own its slot from here
                if self._inline:
                    self._run(source, start)
                else:
                    self._submit(self._run, source, start)
        except Exception as exc:               # never lose a frame (or the callback) silently
            self._fail(source, "failed_internal", f"handling a frame of {source.topic}", exc)
            if frame is not None:              # it holds an in-flight slot: hand it on
                self._submit(self._run, source, self._finish_source(source))

    def _on_stale(self, source: Source, frame: Frame, age_ns: int, waited: bool) -> None:
        clock = self._clock_name()
        head = f"a frame of {source.topic} (frame_id '{frame.msg.header.frame_id}')"
        if age_ns < 0:                         # stamped ahead: published, but the clocks differ
            what = f"{head} was stamped {-age_ns / 1e9:.3f} s ahead of this node's {clock} clock"
            self.failures.report(
                f"ahead:{source.topic}", "stamped_ahead",
                f"binding '{self.config.name}': {what} (more than max_age_ms "
                f"{self.config.max_age_ms}); processed, but ages and latencies of this topic are "
                f"wrong. Likely cause: {STALE_CAUSES}", level="warn",
                summary=f"{what}. Likely cause: {STALE_CAUSES}")
            return
        what = f"{head} was {age_ns / 1e9:.3f} s old on this node's {clock} clock"
        backlog = self._lag.behind_ns(time.monotonic_ns()) if self._lag is not None else -1
        kind, cause = stale_cause(age_ns, backlog, self.config.max_age_ms, waited)
        self.failures.report(
            f"stale:{source.topic}:{kind}", "dropped_stale",
            f"binding '{self.config.name}': {what}, over max_age_ms {self.config.max_age_ms}; "
            f"dropped as stale. Likely cause: {cause}", level="warn",
            summary=f"{what}. Likely cause: {cause}")

    def _clock_name(self) -> str:
        try:
            clock = self._node.get_clock()
            if clock.clock_type == ClockType.ROS_TIME and clock.ros_time_is_active:
                return "ROS (/clock, use_sim_time)"
        except Exception:                      # only for the message
            pass
        return "system"

    def _submit(self, fn, source: Source, *args) -> None:
        """Run ``fn(source, *args)`` on a worker. If that is impossible (the workers are shut
        down: the node is stopping), the frame ``fn`` would carry is counted and its slot freed."""
        try:
            self._workers.submit(fn, source, *args).add_done_callback(self._job_done)
        except Exception as exc:
            if fn is self._run and (not args or args[0] is None):
                return                         # nothing holds a slot
            trace = getattr(args[-1], "trace", None) if fn is self._finish_frame else None
            if trace is not None:              # a traced frame: its trace is written all the same
                trace.release()
            if self._stopped:
                source.count("dropped_unavailable")
            else:
                self._fail(source, "failed_internal", f"queueing a frame of {source.topic}", exc)
            self._finish_quietly(source)

    def _job_done(self, job: Future) -> None:
        # Worker jobs handle their own failures; anything escaping is a defect of ours, and a
        # worker's future would swallow it: say so.
        if job.cancelled():
            return
        exc = job.exception()
        if exc is not None:
            self.failures.report("job", "failed_internal",
                                 f"binding '{self.config.name}': a worker job failed: "
                                 f"{type(exc).__name__}: {exc}")

    def _finish_quietly(self, source: Source) -> None:
        """Release the slot without starting the waiting frame (the node is stopping)."""
        nxt = self._finish_source(source)
        while nxt is not None:
            source.count("dropped_unavailable")
            nxt = self._finish_source(source)

    def _finish_source(self, source: Source) -> Frame | None:
        try:
            return source.finish(self._now_ns())
        except Exception:                      # the clock failed (shutdown): release anyway
            return source.finish(0)

    def _run(self, source: Source, frame: Frame | None) -> None:
        """Start frames of a source until one is in the model (or none waits)."""
        while frame is not None:
            try:
                frame = self._start_frame(source, frame)
            except Exception as exc:           # a defect of ours: count, log, keep serving
                self._fail(source, "failed_internal", f"starting a frame of {source.topic}", exc)
                frame = self._finish_source(source)

    def _start_frame(self, source: Source, frame: Frame) -> Frame | None:
        """Preprocess and queue one frame; return the next frame if this one ended here."""
        try:
            plan = self.plan()
        except TritonRosError as exc:
            if exc.code in UNAVAILABLE_CODES:
                self.failures.report(f"plan:{exc.code.name}", "dropped_unavailable",
                                     f"binding '{self.config.name}': {exc.message}; frames are "
                                     f"dropped until the model is ready", level="warn")
                source.count("dropped_unavailable")
            else:
                self.failures.report(f"plan:{exc.code.name}", "failed_plan",
                                     f"binding '{self.config.name}': cannot feed model "
                                     f"'{self.config.model}': {exc.message}")
                source.count("failed_plan")
            return self._finish_source(source)
        try:
            tensor, placement = plan.encode(frame.msg)
        except Exception as exc:               # a frame's fault: count it, keep serving
            self._fail(source, "failed_preprocess", f"preprocessing a frame of {source.topic}",
                       exc)
            return self._finish_source(source)
        started = time.monotonic_ns()
        batched = plan.batching or plan.leading_one
        future = self.target.infer({plan.input_name: tensor[None] if batched else tensor},
                                   outputs=plan.output.requested, priority=self.config.priority,
                                   timeout_us=self.config.timeout_us)
        future.add_done_callback(
            lambda f: self._submit(self._finish_frame, source, frame, plan, placement, started,
                                   f))
        return None

    def _finish_frame(self, source: Source, frame: Frame, plan: ModelPlan, placement: Any,
                      started: int, future: Future) -> None:
        published = False
        trace = getattr(future, "trace", None)     # a traced frame (targets/local.py)
        try:
            published = self._complete(source, frame, plan, placement, started, future, trace)
        except Exception as exc:               # a defect of ours: count, log, keep serving
            self._fail(source, "failed_internal", f"finishing a frame of {source.topic}", exc)
        finally:
            if trace is not None:
                self._end_trace(trace, frame, started)
            if frame.hedged:
                self._hedged(source, frame, published)                               # whatever happened, the slot goes on
            self._run(source, self._finish_source(source))

    @staticmethod
    def _end_trace(trace, frame: Frame, started: int) -> None:
        """Add the frame's receipt and the end of its preprocessing (``started``: when it was
        submitted) to its request's trace and hand the trace back to the core's tracer (written
        once complete); a trace never fails a frame."""
        try:
            if frame.received_mono_ns:
                trace.capture(TRACE_RECEIVED, frame.received_mono_ns)
            trace.capture(TRACE_PREPROCESS_END, started)
        finally:
            trace.release()

    def _hedged(self, source: Source, frame: Frame, published: bool) -> None:
        """Count a hedged frame's outcome, and say (throttled) that hedging happens."""
        source.count("hedged_published" if published else "hedged_lost")
        remote = self.config.remote
        self.failures.report(
            f"hedge:{source.topic}", "hedged",
            f"binding '{self.config.name}': frames of {source.topic} are hedged: the frame in "
            f"flight has waited over hedge_after_fraction {remote.hedge_after_fraction:g} of "
            f"server_timeout_ms {remote.timeout_ms}, so newer frames go to another endpoint "
            f"(this one {'published' if published else 'lost'}; counted as hedged, "
            f"hedged_published, hedged_lost in /diagnostics)", level="warn", record=False)

    def _complete(self, source: Source, frame: Frame, plan: ModelPlan, placement: Any,
                  started: int, future: Future, trace=None) -> bool:
        """Decode and publish a frame's result (True: published); count whatever else.
        ``trace``: the request's trace, which gets the publication's start and end."""
        try:
            response = future.result()
        except BaseException as exc:           # the future's failure, whatever its type
            error = as_triton_error(exc)
            if error.code in UNAVAILABLE_CODES:
                self.failures.report(f"infer:{error.code.name}", "dropped_unavailable",
                                     f"binding '{self.config.name}': model '{self.config.model}' "
                                     f"did not serve a frame of {source.topic}: {error.message}",
                                     level="warn")
                source.count("dropped_unavailable")
            else:
                self.failures.report(f"infer:{error.code.name}", "failed_inference",
                                     f"binding '{self.config.name}': inference of a frame of "
                                     f"{source.topic} on model '{self.config.model}' failed "
                                     f"({error.code.name}): {error.message}")
                source.count("failed_inference")
            return False
        elapsed = time.monotonic_ns() - started
        source.infer_latency.add(elapsed)
        self._model_latency.add(elapsed)
        if trace is not None:
            trace.capture(TRACE_PUBLISH_START)
        try:
            msg = self._decode(plan, placement, frame, response)
        except Exception as exc:               # the outputs do not decode as configured
            self._fail(source, "failed_decode", f"decoding the result of a frame of "
                       f"{source.topic} ({self.config.format})", exc)
            return False
        try:
            source.publisher.publish(msg)
        except Exception as exc:
            self._fail(source, "failed_publish", f"publishing on {source.output_topic}", exc)
            return False
        if trace is not None:
            trace.capture(TRACE_PUBLISH_END)
        source.count("published")
        latency = self._now_ns() - (frame.stamp_ns or frame.received_ns)
        if latency >= 0:                       # a stamp ahead of our clock has no latency to tell
            source.e2e_latency.add(latency)
        return True

    def _decode(self, plan: ModelPlan, placement: Any, frame: Frame, response):
        outputs = {name: (value[0] if plan.batching else value)
                   for name, value in response.outputs.items()}
        return self._output.decode(plan.output, FrameOutputs(
            frame.msg.header, outputs, plan.batching, response.model_name, response.model_version,
            placement))

    def _fail(self, source: Source, reason: str, what: str, exc: BaseException) -> None:
        """Count a frame's failure by reason and log it (throttled), with its cause. Never
        raises: it runs on the paths that must release the frame's slot afterwards."""
        try:
            cause = (exc.message if isinstance(exc, TritonRosError)
                     else f"{type(exc).__name__}: {exc}")
            self.failures.report(reason, reason,
                                 f"binding '{self.config.name}': {what} failed: {cause}")
        except Exception as inner:             # last resort: the cause must not be lost
            print(f"binding '{self.config.name}': {what} failed: {exc!r}; reporting it failed: "
                  f"{inner!r}", file=sys.stderr, flush=True)
        try:
            source.count(reason)               # after the line: see the module docstring
        except Exception as inner:
            print(f"binding '{self.config.name}': counting {reason} failed: {inner!r}",
                  file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- model plan
    def plan(self) -> ModelPlan:
        """The plan for the model version that serves now (built at its first frame)."""
        spec = self.target.describe()
        plan = self._plan
        if plan is not None and plan.spec is spec:
            return plan
        with self._plan_lock:
            plan = self._plan
            if plan is not None and plan.spec is spec:
                return plan
            failed = self._plan_error
            if failed is not None and failed[0] is spec:
                raise failed[1]
            try:
                plan = build_plan(self.config, spec, self._input, self._output)
            except TritonRosError as exc:
                self._plan_error = (spec, exc)
                raise
            self._plan = plan
            self._log.info(f"binding '{self.config.name}': model '{spec.name}' version "
                           f"{spec.version} ({spec.platform}, {self.target.location}), input "
                           f"'{plan.input_name}' {plan.input.summary}, format "
                           f"{self.config.format}")
            return plan
