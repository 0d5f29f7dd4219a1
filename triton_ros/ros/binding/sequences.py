"""Each source of a binding to a stateful model is one sequence (docs/stateful.md, the node).

A model with ``sequence_batching`` (or an ensemble with such a step) keeps state per sequence:
the node gives every source (a camera) its own correlation ID, sends START with its first frame,
and END when the source is over:

- it is unbound (its robot went away, ``forget_after_s``) or the node stops;
- it has sent no frame to the model for the binding's ``sequence_end_after_ms`` (it stopped
  publishing, or all its frames went stale): the node's reaper ends it, so that its slot is
  free for another camera before the model's own idle timeout.

END travels with a request, as Triton's does: the source's last frame's inputs again (its
response is not published). The next frame of an ended source starts a new sequence (START,
same correlation ID). A sequence starts again, with START, when the model it started on is not
the one serving now (a reload or a new version: Triton's scheduler of the new version does not
know it), when the source has been silent for the model's ``max_sequence_idle_microseconds``
(Triton released it), and after a request of it was refused (INVALID_ARG "must specify the
START flag": the node does not read messages, every refusal restarts the sequence) - Triton's
own advice for a client.

Correlation IDs are unique in the node's process: a counter from a random base (so that two
nodes on one remote server rarely meet), below 2**63 (an INT64 CORRID holds it) and distinct
in its low 32 bits (what an INT32 or UINT32 CORRID keeps); a model whose CORRID control is
TYPE_STRING gets the same number as a decimal string (Triton refuses a numeric ID there).
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

_IDS = itertools.count((random.SystemRandom().getrandbits(30) << 32) + 1)
_IDS_LOCK = threading.Lock()


def next_correlation_id() -> int:
    """A correlation ID no other source of this process has."""
    with _IDS_LOCK:
        return next(_IDS)


@dataclass(frozen=True)
class Ending:
    """What ends a sequence: its ID, the last inputs (sent again with END) and their outputs."""

    correlation_id: int | str
    inputs: Mapping[str, np.ndarray]
    outputs: tuple[str, ...] | None
    why: str


class SourceSequence:
    """The sequence of one source on a stateful model. Thread-safe."""

    def __init__(self, correlation_id: int | None = None) -> None:
        self.correlation_id = (
            correlation_id if correlation_id is not None else next_correlation_id()
        )
        self._lock = threading.Lock()
        self._spec: Any = None  # the ModelSpec it started on; None: not started
        self._last_ns = 0  # monotonic: its last request sent
        self._inputs: Mapping[str, np.ndarray] | None = None
        self._outputs: tuple[str, ...] | None = None
        self._string = False  # the model takes string IDs (STRING CORRID)
        self.started = 0  # sequences started (STARTs sent)
        self.ended = 0  # ENDs sent

    def next_request(
        self,
        spec: Any,
        inputs: Mapping[str, np.ndarray],
        outputs: tuple[str, ...] | None,
        now_ns: int,
    ) -> tuple[int, bool, bool]:
        """(correlation ID, START, END) of the source's next frame, sent now."""
        idle_ns = int(getattr(spec, "sequence_idle_us", 0)) * 1000
        with self._lock:
            start = self._spec is not spec or (idle_ns > 0 and now_ns - self._last_ns >= idle_ns)
            if start:
                self.started += 1
            self._spec = spec
            self._last_ns = now_ns
            self._inputs, self._outputs = inputs, outputs
            self._string = bool(getattr(spec, "string_sequence_ids", False))
            return self.id_for(self._string), start, False

    def id_for(self, string: bool) -> int | str:
        """The correlation ID as the model takes it: a string for a STRING CORRID."""
        return str(self.correlation_id) if string else self.correlation_id

    def refused(self) -> None:
        """A request of the sequence was refused: its next frame starts it again."""
        with self._lock:
            self._spec = None

    def idle_for(self, now_ns: int) -> int:
        """How long the running sequence has sent nothing (ns); -1: none runs."""
        with self._lock:
            return -1 if self._spec is None else now_ns - self._last_ns

    def end(self, why: str, *, idle_ns: int = 0, now_ns: int = 0) -> Ending | None:
        """End the running sequence (None: none runs or, with ``idle_ns``, it sent a frame in
        the last ``idle_ns``): what to send with END."""
        with self._lock:
            if self._spec is None or self._inputs is None:
                return None
            if idle_ns and now_ns - self._last_ns < idle_ns:
                return None
            ending = Ending(self.id_for(self._string), self._inputs, self._outputs, why)
            self._spec = None
            self._inputs = None
            self.ended += 1
            return ending
