"""Triton's metrics endpoint: ``GET /metrics`` on its own port (default 127.0.0.1:8002).

Serves the Prometheus text exposition that :class:`~triton_ros.core.metrics.Metrics` renders
from the shared core, on a small threaded HTTP/1.1 server of the standard library (scrapes are
rare and cheap; no dependency is needed). Same shape as ``GrpcServer``:
``MetricsServer(core, address=, port=)``, ``start()`` returns once it listens, ``stop()``.
"""
from __future__ import annotations

import http.server
import json
import logging
import socket
import socketserver
import threading

from ..core.metrics import CONTENT_TYPE, Metrics
from ..core.server import InferenceServer
from .event_loop_server import host_port

_log = logging.getLogger("triton_ros.metrics")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_ThreadingServer"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?", 1)[0] != "/metrics":
            self._reply(404, b'{"error":"Not Found"}', "application/json")
            return
        try:
            body = self.server.metrics.render().encode("utf-8")
        except Exception as exc:  # a scrape never takes the server down
            _log.exception("rendering metrics failed")
            self._reply(500, json.dumps({"error": str(exc)}).encode(), "application/json")
            return
        self._reply(200, body, CONTENT_TYPE)

    def _method_not_allowed(self) -> None:
        self._reply(405, b'{"error":"Method Not Allowed"}', "application/json")

    do_POST = do_PUT = do_DELETE = do_PATCH = _method_not_allowed  # noqa: N815

    def do_HEAD(self) -> None:  # noqa: N802
        self._method_not_allowed()

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # scrapes are not worth a log line
        _log.debug("%s %s", self.address_string(), format % args)


class _ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    metrics: Metrics


class MetricsServer:
    """Serves ``/metrics`` on a background thread; start() returns once it listens."""

    def __init__(self, core: InferenceServer, *, address: str = "127.0.0.1", port: int = 8002,
                 interval_ms: float = 2000.0, allow_gpu_metrics: bool = True,
                 allow_cpu_metrics: bool = True) -> None:
        self._core = core
        self.address = address
        self.port = port
        self.metrics = Metrics(core, interval_ms=interval_ms, allow_gpu_metrics=allow_gpu_metrics,
                               allow_cpu_metrics=allow_cpu_metrics)
        self._server: _ThreadingServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def target(self) -> str:
        return host_port(self.address, self.port)

    def start(self) -> None:
        server_cls = _ThreadingServer
        if ":" in self.address:
            server_cls = type("_ThreadingServer6", (_ThreadingServer,),
                              {"address_family": socket.AF_INET6})
        self._server = server_cls((self.address, self.port), _Handler)
        self._server.metrics = self.metrics
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="metrics-server", daemon=True)
        self._thread.start()
        _log.info("Started Metrics Service at %s", self.target)

    def stop(self, grace: float = 5.0) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=grace)
        self._server = None
