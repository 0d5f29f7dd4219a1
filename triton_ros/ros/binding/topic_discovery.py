"""Topic name patterns of bindings, matched against the ROS graph as robots come and go.

Patterns are globs over topic names with name segments in mind: ``*`` and ``?`` match within
one segment (never a ``/``), ``**`` matches across segments, ``[...]`` is a character class.
``/robot*/camera*/image_raw`` thus matches ``/robot2/camera_left/image_raw`` but not
``/robot2/arm/camera/image_raw``; ``/**/image_raw`` matches any image_raw topic.
"""

from __future__ import annotations

import re
from typing import Iterable


def compile_pattern(pattern: str) -> re.Pattern:
    """A glob over topic names -> a regular expression matching whole names."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("^" + "".join(out) + "$")


class TopicMatcher:
    """Which topics of the graph, of a type the binding reads, match its patterns."""

    def __init__(self, patterns: Iterable[str], ros_types: str | Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        # e.g. ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
        self.ros_types = (ros_types,) if isinstance(ros_types, str) else tuple(ros_types)
        self._compiled = [compile_pattern(p) for p in self.patterns]

    def matches(self, topic: str) -> bool:
        return any(rx.match(topic) for rx in self._compiled)

    def select(self, topics_and_types: Iterable[tuple[str, list[str]]]) -> list[str]:
        """Topics of the graph (``Node.get_topic_names_and_types()``) of a type read that
        match."""
        return sorted(
            name
            for name, types in topics_and_types
            if any(t in self.ros_types for t in types) and self.matches(name)
        )
