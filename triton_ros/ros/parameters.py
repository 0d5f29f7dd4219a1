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

import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import TritonRosError, invalid_arg
from ..core.model_repository_manager import CONTROL_MODES
from ..core.server import ServerOptions
from ..core.tracer import TraceConfig, parse_trace_config
from ..frontend.kafka.options import KafkaOptions
from ..frontend.options import EndpointOptions
from .codec.camera_info import CameraInfoConfig
from .codec.classification import ClassificationConfig
from .codec.depth import DepthConfig
from .codec.detection3d import Detection3DConfig
from .codec.detection import BOX_FORMATS, DETECTION_LAYOUTS, DetectionConfig
from .codec.preprocess import COLORS, INTERPOLATIONS, LAYOUTS, RESIZE_MODES, PreprocessConfig
from .codec.registry import INPUT_KINDS, OUTPUT_FORMATS, family_of
from .codec.segmentation import SegmentationConfig
from .codec.tensors import TensorsConfig
from .endpoint_parameters import ENDPOINT_PARAMS, endpoint_options
from .kafka_parameters import (MIRROR_PARAMS, MirrorConfig, check_kafka_use, kafka_options,
                               mirror_config)
from .targets.remote.config import RemoteConfig, check_remote_config

# How the node's callbacks run (ros/executor.py; declared here, where no rclpy is imported)
EXECUTORS = ("auto", "events", "wait_set")

BOOL, INT, FLOAT, STR, STR_LIST, FLOAT_LIST = "bool", "int", "float", "str", "str_list", "float_list"
FORMATS = tuple(OUTPUT_FORMATS)       # detections, tensors, classification, segmentation
RELIABILITIES = ("best_effort", "reliable")
TEMPLATE_FIELDS = ("namespace", "topic", "basename", "output_name", "binding", "model",
                   "camera")
_BINDING_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ParamSpec:
    name: str                          # full name, or relative to "<binding>." in BINDING_PARAMS
    default: Any
    kind: str
    description: str
    choices: tuple[str, ...] = ()


def _frontend_params() -> tuple[ParamSpec, ...]:
    """The endpoints' parameters (ros/endpoint_parameters.py), mirroring tritonserver's flags."""
    return tuple(ParamSpec(name, default, kind, description)
                 for name, default, kind, description in ENDPOINT_PARAMS)


def _mirror_params() -> tuple[ParamSpec, ...]:
    """A binding's Kafka result mirror (ros/kafka_parameters.py)."""
    return tuple(ParamSpec(name, default, kind, description)
                 for name, default, kind, description in MIRROR_PARAMS)


