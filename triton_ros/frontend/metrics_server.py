"""Triton's metrics endpoint: ``GET /metrics`` on its own port (default 127.0.0.1:8002).

The exposition is written by ``prometheus_client`` from a custom collector,
:class:`TritonCollector`, that turns each scrape's :class:`~triton_ros.core.metric_family.Family`
list (derived from the same statistics snapshots that answer ModelStatistics) into
``prometheus_client`` metric families with Triton's names, types and labels. It is served by the
same aiohttp transport as the HTTP/REST endpoint (``http_transport``: connection limit, header and
idle timeouts, no thread per connection); a scrape is rendered on a worker thread, so a slow scrape
never blocks other connections.

One adaptation: Triton (prometheus-cpp) names counters without the ``_total`` suffix, as in
``nv_inference_request_success``; ``prometheus_client``'s Prometheus text writer appends
``_total`` to a counter's HELP and TYPE lines. :class:`_TritonName` keeps the family's name
as Triton writes it, so the HELP, TYPE and sample lines agree, as dashboards expect.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric

from ..core.metrics import Metrics
from ..core.server import InferenceServer
from .http.http_transport import AiohttpEndpoint
from .options import MetricsOptions

_log = logging.getLogger("triton_ros.metrics")


class _TritonName(str):
    """A metric family name that stays itself when prometheus_client appends ``_total``."""

    def __add__(self, other: str) -> str:
        if other == "_total":
            return str(self)
        return str.__add__(self, other)


class TritonCollector:
    """prometheus_client collector over :class:`Metrics` (one snapshot per scrape)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self):
        for family in self._metrics.families():
            metric = Metric(_TritonName(family.name), family.help, family.type)
            for labels, value in family.samples:
                metric.add_sample(family.name, {k: str(v) for k, v in labels.items()}, float(value))
            yield metric


def _json_error(status: int, message: str) -> web.Response:
    import json

    response = web.Response(
        status=status, body=json.dumps({"error": message}).encode(), content_type="application/json"
    )
    return response


class MetricsServer(AiohttpEndpoint):
    """Serves ``/metrics`` on an event loop thread; start() returns once it listens."""

    service_name = "Metrics Service"
    endpoint = "metrics"

    def __init__(
        self,
        core: InferenceServer,
        *,
        address: str = "127.0.0.1",
        port: int = 8002,
        options: MetricsOptions | None = None,
        interval_ms: float | None = None,
        allow_gpu_metrics: bool | None = None,
        allow_cpu_metrics: bool | None = None,
    ) -> None:
        options = options or MetricsOptions()
        super().__init__(
            address=address, port=port, limits=options.transport(), stats=core.endpoint_stats
        )
        self._core = core
        self.metrics = Metrics(
            core,
            interval_ms=options.interval_ms if interval_ms is None else interval_ms,
            allow_gpu_metrics=(
                options.allow_gpu_metrics if allow_gpu_metrics is None else allow_gpu_metrics
            ),
            allow_cpu_metrics=(
                options.allow_cpu_metrics if allow_cpu_metrics is None else allow_cpu_metrics
            ),
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TritonCollector(self.metrics))

    def render(self) -> bytes:
        """The exposition, as GET /metrics returns it."""
        return generate_latest(self.registry)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.raw_path.split("?", 1)[0] != "/metrics":
            response = _json_error(404, "Not Found")
        elif request.method != "GET":
            response = _json_error(405, "Method Not Allowed")
        else:
            try:
                body = await asyncio.get_running_loop().run_in_executor(None, self.render)
            except Exception as exc:  # a scrape never takes the server down
                _log.exception("rendering metrics failed")
                return _json_error(500, str(exc))
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})
        if request.can_read_body:
            response.force_close()  # the body is never read: close instead of draining
        return response
