"""Process-level ROS set-up shared by the node and the tools: signals and a clean shutdown.

rclpy's own signal handlers shut the context down from inside the signal handler, while
executor threads may still run; a MultiThreadedExecutor that is not shut down and joined before
``rclpy.shutdown()`` aborts the process at exit. So these processes install their own SIGINT and
SIGTERM handlers that only set an event; the main thread then stops everything in order.
"""
from __future__ import annotations

import signal
import sys
import threading


class StopSignal:
    """Set by SIGINT or SIGTERM (or :meth:`set`); remembers which signal came first."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal_name = ""

    def _handler(self, signum, _frame) -> None:
        if not self.signal_name:
            self.signal_name = signal.Signals(signum).name
        self.event.set()

    def install(self) -> "StopSignal":
        signal.signal(signal.SIGINT, self._handler)
        signal.signal(signal.SIGTERM, self._handler)
        return self

    def set(self) -> None:
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.event.wait(timeout)

    def is_set(self) -> bool:
        return self.event.is_set()


def init_ros(args: list[str] | None = None) -> StopSignal:
    """``rclpy.init`` without rclpy's signal handlers; SIGINT/SIGTERM set the returned signal."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(args=args if args is not None else sys.argv,
               signal_handler_options=SignalHandlerOptions.NO)
    return StopSignal().install()


def strip_ros_args(argv: list[str]) -> list[str]:
    """The command line without the ``--ros-args ... [--]`` part (for argparse)."""
    import rclpy.utilities
    return rclpy.utilities.remove_ros_args(argv)
