"""The pure parts of ``bench/chaos.py``: what counts as a clear error, as lost, as a duplicate."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from chaos import Load, Req, Window, pct, report  # noqa: E402


def classify(status, body) -> Req:
    r = Req(1, "native", 0.0)
    Load._error(r, status, body)
    return r


def test_an_error_with_a_message_is_clear_and_one_without_is_lost():
    assert classify(503, {"error": {"code": "service_unavailable", "message": "retry"}}).outcome == "clear"
    assert (
        classify(502, {"message": "The completion failed: worker_lost"}).outcome == "clear"
    )  # OpenAI SDK body
    assert classify(500, "<html>Server Error (500)</html>").outcome == "lost"
    assert classify(500, None).outcome == "lost"


def test_report_counts_lost_duplicates_missing_and_late_killed_calls_per_fault():
    load = Load.__new__(Load)
    load.reqs = [
        Req(1, "native", 10.0, 10.1, "ok", "j1"),
        Req(2, "chat", 11.0, 11.5, "clear", "j2", "503: retry"),
        Req(3, "messages", 12.0, 14.0, "lost", None, "APIConnectionError"),
        Req(4, "native", 30.0, 30.1, "ok", "j4"),  # outside the window
    ]
    load.direct_reqs = [Req(1, "direct", 10.0, 10.01, "ok")]
    w = Window("kill switch external", "redis", t_before=9.0, t_inject=11.0, t_end=13.0, t_during_end=13.0)
    w.t_after_end, w.flip_at = 15.0, 11.0
    calls = [{"time": 11.5}, {"time": 12.5}]  # 0.5 s after the flip is allowed; 1.5 s is not
    rows, bad = report(load, [w], dup={1: 1}, missing={2: "no call record"}, external_calls=calls)
    row = rows[0]
    assert (row["sent"], row["ok"], row["clear"], row["lost"]) == (3, 1, 1, 1)
    assert (row["dup"], row["missing"], row["killed_late"]) == (1, 1, 1)
    assert bad == 4  # lost + dup + missing + killed late
    assert row["latency_ms"]["before"][0] == pytest.approx(100.0)
    assert row["latency_ms"]["before"][2] == pytest.approx(10.0)
    assert row["recover_s"] == 1.0  # the lost request ended 1 s after the fault ended


def test_pct_is_nearest_rank():
    assert pct([], 50) is None
    assert pct([1, 2, 3, 4, 5], 50) == 3
    assert pct(list(range(1, 101)), 99) == 99


class _Child:
    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


def test_workers_are_ready_once_each_start_of_each_worker_logged_ready(tmp_path):
    """The gate before each fault: a restarted worker counts only once its new start logged
    ``ready.``; an exited one (about to be restarted) is not ready; other processes do not count."""
    from types import SimpleNamespace

    from chaos import Stack

    stack = Stack.__new__(Stack)
    line = b'{"msg": "worker.1@vm ready."}\n'
    (tmp_path / "worker.1.log").write_bytes(line)
    (tmp_path / "worker.2.log").write_bytes(b"booting\n")
    children = {"web.1": _Child(), "worker.1": _Child(), "worker.2": _Child(), "shadow.1": _Child()}
    stack.supervisor = SimpleNamespace(
        output=tmp_path, children=children, restarts=dict.fromkeys(children, 0)
    )
    assert not stack.workers_ready()  # worker.2 has not logged ready.
    (tmp_path / "worker.2.log").write_bytes(line.replace(b"worker.1", b"worker.2"))
    assert stack.workers_ready()
    stack.supervisor.restarts["worker.1"] = 1  # killed and started again: one more ready. needed
    assert not stack.workers_ready()
    (tmp_path / "worker.1.log").write_bytes(line * 2)
    assert stack.workers_ready()
    children["worker.2"] = _Child(code=-9)  # exited, not restarted yet
    assert not stack.workers_ready()
