"""A frame's life in a binding: received, checked, flow-controlled, encoded, inferred, decoded,
published (:class:`FramePath`; the topics it arrives on are :mod:`.binding`'s).

Each frame goes through:

1. the input callback (executor thread): the serialized message read without a copy of its
   pixels (the input kind's reader; typed messages with ``serialized_images`` false), checked
   (:func:`~triton_ros.ros.codec.base.check_input`: the kind's check and the one pixel limit,
   from the header; a stamp before 1970 is malformed, one of 0 counted as ``unstamped``;
   malformed inputs are counted, logged and dropped) and the source's flow control
   (:class:`~triton_ros.ros.binding.source.Source`);
2. still in the callback (node parameter ``preprocess_in_callback``, the default: the pixels were
   just copied in by this thread and are still in the CPU's cache), or on a worker thread (a
   kind that decodes, ``encode_on_workers``): encoding into the model's input and
   ``target.infer``, which only queues - one request per frame, so the model's dynamic batcher
   batches frames of every source (and gRPC requests) together;
3. a worker thread again when the response arrives: decoding by the output format, publication
   with the input's header, a hand-off to the result mirror when the node gives one
   (``mirror``: it only queues, never blocks), then the source's next waiting frame.

How to encode and decode is resolved once per serving model version and set of input kinds
(:class:`~triton_ros.ros.binding.plan.ModelPlan`, built from the target's
:class:`~triton_ros.ros.targets.spec.ModelSpec`), so a reloaded model with another input size is
picked up at its first frame.

A synchronized source's messages are matched by stamp first (message_filters' ApproximateTime
policy, :mod:`~triton_ros.ros.binding.synchronizer`); each matched set that describes one image
(:meth:`~triton_ros.ros.binding.sync_inputs.SyncGroup.check_set`) is one frame from there on.
Messages that found no set are counted by reason and logged (throttled) like the drops; one with
a bad stamp (the synchronizer's guard, or, with ``max_age_ms``, far ahead of the node's clock) is
malformed. Whatever is wrong with one input is named under that input's own topic.

No failure on a frame's path is silent: whatever goes wrong (the plan, preprocessing, inference,
decoding, publishing, or an unexpected exception anywhere) is counted by reason
(:data:`~triton_ros.ros.monitoring.counters.FAIL_REASONS`), logged at once and then throttled
with a count (:class:`~triton_ros.ros.monitoring.failures.FailureLog`), and shown on the
binding's ``/diagnostics`` status with the last error text. The line is logged (and the last
error set) before the count moves, so whoever sees a count finds its cause already there. The
source's in-flight slot is always released, so the next frame runs. Stale frames are explained
(age, topic, likely cause) the same way, as warnings, just after the source counts them.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Executor, Future
from typing import Any, Callable

from rclpy.clock import ClockType

from ...core.errors import StatusCode, TritonRosError, as_triton_error
from ..codec.base import FrameOutputs, InputKind, MalformedInput, OutputFormat, check_input
from ..codec.registry import INPUT_KINDS, input_kind
from ..monitoring.executor_lag import ExecutorLag
from ..monitoring.failures import BACKLOG_CAUSE, NO_BACKLOG, STALE_CAUSES, WAITED_CAUSE, FailureLog
from ..monitoring.latency import LatencyWindow
from ..parameters import BindingConfig
from ..targets.spec import InferFuture, ModelSpec, ModelTarget
from .plan import ModelPlan, build_plan, build_sync_plan
from .source import Frame, Source
from .sync_inputs import MatchedSet, SyncGroup
from .synchronizer import BAD_STAMP

# Inference errors that mean "the model is not serving now" (dropped_unavailable, a warning),
# not "this frame failed" (failed_inference, an error).
UNAVAILABLE_CODES = (StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND)
# A traced frame's own activities around the core's (docs/tracing.md): received by the input
# callback, preprocessed (submitted), result decoding started, message published.
TRACE_RECEIVED, TRACE_PREPROCESS_END, TRACE_PUBLISH_START, TRACE_PUBLISH_END = (
    "ROS_FRAME_RECEIVED",
    "ROS_PREPROCESS_END",
    "ROS_PUBLISH_START",
    "ROS_PUBLISH_END",
)


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
    reached_ns = age_ns - backlog_ns  # its age without the node's own backlog
    if reached_ns <= max_age_ms * 1_000_000:
        return "backlog", (
            f"{BACKLOG_CAUSE} (the node was {backlog_ns / 1e6:.0f} ms behind; "
            f"without that the frame was {reached_ns / 1e6:.0f} ms old)"
        )
    return "arrived", (
        f"it was {reached_ns / 1e9:.3f} s old even without the node's own "
        f"backlog ({backlog_ns / 1e6:.0f} ms): {STALE_CAUSES}"
    )


class FramePath:
    """The frames of one binding, from their input callback to their publication."""

    def __init__(
        self,
        config: BindingConfig,
        *,
        node,
        target: ModelTarget,
        workers: Executor,
        output: OutputFormat,
        fixed_kind: InputKind | None,
        failures: FailureLog,
        model_latency: LatencyWindow,
        preprocess_in_callback: bool,
        executor_lag: ExecutorLag | None,
        mirror: Callable[[Source, Any, str, Any], None] | None,
    ) -> None:
        self.config = config
        self.target = target
        self.failures = failures
        self.stopped = False  # the binding stopped: take no new frames
        self._node = node
        self._log = node.get_logger()
        self._workers = workers
        self._output = output
        self._fixed_kind = fixed_kind  # None: each topic's kind (input_kind auto)
        # The model's latency as this node's frames see it (request -> response), for its
        # /diagnostics record; shared by the bindings of one model.
        self._model_latency = model_latency
        # Preprocess in the image callback: the frame was just copied in by this thread, so its
        # pixels are still in the cache (on a worker they arrive cold, after a hand-off).
        self._inline = preprocess_in_callback
        # How far behind the node's executor is (None: not measured): explains stale frames.
        self._lag = executor_lag
        # Each published result is also handed to mirror(source, message, model, version)
        # (ros/mirror: a copy to Kafka); it queues and returns, and never raises.
        self._mirror = mirror
        # The plan of each input kind (its name) or, for a synchronized binding, of each set of
        # input kinds (MatchedSet.kinds), and the last failure to make one, with its spec
        self._plans: dict[Any, ModelPlan] = {}
        self._plan_errors: dict[Any, tuple[ModelSpec, TritonRosError]] = {}
        self._plan_lock = threading.Lock()

    # ---------------------------------------------------------------- received
    def on_input(
        self, source: Source, msg, kind: InputKind, reader: Callable[[Any], Any] | None
    ) -> None:
        """A message of ``source``'s topic, read with ``kind`` (``reader``: its serialized
        reader; None: a typed message)."""
        if self.stopped:
            return
        try:
            now = self._now_ns()
            header = None  # None: the bytes did not deserialize
            try:
                if reader is not None:
                    msg = reader(msg)
                header = msg.header
                check_input(kind, msg)
                stamp = self._stamp_of(source, source.topic, msg)
            except MalformedInput as exc:
                self._malformed(source.topic, kind.name, header, exc)
                source.count_malformed()
                return
            # Decoding kinds (compressed images) run on the workers: spread over cores.
            self._offer(
                source,
                Frame(msg, stamp, now, kind.name, time.monotonic_ns()),
                now,
                on_workers=kind.encode_on_workers,
            )
        except Exception as exc:  # never lose a frame (or the callback) silently
            self._fail(source, "failed_internal", f"handling a frame of {source.topic}", exc)

    def on_sync_input(self, source: Source, index: int, msg) -> None:
        """A message of input ``index`` of a synchronized ``source`` (its namespace)."""
        if self.stopped:
            return
        group = source.sync
        resolved = group.inputs[index]
        try:
            now = self._now_ns()
            header = None  # None: the bytes did not deserialize
            try:
                reader = group.readers[index]
                if reader is not None:
                    msg = reader(msg)
                header = msg.header
                check_input(resolved.kind, msg)
                stamp = self._stamp_of(source, resolved.topic, msg)
                ahead = stamp - now
                jump_ms = self.config.sync.max_jump_ms
                if self.config.max_age_ms > 0 and jump_ms > 0 and ahead > jump_ms * 1e6:
                    raise MalformedInput(
                        f"stamped {ahead / 1e9:.3f} s ahead of this node's "
                        f"{self._clock_name()} clock (over sync_max_stamp_jump_ms {jump_ms:g}; "
                        f"max_age_ms is set, so the clocks are meant to agree): a bad stamp "
                        f"would hold up the matching of every later message"
                    )
            except MalformedInput as exc:
                hint = ""
                if (
                    resolved.kind.name == "image"
                    and header is not None
                    and msg.encoding in ("16UC1", "32FC1")
                ):
                    hint = (
                        f" (a depth image: set {self.config.name}.input_kinds."
                        f"{resolved.name}: depth)"
                    )
                self._malformed(resolved.topic, resolved.kind.name, header, exc, hint)
                source.count_malformed()
                return
            result = group.add(index, stamp, msg, now)
            for dropped in result.dropped:
                if dropped.reason == BAD_STAMP:
                    bad = group.inputs[dropped.index]
                    self._malformed(
                        bad.topic,
                        bad.kind.name,
                        dropped.entry.item.header,
                        MalformedInput(f"bad stamp: {dropped.detail}"),
                    )
                    source.count_malformed()
                else:
                    self._report_unmatched(source, group, dropped)
            for i in result.bound_violated:
                self._log.warning(
                    f"binding '{self.config.name}': messages of {group.inputs[i].topic} came "
                    f"closer together than sync_min_interval_ms "
                    f"{self.config.sync.min_interval_ms:g}; sets may not be the best (lower it)"
                )
            for entries in result.sets:
                if not self._set_holds(source, group, entries):
                    continue
                matched = group.matched(entries)
                self._offer(
                    source,
                    Frame(
                        matched,
                        matched.stamp_ns,
                        now,
                        matched.kinds,
                        received_mono_ns=time.monotonic_ns(),
                    ),
                    now,
                    on_workers=group.decodes,
                )
        except Exception as exc:  # never lose a message (or the callback) silently
            self._fail(source, "failed_internal", f"handling a message of {resolved.topic}", exc)

    def _set_holds(self, source: Source, group: SyncGroup, entries) -> bool:
        """Whether a matched set describes one image (SyncGroup.check_set): a set whose sizes
        differ is malformed (counted, logged under the input that differs); frame_id
        mismatches are warned about (throttled per topic) and the set goes on."""
        problems, mismatches = group.check_set(entries)
        for problem in mismatches:
            resolved = group.inputs[problem.index]
            self.failures.report(
                f"frame_id:{resolved.topic}",
                "frame_id_mismatch",
                f"binding '{self.config.name}': {resolved.kind.name} on {resolved.topic} (input "
                f"{resolved.name}): {problem.text}",
                level="warn",
                topic=resolved.topic,
            )
        for problem in problems:
            resolved = group.inputs[problem.index]
            self._malformed(
                resolved.topic,
                resolved.kind.name,
                entries[problem.index].item.header,
                MalformedInput(problem.text),
            )
        if problems:
            source.count_malformed()
        return not problems

    def _stamp_of(self, source: Source, topic: str, msg) -> int:
        """A checked message's header stamp (ns). Before 1970 (a negative time, which ROS time
        cannot hold) is malformed; 0 (the publisher left it unset) is counted as unstamped and
        warned about: max_age_ms cannot apply to it, and it is processed all the same."""
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        if stamp < 0:
            raise MalformedInput(f"stamped {msg.header.stamp.sec} s, before 1970: not a ROS time")
        if stamp == 0:
            source.count("unstamped")
            self.failures.report(
                f"unstamped:{topic}",
                "unstamped",
                f"binding '{self.config.name}': a message of {topic} (frame_id "
                f"'{msg.header.frame_id}') is stamped 0 (its publisher leaves header.stamp "
                f"unset): max_age_ms cannot apply and its latency is unknown; processed "
                f"(counted as unstamped in /diagnostics)",
                level="warn",
                topic=topic,
            )
        return stamp

    def _report_unmatched(self, source: Source, group: SyncGroup, dropped) -> None:
        resolved = group.inputs[dropped.index]
        stamp = dropped.entry.stamp_ns
        why = {
            "too_old": "it is older than messages already paired (late or out of order)",
            "no_partner": f"no message of every other input within sync_slop_ms "
            f"{self.config.sync.slop_ms:g} (or a closer one took its partners)",
            "queue_overflow": f"the queue was full (sync_queue_size "
            f"{self.config.sync.queue_size}: an input is missing or late)",
        }
        self.failures.report(
            f"unmatched:{dropped.reason}:{resolved.topic}",
            f"unmatched_{dropped.reason}",
            f"binding '{self.config.name}': a message of {resolved.topic} (input "
            f"{resolved.name}, stamp {stamp // 1_000_000_000}.{stamp % 1_000_000_000:09d}) found "
            f"no set: {why[dropped.reason]}; dropped (counted as unmatched_{dropped.reason} in "
            f"/diagnostics)",
            level="warn",
            topic=resolved.topic,
        )
        source.count(f"unmatched_{dropped.reason}")

    # ---------------------------------------------------------------- flow control
    def _now_ns(self) -> int:
        """Now on the node's clock: ROS time (the /clock topic) with use_sim_time, else the
        system clock; header stamps are compared with it."""
        return self._node.get_clock().now().nanoseconds

    def _offer(
        self, source: Source, received: Frame, now: int, *, on_workers: bool = False
    ) -> None:
        """Hand a received frame to the source's flow control and start it if it may: in this
        callback (preprocess_in_callback), or on a worker when ``on_workers`` (decoding)."""
        frame = source.offer(received, now)
        if frame is None:
            return
        try:
            if self._inline and not on_workers:
                self._run(source, frame)
            else:
                self._submit(self._run, source, frame)
        except Exception as exc:  # it holds an in-flight slot: hand it on
            self._fail(source, "failed_internal", f"starting a frame of {source.topic}", exc)
            self._submit(self._run, source, self._finish_source(source))

    def _malformed(
        self, topic: str, kind: str, header: Any, exc: Exception, hint: str = ""
    ) -> None:
        """Log a malformed message of ``topic`` (throttled per topic); the caller counts it.
        ``header``: the message's (None: its bytes did not deserialize)."""
        which = "" if header is None else f" (frame_id '{header.frame_id}')"
        self.failures.report(
            f"malformed:{topic}",
            "dropped_malformed",
            f"binding '{self.config.name}': malformed {kind} on {topic}{which}: "
            f"{exc}{hint}; dropped (counted as dropped_malformed in /diagnostics)",
            level="warn",
            topic=topic,
        )

    def on_stale(self, source: Source, frame: Frame, age_ns: int, waited: bool) -> None:
        """A frame of ``source`` went stale (the source counted it): say why."""
        clock = self._clock_name()
        head = f"a frame of {source.topic} (frame_id '{frame.msg.header.frame_id}')"
        if age_ns < 0:  # stamped ahead: published, but the clocks differ
            what = f"{head} was stamped {-age_ns / 1e9:.3f} s ahead of this node's {clock} clock"
            self.failures.report(
                f"ahead:{source.topic}",
                "stamped_ahead",
                f"binding '{self.config.name}': {what} (more than max_age_ms "
                f"{self.config.max_age_ms}); processed, but ages and latencies of this topic are "
                f"wrong. Likely cause: {STALE_CAUSES}",
                level="warn",
                summary=f"{what}. Likely cause: {STALE_CAUSES}",
                topic=source.topic,
            )
            return
        what = f"{head} was {age_ns / 1e9:.3f} s old on this node's {clock} clock"
        backlog = self._lag.behind_ns(time.monotonic_ns()) if self._lag is not None else -1
        kind, cause = stale_cause(age_ns, backlog, self.config.max_age_ms, waited)
        self.failures.report(
            f"stale:{source.topic}:{kind}",
            "dropped_stale",
            f"binding '{self.config.name}': {what}, over max_age_ms {self.config.max_age_ms}; "
            f"dropped as stale. Likely cause: {cause}",
            level="warn",
            summary=f"{what}. Likely cause: {cause}",
            topic=source.topic,
        )

    def _clock_name(self) -> str:
        try:
            clock = self._node.get_clock()
            if clock.clock_type == ClockType.ROS_TIME and clock.ros_time_is_active:
                return "ROS (/clock, use_sim_time)"
        except Exception:  # only for the message
            pass
        return "system"

    # ---------------------------------------------------------------- on the workers
    def _submit(self, fn, source: Source, *args) -> None:
        """Run ``fn(source, *args)`` on a worker. If that is impossible (the workers are shut
        down: the node is stopping), the frame ``fn`` would carry is counted and its slot freed."""
        try:
            self._workers.submit(fn, source, *args).add_done_callback(self._job_done)
        except Exception as exc:
            if fn is self._run and (not args or args[0] is None):
                return  # nothing holds a slot
            trace = args[-1].trace if fn is self._finish_frame else None  # its InferFuture
            if trace is not None:  # a traced frame: its trace is written all the same
                trace.release()
            if self.stopped:
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
            self.failures.report(
                "job",
                "failed_internal",
                f"binding '{self.config.name}': a worker job failed: {type(exc).__name__}: {exc}",
            )

    def _finish_quietly(self, source: Source) -> None:
        """Release the slot without starting the waiting frame (the node is stopping)."""
        nxt = self._finish_source(source)
        while nxt is not None:
            source.count("dropped_unavailable")
            nxt = self._finish_source(source)

    def _finish_source(self, source: Source) -> Frame | None:
        try:
            return source.finish(self._now_ns())
        except Exception:  # the clock failed (shutdown): release anyway
            return source.finish(0)

    def _run(self, source: Source, frame: Frame | None) -> None:
        """Start frames of a source until one is in the model (or none waits)."""
        while frame is not None:
            try:
                frame = self._start_frame(source, frame)
            except Exception as exc:  # a defect of ours: count, log, keep serving
                self._fail(source, "failed_internal", f"starting a frame of {source.topic}", exc)
                frame = self._finish_source(source)

    def _start_frame(self, source: Source, frame: Frame) -> Frame | None:
        """Preprocess and queue one frame; return the next frame if this one ended here."""
        try:
            plan = self.plan(frame.kind)
        except TritonRosError as exc:
            if exc.code in UNAVAILABLE_CODES:
                self.failures.report(
                    f"plan:{exc.code.name}",
                    "dropped_unavailable",
                    f"binding '{self.config.name}': {exc.message}; frames are "
                    f"dropped until the model is ready",
                    level="warn",
                )
                source.count("dropped_unavailable")
            else:
                self.failures.report(
                    f"plan:{exc.code.name}",
                    "failed_plan",
                    f"binding '{self.config.name}': cannot feed model "
                    f"'{self.config.model}': {exc.message}",
                )
                source.count("failed_plan")
            return self._finish_source(source)
        try:
            inputs, placement, placements = plan.encode_request(frame.msg)
        except MalformedInput as exc:  # found decoding (a corrupt JPEG): the sender's
            topic, kind, msg = source.topic, frame.kind, frame.msg
            group = source.sync
            if group is not None:
                kind = "input"
                if exc.input_name is not None:  # a set's input (plan.py)
                    resolved = next(i for i in group.inputs if i.name == exc.input_name)
                    topic, kind, msg = resolved.topic, resolved.kind.name, msg[exc.input_name]
            self._malformed(topic, kind, msg.header, exc)
            source.count("dropped_malformed")
            return self._finish_source(source)
        except Exception as exc:  # a frame's fault: count it, keep serving
            self._fail(source, "failed_preprocess", f"preprocessing a frame of {source.topic}", exc)
            return self._finish_source(source)
        started = time.monotonic_ns()
        sequence = None
        if plan.spec.stateful:  # each source is one sequence (sequences.py)
            sequence = source.sequence.next_request(
                plan.spec, inputs, plan.output.requested, started
            )
        stream = None
        if plan.spec.decoupled:  # each response published as it comes
            stream = _Stream(self, source, frame, plan, (placement, placements))
        future = self.target.infer(
            inputs,
            outputs=plan.output.requested,
            priority=self.config.priority,
            timeout_us=self.config.timeout_us,
            sequence=sequence,
            on_response=stream,
        )
        future.add_done_callback(
            lambda f: self._submit(
                self._finish_frame, source, frame, plan, (placement, placements, stream), started, f
            )
        )
        return None

    # ---------------------------------------------------------------- sequences
    def end_sequence(self, source: Source, why: str, idle_ns: int = 0) -> bool:
        """End ``source``'s sequence on a stateful model (sequences.py): its last inputs again,
        with END; the response is not published. With ``idle_ns``: only if it sent nothing for
        that long. True: an END was sent."""
        sequence = source.sequence
        ending = sequence.end(why, idle_ns=idle_ns, now_ns=time.monotonic_ns())
        if ending is None:
            return False
        sink = None
        try:
            decoupled = self.target.describe().decoupled
        except Exception:  # not serving: the END is refused below, counted
            decoupled = False
        if decoupled:

            def sink(response, final):  # the responses of an END are not published
                return None

        future = self.target.infer(
            ending.inputs,
            outputs=ending.outputs,
            priority=self.config.priority,
            timeout_us=self.config.timeout_us,
            sequence=(ending.correlation_id, False, True),
            on_response=sink,
        )
        self._log.info(
            f"binding '{self.config.name}': sequence {ending.correlation_id} of "
            f"{source.topic} ends ({why})"
        )

        def ended(f: Future) -> None:
            exc = f.exception()
            if exc is not None:  # the sequence is gone all the same
                error = as_triton_error(exc)
                self.failures.report(
                    f"sequence_end:{error.code.name}",
                    "sequence_end",
                    f"binding '{self.config.name}': ending sequence {ending.correlation_id} of "
                    f"{source.topic} ({why}) was refused ({error.code.name}): {error.message}",
                    level="warn",
                    record=False,
                )

        future.add_done_callback(ended)
        return True

    def _finish_frame(
        self,
        source: Source,
        frame: Frame,
        plan: ModelPlan,
        placement: Any,
        started: int,
        future: InferFuture,
    ) -> None:
        published = False
        trace = future.trace  # a traced frame's (targets/spec.py InferFuture)
        try:
            published = self._complete(source, frame, plan, placement, started, future, trace)
        except Exception as exc:  # a defect of ours: count, log, keep serving
            self._fail(source, "failed_internal", f"finishing a frame of {source.topic}", exc)
        finally:
            try:
                if trace is not None:
                    self._end_trace(trace, frame, started)
                if frame.hedged:
                    self._hedged(source, frame, published)
            finally:
                # whatever happened, the slot goes on (a failure above: _job_done reports it)
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
            f"hedge:{source.topic}",
            "hedged",
            f"binding '{self.config.name}': frames of {source.topic} are hedged: the frame in "
            f"flight has waited over hedge_after_fraction {remote.hedge_after_fraction:g} of "
            f"server_timeout_ms {remote.timeout_ms}, so newer frames go to another endpoint "
            f"(this one {'published' if published else 'lost'}; counted as hedged, "
            f"hedged_published, hedged_lost in /diagnostics)",
            level="warn",
            record=False,
        )

    def _complete(
        self,
        source: Source,
        frame: Frame,
        plan: ModelPlan,
        placement: Any,
        started: int,
        future: InferFuture,
        trace=None,
    ) -> bool:
        """Decode and publish a frame's result (True: published); count whatever else.
        ``trace``: the request's trace, which gets the publication's start and end."""
        try:
            response = future.result()
        except BaseException as exc:  # the future's failure, whatever its type
            if plan.spec.stateful:  # refused (or lost): the next frame starts anew
                source.sequence.refused()
            error = as_triton_error(exc)
            if error.code in UNAVAILABLE_CODES:
                self.failures.report(
                    f"infer:{error.code.name}",
                    "dropped_unavailable",
                    f"binding '{self.config.name}': model '{self.config.model}' "
                    f"did not serve a frame of {source.topic}: {error.message}",
                    level="warn",
                )
                source.count("dropped_unavailable")
            else:
                self.failures.report(
                    f"infer:{error.code.name}",
                    "failed_inference",
                    f"binding '{self.config.name}': inference of a frame of "
                    f"{source.topic} on model '{self.config.model}' failed "
                    f"({error.code.name}): {error.message}",
                )
                source.count("failed_inference")
            return False
        elapsed = time.monotonic_ns() - started
        source.infer_latency.add(elapsed)
        self._model_latency.add(elapsed)
        stream = placement[2]
        if stream is not None:  # decoupled: each response was published
            return stream.done(source, frame)
        if trace is not None:
            trace.capture(TRACE_PUBLISH_START)
        try:
            msg = self._decode(plan, placement, frame, response)
        except Exception as exc:  # the outputs do not decode as configured
            self._fail(
                source,
                "failed_decode",
                f"decoding the result of a frame of {source.topic} ({self.config.format})",
                exc,
            )
            return False
        try:
            source.publisher.publish(msg)
            if source.extra_publishers:
                for name, extra in self._output.extras(plan.output, msg).items():
                    source.extra_publishers[name].publish(extra)
        except Exception as exc:
            self._fail(source, "failed_publish", f"publishing on {source.output_topic}", exc)
            return False
        if trace is not None:
            trace.capture(TRACE_PUBLISH_END)
        source.count("published")
        latency = self._now_ns() - (frame.stamp_ns or frame.received_ns)
        if latency >= 0:  # a stamp ahead of our clock has no latency to tell
            source.e2e_latency.add(latency)
        if self._mirror is not None:
            self._mirror(source, msg, response.model_name, response.model_version)
        return True

    def _decode(self, plan: ModelPlan, placement: Any, frame: Frame, response):
        outputs = {
            name: (value[0] if plan.batching else value) for name, value in response.outputs.items()
        }
        placement, placements = placement[:2]
        # A matched set's results carry its reference input's header
        header = (
            frame.msg[plan.input_name].header
            if isinstance(frame.msg, MatchedSet)
            else frame.msg.header
        )
        return self._output.decode(
            plan.output,
            FrameOutputs(
                header,
                outputs,
                plan.batching,
                response.model_name,
                response.model_version,
                placement,
                placements,
            ),
        )

    def _fail(self, source: Source, reason: str, what: str, exc: BaseException) -> None:
        """Count a frame's failure by reason and log it (throttled), with its cause. Never
        raises: it runs on the paths that must release the frame's slot afterwards."""
        try:
            cause = (
                exc.message if isinstance(exc, TritonRosError) else f"{type(exc).__name__}: {exc}"
            )
            self.failures.report(
                reason,
                reason,
                f"binding '{self.config.name}': {what} failed: {cause}",
                topic=source.topic,
            )
        except Exception as inner:  # last resort: the cause must not be lost
            print(
                f"binding '{self.config.name}': {what} failed: {exc!r}; reporting it failed: "
                f"{inner!r}",
                file=sys.stderr,
                flush=True,
            )
        try:
            source.count(reason)  # after the line: see the module docstring
        except Exception as inner:
            print(
                f"binding '{self.config.name}': counting {reason} failed: {inner!r}",
                file=sys.stderr,
                flush=True,
            )

    # ---------------------------------------------------------------- model plan
    def plan(self, kind: Any = "") -> ModelPlan:
        """The plan for the model version that serves now (built at its first frame of that
        kind): of input kind ``kind`` (a name; default: the binding's, else ``image``) or, for a
        synchronized binding, of the set's input kinds (``MatchedSet.kinds``)."""
        if not kind:
            kind = self._fixed_kind.name if self._fixed_kind is not None else "image"
        spec = self.target.describe()
        plan = self._plans.get(kind)
        if plan is not None and plan.spec is spec:
            return plan
        with self._plan_lock:
            plan = self._plans.get(kind)
            if plan is not None and plan.spec is spec:
                return plan
            failed = self._plan_errors.get(kind)
            if failed is not None and failed[0] is spec:
                raise failed[1]
            try:
                if isinstance(kind, str):
                    plan = build_plan(self.config, spec, INPUT_KINDS[kind], self._output)
                else:
                    plan = build_sync_plan(
                        self.config, spec, [(name, input_kind(k)) for name, k in kind], self._output
                    )
            except TritonRosError as exc:
                self._plan_errors[kind] = (spec, exc)
                raise
            if len(self._plans) >= 16:  # sources changed their kinds: start over
                self._plans.clear()
            self._plans[kind] = plan
            self._log.info(
                f"binding '{self.config.name}': model '{spec.name}' version "
                f"{spec.version} ({spec.platform}, {self.target.location}), "
                + (
                    self._describe_feeds(plan, dict(kind))
                    if plan.feeds
                    else f"{kind} input '{plan.input_name}' {plan.input.summary}"
                )
                + f", format {self.config.format}"
            )
            return plan

    @staticmethod
    def _describe_feeds(plan: ModelPlan, kinds: dict[str, str]) -> str:
        feeds = "; ".join(
            f"{name} [{kinds[name]}] {input_plan.summary}" for name, input_plan, _, _ in plan.feeds
        )
        return f"inputs {feeds} (results carry the header of {plan.input_name})"


