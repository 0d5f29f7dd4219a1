"""The node's executor: callbacks run inline on one thread, blocking ones on a thread of their own.

rclpy's MultiThreadedExecutor dispatches every callback through a thread pool and rescans its list
of pending callbacks on each wake-up; at camera rates that bookkeeping cost more CPU than the
frames themselves (measured: 10-16 ms of CPU per frame against 7 ms with a single thread, and
the multi-threaded node fell behind at 120 frames/s). Image callbacks here only check a header and
hand the frame to the worker pool, so one thread runs them. Only callback groups named as
*blocking* (model load and unload, which take seconds) go to a separate thread, so that they never
stall the cameras. Mutual exclusion of callback groups is rclpy's own: a group's next callback is
not taken before the previous one ends.

Uses only the public executor API (``wait_for_ready_callbacks``, ``spin_once``), the same on
Humble, Jazzy and Kilted. A callback that raises is logged and the executor goes on.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import rclpy.executors as _executors
from rclpy.executors import SingleThreadedExecutor

# Exceptions of wait_for_ready_callbacks that only mean "nothing to run this time".
_IDLE = tuple(getattr(_executors, name) for name in
              ("ShutdownException", "TimeoutException", "ConditionReachedException")
              if hasattr(_executors, name))


class NodeExecutor(SingleThreadedExecutor):
    def __init__(self, *, blocking_groups: Iterable = (), logger=None, context=None) -> None:
        super().__init__(context=context)
        self._blocking = list(blocking_groups)
        self._logger = logger
        self._threads = ThreadPoolExecutor(max_workers=max(1, len(self._blocking)),
                                           thread_name_prefix="ros_blocking_callback")

    def spin_once(self, timeout_sec: float | None = None) -> None:
        try:
            handler, entity, _node = self.wait_for_ready_callbacks(timeout_sec=timeout_sec)
        except _IDLE:
            return
        group = getattr(entity, "callback_group", None)
        if group is not None and any(group is g for g in self._blocking):
            self._threads.submit(self._run, handler)
        else:
            self._run(handler)

    def _run(self, handler) -> None:
        try:
            handler()
            error = handler.exception()
            if error is not None:
                raise error
        except Exception as exc:  # one callback's fault must not stop the node
            if self._logger is not None:
                self._logger.error(f"callback failed: {type(exc).__name__}: {exc}")

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        done = super().shutdown(timeout_sec)
        self._threads.shutdown(wait=True)
        return done
