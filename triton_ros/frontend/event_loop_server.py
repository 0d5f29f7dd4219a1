"""An endpoint served by ``asyncio`` on a thread of its own (the gRPC and HTTP endpoints).

The frontends run beside a ROS node's executor in the same process, so each network endpoint
owns an event loop thread. :class:`EventLoopServer` gives them one shape:
``Server(core, address=, port=)``, ``start()`` returns once it listens (or raises why it could
not), ``stop(grace)`` refuses new work and gives in-flight requests ``grace`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import threading

_log = logging.getLogger("triton_ros.frontend")


def host_port(address: str, port: int) -> str:
    """``address:port``, with IPv6 addresses in brackets."""
    host = f"[{address}]" if ":" in address else address
    return f"{host}:{port}"


class EventLoopServer:
    """Base class: subclasses bind in :meth:`_listen` and shut down in :meth:`_shutdown`."""

    service_name = "service"  # as tritonserver names it in "Started <name> at <address>"

    def __init__(self, *, address: str, port: int) -> None:
        self.address = address
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop_requested: asyncio.Event | None = None
        self._grace = 5.0

    @property
    def target(self) -> str:
        return host_port(self.address, self.port)

    async def _listen(self) -> None:
        """Bind and start serving; set ``self.port`` to the bound port."""
        raise NotImplementedError

    async def _shutdown(self, grace: float) -> None:
        """Stop accepting work; let in-flight requests finish within ``grace`` seconds."""
        raise NotImplementedError

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.service_name, daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        """The endpoint's event loop (subclasses may pick another implementation)."""
        return asyncio.new_event_loop()

    def _run(self) -> None:
        self._loop = self._new_loop()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # report start failures to start()
            self._error = exc
            self._started.set()
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        await self._listen()
        _log.info("Started %s at %s", self.service_name, self.target)
        self._stop_requested = asyncio.Event()
        self._started.set()
        await self._stop_requested.wait()
        await self._shutdown(self._grace)

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting requests; give in-flight requests ``grace`` seconds to finish."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        self._grace = grace
        self._loop.call_soon_threadsafe(self._stop_requested.set)
        self._thread.join(timeout=grace + 5.0)
        if self._thread.is_alive():
            _log.warning("%s did not stop within %.1f s", self.service_name, grace + 5.0)
