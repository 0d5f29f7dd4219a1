"""A binding: input image topics -> one model input -> one output topic per input topic.

A :class:`Binding` owns its sources (one per input topic: explicit ``topics`` bound at start,
and topics matching ``topic_patterns`` bound and unbound as the graph changes), their
subscriptions and publishers. Each frame goes through:

1. the image callback (executor thread): header checks (malformed images are counted, logged
   and dropped) and the source's flow control (:class:`~triton_ros.ros.source.Source`);
2. a worker thread: preprocessing into the model's input and ``InferenceServer.infer`` - one
   request per frame, so the model's dynamic batcher batches frames of every source (and gRPC
   requests) together;
3. a worker thread again when the response arrives: decoding (detections, classification or
   tensors), publication with the input's header, then the source's next waiting frame.

How to preprocess and decode is resolved once per loaded model version (:class:`ModelPlan`), so a
reloaded model with another input size is picked up at its first frame.
"""
from __future__ import annotations

import threading
import time
import weakref
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any, Callable

from ..core.errors import StatusCode, TritonRosError, as_triton_error, invalid_arg
from ..core.infer_request import InferRequest, RequestedOutput
from ..core.server import InferenceServer
from . import output_messages
from .classification_decoder import (ClassificationPlan, decode_classification,
                                     plan_classification)
from .detection_decoder import DetectionPlan, decode_detections, plan_detections
from .diagnostics import DiagnosticsReporter
from .parameters import BindingConfig
from .preprocess import (InputPlan, Letterbox, MalformedImage, Preprocessor, check_image,
                         plan_input)
from .source import Frame, Source, SourceCounters
from .topic_discovery import TopicMatcher

LOG_EVERY_NS = 5_000_000_000           # repeated errors of one kind: one log line per 5 s


@dataclass(frozen=True)
class ModelPlan:
    """How this binding feeds and reads one loaded model version."""

    model: weakref.ref
    version: int
    input_name: str
    batching: bool
    input: InputPlan
    preprocessor: Preprocessor
    requested: tuple[RequestedOutput, ...] | None
    decoder: DetectionPlan | ClassificationPlan | None


