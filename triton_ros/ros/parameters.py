"""Every ROS parameter of the inference node: declared in one place, parsed into typed settings.

ROS parameters cannot be lists of dictionaries, so bindings are named in ``bindings`` (a string
array) and each binding's settings are parameters under its name: ``<binding>.model``,
``<binding>.topic_patterns``... (:data:`BINDING_PARAMS`). Every parameter has a default and a
description (shown by ``ros2 param describe``) and is read-only: the node reads them once at start.

Parameters are declared with dynamic typing and checked here instead, so that a YAML file may
write ``0`` for a double, ``[]`` for an empty list or a single string for a list, and a wrong type
gets an error naming the parameter. Parsing goes parameters -> checked values -> the frozen
:class:`NodeConfig` and :class:`BindingConfig`; nothing past this module reads a raw parameter.
config/inference.yaml documents the same parameters (a test keeps the two in step).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import TritonRosError, invalid_arg
from ..core.model_repository_manager import CONTROL_MODES
from ..core.server import ServerOptions
from ..core.tracer import TraceConfig, parse_trace_config
from ..frontend import options as endpoints
from ..frontend.kafka.options import KafkaOptions, options_from_parameters
from ..frontend.options import EndpointOptions
from ..settings import STR, Setting, build, check, parameter_namer, parameters_of, setting, under
from .codec.base import InputKind, OutputFormat
from .codec.registry import INPUT_KINDS, OUTPUT_FORMATS, PARTS
from .mirror.config import MirrorConfig, check_kafka_use, mirror_config
from .targets.remote.config import RemoteConfig, remote_config

# How the node's callbacks run (ros/executor.py; declared here, where no rclpy is imported)
EXECUTORS = ("auto", "events", "wait_set")

FORMATS = tuple(OUTPUT_FORMATS)  # detections, tensors, classification, segmentation
RELIABILITIES = ("best_effort", "reliable")
TEMPLATE_FIELDS = ("namespace", "topic", "basename", "output_name", "binding", "model", "camera")
_BINDING_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ServerSettings:
    """The embedded core's settings, as the node's parameters (``triton-ros-server`` has its
    own flags for them, with tritonserver's defaults)."""

    model_repository: tuple[str, ...] = setting(
        [],
        "Model repository directory, or a list of them (tritonserver --model-repository). "
        "Empty: the repository bundled with the package.",
        ros_default="",
    )
    model_control_mode: str = setting(
        "explicit",
        "Triton's model control mode. explicit: startup_models load at start and "
        "~/load_model and ~/unload_model work; none: every model loads at start, the "
        "services refuse; poll: as none, and the repository is re-scanned every "
        "repository_poll_secs.",
        choices=CONTROL_MODES,
    )
    startup_models: tuple[str, ...] = setting(
        ["*"], "With explicit control: models loaded at start ('*': every model of the repository)."
    )
    strict_model_config: bool = setting(
        False,
        "Require a complete config.pbtxt (tritonserver --strict-model-config); false: a "
        "missing or partial configuration is completed from the model files (ONNX, "
        "OpenVINO, TensorRT and Python models).",
    )
    strict_readiness: bool = setting(
        True,
        "Server readiness (gRPC ServerReady, HTTP /v2/health/ready) requires every "
        "loaded model to be READY (tritonserver --strict-readiness).",
    )
    repository_poll_secs: float = setting(
        15.0, "Poll interval in poll mode, seconds.", low=0, above=True
    )
    exit_timeout_secs: float = setting(
        30.0, "At shutdown, how long in-flight requests may take to finish, seconds."
    )


@dataclass(frozen=True)
class NodeSettings:
    """How the node runs: its bindings, periods, threads and executor."""

    bindings: tuple[str, ...] = setting(
        [],
        "Names of the bindings (topics -> model input -> output topics). Each binding's "
        "settings are the parameters '<name>.*'.",
    )
    discovery_period_s: float = setting(
        1.0,
        "How often topic_patterns are matched against the ROS graph, seconds.",
        low=0,
        above=True,
    )
    diagnostics_period_s: float = setting(
        1.0,
        "Period of /diagnostics and ~/status, seconds (rates and percentiles cover one period).",
        low=0,
        above=True,
    )
    worker_threads: int = setting(
        4,
        "Threads that decode results and publish them (and preprocess frames, with "
        "preprocess_in_callback false). On a 2-core host 1 cost at most a few percent "
        "less CPU per frame than 4 (bench/DECISIONS.md, 'Worker threads and OpenCV's "
        "pool on two cores'); more cores use them.",
        low=1,
    )
    executor: str = setting(
        "auto",
        "How the node's callbacks run. events: rclpy's EventsExecutor (ROS 2 Kilted and "
        "later), about half the executor's CPU per frame; ~/load_model and "
        "~/unload_model are then served, under the same names, by a hidden helper node "
        "(_<node>_control) on a thread of its own. wait_set: rclpy's wait-set executor "
        "(every ROS 2, e.g. Humble), loads in their own callback group. auto: events "
        "where rclpy has it, else wait_set.",
        choices=EXECUTORS,
    )
    preprocess_in_callback: bool = setting(
        True,
        "Preprocess each frame in the image callback, on the executor thread that just "
        "received it, while its pixels are still in the CPU's cache (less CPU per frame: "
        "bench/DECISIONS.md, 'Preprocessing in the image callback'); false: on the "
        "worker threads, after a hand-off, which spreads preprocessing over cores where "
        "one thread cannot keep up (many high-resolution cameras).",
    )
    serialized_images: bool = setting(
        True,
        "Subscribe to images as serialized bytes (raw=True) and read them with rosbags' "
        "CDR deserializer: the pixels stay in the received buffer (no copy, no Python "
        "message per frame; less CPU to receive: bench/DECISIONS.md, 'Serialized image "
        "subscriptions'); false: rclpy's typed sensor_msgs/Image messages.",
    )


TRACE_PREFIX = "trace."


@dataclass(frozen=True)
class TraceSettings:
    """Request tracing (core/tracer.py, docs/tracing.md): tritonserver's --trace-config
    settings, as ``trace.*`` parameters."""

    file: str = setting(
        "",
        "Trace file in Triton's JSON format (tritonserver --trace-config triton,file=...): "
        "requests of every frontend and the frames of bindings served by the embedded "
        "core; empty: no tracing.",
    )
    level: tuple[str, ...] = setting(
        [],
        "Trace levels (--trace-config level=...): TIMESTAMPS, TENSORS (several add up); "
        '[] or "OFF" (quoted: YAML reads a bare OFF as false): off.',
    )
    rate: int = setting(
        1000, "Trace one request (or frame) in this many (--trace-config rate=...)."
    )
    count: int = setting(
        -1, "Traces to take before tracing stops; -1: no limit (--trace-config count=...)."
    )
    log_frequency: int = setting(
        0,
        "0: one trace file; N: every N traces go to <trace.file>.<index> (--trace-config "
        "triton,log-frequency=...).",
    )


NODE_PARAMS: tuple[Setting, ...] = (
    *parameters_of(ServerSettings),
    *parameters_of(NodeSettings),
    *endpoints.parameters(),
    *parameters_of(TraceSettings, TRACE_PREFIX),
)

INPUT_KIND_CHOICES = ("auto", *INPUT_KINDS)
# Maps of a synchronized binding, given as '<binding>.<map>.<model input>' (YAML: a mapping under
# the map's name); their keys are model input names, so they are declared as they are given.
SYNC_MAPS: dict[str, str] = {
    "inputs": "Topic feeding model input '{key}', relative to the binding's source namespace "
    "(topics / topic_patterns name the namespaces): the inputs of one namespace are "
    "matched by header stamp into one request.",
    "input_kinds": "Input kind of model input '{key}' (image, depth, camera_info, or a kind of "
    "codec/registry.py); unset: by the topic's message type.",
}


@dataclass(frozen=True)
class SyncConfig:
    """How a synchronized binding matches its inputs (message_filters' ApproximateTime); each
    field is a setting, the binding's parameter ``sync_*``."""

    slop_ms: float = setting(
        10.0,
        "With 'inputs': the most the header stamps of one matched set may differ, "
        "milliseconds (message_filters' ApproximateTime max interval).",
        name="sync_slop_ms",
        low=0,
    )
    queue_size: int = setting(
        10,
        "With 'inputs': messages of one input waiting for partners at most; the oldest is "
        "dropped beyond (counted as unmatched_queue_overflow).",
        name="sync_queue_size",
        low=1,
    )
    min_interval_ms: float = setting(
        0.0,
        "With 'inputs': the least time between two messages of one input, milliseconds "
        "(message_filters' inter-message lower bound): a set is published as soon as it "
        "is provably the best instead of when the next message arrives; 0: no bound.",
        name="sync_min_interval_ms",
        low=0,
    )
    max_jump_ms: float = setting(
        1000.0,
        "With 'inputs': a message stamped more than this ahead of (or behind) its own "
        "input's last message and the namespace's other inputs, after the time between "
        "their arrivals, or, with max_age_ms set, ahead of the node's clock, has a bad "
        "stamp: dropped before matching and counted as dropped_malformed, so that it "
        "holds up no set (two in a row that agree are the input's new timeline); when "
        "an input's stamps jump back this far, the waiting messages stamped that far "
        "ahead are bad and matching starts over. More than the largest latency "
        "difference between the inputs; 0: no check.",
        name="sync_max_stamp_jump_ms",
        low=0,
    )


@dataclass(frozen=True)
class BindingConfig:
    """One binding: topics -> model -> topics. Its fields up to ``output_depth`` are the
    binding's own settings (parameters ``<binding>.<name>``); the remote target, the Kafka
    mirror and the matching of synchronized inputs hold theirs, and every input kind and output
    format's settings are held by its name (:attr:`codecs`, :meth:`settings_for`)."""

    # what is bound
    model: str = setting("", "Model to run (required).")
    model_version: int = setting(-1, "Model version; -1: the latest ready version.")
    input: str = setting(
        "",
        "Model input that receives the image; empty: the model's only input. With "
        "'inputs': the input whose header the results carry (empty: the model's first "
        "input fed).",
    )
    topics: tuple[str, ...] = setting(
        [],
        "Input topics (absolute names; sensor_msgs/Image or CompressedImage, see "
        "input_kind), bound at start; with 'inputs', source namespaces.",
    )
    topic_patterns: tuple[str, ...] = setting(
        [],
        "Glob patterns of input topics, matched against the ROS graph every "
        "discovery_period_s, so that robots may come and go: '*' and '?' stay within one "
        "name segment, '**' spans segments, '[abc]' is a character class, e.g. "
        "'/robot*/camera*/image_raw'. Only topics of a type input_kind reads match.",
    )
    forget_after_s: float = setting(
        30.0,
        "A topic found by a pattern is unbound after having no publisher for this long, "
        "seconds (0: never).",
    )
    input_kind: str = setting(
        "auto",
        "What the input topics carry: image (sensor_msgs/Image), compressed "
        "(sensor_msgs/CompressedImage, JPEG or PNG, as image_transport's compressed "
        "transport publishes it), or auto: each topic's type as the ROS graph shows it "
        "(a topic with no publisher yet is read as image_transport names it: "
        ".../compressed as CompressedImage, else Image, until one appears).",
        choices=INPUT_KIND_CHOICES,
    )
    # outputs
    format: str = setting(
        "detections",
        "What is published per input frame: detections "
        "(vision_msgs/Detection2DArray, or triton_ros_interfaces/Detections "
        "without vision_msgs), classification (vision_msgs/Classification, or "
        "triton_ros_interfaces/Classification), tensors "
        "(triton_ros_interfaces/TensorList), segmentation (sensor_msgs/Image "
        "mono8 class ids in the source's pixels) or detections3d "
        "(vision_msgs/Detection3DArray, or triton_ros_interfaces/Detections3D: "
        "positions in metres, from a synchronized binding's depth and "
        "CameraInfo).",
        choices=FORMATS,
    )
    output_name: str = setting(
        "",
        "Name used by output_topic_template; empty: the format's name (detections, "
        "classification, tensors, segmentation, detections3d).",
    )
    output_topic_template: str = setting(
        "{namespace}/{output_name}",
        "Output topic of each input topic. Fields: {namespace} (the input topic without its "
        "last name), {topic} (the input topic), {basename} (its last name), {output_name}, "
        "{binding}, {model}, {camera} (the namespace of the image topic without "
        "image_transport's transport subtopic: /robot1/front for /robot1/front/image_raw and "
        "/robot1/front/image_raw/compressed). The default maps /robot1/camera_front/image_raw "
        "to /robot1/camera_front/detections. A relative result is in the node's namespace.",
    )
    class_names: tuple[str, ...] = setting(
        [],
        "Class names by index; empty: the output's label_filename in the model's own "
        "config.pbtxt (an ensemble's own label file, not its steps'), else the class index.",
    )
    # flow control
    max_in_flight: int = setting(
        1,
        "Frames of one input topic in the model at once (K). Further frames wait in a "
        "one-frame slot where the latest frame wins; replaced frames count as dropped.",
        low=1,
    )
    max_age_ms: int = setting(
        500,
        "Frames older than this (header stamp to now, on the node's clock) are dropped, "
        "counted and logged with their age and likely cause; 0: no limit (use 0 when the "
        "robots' clocks are not synchronized with this host's).",
        low=0,
    )
    sequence_end_after_ms: int = setting(
        2000,
        "A stateful model (sequence_batching, or an ensemble with a stateful step): each "
        "source is its own sequence (docs/stateful.md); a source that has sent no frame "
        "to the model for this long (it stopped publishing, or its frames go stale) ends "
        "its sequence, freeing its slot; its next frame starts a new one. 0: only when "
        "the source is unbound (or the model idles the sequence out).",
        low=0,
    )
    priority: int = setting(
        0, "Triton request priority of this binding's frames (0: the model's default).", low=0
    )
    timeout_us: int = setting(
        0, "Triton request queue timeout, microseconds (0: the model's queue policy).", low=0
    )
    input_reliability: str = setting(
        "best_effort",
        "Input QoS reliability (best_effort with depth 5 is the sensor_data profile).",
        choices=RELIABILITIES,
    )
    input_depth: int = setting(5, "Input QoS history depth.", low=1)
    output_reliability: str = setting("reliable", "Output QoS reliability.", choices=RELIABILITIES)
    output_depth: int = setting(10, "Output QoS history depth.", low=1)

    name: str = ""
    remote: RemoteConfig | None = None  # set: served by server_urls, not the core
    kafka_mirror: MirrorConfig | None = None  # set: results mirrored to a Kafka topic
    sync: SyncConfig = SyncConfig()
    # Synchronized inputs: (model input, topic relative to the source namespace), in name order
    inputs: tuple[tuple[str, str], ...] = ()
    input_kinds: tuple[tuple[str, str], ...] = ()  # (model input, kind name or family)
    # Every input kind's and output format's settings, by its name (its ``configure``)
    codecs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def synchronized(self) -> bool:
        """Fed from several topics of each source (``inputs``), matched by stamp."""
        return bool(self.inputs)

    def settings_for(self, part: InputKind | OutputFormat) -> Any:
        """The settings of an input kind or output format, as this binding holds them."""
        return self.codecs[part.name]


# The parameters of a binding, relative to '<binding>.': its own, its remote target's, its
# Kafka mirror's, its matching's, then every input kind's and output format's (a setting that
# several read is declared once, by the first part that declares it).
BINDING_PARTS: tuple[tuple[str, type], ...] = (
    ("binding", BindingConfig),
    ("remote target", RemoteConfig),
    ("Kafka mirror", MirrorConfig),
    ("synchronized inputs", SyncConfig),
    *((part.name, part.settings) for part in PARTS if part.settings is not None),
)


def _binding_params() -> tuple[Setting, ...]:
    declared: dict[str, Setting] = {}
    for _, cls in BINDING_PARTS:
        for spec in parameters_of(cls):
            if declared.setdefault(spec.name, spec) != spec:
                raise TypeError(
                    f"binding parameter '{spec.name}' is declared twice, "
                    f"differently ({cls.__name__})"
                )
    return tuple(declared.values())


BINDING_PARAMS: tuple[Setting, ...] = _binding_params()


@dataclass(frozen=True)
class NodeConfig:
    server: ServerOptions
    frontends: EndpointOptions
    bindings: tuple[BindingConfig, ...]
    discovery_period_s: float
    diagnostics_period_s: float
    worker_threads: int
    executor: str = "auto"
    serialized_images: bool = True
    preprocess_in_callback: bool = True
    unknown_parameters: tuple[str, ...] = ()
    kafka: KafkaOptions = KafkaOptions()  # kafka.*: the frontend's and the mirrors' brokers


# --------------------------------------------------------------------------------------------
# Declaring and reading
# --------------------------------------------------------------------------------------------


def _trace_config(values: dict[str, Any]) -> TraceConfig:
    """The trace.* parameters, checked as tritonserver checks its --trace-* options."""
    trace = build(
        TraceSettings, under(values, TRACE_PREFIX), parameter_namer(TraceSettings, TRACE_PREFIX)
    )
    try:
        return parse_trace_config(
            (),
            file=trace.file,
            levels=list(trace.level) or ["OFF"],
            rate=trace.rate,
            count=trace.count,
            log_frequency=trace.log_frequency,
        )
    except TritonRosError as exc:
        raise invalid_arg(f"parameter trace.*: {exc.message}") from None


def declare_and_read(node, *, bundled_repository: Path | None = None) -> NodeConfig:
    """Declare every parameter on ``node`` and parse them; INVALID_ARG names a bad parameter."""
    values = {spec.name: _declare(node, spec.name, spec) for spec in NODE_PARAMS}
    settings = build(NodeSettings, values, parameter_namer(NodeSettings, ""))
    seen: set[str] = set()
    bindings = []
    for name in settings.bindings:
        if not _BINDING_NAME.match(name):
            raise invalid_arg(
                f"binding name '{name}' must start with a letter and hold only "
                f"letters, digits and '_'"
            )
        if name in seen:
            raise invalid_arg(f"binding '{name}' is listed twice in 'bindings'")
        if any(name == spec.name.split(".")[0] for spec in NODE_PARAMS):
            raise invalid_arg(f"binding name '{name}' is also a node parameter; choose another")
        seen.add(name)
        raw = {spec.name: _declare(node, f"{name}.{spec.name}", spec) for spec in BINDING_PARAMS}
        raw.update(_declare_sync_maps(node, name))
        bindings.append(binding_config(name, raw))

    core = build(ServerSettings, values, parameter_namer(ServerSettings, ""))
    repositories = core.model_repository or (
        (str(bundled_repository),) if bundled_repository else ()
    )
    if not repositories:
        raise invalid_arg(
            "parameter 'model_repository' is empty and no bundled repository was found"
        )
    server = ServerOptions(
        model_repositories=repositories,
        model_control_mode=core.model_control_mode,
        startup_models=core.startup_models,
        strict_model_config=core.strict_model_config,
        strict_readiness=core.strict_readiness,
        repository_poll_secs=core.repository_poll_secs,
        exit_timeout_secs=max(0.0, core.exit_timeout_secs),
        trace_config=_trace_config(values),
    )
    kafka = options_from_parameters(values, require_topics=False)
    check_kafka_use(kafka, [b.name for b in bindings if b.kafka_mirror is not None])
    frontends = endpoints.options_from_parameters(values, server.exit_timeout_secs, kafka)
    declared = (
        {spec.name for spec in NODE_PARAMS}
        | {f"{b}.{spec.name}" for b in settings.bindings for spec in BINDING_PARAMS}
        | {
            f"{b.name}.{m}.{key}"
            for b in bindings
            for m, pairs in (("inputs", b.inputs), ("input_kinds", b.input_kinds))
            for key, _ in pairs
        }
    )
    return NodeConfig(
        server=server,
        frontends=frontends,
        bindings=tuple(bindings),
        discovery_period_s=settings.discovery_period_s,
        diagnostics_period_s=settings.diagnostics_period_s,
        worker_threads=settings.worker_threads,
        executor=settings.executor,
        serialized_images=settings.serialized_images,
        preprocess_in_callback=settings.preprocess_in_callback,
        unknown_parameters=tuple(sorted(unknown_overrides(node, declared))),
        kafka=kafka,
    )


def binding_config(name: str, raw: dict[str, Any]) -> BindingConfig:
    """Check one binding's values (keyed by relative parameter name) and build its config: its
    own settings, its remote target's, mirror's and matching's, and every input kind's and
    output format's, held by name."""

    def where(param: str) -> str:
        return f"parameter '{name}.{param}'"

    if not raw["model"]:
        raise invalid_arg(f"{where('model')} is required: the model this binding runs")
    if not raw["topics"] and not raw["topic_patterns"]:
        raise invalid_arg(f"binding '{name}' needs '{name}.topics' or '{name}.topic_patterns'")
    for topic in raw["topics"]:
        if not topic.startswith("/"):
            raise invalid_arg(f"{where('topics')}: '{topic}' must be an absolute topic name")
    for pattern in raw["topic_patterns"]:
        if not pattern.startswith("/"):
            raise invalid_arg(f"{where('topic_patterns')}: '{pattern}' must start with '/'")
    for param in ("output_topic_template", "kafka_mirror_key"):
        fields = [f for _, f, _, _ in string.Formatter().parse(raw[param]) if f is not None]
        unknown = [f for f in fields if f not in TEMPLATE_FIELDS]
        if unknown:
            raise invalid_arg(
                f"{where(param)}: unknown field(s) "
                f"{', '.join('{' + f + '}' for f in unknown)} (known: "
                f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})"
            )
    named = parameter_namer(BindingConfig, f"{name}.")
    inputs, input_kinds = _sync_inputs(name, raw)
    config = build(
        BindingConfig,
        raw,
        named,
        name=name,
        remote=remote_config(raw, name),
        kafka_mirror=mirror_config(raw, name),
        inputs=inputs,
        input_kinds=input_kinds,
        sync=build(SyncConfig, raw, parameter_namer(SyncConfig, f"{name}.")),
        codecs={
            part.name: part.configure(raw, parameter_namer(part.settings, f"{name}."))
            for part in PARTS
            if part.settings is not None
        },
    )
    # a format's default output name is its own; a negative forget_after_s is 0 (never)
    return replace(
        config,
        output_name=config.output_name or config.format,
        forget_after_s=max(0.0, config.forget_after_s),
    )


