"""The node's model-control services: ~/load_model, ~/unload_model, ~/list_models and
~/get_model_statistics (triton_ros_interfaces/srv).

Each service converts and delegates to the shared :class:`~triton_ros.core.server.InferenceServer`,
exactly like the gRPC endpoint's RepositoryModelLoad, RepositoryModelUnload, RepositoryIndex and
ModelStatistics. A failure answers ``success: false`` with the core's message and is logged; it
never takes the node down. Loading and unloading run apart from the frames, so a slow load
blocks neither frames nor the queries: in their own callback group on the wait-set executor, or,
with the events executor (which runs every callback on one thread), on a hidden control node
spun on a thread of its own, under the same service names (``ros/executor.py``). Loading or
unloading one model does not touch the requests of another.
"""

from __future__ import annotations

from typing import Callable

from ..core.errors import as_triton_error
from ..core.infer_stats import Duration, StatsSnapshot
from ..core.server import InferenceServer
from ..core.strict_parse import parse_model_version


class ModelServices:
    def __init__(
        self,
        node,
        core: InferenceServer,
        *,
        control_group,
        query_group,
        control_node=None,
        remote_models: Callable[[], list] = list,
    ) -> None:
        from triton_ros_interfaces.srv import GetModelStatistics, ListModels, LoadModel, UnloadModel

        self._node = node
        self._core = core
        self._remote_models = remote_models
        self._log = node.get_logger()
        # With a control node, load and unload are its services, named as this node's own.
        control = control_node or node
        prefix = "~/" if control_node is None else node.get_fully_qualified_name() + "/"
        self.services = [
            control.create_service(
                LoadModel,
                prefix + "load_model",
                self._load,
                callback_group=control_group if control is node else None,
            ),
            control.create_service(
                UnloadModel,
                prefix + "unload_model",
                self._unload,
                callback_group=control_group if control is node else None,
            ),
            node.create_service(
                ListModels, "~/list_models", self._list, callback_group=query_group
            ),
            node.create_service(
                GetModelStatistics,
                "~/get_model_statistics",
                self._statistics,
                callback_group=query_group,
            ),
        ]

    def _fail(self, response, what: str, exc: BaseException):
        error = as_triton_error(exc)
        self._log.error(f"{what}: {error.message}")
        response.success = False
        response.message = error.message
        return response

    def _control(self, response, verb: str, name: str, action):
        """Run a load or unload and answer with its outcome (the core's message on failure)."""
        self._log.info(f"{verb}ing model '{name}'")
        try:
            action()
        except Exception as exc:
            return self._fail(response, f"~/{verb}_model '{name}'", exc)
        response.success = True
        response.message = f"model '{name}' {verb}ed"
        self._log.info(response.message)
        return response

    def _load(self, request, response):
        return self._control(
            response,
            "load",
            request.model_name,
            lambda: self._core.load_model(request.model_name, config_json=request.config or None),
        )

    def _unload(self, request, response):
        return self._control(
            response,
            "unload",
            request.model_name,
            lambda: self._core.unload_model(
                request.model_name, unload_dependents=request.unload_dependents
            ),
        )

    def _list(self, request, response):
        from triton_ros_interfaces.msg import ModelState

        try:
            entries = self._core.repository_index(ready_only=request.ready_only)
        except Exception as exc:
            return self._fail(response, "~/list_models", exc)
        response.models = [
            ModelState(name=e.name, version=e.version, state=e.state, reason=e.reason)
            for e in entries
        ]
        # Remote models of bindings (server_urls): one row per endpoint, with its state.
        for remote in self._remote_models():
            version = str(remote.version) if remote.version >= 0 else ""
            for url, state, reason in remote.describe_endpoints():
                ready = state == "up"
                if request.ready_only and not ready:
                    continue
                response.models.append(
                    ModelState(
                        name=remote.name,
                        version=version,
                        state="READY" if ready else "UNAVAILABLE",
                        reason=f"remote endpoint {state}" + ("" if ready else f": {reason}"),
                        endpoint=url,
                    )
                )
        response.success = True
        return response

    def _statistics(self, request, response):
        try:
            snapshots = self._core.model_statistics(
                request.model_name, parse_model_version(request.model_version)
            )
        except Exception as exc:
            return self._fail(response, "~/get_model_statistics", exc)
        response.model_stats = [statistics_message(s) for s in snapshots]
        response.success = True
        return response


def _duration(d: Duration):
    from triton_ros_interfaces.msg import StatisticDuration

    return StatisticDuration(count=d.count, ns=d.ns)


def statistics_message(s: StatsSnapshot):
    """A core statistics snapshot as triton_ros_interfaces/ModelStatistics."""
    from triton_ros_interfaces.msg import InferBatchStatistics, ModelStatistics

    msg = ModelStatistics(
        name=s.name,
        version=str(s.version),
        last_inference=s.last_inference_ms,
        inference_count=s.inference_count,
        execution_count=s.execution_count,
        success=_duration(s.success),
        fail=_duration(s.fail),
        queue=_duration(s.queue),
        compute_input=_duration(s.compute_input),
        compute_infer=_duration(s.compute_infer),
        compute_output=_duration(s.compute_output),
        cache_hit=_duration(s.cache_hit),
        cache_miss=_duration(s.cache_miss),
        mean_batch_size=s.inference_count / s.execution_count if s.execution_count else 0.0,
        failure_reasons=sorted(s.failures_by_reason),
        failure_counts=[s.failures_by_reason[k] for k in sorted(s.failures_by_reason)],
    )
    msg.batch_stats = [
        InferBatchStatistics(
            batch_size=b.batch_size,
            compute_input=_duration(b.compute_input),
            compute_infer=_duration(b.compute_infer),
            compute_output=_duration(b.compute_output),
        )
        for b in s.batch_stats
    ]
    return msg
