"""The ``inference_node``: Triton's serving model inside one ROS 2 node. This module builds the
node's graph from its parameters and runs it; each part is a sub-package or module of its own.

``ros2 run triton_ros inference_node --ros-args --params-file config/inference.yaml``

The node embeds the core :class:`~triton_ros.core.server.InferenceServer` (model repository,
control mode, dynamic batchers, statistics) and serves it three ways at once, all on the same
models and batchers:

- bindings (:mod:`.binding`): camera topics in, one result topic per camera out, each reading
  and writing messages through its codec (:mod:`.codec`) and feeding its model target
  (:mod:`.targets`): the embedded core's model, or one on remote endpoints, as
  :func:`model_target_for` picks;
- the KServe v2 gRPC, HTTP and metrics endpoints, and the Kafka frontend when ``kafka.*``
  parameters name brokers and request topics (``triton_ros.frontend``, whose options declare
  their parameters);
- services ~/load_model, ~/unload_model, ~/list_models, ~/get_model_statistics
  (:mod:`.model_services`), with /diagnostics and ~/status (:mod:`.monitoring`, and the remote
  endpoints' own statuses).

A binding with ``kafka_mirror_topic`` also sends a copy of each result to Kafka
(:mod:`.mirror`), off the frame's path.

Parameters are declared in :mod:`.parameters`; the callbacks run on the executor that
:mod:`.executor` chooses (``executor`` parameter). SIGINT and SIGTERM stop it cleanly: inputs and
endpoints close, the executor is shut down and joined, in-flight frames finish and publish, the
models unload, and the process exits 0.
"""

from __future__ import annotations

import logging
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NoReturn

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.logging import LoggingSeverity, get_logger
from rclpy.node import Node
from triton_ros_interfaces.msg import InferenceStatus

from ..core.errors import TritonRosError
from ..core.memory import keep_freed_buffers
from ..core.server import InferenceServer
from ..frontend.endpoints import EndpointStartError, Endpoints
from .binding.binding import Binding
from .codec.messages import CLASSIFICATION_TYPE, DETECTIONS3D_TYPE, DETECTIONS_TYPE, VISION_MSGS
from .executor import NodeSpinner, resolve_executor
from .mirror.diagnostics import MirrorReporter, mirror_statuses
from .mirror.kafka_mirror import CLOSE_TIMEOUT_S, KafkaMirror
from .mirror.mirror_metrics import mirror_families
from .model_services import ModelServices
from .monitoring.diagnostics import DiagnosticsReporter
from .monitoring.executor_lag import PERIOD_S as LAG_PERIOD_S, ExecutorLag
from .monitoring.messages import diagnostic_array, status_message
from .package_files import package_file
from .parameters import BindingConfig, declare_and_read
from .ros_logging import route_python_logging
from .ros_process import ExitWatchdog, init_ros
from .targets.local import LocalModelTarget
from .targets.remote.diagnostics import EndpointReporter, endpoint_statuses
from .targets.remote.model import RemoteModel
from .targets.spec import ModelTarget

NODE_NAME = "inference_node"


