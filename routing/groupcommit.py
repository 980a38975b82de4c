"""Group commit: the calls a process finishes at the same time share one database transaction.

Without Redis (the embedded default, SQLite) the worker writes each call's records before the
caller is answered (:mod:`routing.recording`). SQLite has one writer at a time, so with many
worker threads each write waited for the write lock behind the others (``BEGIN IMMEDIATE`` under
the busy timeout), and each paid the fixed queries of a write on its own. Here the writes of
concurrent threads are queued: one thread at a time (the *leader*) writes everything queued so
far in one call of the batch function, then wakes the threads whose items it wrote and hands the
leadership to the next queued thread. A thread alone writes its own item at once, as before.

Each caller still returns only after its own item is committed (or with the exception its item
raised), so nothing a caller can see precedes the write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


class _Item:
    __slots__ = ("payload", "wake", "lead", "written", "error")

    def __init__(self, payload: Any) -> None:
        self.payload = payload
        self.wake = threading.Event()  # set when the item was written, or when it becomes leader
        self.lead = False
        self.written = False
        self.error: BaseException | None = None


class GroupCommit:
    """Write concurrently submitted items in batches (one leader thread at a time).

    ``write_batch(payloads)`` writes a list of items (at most ``max_batch``) and returns, in the
    same order, ``None`` for each item written or the exception that item raised (so one bad
    item does not fail the others). An exception raised by ``write_batch`` itself fails every
    item of that batch.
    """

    def __init__(
        self, write_batch: Callable[[Sequence[Any]], Sequence[BaseException | None]], *, max_batch: int = 64
    ) -> None:
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Item] = []
        self._leading = False

    def write(self, payload: Any) -> None:
        """Write ``payload`` (within a batch with other threads' payloads); return once committed.

        Raises what writing this payload raised.
        """
        item = _Item(payload)
        with self._lock:
            self._queue.append(item)
            if not self._leading:
                self._leading = item.lead = True
        if not item.lead:
            item.wake.wait()
        if not item.written:
            self._lead()
        if item.error is not None:
            raise item.error

    def _lead(self) -> None:
        """Write the queued items (the leader's own is first), wake their threads, then pass the
        lead to the first item queued meanwhile."""
        with self._lock:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        try:
            errors = list(self._write_batch([i.payload for i in batch]))
        except BaseException as exc:  # noqa: BLE001 - handed to every caller of the batch
            errors = [exc] * len(batch)
        for i, error in zip(batch, errors, strict=True):
            i.error, i.written = error, True
            i.wake.set()
        with self._lock:
            if self._queue:
                self._queue[0].lead = True
                self._queue[0].wake.set()
            else:
                self._leading = False
