"""The node's executors: callbacks run inline on one thread, blocking ones on a thread of their own.

Two ways to run the node's callbacks, chosen by the node parameter ``executor``:

- ``events`` (``auto`` where rclpy has it: ``rclpy.experimental.EventsExecutor``, ROS 2 Kilted
  and later): rclpy's events executor, driven by :meth:`NodeSpinner._spin_events`. It does not
  rebuild a wait set in Python for every wake-up, which costs about half of the executor's CPU
  per frame. It runs every callback on its one thread, so the services that take seconds
  (``~/load_model``,
  ``~/unload_model``) live on a hidden helper node (``_<node>_control``, same namespace, the
  same service names as before: ``/<namespace>/<node>/load_model``) that a
  :class:`NodeExecutor` spins on a thread of its own: a load never stalls the cameras. The
  events executor is driven with ``spin_once`` in a loop: its ``spin()`` (rclpy of Kilted's
  wheels) runs no timer and keeps a core busy.
- ``wait_set`` (``auto`` where rclpy has no events executor, e.g. Humble): :class:`NodeExecutor`,
  below.

:class:`NodeExecutor`: rclpy's MultiThreadedExecutor dispatches every callback through a thread
pool and rescans its list of pending callbacks on each wake-up; at camera rates that bookkeeping
cost more CPU than the frames themselves (measured: 10-16 ms of CPU per frame against 7 ms with a
single thread, and the multi-threaded node fell behind at 120 frames/s). Image callbacks here
check a header and preprocess the frame (or hand it to the worker pool), then only queue it,
so one thread runs them. Only callback groups named as *blocking* (model load and unload,
which take seconds) go to a separate thread, so that they never stall the cameras. Mutual
exclusion of callback groups is rclpy's own: a group's next callback is not taken before the
previous one ends. It uses only the public executor API (``wait_for_ready_callbacks``,
``spin_once``), the same on Humble, Jazzy and Kilted.

In both, a callback that raises is logged and the executor goes on.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import rclpy.executors as _executors
from rclpy.executors import SingleThreadedExecutor

from ..core.errors import invalid_arg
from .parameters import EXECUTORS

SPIN_PERIOD_S = 0.2  # how soon a spinning thread notices that it must stop

# Exceptions of wait_for_ready_callbacks that only mean "nothing to run this time".
_IDLE = tuple(
    getattr(_executors, name)
    for name in ("ShutdownException", "TimeoutException", "ConditionReachedException")
    if hasattr(_executors, name)
)
# Those that end a spin: the executor or the context was shut down.
_ENDED = tuple(
    getattr(_executors, name)
    for name in ("ShutdownException", "ExternalShutdownException")
    if hasattr(_executors, name)
)


class NodeExecutor(SingleThreadedExecutor):
    def __init__(self, *, blocking_groups: Iterable = (), logger=None, context=None) -> None:
        super().__init__(context=context)
        self._blocking = list(blocking_groups)
        self._logger = logger
        self._threads = ThreadPoolExecutor(
            max_workers=max(1, len(self._blocking)), thread_name_prefix="ros_blocking_callback"
        )

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
            _report_failure(self._logger, exc)

    def shutdown(self, timeout_sec: float | None = None) -> bool:
        done = super().shutdown(timeout_sec)
        self._threads.shutdown(wait=True)
        return done


def events_executor_class():
    """rclpy's EventsExecutor, or None where this rclpy has none (Humble's, for one)."""
    try:
        from rclpy.experimental import EventsExecutor
    except ImportError:
        return None
    return EventsExecutor


def resolve_executor(kind: str) -> str:
    """``auto`` -> ``events`` where rclpy has it, else ``wait_set``; ``events`` without it is
    INVALID_ARG (the parameter asked for something this ROS 2 cannot give)."""
    if kind not in EXECUTORS:
        raise invalid_arg(
            f"parameter 'executor' must be one of {', '.join(EXECUTORS)}, not '{kind}'"
        )
    available = events_executor_class() is not None
    if kind == "events" and not available:
        raise invalid_arg(
            "parameter 'executor' is 'events' but this rclpy has no "
            "rclpy.experimental.EventsExecutor (ROS 2 Kilted or later); use "
            "'auto' or 'wait_set'"
        )
    if kind == "auto":
        return "events" if available else "wait_set"
    return kind


class NodeSpinner:
    """Runs the node's callbacks on a thread (and, with ``events``, the control node's on a
    second one) until :meth:`stop`. ``alive()`` is false once a spinning thread has ended."""

    def __init__(
        self, node, *, kind: str, blocking_groups: Iterable = (), control_node=None, logger=None
    ) -> None:
        self._logger = logger
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._executors: list = []
        if kind == "events":
            main = events_executor_class()(context=node.context)
            main.add_node(node)
            self._executors.append(main)
            self._threads.append(
                threading.Thread(target=self._spin_events, args=(main,), name="ros_executor")
            )
            if control_node is not None:
                control = NodeExecutor(logger=logger, context=node.context)
                control.add_node(control_node)
                self._executors.append(control)
                self._threads.append(
                    threading.Thread(
                        target=self._spin, args=(control,), name="ros_control_executor"
                    )
                )
        else:
            main = NodeExecutor(
                blocking_groups=blocking_groups, logger=logger, context=node.context
            )
            main.add_node(node)
            self._executors.append(main)
            self._threads.append(
                threading.Thread(target=self._spin, args=(main,), name="ros_executor")
            )

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        # A wait-set executor's spin() returns only once it is shut down; the events loop ends
        # on the flag within SPIN_PERIOD_S, and its executor is shut down after its thread has
        # left spin_once (not while another thread is inside it).
        self._stopping.set()
        for executor in self._executors:
            if isinstance(executor, NodeExecutor):
                executor.shutdown()
        for thread in self._threads:
            thread.join()
        for executor in self._executors:
            if not isinstance(executor, NodeExecutor):
                executor.shutdown()

    def _spin(self, executor: "NodeExecutor") -> None:
        try:
            executor.spin()
        except _ENDED:
            pass

    def _spin_events(self, executor) -> None:
        while not self._stopping.is_set() and executor.context.ok():
            try:
                executor.spin_once(timeout_sec=SPIN_PERIOD_S)
            except _ENDED:
                return
            except _IDLE:  # nothing to run this time
                continue
            except Exception as exc:  # one callback's fault must not stop the node
                _report_failure(self._logger, exc)


def _report_failure(logger, exc: Exception) -> None:
    if logger is not None:
        logger.error(f"callback failed: {type(exc).__name__}: {exc}")
