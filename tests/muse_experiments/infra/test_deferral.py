"""The deferral helper behind "bookkeeping after the answer" (muse_experiments/infra/deferral.py)."""

from __future__ import annotations

import logging
import threading

import pytest

from muse_experiments.infra.deferral import defer, run_deferred


def test_outside_a_block_a_deferred_call_runs_at_once_and_raises():
    calls = []
    defer(calls.append, 1)
    assert calls == [1]
    with pytest.raises(ZeroDivisionError):
        defer(lambda: 1 / 0)


def test_a_block_runs_its_calls_in_order_when_it_exits():
    calls = []
    with run_deferred():
        defer(calls.append, "a")
        defer(calls.append, "b")
        assert calls == []
    assert calls == ["a", "b"]
    defer(calls.append, "after")  # the block is over: at once again
    assert calls == ["a", "b", "after"]


def test_a_failing_deferred_call_is_logged_and_the_next_still_runs(caplog):
    calls = []
    with caplog.at_level(logging.ERROR, logger="muse_experiments.infra.deferral"), run_deferred():
        defer(lambda: 1 / 0)
        defer(calls.append, "next")
    assert calls == ["next"]
    assert "deferred call failed" in caplog.text
    assert "ZeroDivisionError" in caplog.text


def test_the_calls_run_even_when_the_block_raises():
    calls = []
    with pytest.raises(KeyError), run_deferred():
        defer(calls.append, "x")
        raise KeyError("boom")
    assert calls == ["x"]


def test_blocks_nest_and_belong_to_their_thread():
    calls = []
    with run_deferred():
        defer(calls.append, "outer")
        with run_deferred():
            defer(calls.append, "inner")
        assert calls == ["inner"]
        other = threading.Thread(target=defer, args=(calls.append, "other thread"))
        other.start()
        other.join()
        assert calls == ["inner", "other thread"]  # no block in that thread: at once
        defer(calls.append, "outer again")
    assert calls == ["inner", "other thread", "outer", "outer again"]