class Binding:
    """Runtime of one binding inside the node."""

    def __init__(self, config: BindingConfig, *, node, core: InferenceServer, workers: Executor,
                 reporter: DiagnosticsReporter, callback_group) -> None:
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        self.config = config
        self._node = node
        self._core = core
        self._workers = workers
        self._reporter = reporter
        self._group = callback_group
        self._log = node.get_logger()
        self._matcher = TopicMatcher(config.topic_patterns) if config.topic_patterns else None
        reliability = {"best_effort": ReliabilityPolicy.BEST_EFFORT,
                       "reliable": ReliabilityPolicy.RELIABLE}
        self._input_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.input_depth,
                                     reliability=reliability[config.input_reliability])
        self._output_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=config.output_depth,
                                      reliability=reliability[config.output_reliability])
        self._message_type = output_messages.message_type(config.format)
        self._sources: dict[str, Source] = {}
        self._sources_lock = threading.Lock()
        self.retired = SourceCounters()        # totals of unbound sources, kept for the totals
        self._plan: ModelPlan | None = None
        self._plan_error: tuple[Any, TritonRosError] | None = None
        self._plan_lock = threading.Lock()
        self._logged: dict[str, int] = {}
        self._stopped = False

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
        from sensor_msgs.msg import Image

        with self._sources_lock:
            if topic in self._sources or self._stopped:
                return None
            output = self.output_topic(topic)
            if output == topic:
                self._log.error(f"binding '{self.config.name}': output topic of '{topic}' is the "
                                f"input topic itself; check output_topic_template")
                return None
            source = Source(topic, output, max_in_flight=self.config.max_in_flight,
                            max_age_ms=self.config.max_age_ms, discovered=discovered)
            source.last_seen_publisher_ns = time.monotonic_ns()
            source.publisher = self._node.create_publisher(self._message_type, output,
                                                           self._output_qos)
            source.output_topic = getattr(source.publisher, "topic_name", output)
            source.subscription = self._node.create_subscription(
                Image, topic, lambda msg, s=source: self._on_image(s, msg), self._input_qos,
                callback_group=self._group)
            self._sources[topic] = source
        how = "found" if discovered else "bound"
        self._log.info(f"binding '{self.config.name}': {how} {topic} -> {source.output_topic} "
                       f"(model '{self.config.model}')")
        return source

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

    # ---------------------------------------------------------------- per frame
    def _now_ns(self) -> int:
        return self._node.get_clock().now().nanoseconds

    def _on_image(self, source: Source, msg) -> None:
        if self._stopped:
            return
        now = self._now_ns()
        try:
            check_image(msg.encoding, msg.height, msg.width, msg.step, len(msg.data))
        except MalformedImage as exc:
            if source.count_malformed(now):
                self._log.warning(
                    f"binding '{self.config.name}': malformed image on {source.topic} (frame_id "
                    f"'{msg.header.frame_id}'): {exc}; dropped (counted as dropped_malformed in "
                    f"/diagnostics)")
            return
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        frame = source.offer(Frame(msg, stamp, now), now)
        if frame is not None:
            self._submit(self._run, source, frame)

    def _submit(self, fn, *args) -> None:
        try:
            self._workers.submit(fn, *args)
        except RuntimeError:                   # workers shut down: the node is stopping
            source = args[0]
            source.count("failed")
            source.finish(self._now_ns())

    def _run(self, source: Source, frame: Frame | None) -> None:
        while frame is not None:
            frame = self._start_frame(source, frame)

    def _start_frame(self, source: Source, frame: Frame) -> Frame | None:
        """Preprocess and queue one frame; return the next frame if this one ended here."""
        try:
            plan = self.plan()
        except TritonRosError as exc:
            unavailable = exc.code in (StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND) or \
                "unknown model" in exc.message
            source.count("dropped_unavailable" if unavailable else "failed")
            self._log_throttled(f"plan:{exc.message}",
                                f"binding '{self.config.name}': {exc.message}; frames are dropped "
                                f"until the model is ready" if unavailable else
                                f"binding '{self.config.name}': cannot feed model "
                                f"'{self.config.model}': {exc.message}")
            return source.finish(self._now_ns())
        msg = frame.msg
        try:
            tensor, box = plan.preprocessor(msg.data, msg.encoding, msg.height, msg.width,
                                            msg.step)
        except Exception as exc:               # a frame's fault: count it, keep serving
            source.count("failed")
            self._log_throttled("preprocess", f"binding '{self.config.name}': preprocessing a "
                                f"frame of {source.topic} failed: {exc}")
            return source.finish(self._now_ns())
        request = InferRequest(
            model_name=self.config.model,
            inputs={plan.input_name: tensor[None] if plan.batching else tensor},
            model_version=self.config.model_version, requested_outputs=plan.requested,
            priority=self.config.priority, timeout_us=self.config.timeout_us)
        started = time.monotonic_ns()
        future = self._core.infer(request)
        future.add_done_callback(
            lambda f: self._submit(self._finish_frame, source, frame, plan, box, started, f))
        return None

    def _finish_frame(self, source: Source, frame: Frame, plan: ModelPlan, box: Letterbox,
                      started: int, future: Future) -> None:
        try:
            response = future.result()
        except Exception as exc:
            error = as_triton_error(exc)
            unloading = error.code == StatusCode.UNAVAILABLE and "stopping" in error.message
            source.count("dropped_unavailable" if unloading else "failed")
            self._log_throttled(f"infer:{error.code.name}",
                                f"binding '{self.config.name}': inference of a frame of "
                                f"{source.topic} failed: {error.message}")
        else:
            elapsed = time.monotonic_ns() - started
            source.infer_latency.add(elapsed)
            self._reporter.model_latency(self.config.model).add(elapsed)
            try:
                self._publish(source, frame, plan, box, response)
            except Exception as exc:           # decoding or publishing one frame failed
                source.count("failed")
                self._log_throttled("publish", f"binding '{self.config.name}': publishing the "
                                    f"result of a frame of {source.topic} failed: {exc}")
        self._run(source, source.finish(self._now_ns()))

    def _publish(self, source: Source, frame: Frame, plan: ModelPlan, box: Letterbox,
                 response) -> None:
        outputs = {name: (value[0] if plan.batching else value)
                   for name, value in response.outputs.items()}
        header = frame.msg.header
        fmt = self.config.format
        if fmt == "detections":
            result = decode_detections(outputs, plan.decoder, box)
            msg = output_messages.detections(header, result, plan.decoder.labels)
        elif fmt == "classification":
            result = decode_classification(outputs, plan.decoder)
            msg = output_messages.classification(header, result, plan.decoder.labels)
        else:
            shaped = ((name, value[None] if plan.batching else value)
                      for name, value in outputs.items())
            msg = output_messages.tensor_list(header, response.model_name,
                                              response.model_version, shaped)
        source.publisher.publish(msg)
        now = self._now_ns()
        source.count("published")
        source.e2e_latency.add(now - (frame.stamp_ns or frame.received_ns))

    def _log_throttled(self, key: str, text: str) -> None:
        now = time.monotonic_ns()
        last = self._logged.get(key)
        if last is None or now - last >= LOG_EVERY_NS:
            self._logged[key] = now
            self._log.error(text)

    # ---------------------------------------------------------------- model plan
    def plan(self) -> ModelPlan:
        """The plan for the model version that serves now (built at its first frame)."""
        model = self._core.get_model(self.config.model, self.config.model_version)
        plan = self._plan
        if plan is not None and plan.model() is model:
            return plan
        with self._plan_lock:
            failed = self._plan_error
            if failed is not None and failed[0]() is model:
                raise failed[1]
            try:
                plan = build_plan(self.config, model)
            except TritonRosError as exc:
                self._plan_error = (weakref.ref(model), exc)
                raise
            self._plan = plan
            self._log.info(f"binding '{self.config.name}': model '{model.name}' version "
                           f"{model.version}, input '{plan.input_name}' "
                           f"{plan.input.layout} {plan.input.dtype} "
                           f"{plan.input.width}x{plan.input.height}x{plan.input.channels}, "
                           f"{self.config.preprocess.resize}")
            return plan


