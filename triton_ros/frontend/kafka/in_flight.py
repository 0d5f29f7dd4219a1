"""The records of one partition between fetch and commit: replies produced in offset order,
offsets committable only up to the first record whose reply is not yet acknowledged.

Requests of a partition run concurrently in the core (they may share a batch, or run on two
instances, and finish in any order); their replies are produced in the order the requests were
consumed, so replies to one key keep the order of the requests (a key maps to one partition, a
reply keyed alike to one reply partition). A record moves through:

1. fetched and read: :meth:`PartitionInFlight.add` (the consumer thread), with the record as
   ``messages.read_record`` read it: plain data, never the client's message;
2. its reply (or error, or dead letter) ready: :meth:`ready`, from whichever thread finished it;
   records ready at the head of the line are handed to ``produce`` at once, in offset order,
   under the partition's lock;
3. acknowledged: :meth:`delivered`, from the producer's delivery thread. The next offset to
   commit moves past every acknowledged record at the head of the line (``committable``).

The count of records in the partition (fetched, not yet acknowledged) is what the consumer
bounds per partition. Hand-written: no Kafka client library orders and tracks the work an
application does between consuming and committing.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Sequence

from .messages import Record


class Entry:
    """One consumed record: its offset, what the server made of it, its pending deliveries."""

    __slots__ = ("offset", "message", "records", "pending", "done", "data")

    def __init__(self, offset: int, message: Any = None) -> None:
        self.offset = offset
        self.message = message  # the record as read (kept for retries, dead letters)
        self.records: Sequence[Record] | None = None
        self.pending = 0
        self.done = False
        self.data: Any = None  # the server's own state for this record


class PartitionInFlight:
    """The in-flight records of one topic partition."""

    def __init__(
        self, topic: str, partition: int, produce: Callable[[Entry, Record], None]
    ) -> None:
        self.topic = topic
        self.partition = partition
        self._produce = produce
        self._lock = threading.RLock()  # produce() may poll, and deliveries re-enter
        self._drained = threading.Condition(self._lock)
        self._waiting: deque[Entry] = deque()  # fetched; reply not produced yet
        self._producing: deque[Entry] = deque()  # produced; acknowledgement pending
        self.committable: int | None = None  # the next offset to commit (None: none yet)
        self._ceiling: int | None = None  # a forgotten record's: never committed past
        self.revoked = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting) + len(self._producing)

    def add(self, offset: int, message: Any = None) -> Entry:
        entry = Entry(offset, message)
        with self._lock:
            self._waiting.append(entry)
        return entry

    def ready(self, entry: Entry, records: Sequence[Record]) -> None:
        """The entry's records are known; produce every ready entry at the head, in order."""
        with self._lock:
            entry.records = records
            self._produce_head()

    def _produce_head(self) -> None:
        while self._waiting and self._waiting[0].records is not None:
            head = self._waiting.popleft()
            self._producing.append(head)
            head.pending = len(head.records)
            if not head.records:
                self._finish(head)
                continue
            for record in head.records:
                self._produce(head, record)

    def delivered(self, entry: Entry) -> bool:
        """One of the entry's records is acknowledged (or given up on); True when that was its
        last."""
        with self._lock:
            entry.pending -= 1
            if entry.pending == 0:
                self._finish(entry)
                return True
            return False

    def _finish(self, entry: Entry) -> None:
        entry.done = True
        while self._producing and self._producing[0].done:
            offset = self._producing.popleft().offset + 1
            self.committable = offset if self._ceiling is None else min(offset, self._ceiling)
        if not self._waiting and not self._producing:
            self._drained.notify_all()

    def forget(self, entry: Entry) -> None:
        """Drop an entry that will not be answered here (revoked, or stopping, before it was
        sent again): later entries may then be produced, but no offset past it is committed,
        so the group's next owner of the partition serves it again."""
        with self._lock:
            try:
                self._waiting.remove(entry)
            except ValueError:
                return
            if self._ceiling is None or entry.offset < self._ceiling:
                self._ceiling = entry.offset
            self._produce_head()
            if not self._waiting and not self._producing:
                self._drained.notify_all()

    def wait_drained(self, timeout: float) -> bool:
        """Wait until every fetched record is acknowledged; False on timeout."""
        with self._lock:
            return self._drained.wait_for(
                lambda: not self._waiting and not self._producing, timeout
            )