NODE_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("model_repository", "", STR_LIST,
              "Model repository directory, or a list of them (tritonserver --model-repository). "
              "Empty: the repository bundled with the package."),
    ParamSpec("model_control_mode", "explicit", STR,
              "Triton's model control mode. explicit: startup_models load at start and "
              "~/load_model and ~/unload_model work; none: every model loads at start, the "
              "services refuse; poll: as none, and the repository is re-scanned every "
              "repository_poll_secs.", CONTROL_MODES),
    ParamSpec("startup_models", ["*"], STR_LIST,
              "With explicit control: models loaded at start ('*': every model of the "
              "repository)."),
    ParamSpec("strict_model_config", False, BOOL,
              "Require a complete config.pbtxt (tritonserver --strict-model-config); false: a "
              "missing or partial configuration is completed from the model files (ONNX, "
              "OpenVINO, TensorRT and Python models)."),
    ParamSpec("strict_readiness", True, BOOL,
              "Server readiness (gRPC ServerReady, HTTP /v2/health/ready) requires every "
              "loaded model to be READY (tritonserver --strict-readiness)."),
    ParamSpec("repository_poll_secs", 15.0, FLOAT, "Poll interval in poll mode, seconds."),
    ParamSpec("exit_timeout_secs", 30.0, FLOAT,
              "At shutdown, how long in-flight requests may take to finish, seconds."),
    *_frontend_params(),
    # Request tracing (core/tracer.py, docs/tracing.md): tritonserver's --trace-config settings
    ParamSpec("trace.file", "", STR,
              "Trace file in Triton's JSON format (tritonserver --trace-config "
              "triton,file=...): requests of every frontend and the frames of bindings served "
              "by the embedded core; empty: no tracing."),
    ParamSpec("trace.level", [], STR_LIST,
              "Trace levels (--trace-config level=...): TIMESTAMPS, TENSORS (several add up); "
              "[] or \"OFF\" (quoted: YAML reads a bare OFF as false): off."),
    ParamSpec("trace.rate", 1000, INT,
              "Trace one request (or frame) in this many (--trace-config rate=...)."),
    ParamSpec("trace.count", -1, INT,
              "Traces to take before tracing stops; -1: no limit (--trace-config count=...)."),
    ParamSpec("trace.log_frequency", 0, INT,
              "0: one trace file; N: every N traces go to <trace.file>.<index> "
              "(--trace-config triton,log-frequency=...)."),
    ParamSpec("bindings", [], STR_LIST,
              "Names of the bindings (topics -> model input -> output topics). Each binding's "
              "settings are the parameters '<name>.*'."),
    ParamSpec("discovery_period_s", 1.0, FLOAT,
              "How often topic_patterns are matched against the ROS graph, seconds."),
    ParamSpec("diagnostics_period_s", 1.0, FLOAT,
              "Period of /diagnostics and ~/status, seconds (rates and percentiles cover one "
              "period)."),
    ParamSpec("worker_threads", 4, INT,
              "Threads that decode results and publish them (and preprocess frames, with "
              "preprocess_in_callback false). On a 2-core host 1 cost at most a few percent "
              "less CPU per frame than 4 (bench/DECISIONS.md, 'Worker threads and OpenCV's "
              "pool on two cores'); more cores use them."),
    ParamSpec("executor", "auto", STR,
              "How the node's callbacks run. events: rclpy's EventsExecutor (ROS 2 Kilted and "
              "later), about half the executor's CPU per frame; ~/load_model and "
              "~/unload_model are then served, under the same names, by a hidden helper node "
              "(_<node>_control) on a thread of its own. wait_set: rclpy's wait-set executor "
              "(every ROS 2, e.g. Humble), loads in their own callback group. auto: events "
              "where rclpy has it, else wait_set.", EXECUTORS),
    ParamSpec("preprocess_in_callback", True, BOOL,
              "Preprocess each frame in the image callback, on the executor thread that just "
              "received it, while its pixels are still in the CPU's cache (less CPU per frame: "
              "bench/DECISIONS.md, 'Preprocessing in the image callback'); false: on the "
              "worker threads, after a hand-off, which spreads preprocessing over cores where "
              "one thread cannot keep up (many high-resolution cameras)."),
    ParamSpec("serialized_images", True, BOOL,
              "Subscribe to images as serialized bytes (raw=True) and read them with rosbags' "
              "CDR deserializer: the pixels stay in the received buffer (no copy, no Python "
              "message per frame; less CPU to receive: bench/DECISIONS.md, 'Serialized image "
              "subscriptions'); false: rclpy's typed sensor_msgs/Image messages."),
)

# Input kinds (codec/registry.py): what a binding's topics carry, and compressed images
INPUT_KIND_CHOICES = ("auto", *INPUT_KINDS)
COMPRESSED_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("input_kind", "auto", STR,
              "What the input topics carry: image (sensor_msgs/Image), compressed "
              "(sensor_msgs/CompressedImage, JPEG or PNG, as image_transport's compressed "
              "transport publishes it), or auto: each topic's type as the ROS graph shows it "
              "(a topic with no publisher yet is read as image_transport names it: "
              ".../compressed as CompressedImage, else Image, until one appears).",
              INPUT_KIND_CHOICES),
    ParamSpec("reduced_decoding", True, BOOL,
              "Compressed inputs: decode a JPEG at 1/2, 1/4 or 1/8 of its size when that is "
              "still at least the model's input size (libjpeg's scaled decoding; boxes and masks "
              "stay in the source's full pixels)."),
)
# Format segmentation (codec/segmentation.py)
SEGMENTATION_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("segmentation_output", "", STR,
              "Format segmentation: the output holding per-pixel class scores [C,H,W] (argmax "
              "in the node) or class ids [H,W] or [1,H,W]; empty: the model's first output."),
    ParamSpec("segmentation_overlay", False, BOOL,
              "Format segmentation: also publish the mask coloured by class (rgb8, for rviz) on "
              "<output topic>/overlay."),
)

