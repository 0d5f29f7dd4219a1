"""Route the core's Python ``logging`` records (model loads, backend errors...) to the ROS log.

The core never imports rclpy; it logs to ``logging.getLogger("triton_ros.*")``. In the node those
records go to rclpy's logger of the same name, so they reach the console, the log files and
/rosout like the node's own lines.
"""

from __future__ import annotations

import logging


class RosLogHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        from rclpy.logging import get_logger

        try:
            logger = get_logger(record.name)
            text = self.format(record)
            if record.levelno >= logging.ERROR:
                logger.error(text)
            elif record.levelno >= logging.WARNING:
                logger.warning(text)
            elif record.levelno >= logging.INFO:
                logger.info(text)
            else:
                logger.debug(text)
        except Exception:  # logging must never break the caller
            self.handleError(record)


def route_python_logging(level: int = logging.INFO) -> None:
    """Send the ``triton_ros`` loggers' records (at ``level`` and above) to rclpy."""
    root = logging.getLogger("triton_ros")
    if not any(isinstance(h, RosLogHandler) for h in root.handlers):
        handler = RosLogHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
