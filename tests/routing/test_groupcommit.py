"""Group commit (routing.groupcommit): concurrent writers share batches, each returns after its own
item is written, and one item's error reaches only its own caller."""

from __future__ import annotations

import threading
import time

from routing.groupcommit import GroupCommit


class Recorder:
    """A batch writer that records each batch; the first batch waits until ``hold_until`` items
    are queued behind it, so the next batch is known to hold them all."""

    def __init__(self, hold_until: int, gc_ref: list) -> None:
        self.batches: list[list] = []
        self.hold_until = hold_until
        self.gc_ref = gc_ref
        self.written: set = set()

    def __call__(self, payloads):
        if not self.batches:
            deadline = time.monotonic() + 10
            while len(self.gc_ref[0]._queue) < self.hold_until and time.monotonic() < deadline:
                time.sleep(0.001)
        self.batches.append(list(payloads))
        self.written.update(payloads)
        return [ValueError(f"bad {p}") if str(p).startswith("bad") else None for p in payloads]


def run_threads(gc: GroupCommit, recorder: Recorder, payloads: list) -> dict:
    outcome: dict = {}

    def one(p):
        try:
            gc.write(p)
            outcome[p] = ("ok", p in recorder.written)
        except ValueError as exc:
            outcome[p] = ("error", str(exc))

    threads = [threading.Thread(target=one, args=(p,)) for p in payloads]
    threads[0].start()
    while not gc._leading:
        time.sleep(0.001)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(10)
    return outcome


def test_concurrent_writes_share_one_batch_and_each_caller_sees_its_own_outcome():
    ref: list = []
    recorder = Recorder(hold_until=4, gc_ref=ref)
    gc = GroupCommit(recorder)
    ref.append(gc)

    outcome = run_threads(gc, recorder, ["first", "a", "bad-b", "c", "d"])

    # the first caller wrote alone; the four that queued meanwhile went in one batch
    assert recorder.batches[0] == ["first"]
    assert sorted(recorder.batches[1]) == ["a", "bad-b", "c", "d"]
    assert len(recorder.batches) == 2
    # every caller returned after its own item was written; only the bad one raised
    assert outcome == {
        "first": ("ok", True),
        "a": ("ok", True),
        "c": ("ok", True),
        "d": ("ok", True),
        "bad-b": ("error", "bad bad-b"),
    }
    assert gc._leading is False and gc._queue == []


def test_a_failing_batch_fails_each_of_its_callers_and_the_next_write_still_runs():
    calls: list[list] = []

    def broken(payloads):
        calls.append(list(payloads))
        if payloads == ["x"]:
            raise RuntimeError("database is locked")
        return [None] * len(payloads)

    gc = GroupCommit(broken)
    try:
        gc.write("x")
    except RuntimeError as exc:
        assert str(exc) == "database is locked"
    else:
        raise AssertionError("the write error did not reach its caller")
    gc.write("y")
    assert calls == [["x"], ["y"]]
    assert gc._leading is False


def test_batches_are_bounded():
    ref: list = []
    recorder = Recorder(hold_until=5, gc_ref=ref)
    gc = GroupCommit(recorder, max_batch=2)
    ref.append(gc)

    outcome = run_threads(gc, recorder, ["p0", "p1", "p2", "p3", "p4", "p5"])

    assert [len(b) for b in recorder.batches] == [1, 2, 2, 1]
    assert sorted(p for b in recorder.batches for p in b) == ["p0", "p1", "p2", "p3", "p4", "p5"]
    assert all(v == ("ok", True) for v in outcome.values())