BINDING_PARAMS: tuple[ParamSpec, ...] = (
    # what is bound
    ParamSpec("model", "", STR, "Model to run (required)."),
    ParamSpec("model_version", -1, INT, "Model version; -1: the latest ready version."),
    ParamSpec("input", "", STR,
              "Model input that receives the image; empty: the model's only input. With "
              "'inputs': the input whose header the results carry (empty: the model's first "
              "input fed)."),
    ParamSpec("server_urls", [], STR_LIST,
              "KServe v2 endpoints serving the model (tritonserver, KServe, triton-ros-server): "
              "grpc://host:port, grpcs://host:port, http://host:port or https://host:port. Each "
              "frame goes to the healthy endpoint with the fewest outstanding requests; a failing "
              "endpoint is probed again with backoff. Empty: the node's embedded core."),
    ParamSpec("server_timeout_ms", 1000, INT,
              "With server_urls: per-request timeout, milliseconds; an endpoint that does not "
              "answer in time is marked down (the frame is retried once on another endpoint if "
              "time is left)."),
    ParamSpec("hedge_after_fraction", 0.25, FLOAT,
              "With two or more server_urls: when a topic's frames in flight (max_in_flight) "
              "have had no answer for this fraction of server_timeout_ms (a hung endpoint), a "
              "newer frame is sent at once to another endpoint that is up and not stalled "
              "instead of waiting or being dropped (one such hedged frame in flight per topic; "
              "counted as hedged, hedged_published, hedged_lost in /diagnostics). 0: no "
              "hedging; at most 1."),
    ParamSpec("tls_ca_file", "", STR,
              "With grpcs:// or https:// URLs: PEM file of the CA that signed the servers' "
              "certificates; empty: the system's CAs."),
    ParamSpec("tls_cert_file", "", STR,
              "With grpcs:// or https:// URLs: PEM client certificate (mutual TLS), with "
              "tls_key_file."),
    ParamSpec("tls_key_file", "", STR, "PEM private key of tls_cert_file."),
    ParamSpec("server_header_key", "", STR,
              "Header sent with every remote call, for Triton's restricted protocols "
              "(tritonserver --grpc-restricted-protocol / --http-restricted-api key=value)."),
    ParamSpec("server_header_value", "", STR,
              "Value of server_header_key (a secret: never logged or shown in diagnostics; "
              "readable through the parameter services: prefer server_header_value_env)."),
    ParamSpec("server_header_value_env", "", STR,
              "Name of an environment variable of the node's process holding the value of "
              "server_header_key, so that the secret is in no parameter; wins over "
              "server_header_value."),
    ParamSpec("shared_memory", "auto", STR,
              "With server_urls: auto sends inputs through system shared memory to endpoints on "
              "this host that accept it (127.0.0.1, localhost, ::1), else over the wire; off: "
              "always over the wire.", ("auto", "off")),
    ParamSpec("topics", [], STR_LIST,
              "Input topics (absolute names; sensor_msgs/Image or CompressedImage, see "
              "input_kind), bound at start; with 'inputs', source namespaces."),
    ParamSpec("topic_patterns", [], STR_LIST,
              "Glob patterns of input topics, matched against the ROS graph every "
              "discovery_period_s, so that robots may come and go: '*' and '?' stay within one "
              "name segment, '**' spans segments, '[abc]' is a character class, e.g. "
              "'/robot*/camera*/image_raw'. Only topics of a type input_kind reads match."),
    ParamSpec("forget_after_s", 30.0, FLOAT,
              "A topic found by a pattern is unbound after having no publisher for this long, "
              "seconds (0: never)."),
    # outputs
    ParamSpec("format", "detections", STR,
              "What is published per input frame: detections (vision_msgs/Detection2DArray, or "
              "triton_ros_interfaces/Detections without vision_msgs), classification "
              "(vision_msgs/Classification, or triton_ros_interfaces/Classification), tensors "
              "(triton_ros_interfaces/TensorList) or segmentation (sensor_msgs/Image mono8 class "
              "ids in the source's pixels).", FORMATS),
    ParamSpec("output_name", "", STR,
              "Name used by output_topic_template; empty: the format's name (detections, "
              "classification, tensors)."),
    ParamSpec("output_topic_template", "{namespace}/{output_name}", STR,
              "Output topic of each input topic. Fields: {namespace} (the input topic without its "
              "last name), {topic} (the input topic), {basename} (its last name), "
              "{output_name}, {binding}, {model}, {camera} (the namespace of the image topic "
              "without image_transport's transport subtopic: /robot1/front for "
              "/robot1/front/image_raw and /robot1/front/image_raw/compressed). The default maps "
              "/robot1/camera_front/image_raw to /robot1/camera_front/detections. A relative "
              "result is in the node's namespace."),
    ParamSpec("outputs", [], STR_LIST,
              "Format tensors: the model outputs to publish; empty: all."),
    # preprocessing
    ParamSpec("resize", "letterbox", STR,
              "letterbox: keep the aspect ratio and pad (boxes are mapped back to the source "
              "image); stretch: resize to the input size. Done with OpenCV straight from the "
              "message's bytes (numpy where OpenCV is missing).", RESIZE_MODES),
    ParamSpec("interpolation", "bilinear", STR, "Resize interpolation.", INTERPOLATIONS),
    ParamSpec("pad_value", 114, INT, "Letterbox padding, as a pixel value (0-255)."),
    ParamSpec("color", "rgb", STR,
              "Channel order of a 3-channel model input (images are converted from their "
              "encoding; a 1-channel input gets mono).", COLORS),
    ParamSpec("layout", "auto", STR,
              "Model input layout; auto: from the input's format in config.pbtxt, else from "
              "its dims.", LAYOUTS),
    ParamSpec("width", 0, INT, "Model input width; 0: from the model's dims."),
    ParamSpec("height", 0, INT, "Model input height; 0: from the model's dims."),
    ParamSpec("scale", 0.0, FLOAT,
              "Input value = (pixel * scale - mean) / std, per channel, in the model input's "
              "data type. 0: 1/255 for floating-point inputs, 1 for integer inputs (raw "
              "pixels)."),
    ParamSpec("mean", [0.0], FLOAT_LIST, "Per-channel mean (one value: all channels)."),
    ParamSpec("std", [1.0], FLOAT_LIST, "Per-channel standard deviation (one value: all)."),
    # flow control
    ParamSpec("max_in_flight", 1, INT,
              "Frames of one input topic in the model at once (K). Further frames wait in a "
              "one-frame slot where the latest frame wins; replaced frames count as dropped."),
    ParamSpec("max_age_ms", 500, INT,
              "Frames older than this (header stamp to now, on the node's clock) are dropped, "
              "counted and logged with their age and likely cause; 0: no limit (use 0 when the "
              "robots' clocks are not synchronized with this host's)."),
    ParamSpec("priority", 0, INT,
              "Triton request priority of this binding's frames (0: the model's default)."),
    ParamSpec("timeout_us", 0, INT,
              "Triton request queue timeout, microseconds (0: the model's queue policy)."),
    ParamSpec("input_reliability", "best_effort", STR,
              "Input QoS reliability (best_effort with depth 5 is the sensor_data profile).",
              RELIABILITIES),
    ParamSpec("input_depth", 5, INT, "Input QoS history depth."),
    ParamSpec("output_reliability", "reliable", STR, "Output QoS reliability.", RELIABILITIES),
    ParamSpec("output_depth", 10, INT, "Output QoS history depth."),
    # detections
    ParamSpec("detection_layout", "auto", STR,
              "boxes_scores: raw boxes [A,4] and class scores [A,C] outputs; detections: one "
              "decoded [K,6] output of rows (x1, y1, x2, y2, score, class_id), padding rows with "
              "score 0; auto: detections if the model has detections_output, else "
              "boxes_scores.", DETECTION_LAYOUTS),
    ParamSpec("boxes_output", "boxes", STR, "Output holding boxes (boxes_scores layout)."),
    ParamSpec("scores_output", "scores", STR,
              "Output holding per-class scores (boxes_scores layout)."),
    ParamSpec("detections_output", "detections", STR,
              "Output holding decoded detections (detections layout)."),
    ParamSpec("box_format", "xyxy", STR, "Box coordinates in the model's output.", BOX_FORMATS),
    ParamSpec("box_normalized", False, BOOL,
              "Boxes are fractions of the model input size instead of its pixels."),
    ParamSpec("score_threshold", 0.25, FLOAT, "Detections scoring at or below this are dropped."),
    ParamSpec("nms", True, BOOL,
              "Run non-maximum suppression in the node (set false when the model already did)."),
    ParamSpec("nms_iou_threshold", 0.45, FLOAT,
              "Boxes overlapping a better one by more than this IoU are suppressed."),
    ParamSpec("class_agnostic_nms", False, BOOL,
              "NMS across classes instead of per class."),
    ParamSpec("pre_nms_top_k", 1000, INT, "Best candidates kept before NMS (0: all)."),
    ParamSpec("top_k", 100, INT, "Detections kept per image after NMS (0: all)."),
    ParamSpec("class_names", [], STR_LIST,
              "Class names by index; empty: the output's label_filename in the model's own "
              "config.pbtxt (an ensemble's own label file, not its steps'), else the class "
              "index."),
    # classification
    ParamSpec("classification_output", "", STR,
              "Output holding class scores; empty: the model's first output."),
    ParamSpec("class_count", 5, INT, "Classes published per image, best first (0: all)."),
    ParamSpec("softmax", False, BOOL, "Apply a softmax to the scores (the model gives logits)."),
    # results mirrored to Kafka
    *_mirror_params(),
    *COMPRESSED_PARAMS,
    *SEGMENTATION_PARAMS,
    # synchronized inputs (the maps 'inputs' and 'input_kinds': SYNC_MAPS), depth, 3D detections
    ParamSpec("sync_slop_ms", 10.0, FLOAT,
              "With 'inputs': the most the header stamps of one matched set may differ, "
              "milliseconds (message_filters' ApproximateTime max interval)."),
    ParamSpec("sync_queue_size", 10, INT,
              "With 'inputs': messages of one input waiting for partners at most; the oldest "
              "is dropped beyond (counted as unmatched_queue_overflow)."),
    ParamSpec("sync_min_interval_ms", 0.0, FLOAT,
              "With 'inputs': the least time between two messages of one input, milliseconds "
              "(message_filters' inter-message lower bound): a set is published as soon as it "
              "is provably the best instead of when the next message arrives; 0: no bound."),
    ParamSpec("depth_scale", 0.001, FLOAT,
              "Depth inputs: metres per unit of a 16UC1 image (0.001: millimetres, REP 118); "
              "32FC1 images are metres."),
    ParamSpec("depth_min_m", 0.0, FLOAT,
              "Depth inputs: valid depths are clipped into [depth_min_m, depth_max_m], metres."),
    ParamSpec("depth_max_m", 0.0, FLOAT,
              "Depth inputs: upper end of the clip range, metres; 0: no upper limit."),
    ParamSpec("depth_fill", 0.0, FLOAT,
              "Depth inputs: the value of invalid pixels (0, NaN, inf) and of the letterbox "
              "padding, metres."),
    ParamSpec("detections3d_output", "detections3d", STR,
              "Format detections3d: the output holding rows (x, y, z, size_x, size_y, size_z, "
              "score, class_id), metres in the reference input's frame."),
)