def build_plan(config: BindingConfig, model) -> ModelPlan:
    """Resolve a binding's settings against a loaded model; INVALID_ARG when they do not fit."""
    mc = model.config
    if config.input:
        tensor = mc.input(config.input)
        if tensor is None:
            raise invalid_arg(f"model '{mc.name}' has no input '{config.input}' (inputs: "
                              f"{', '.join(t.name for t in mc.inputs)})")
    else:
        required = [t for t in mc.inputs if not t.optional]
        if len(required) != 1:
            raise invalid_arg(f"model '{mc.name}' has inputs "
                              f"{', '.join(t.name for t in mc.inputs)}; set the binding's "
                              f"'input' parameter")
        tensor = required[0]
    others = [t.name for t in mc.inputs if not t.optional and t.name != tensor.name]
    if others:
        raise invalid_arg(f"model '{mc.name}' also requires input(s) {', '.join(others)}, which "
                          f"an image binding cannot provide")
    input_plan = plan_input(config.preprocess, tensor, model=mc.name)
    decoder: DetectionPlan | ClassificationPlan | None = None
    requested: tuple[RequestedOutput, ...] | None = None
    if config.format == "detections":
        decoder = plan_detections(config.detection, mc, model.labels, input_plan)
        requested = tuple(RequestedOutput(name) for name in decoder.outputs)
    elif config.format == "classification":
        decoder = plan_classification(config.classification, mc, model.labels)
        requested = (RequestedOutput(decoder.output),)
    elif config.outputs:
        for name in config.outputs:
            if mc.output(name) is None:
                raise invalid_arg(f"model '{mc.name}' has no output '{name}'")
        requested = tuple(RequestedOutput(name) for name in config.outputs)
    return ModelPlan(model=weakref.ref(model), version=model.version, input_name=tensor.name,
                     batching=mc.max_batch_size > 0, input=input_plan,
                     preprocessor=Preprocessor(input_plan), requested=requested,
                     decoder=decoder)