class InferenceNode(Node):
    """The node; :meth:`start` loads the models and opens everything, :meth:`close_inputs` and
    :meth:`finish` shut it down in two steps around the executor's shutdown."""

    def __init__(self, **kwargs) -> None:
        super().__init__(kwargs.pop("node_name", NODE_NAME), **kwargs)
        debug = self.get_logger().get_effective_level() <= LoggingSeverity.DEBUG
        route_python_logging(logging.DEBUG if debug else logging.INFO)  # --log-level applies
        self.config = declare_and_read(self, bundled_repository=package_file("model_repository"))
        for name in self.config.unknown_parameters:
            self.get_logger().warning(
                f"parameter '{name}' is not a parameter of this node "
                f"(misspelt, or a binding missing from 'bindings'?)"
            )
        self.executor_kind = resolve_executor(self.config.executor)
        self.control_node: Node | None = None  # events: load/unload live there
        # Every frame is a new megabyte-sized buffer: glibc keeps freed ones for the next frame
        # instead of mapping fresh pages (a page fault each; core/memory.py).
        keep_freed_buffers()
        self.core = InferenceServer(self.config.server)
        self.reporter = DiagnosticsReporter(self.core)
        self.workers = ThreadPoolExecutor(
            max_workers=self.config.worker_threads, thread_name_prefix="triton_ros_worker"
        )
        self.frontends = Endpoints(self.core, self.config.frontends)
        self.mirror = KafkaMirror(
            self.config.kafka,
            self.config.bindings,
            node_name=self.get_fully_qualified_name(),
            logger=self.get_logger(),
        )
        self._mirror_reporter = MirrorReporter()
        # Everything runs on the executor's thread except the control group (load, unload).
        self._image_group = MutuallyExclusiveCallbackGroup()
        # How far behind the executor runs the image callbacks (explains stale frames).
        self.executor_lag = ExecutorLag()
        self.control_group = MutuallyExclusiveCallbackGroup()
        self._query_group = MutuallyExclusiveCallbackGroup()
        self._timer_group = MutuallyExclusiveCallbackGroup()
        self.bindings = [
            Binding(
                cfg,
                node=self,
                target=model_target_for(cfg, self.core),
                workers=self.workers,
                callback_group=self._image_group,
                # a remote binding's round trips are not the local model's
                model_latency=(
                    self.reporter.model_latency(cfg.model) if cfg.remote is None else None
                ),
                serialized_images=self.config.serialized_images,
                preprocess_in_callback=self.config.preprocess_in_callback,
                executor_lag=self.executor_lag,
                mirror=self.mirror.for_binding(cfg.name),
            )
            for cfg in self.config.bindings
        ]
        if self.remote_models():
            # A remote frame crosses threads four times (worker, event loop, gRPC, worker);
            # with the GIL's default 5 ms switch interval each crossing may wait that long
            # behind the image callbacks and preprocessing. 1 ms keeps the round trip short.
            sys.setswitchinterval(0.001)
        self.model_services: ModelServices | None = None
        self._diagnostics_pub = None
        self._status_pub = None
        self._started_core = False
        self._endpoint_reporter = EndpointReporter()

    # ---------------------------------------------------------------- start
    def start(self) -> None:
        log = self.get_logger()
        repos = ", ".join(self.config.server.model_repositories)
        log.info(f"model repository {repos} (control mode {self.config.server.model_control_mode})")
        self.core.start()
        self._started_core = True
        for entry in self.core.repository_index():
            if entry.state:
                log.info(
                    f"model '{entry.name}' version {entry.version}: {entry.state}"
                    + (f" ({entry.reason})" if entry.reason else "")
                )
        for kind, endpoint in self.frontends.start():
            log.info(f"serving {kind.title} at {endpoint.target}")
        if self.mirror:
            self.mirror.start()
            self.core.metric_sources.add(
                "kafka_mirror", lambda: mirror_families(self.mirror.figures())
            )
        for binding in self.bindings:
            if isinstance(binding.target, RemoteModel):
                binding.target.start()
                endpoints = binding.target.describe_endpoints()
                text = (
                    f"binding '{binding.config.name}': model '{binding.config.model}' on "
                    + ", ".join(
                        f"{url} ({state})" if state == "up" else f"{url} ({state}: {reason})"
                        for url, state, reason in endpoints
                    )
                )
                if all(state == "up" for _, state, _ in endpoints):
                    log.info(text)
                else:
                    log.warning(text)
        if self.executor_kind == "events":
            # The events executor runs every callback on one thread: the services that take
            # seconds get a hidden node and a thread of their own (ros/executor.py). Global
            # remappings (__node:=...) are not applied to it, so it cannot take this node's name.
            self.control_node = Node(
                f"_{self.get_name()}_control",
                namespace=self.get_namespace(),
                context=self.context,
                use_global_arguments=False,
                start_parameter_services=False,
            )
        self.model_services = ModelServices(
            self,
            self.core,
            control_group=self.control_group,
            control_node=self.control_node,
            query_group=self._query_group,
            remote_models=self.remote_models,
        )
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._status_pub = self.create_publisher(InferenceStatus, "~/status", 10)
        self.create_timer(
            self.config.diagnostics_period_s,
            self._publish_diagnostics,
            callback_group=self._timer_group,
        )
        # In the image callbacks' group, on the steady clock: it waits where frames wait.
        self._lag_timer = self.create_timer(
            LAG_PERIOD_S,
            self._measure_lag,
            callback_group=self._image_group,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )
        for binding in self.bindings:
            binding.start()
        # Patterns, auto kinds, and synchronized namespaces (bound as their inputs appear)
        if any(b.needs_discovery() for b in self.bindings):
            self._discover()
            self.create_timer(
                self.config.discovery_period_s, self._discover, callback_group=self._timer_group
            )
        if any(
            b.config.format in ("detections", "classification", "detections3d")
            for b in self.bindings
        ):
            log.info(
                "results are published as "
                + ", ".join(
                    f"{t.__module__.split('.')[0]}/{t.__name__}"
                    for t in (DETECTIONS_TYPE, CLASSIFICATION_TYPE, DETECTIONS3D_TYPE)
                )
                + (
                    ""
                    if VISION_MSGS
                    else " (vision_msgs is not installed: the package's "
                    "fallback messages, same field names, no results[].pose)"
                )
            )

    def announce_ready(self) -> None:
        """Log ``ready:`` once the executor spins: from then on services and frames are answered
        (tests and launch scripts wait for this line, so it must not come before that)."""
        self.get_logger().info(
            f"callbacks run on rclpy's "
            f"{'events' if self.executor_kind == 'events' else 'wait-set'} "
            f"executor (parameter 'executor': {self.config.executor})"
        )
        self.get_logger().info(
            f"ready: {len(self.bindings)} binding(s) "
            f"[{', '.join(b.config.name + ' -> ' + b.config.model for b in self.bindings)}]"
        )

    def remote_models(self) -> list[RemoteModel]:
        """The bindings' remote model targets (server_urls)."""
        return [b.target for b in self.bindings if isinstance(b.target, RemoteModel)]

    # ---------------------------------------------------------------- periodic work
    def _discover(self) -> None:
        try:
            topics = self.get_topic_names_and_types()
            for binding in self.bindings:
                binding.discover(topics, self.count_publishers)
        except Exception as exc:  # graph queries can fail while shutting down
            self.get_logger().warning(f"topic discovery failed: {exc}")

    def _measure_lag(self) -> None:
        now = time.monotonic_ns()  # the steady clock's (CLOCK_MONOTONIC)
        until = self._lag_timer.time_until_next_call()
        self.executor_lag.tick(now, now + (until if until is not None else 0))

    def _publish_diagnostics(self) -> None:
        try:
            now = time.monotonic_ns()
            models, bindings = self.reporter.report(
                [b.figures() for b in self.bindings], now, self.executor_lag.samples.drain()
            )
            stamp = self.get_clock().now().to_msg()
            array = diagnostic_array(stamp, self.get_fully_qualified_name(), models, bindings)
            array.status.extend(
                endpoint_statuses(
                    self.get_fully_qualified_name(),
                    self._endpoint_reporter.report(self.remote_models(), now),
                )
            )
            if self.mirror:
                array.status.extend(
                    mirror_statuses(
                        self.get_fully_qualified_name(),
                        self._mirror_reporter.report(self.mirror.figures(), now),
                    )
                )
            self._diagnostics_pub.publish(array)
            self._status_pub.publish(status_message(stamp, models, bindings))
        except Exception as exc:  # monitoring must never stop the node
            self.get_logger().error(f"diagnostics failed: {exc}")

    # ---------------------------------------------------------------- stop
    def close_inputs(self) -> None:
        """Stop taking frames and network requests (before the executor is shut down)."""
        for binding in self.bindings:
            binding.stop()
        self.frontends.stop_protocols()

    def finish(self) -> None:
        """Let in-flight requests finish (their results are still published), unload models;
        then stop the metrics endpoint (the same order as triton-ros-server)."""
        if self._started_core:
            self.core.stop()
        # Frames still in a model (a remote one too) finish and publish before the workers stop.
        deadline = time.monotonic() + self.config.server.exit_timeout_secs
        while any(b.in_flight() for b in self.bindings) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.mirror:  # their results go to Kafka, within a bound
            self.mirror.close(min(CLOSE_TIMEOUT_S, self.config.server.exit_timeout_secs))
        self.frontends.stop()
        self.workers.shutdown(wait=True)
        for binding in self.bindings:
            try:
                binding.target.close()
            except Exception as exc:  # shutting down: report, carry on
                self.get_logger().error(
                    f"binding '{binding.config.name}': closing its model "
                    f"target failed: {type(exc).__name__}: {exc}"
                )