# Maps of a synchronized binding, given as '<binding>.<map>.<model input>' (YAML: a mapping under
# the map's name); their keys are model input names, so they are declared as they are given.
SYNC_MAPS: dict[str, str] = {
    "inputs": "Topic feeding model input '{key}', relative to the binding's source namespace "
              "(topics / topic_patterns name the namespaces): the inputs of one namespace are "
              "matched by header stamp into one request.",
    "input_kinds": "Input kind of model input '{key}' (image, depth, camera_info, or a kind of "
                   "codec/registry.py); unset: by the topic's message type.",
}
KIND_NAMES = ("image", "depth", "camera_info")        # families; kinds by name too


@dataclass(frozen=True)
class SyncConfig:
    """How a synchronized binding matches its inputs (message_filters' ApproximateTime)."""

    slop_ms: float = 10.0
    queue_size: int = 10
    min_interval_ms: float = 0.0


@dataclass(frozen=True)
class BindingConfig:
    name: str
    model: str
    model_version: int
    input: str
    topics: tuple[str, ...]
    topic_patterns: tuple[str, ...]
    forget_after_s: float
    format: str
    output_name: str
    output_topic_template: str
    outputs: tuple[str, ...]
    preprocess: PreprocessConfig
    detection: DetectionConfig
    classification: ClassificationConfig
    max_in_flight: int
    max_age_ms: int
    priority: int
    timeout_us: int
    input_reliability: str
    input_depth: int
    output_reliability: str
    output_depth: int
    remote: RemoteConfig | None = None         # set: served by server_urls, not the core
    kafka_mirror: MirrorConfig | None = None   # set: results mirrored to a Kafka topic
    input_kind: str = "auto"                   # codec/registry.py, or auto: the graph's type
    segmentation: SegmentationConfig = SegmentationConfig()
    # Synchronized inputs: (model input, topic relative to the source namespace), in name order
    inputs: tuple[tuple[str, str], ...] = ()
    input_kinds: tuple[tuple[str, str], ...] = ()   # (model input, kind name or family)
    sync: SyncConfig = SyncConfig()
    depth: DepthConfig = DepthConfig()
    detection3d: Detection3DConfig = Detection3DConfig()

    @property
    def synchronized(self) -> bool:
        """Fed from several topics of each source (``inputs``), matched by stamp."""
        return bool(self.inputs)

    @property
    def input_settings(self) -> Any:
        """The settings of this binding's input kind."""
        return self.settings_for(INPUT_KINDS.get(self.input_kind))

    def settings_for(self, kind: Any) -> Any:
        """The settings of an input of ``kind`` (an InputKind): depth, CameraInfo, or images."""
        family = family_of(kind) if kind is not None else "image"
        if family == "depth":
            return self.depth
        if family == "camera_info":
            return CameraInfoConfig()
        return self.preprocess

    @property
    def output_settings(self) -> Any:
        """The settings of this binding's output format (``format``)."""
        return {"detections": self.detection, "classification": self.classification,
                "tensors": TensorsConfig(self.outputs),
                "segmentation": self.segmentation,
                "detections3d": self.detection3d}[self.format]


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
    kafka: KafkaOptions = KafkaOptions()       # kafka.*: the frontend's and the mirrors' brokers