def _sync_inputs(name: str, raw: dict[str, Any]):
    """The synchronized inputs of a binding and their kinds, checked."""

    def where(param: str) -> str:
        return f"parameter '{name}.{param}'"

    inputs = tuple(sorted((raw.get("inputs") or {}).items()))
    kinds = tuple(sorted((raw.get("input_kinds") or {}).items()))
    for key, topic in inputs:
        if not topic or topic.startswith("/") or topic.endswith("/") or "//" in topic:
            raise invalid_arg(
                f"{where('inputs.' + key)}: '{topic}' must be a topic name relative "
                f"to the source namespace (e.g. depth/image_raw), not absolute"
            )
    names = {key for key, _ in inputs}
    known = set(INPUT_KINDS) | {kind.family for kind in INPUT_KINDS.values()}
    for key, kind in kinds:
        if key not in names:
            raise invalid_arg(
                f"{where('input_kinds.' + key)}: '{key}' is not one of the "
                f"binding's inputs ({', '.join(sorted(names)) or 'none'})"
            )
        if kind not in known:
            raise invalid_arg(
                f"{where('input_kinds.' + key)}: unknown input kind '{kind}' "
                f"(known: {', '.join(sorted(known))})"
            )
    if inputs and raw["input"] and raw["input"] not in names:
        raise invalid_arg(
            f"{where('input')}: '{raw['input']}' is not one of the binding's "
            f"inputs ({', '.join(sorted(names))}); with 'inputs' it names the one "
            f"whose header the results carry"
        )
    return inputs, kinds