class _Stream:
    """A decoupled model's responses to one frame, each decoded and published as it comes
    (on the thread that sends it, so in order), with the frame's header. The frame counts as
    published once its request ends if any response was published (an answer of the final
    flag alone counts as published: the model had nothing to say); an error response is a
    failed inference, logged like any."""

    __slots__ = ("_path", "_source", "_frame", "_plan", "_placement", "published", "failed")

    def __init__(
        self, path: FramePath, source: Source, frame: Frame, plan: ModelPlan, placement: Any
    ) -> None:
        self._path, self._source, self._frame = path, source, frame
        self._plan, self._placement = plan, placement
        self.published = 0
        self.failed: str | None = None

    def __call__(self, response, final: bool) -> None:
        if response is None:  # the final flag alone
            return
        path, source = self._path, self._source
        try:
            if isinstance(response, TritonRosError):
                raise response
            msg = path._decode(self._plan, self._placement, self._frame, response)
            source.publisher.publish(msg)
            self.published += 1
            if path._mirror is not None:
                path._mirror(source, msg, response.model_name, response.model_version)
        except TritonRosError as exc:
            self.failed = "failed_inference"
            path.failures.report(
                f"infer:{exc.code.name}",
                "failed_inference",
                f"binding '{path.config.name}': a response to a frame of "
                f"{source.topic} on model '{path.config.model}' is an error "
                f"({exc.code.name}): {exc.message}",
            )
        except Exception as exc:  # decoding or publishing: counted at the end
            self.failed = "failed_decode"
            path.failures.report(
                "failed_decode",
                "failed_decode",
                f"binding '{path.config.name}': a response to a frame of "
                f"{source.topic} did not decode or publish: "
                f"{type(exc).__name__}: {exc}",
                topic=source.topic,
            )

    def done(self, source: Source, frame: Frame) -> bool:
        """The request ended: count the frame once (True: published)."""
        if self.published or self.failed is None:
            source.count("published")
            latency = self._path._now_ns() - (frame.stamp_ns or frame.received_ns)
            if latency >= 0:
                source.e2e_latency.add(latency)
            return True
        source.count(self.failed)
        return False