# --------------------------------------------------------------------------------------------
# Declaring and reading
# --------------------------------------------------------------------------------------------

def _trace_config(values: dict[str, Any]) -> TraceConfig:
    """The trace.* parameters, checked as tritonserver checks its --trace-* options."""
    try:
        return parse_trace_config(
            (), file=values["trace.file"], levels=values["trace.level"] or ["OFF"],
            rate=values["trace.rate"], count=values["trace.count"],
            log_frequency=values["trace.log_frequency"])
    except TritonRosError as exc:
        raise invalid_arg(f"parameter trace.*: {exc.message}") from None


def declare_and_read(node, *, bundled_repository: Path | None = None) -> NodeConfig:
    """Declare every parameter on ``node`` and parse them; INVALID_ARG names a bad parameter."""
    values = {spec.name: _declare(node, spec.name, spec) for spec in NODE_PARAMS}
    binding_names = values["bindings"]
    seen: set[str] = set()
    bindings = []
    for name in binding_names:
        if not _BINDING_NAME.match(name):
            raise invalid_arg(f"binding name '{name}' must start with a letter and hold only "
                              f"letters, digits and '_'")
        if name in seen:
            raise invalid_arg(f"binding '{name}' is listed twice in 'bindings'")
        if any(name == spec.name.split(".")[0] for spec in NODE_PARAMS):
            raise invalid_arg(f"binding name '{name}' is also a node parameter; choose another")
        seen.add(name)
        raw = {spec.name: _declare(node, f"{name}.{spec.name}", spec) for spec in BINDING_PARAMS}
        raw.update(_declare_sync_maps(node, name))
        bindings.append(binding_config(name, raw))

    repositories = tuple(values["model_repository"]) or \
        ((str(bundled_repository),) if bundled_repository else ())
    if not repositories:
        raise invalid_arg("parameter 'model_repository' is empty and no bundled repository "
                          "was found")
    server = ServerOptions(
        model_repositories=repositories,
        model_control_mode=values["model_control_mode"],
        startup_models=tuple(values["startup_models"]),
        strict_model_config=values["strict_model_config"],
        strict_readiness=values["strict_readiness"],
        repository_poll_secs=_positive(values, "repository_poll_secs"),
        exit_timeout_secs=max(0.0, values["exit_timeout_secs"]),
        trace_config=_trace_config(values),
    )
    kafka = kafka_options(values)
    check_kafka_use(kafka, [b.name for b in bindings if b.kafka_mirror is not None])
    frontends = endpoint_options(values, server.exit_timeout_secs, kafka)
    declared = {spec.name for spec in NODE_PARAMS} | {
        f"{b}.{spec.name}" for b in binding_names for spec in BINDING_PARAMS} | {
        f"{b.name}.{m}.{key}" for b in bindings for m, pairs in
        (("inputs", b.inputs), ("input_kinds", b.input_kinds)) for key, _ in pairs}
    return NodeConfig(
        server=server, frontends=frontends, bindings=tuple(bindings),
        discovery_period_s=_positive(values, "discovery_period_s"),
        diagnostics_period_s=_positive(values, "diagnostics_period_s"),
        worker_threads=_at_least(values, "worker_threads", 1),
        executor=values["executor"],
        serialized_images=values["serialized_images"],
        preprocess_in_callback=values["preprocess_in_callback"],
        unknown_parameters=tuple(sorted(unknown_overrides(node, declared))),
        kafka=kafka,
    )