def model_target_for(config: BindingConfig, core: InferenceServer) -> ModelTarget:
    """The target of a binding: the embedded core's model, or with ``server_urls`` a
    :class:`~triton_ros.ros.targets.remote.model.RemoteModel` (started and stopped by the node)."""
    if config.remote is not None:
        return RemoteModel(config.model, config.model_version, config.remote, binding=config.name)
    return LocalModelTarget(core, config.model, config.model_version)


def main(args: list[str] | None = None) -> NoReturn:
    """Run the node until SIGINT or SIGTERM, stop it in order, and end the process with its
    exit status (0, or 1 when it could not start or its executor died): this does not return.
    The stop is bounded (:class:`~triton_ros.ros.ros_process.ExitWatchdog`)."""
    stop = init_ros(args)
    watchdog = ExitWatchdog(NODE_NAME)
    stop.on_repeat = watchdog.fire  # a second SIGINT/SIGTERM: out now, telling why
    node: InferenceNode | None = None
    spinner: NodeSpinner | None = None
    rc = 0
    try:
        node = InferenceNode()
        node.start()
        spinner = NodeSpinner(
            node,
            kind=node.executor_kind,
            blocking_groups=[node.control_group],
            control_node=node.control_node,
            logger=node.get_logger(),
        )
        spinner.start()
        node.announce_ready()
        while not stop.wait(0.2):
            if not spinner.alive():
                node.get_logger().error("the executor stopped unexpectedly")
                rc = 1
                break
        if stop.signal_name:
            node.get_logger().info(f"{stop.signal_name} received, shutting down")
    except TritonRosError as exc:
        _log_error(node, f"cannot start: {exc.message}")
        rc = 1
    except EndpointStartError as exc:  # e.g. the gRPC port is taken
        _log_error(node, f"cannot start: {exc}")
        rc = 1
    except Exception as exc:  # e.g. the gRPC port is taken
        _log_error(node, f"cannot start: {type(exc).__name__}: {exc}")
        rc = 1
    finally:
        watchdog.arm(stop_bound_s(node))
        if node is not None:
            node.close_inputs()
        if spinner is not None:
            spinner.stop()
        if node is not None:
            node.finish()
            node.get_logger().info("stopped")
            if node.control_node is not None:
                node.control_node.destroy_node()
            node.destroy_node()
        rclpy.try_shutdown()
    watchdog.leave(rc)  # the process ends here (ros_process.py)


def stop_bound_s(node: InferenceNode | None) -> float:
    """How long the orderly stop may take: frames and requests in flight get the exit timeout
    (``exit_timeout_secs``), a remote one its request timeout, the rest a few seconds."""
    if node is None:
        return 10.0
    remote_s = max(
        (b.config.remote.timeout_ms / 1000.0 for b in node.bindings if b.config.remote is not None),
        default=0.0,
    )
    return node.config.server.exit_timeout_secs + remote_s + 10.0


def _log_error(node, text: str) -> None:
    if node is not None:
        node.get_logger().error(text)
    else:
        get_logger(NODE_NAME).error(text)


if __name__ == "__main__":
    main()
