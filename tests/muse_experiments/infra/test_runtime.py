"""Process tuning: garbage-collection thresholds and start-up objects frozen."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

from muse_experiments.infra.runtime import tune_gc


@pytest.fixture
def restore_gc():
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_tune_gc_freezes_what_is_alive_and_applies_the_thresholds(settings, restore_gc):
    settings.GC_THRESHOLD = [50_000, 50, 100]
    survivor = [object() for _ in range(1000)]
    tune_gc()
    assert gc.get_threshold() == (50_000, 50, 100)
    assert gc.get_freeze_count() >= len(survivor)


def test_an_empty_setting_leaves_the_interpreter_alone(settings, restore_gc):
    settings.GC_THRESHOLD = []
    gc.set_threshold(700, 10, 10)
    tune_gc()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_bad_setting_is_logged_not_raised(settings, restore_gc, caplog):
    settings.GC_THRESHOLD = [-1, "x"]
    tune_gc()
    assert "GC_THRESHOLD" in caplog.text


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_run_at_idle_priority_moves_every_thread_and_new_threads_inherit_it():
    # in a child process: an unprivileged process may not take its priority back
    probe = """
import os, threading, json
from muse_experiments.infra.runtime import run_at_idle_priority
started, stop = threading.Event(), threading.Event()
tids = []
def before():
    tids.append(threading.get_native_id()); started.set(); stop.wait()
t = threading.Thread(target=before); t.start(); started.wait()
moved = run_at_idle_priority()
after = []
t2 = threading.Thread(target=lambda: after.append((os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0))))
t2.start(); t2.join()
out = {"moved": moved, "policies": [os.sched_getscheduler(x) for x in (0, tids[0])],
       "nice": [os.getpriority(os.PRIO_PROCESS, x) for x in (0, tids[0])], "new": after[0]}
stop.set(); t.join()
print(json.dumps(out))
"""
    child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr[-2000:]
    out = json.loads(child.stdout)
    assert out["moved"] is True
    assert out["policies"] == [os.SCHED_IDLE, os.SCHED_IDLE]  # the caller and a thread started before
    assert out["nice"] == [19, 19]
    assert out["new"] == [os.SCHED_IDLE, 19]  # a thread started after inherits both
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # this process untouched