def binding_config(name: str, raw: dict[str, Any]) -> BindingConfig:
    """Check one binding's values (keyed by relative parameter name) and build its config."""
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
    fmt = raw["format"]
    output_name = raw["output_name"] or fmt       # a format's default output name is its own
    template = raw["output_topic_template"]
    for param in ("output_topic_template", "kafka_mirror_key"):
        fields = [f for _, f, _, _ in string.Formatter().parse(raw[param]) if f is not None]
        unknown = [f for f in fields if f not in TEMPLATE_FIELDS]
        if unknown:
            raise invalid_arg(f"{where(param)}: unknown field(s) "
                              f"{', '.join('{' + f + '}' for f in unknown)} (known: "
                              f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)})")
    for param in ("score_threshold", "nms_iou_threshold"):
        if not 0.0 <= raw[param] <= 1.0:
            raise invalid_arg(f"{where(param)} must be within [0, 1], got {raw[param]}")
    for param in ("max_in_flight", "input_depth", "output_depth"):
        if raw[param] < 1:
            raise invalid_arg(f"{where(param)} must be at least 1, got {raw[param]}")
    for param in ("max_age_ms", "timeout_us", "priority", "top_k", "pre_nms_top_k",
                  "class_count", "width", "height"):
        if raw[param] < 0:
            raise invalid_arg(f"{where(param)} must not be negative, got {raw[param]}")
    if not 0 <= raw["pad_value"] <= 255:
        raise invalid_arg(f"{where('pad_value')} must be within [0, 255]")
    class_names = tuple(raw["class_names"])
    remote = None
    header_value = raw["server_header_value"]
    if raw["server_header_value_env"]:
        header_value = os.environ.get(raw["server_header_value_env"], "")
        if not header_value:
            raise invalid_arg(f"{where('server_header_value_env')}: the environment variable "
                              f"'{raw['server_header_value_env']}' is not set or empty")
    if raw["server_urls"]:
        remote = RemoteConfig(
            urls=tuple(raw["server_urls"]), timeout_ms=raw["server_timeout_ms"],
            tls_ca_file=raw["tls_ca_file"], tls_cert_file=raw["tls_cert_file"],
            tls_key_file=raw["tls_key_file"], header_key=raw["server_header_key"],
            header_value=header_value, shared_memory=raw["shared_memory"],
            hedge_after_fraction=raw["hedge_after_fraction"])
        try:
            check_remote_config(remote)
        except TritonRosError as exc:
            raise invalid_arg(f"binding '{name}': {exc.message}") from None
    inputs, input_kinds, sync, depth = _sync_settings(name, raw)
    return BindingConfig(
        name=name, model=raw["model"], model_version=raw["model_version"], input=raw["input"],
        topics=tuple(raw["topics"]), topic_patterns=tuple(raw["topic_patterns"]),
        forget_after_s=max(0.0, raw["forget_after_s"]), format=fmt, output_name=output_name,
        output_topic_template=template, outputs=tuple(raw["outputs"]),
        preprocess=PreprocessConfig(
            resize=raw["resize"], interpolation=raw["interpolation"], pad_value=raw["pad_value"],
            color=raw["color"], layout=raw["layout"], width=raw["width"], height=raw["height"],
            scale=raw["scale"], mean=tuple(raw["mean"]), std=tuple(raw["std"]),
            reduced_decoding=raw["reduced_decoding"]),
        detection=DetectionConfig(
            layout=raw["detection_layout"], boxes_output=raw["boxes_output"],
            scores_output=raw["scores_output"], detections_output=raw["detections_output"],
            box_format=raw["box_format"], box_normalized=raw["box_normalized"],
            score_threshold=raw["score_threshold"], nms=raw["nms"],
            nms_iou_threshold=raw["nms_iou_threshold"],
            class_agnostic_nms=raw["class_agnostic_nms"], pre_nms_top_k=raw["pre_nms_top_k"],
            top_k=raw["top_k"], class_names=class_names),
        classification=ClassificationConfig(
            output=raw["classification_output"], class_count=raw["class_count"],
            softmax=raw["softmax"], class_names=class_names),
        max_in_flight=raw["max_in_flight"], max_age_ms=raw["max_age_ms"],
        priority=raw["priority"], timeout_us=raw["timeout_us"],
        input_reliability=raw["input_reliability"], input_depth=raw["input_depth"],
        output_reliability=raw["output_reliability"], output_depth=raw["output_depth"],
        remote=remote, kafka_mirror=mirror_config(name, raw),
        input_kind=raw["input_kind"],
        segmentation=SegmentationConfig(output=raw["segmentation_output"],
                                        overlay=raw["segmentation_overlay"],
                                        class_names=class_names),
        inputs=inputs, input_kinds=input_kinds, sync=sync, depth=depth,
        detection3d=Detection3DConfig(
            output=raw["detections3d_output"], score_threshold=raw["score_threshold"],
            top_k=raw["top_k"], class_names=class_names),
    )


