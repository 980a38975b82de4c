"""The host's idle CPU share from /proc/stat, and the wait for it (muse_experiments.infra.idle_cpu)."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import pytest

from muse_experiments.infra.idle_cpu import IdleCpuSampler, read_cpu_times, wait_for_idle_cpu


def stat_line(user, nice, system, idle, iowait=0, irq=0, softirq=0, steal=0):
    return f"cpu  {user} {nice} {system} {idle} {iowait} {irq} {softirq} {steal} 0 0\ncpu0 1 2 3 4\n"


def write_stat(path, text):
    """Replace the file at once, as /proc/stat reads: a reader never sees it half written."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextmanager
def busy_host(stat, *, idle=None):
    """A host whose ticks move every 10 ms: all busy, or all idle once ``idle`` is set."""
    idle = idle or threading.Event()
    stop = threading.Event()
    ticks = {"busy": 0, "idle": 0}

    def run():
        while not stop.wait(0.01):
            ticks["idle" if idle.is_set() else "busy"] += 10
            write_stat(stat, stat_line(ticks["busy"], 0, 0, ticks["idle"]))

    write_stat(stat, stat_line(0, 0, 0, 0))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield idle
    finally:
        stop.set()
        thread.join()


def test_cpu_times_are_idle_plus_iowait_over_every_state(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(stat_line(10, 5, 20, 300, iowait=7, irq=1, softirq=2, steal=3))
    assert read_cpu_times(stat) == (307, 348)
    assert read_cpu_times(tmp_path / "missing") is None
    stat.write_text("intr 1 2 3\n")
    assert read_cpu_times(stat) is None


def test_the_share_is_the_idle_ticks_between_two_readings(tmp_path):
    """Nice time (the waiting work itself) counts as busy; the second reading follows a window."""
    stat = tmp_path / "stat"
    stat.write_text(stat_line(100, 0, 100, 800))
    sampler = IdleCpuSampler(path=stat, window_s=0.1)

    def tick():  # during the first window: 30 user, 50 nice, 20 idle ticks
        time.sleep(0.03)
        write_stat(stat, stat_line(130, 50, 100, 820))

    threading.Thread(target=tick).start()
    assert sampler.idle_share() == pytest.approx(20 / 100)
    assert sampler.idle_share() == pytest.approx(0.2)  # fresh within the window: the same reading
    time.sleep(0.11)
    write_stat(stat, stat_line(130, 50, 100, 920))  # then all idle
    assert sampler.idle_share() == pytest.approx(1.0)


def test_the_wait_returns_once_the_host_is_idle_enough_and_gives_up_after_its_longest_wait(tmp_path):
    stat = tmp_path / "stat"
    sampler = IdleCpuSampler(path=stat, window_s=0.05)
    with busy_host(stat) as idle:
        started = time.monotonic()
        assert wait_for_idle_cpu(0.5, max_wait_s=0.3, sampler=sampler) is False
        assert 0.3 <= time.monotonic() - started < 1.5
        threading.Timer(0.2, idle.set).start()
        started = time.monotonic()
        assert wait_for_idle_cpu(0.5, max_wait_s=5, sampler=sampler) is True
        assert 0.2 <= time.monotonic() - started < 2.0


def test_no_threshold_or_no_reading_never_waits(tmp_path):
    never = IdleCpuSampler(path=tmp_path / "missing", window_s=10)
    started = time.monotonic()
    assert wait_for_idle_cpu(0.0, max_wait_s=10, sampler=never) is True
    assert wait_for_idle_cpu(0.9, max_wait_s=10, sampler=never) is True  # not Linux: no reading
    assert time.monotonic() - started < 0.5