def _declare_sync_maps(node, binding: str) -> dict[str, dict[str, str]]:
    """Declare the entries given under '<binding>.inputs.' and '<binding>.input_kinds.' (their
    keys are the model's input names, known only from what was given) and read them."""
    overrides = getattr(node, "_parameter_overrides", None) or {}
    out: dict[str, dict[str, str]] = {}
    for map_name, description in SYNC_MAPS.items():
        prefix = f"{binding}.{map_name}."
        entries = {}
        for full in sorted(n for n in overrides if n.startswith(prefix)):
            key = full[len(prefix) :]
            spec = Setting(
                field=key,
                name=full,
                kind=STR,
                default="",
                help=description.format(key=key),
                flag=None,
            )
            entries[key] = _declare(node, full, spec)
        out[map_name] = entries
    return out


def _declare(node, full_name: str, spec: Setting) -> Any:
    from rcl_interfaces.msg import ParameterDescriptor

    constraints = f"one of: {', '.join(spec.choices)}" if spec.choices else ""
    descriptor = ParameterDescriptor(
        description=spec.help,
        additional_constraints=constraints,
        read_only=True,
        dynamic_typing=True,
    )
    value = node.declare_parameter(full_name, spec.default, descriptor).value
    return check(spec, value, f"parameter '{full_name}'", ranges=False)


def check_value(full_name: str, value: Any, spec: Setting) -> Any:
    """Coerce a parameter value to the spec's kind, or raise INVALID_ARG naming the parameter."""
    return check(spec, value, f"parameter '{full_name}'")


def unknown_overrides(node, declared: set[str]) -> set[str]:
    """Parameters given to the node (YAML, -p) that it does not declare: likely typos."""
    overrides = getattr(node, "_parameter_overrides", None) or {}
    builtin = {"use_sim_time", "start_type_description_service"}
    return {
        name
        for name in overrides
        if name not in declared and name not in builtin and not name.startswith("qos_overrides.")
    }