def _sync_settings(name: str, raw: dict[str, Any]):
    """The synchronized inputs, their kinds, matching and depth settings of a binding, checked."""
    def where(param: str) -> str:
        return f"parameter '{name}.{param}'"

    inputs = tuple(sorted((raw.get("inputs") or {}).items()))
    kinds = tuple(sorted((raw.get("input_kinds") or {}).items()))
    for key, topic in inputs:
        if not topic or topic.startswith("/") or topic.endswith("/") or "//" in topic:
            raise invalid_arg(f"{where('inputs.' + key)}: '{topic}' must be a topic name relative "
                              f"to the source namespace (e.g. depth/image_raw), not absolute")
    names = {key for key, _ in inputs}
    known = set(INPUT_KINDS) | set(KIND_NAMES)
    for key, kind in kinds:
        if key not in names:
            raise invalid_arg(f"{where('input_kinds.' + key)}: '{key}' is not one of the "
                              f"binding's inputs ({', '.join(sorted(names)) or 'none'})")
        if kind not in known:
            raise invalid_arg(f"{where('input_kinds.' + key)}: unknown input kind '{kind}' "
                              f"(known: {', '.join(sorted(known))})")
    if inputs and raw["input"] and raw["input"] not in names:
        raise invalid_arg(f"{where('input')}: '{raw['input']}' is not one of the binding's "
                          f"inputs ({', '.join(sorted(names))}); with 'inputs' it names the one "
                          f"whose header the results carry")
    if raw["sync_slop_ms"] < 0 or raw["sync_min_interval_ms"] < 0:
        raise invalid_arg(f"{where('sync_slop_ms')} and {where('sync_min_interval_ms')} must "
                          f"not be negative")
    if raw["sync_queue_size"] < 1:
        raise invalid_arg(f"{where('sync_queue_size')} must be at least 1, got "
                          f"{raw['sync_queue_size']}")
    if not raw["depth_scale"] > 0:
        raise invalid_arg(f"{where('depth_scale')} must be positive, got {raw['depth_scale']}")
    if raw["depth_min_m"] < 0 or raw["depth_max_m"] < 0 or (
            raw["depth_max_m"] and raw["depth_max_m"] <= raw["depth_min_m"]):
        raise invalid_arg(f"{where('depth_min_m')} and {where('depth_max_m')} must make a range "
                          f"(0 <= min < max; max 0: no upper limit), got "
                          f"[{raw['depth_min_m']}, {raw['depth_max_m']}]")
    sync = SyncConfig(slop_ms=raw["sync_slop_ms"], queue_size=raw["sync_queue_size"],
                      min_interval_ms=raw["sync_min_interval_ms"])
    depth = DepthConfig(scale=raw["depth_scale"], min_m=raw["depth_min_m"],
                        max_m=raw["depth_max_m"], fill=raw["depth_fill"], resize=raw["resize"],
                        layout=raw["layout"], width=raw["width"], height=raw["height"])
    return inputs, kinds, sync, depth


def _declare_sync_maps(node, binding: str) -> dict[str, dict[str, str]]:
    """Declare the entries given under '<binding>.inputs.' and '<binding>.input_kinds.' (their
    keys are the model's input names, known only from what was given) and read them."""
    overrides = getattr(node, "_parameter_overrides", None) or {}
    out: dict[str, dict[str, str]] = {}
    for map_name, description in SYNC_MAPS.items():
        prefix = f"{binding}.{map_name}."
        entries = {}
        for full in sorted(n for n in overrides if n.startswith(prefix)):
            key = full[len(prefix):]
            spec = ParamSpec(full, "", STR, description.format(key=key))
            entries[key] = _declare(node, full, spec)
        out[map_name] = entries
    return out


def _declare(node, full_name: str, spec: ParamSpec) -> Any:
    from rcl_interfaces.msg import ParameterDescriptor

    constraints = f"one of: {', '.join(spec.choices)}" if spec.choices else ""
    descriptor = ParameterDescriptor(description=spec.description,
                                     additional_constraints=constraints,
                                     read_only=True, dynamic_typing=True)
    value = node.declare_parameter(full_name, spec.default, descriptor).value
    return check_value(full_name, value, spec)


def check_value(full_name: str, value: Any, spec: ParamSpec) -> Any:
    """Coerce a parameter value to the spec's kind, or raise INVALID_ARG naming the parameter."""
    def bad(expected: str):
        return invalid_arg(f"parameter '{full_name}' must be {expected}, got {value!r}")

    kind = spec.kind
    if value is None and kind in (STR_LIST, FLOAT_LIST):
        value = []                     # YAML "[]" arrives as a parameter of no type
    if kind == BOOL:
        if not isinstance(value, bool):
            raise bad("true or false")
    elif kind == INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
    elif kind == FLOAT:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        value = float(value)
    elif kind == STR:
        if not isinstance(value, str):
            raise bad("a string")
        if spec.choices and value not in spec.choices:
            raise bad(f"one of {', '.join(spec.choices)}")
    elif kind == STR_LIST:
        if isinstance(value, str):
            value = [value] if value else []
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            value = list(value)
        elif hasattr(value, "__len__") and len(value) == 0:   # [] of any array type
            value = []
        else:
            raise bad("a list of strings")
    elif kind == FLOAT_LIST:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [float(value)]
        else:
            try:
                items = list(value)
            except TypeError:
                raise bad("a list of numbers") from None
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in items):
                raise bad("a list of numbers")
            value = [float(v) for v in items]
        if not value:
            raise bad("a non-empty list of numbers")
    return value


def _positive(values: dict, name: str) -> float:
    if values[name] <= 0:
        raise invalid_arg(f"parameter '{name}' must be positive, got {values[name]}")
    return values[name]


def _at_least(values: dict, name: str, low: int) -> int:
    if values[name] < low:
        raise invalid_arg(f"parameter '{name}' must be at least {low}, got {values[name]}")
    return values[name]


def unknown_overrides(node, declared: set[str]) -> set[str]:
    """Parameters given to the node (YAML, -p) that it does not declare: likely typos."""
    overrides = getattr(node, "_parameter_overrides", None) or {}
    builtin = {"use_sim_time", "start_type_description_service"}
    return {name for name in overrides
            if name not in declared and name not in builtin and not name.startswith("qos_overrides.")}
