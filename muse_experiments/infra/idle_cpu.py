"""Wait until the host has idle CPU: how work that may wait yields to work that may not.

A process under ``SCHED_IDLE`` (:func:`muse_experiments.infra.runtime.run_at_idle_priority`) gets a
core only when no normal thread wants it, but what it asks of shared services (Redis, PostgreSQL,
an upstream on the same host) runs at their priority, and a saturated host still slows down. So
before each piece of deferrable work (a shadow call) :func:`wait_for_idle_cpu` waits until the
share of the host's CPU left idle, over the last :data:`WINDOW_S`, is at least the asked share.

The share is read from Linux's ``/proc/stat`` (first line: the time every core spent in each state
since boot, ``proc(5)``): ``(idle + iowait) / all`` between two readings. Time spent by niced
processes (the waiting work itself, at nice 19) counts as busy, so the waiting work throttles
itself too: it uses what the host leaves idle above the asked share, never the share itself.
Where ``/proc/stat`` cannot be read (not Linux) there is no reading and nothing waits.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

#: Seconds between the two ``/proc/stat`` readings one idle share is computed from.
WINDOW_S = 0.25
#: Where Linux reports the CPU time per state (``proc(5)``).
PROC_STAT = Path("/proc/stat")


def read_cpu_times(path: Path = PROC_STAT) -> tuple[int, int] | None:
    """``(idle ticks, all ticks)`` of every core since boot (``idle + iowait`` and the sum of
    every state on ``/proc/stat``'s first line), or None where it cannot be read."""
    try:
        with path.open() as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 6:
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[3] + ticks[4], sum(ticks)


class IdleCpuSampler:
    """The host's idle CPU share over the last ``window_s`` seconds, shared by a process's threads
    (one of them reads while the others wait for its reading)."""

    def __init__(self, *, path: Path = PROC_STAT, window_s: float = WINDOW_S) -> None:
        self.path = path
        self.window_s = window_s
        self._lock = threading.Lock()
        self._last: tuple[float, tuple[int, int]] | None = None  # (monotonic s, cpu times)
        self._share: tuple[float, float] | None = None  # (monotonic s, idle share)

    def idle_share(self) -> float | None:
        """Idle share of all cores (0–1) over the last ``window_s`` (at most that old), or None
        where ``/proc/stat`` cannot be read. Sleeps up to ``window_s`` for a fresh reading."""
        with self._lock:
            now = time.monotonic()
            if self._share is not None and now - self._share[0] < self.window_s:
                return self._share[1]
            if self._last is None or now - self._last[0] > 4 * self.window_s:
                first = read_cpu_times(self.path)
                if first is None:
                    return None
                self._last = (now, first)
                time.sleep(self.window_s)
            then, (idle0, all0) = self._last
            times = read_cpu_times(self.path)
            if times is None:
                return None
            now = time.monotonic()
            idle1, all1 = times
            share = (idle1 - idle0) / (all1 - all0) if all1 > all0 else 1.0
            self._last = (now, times)
            self._share = (now, share)
            return share


_sampler = IdleCpuSampler()


def wait_for_idle_cpu(min_share: float, *, max_wait_s: float, sampler: IdleCpuSampler | None = None) -> bool:
    """Block until at least ``min_share`` (0–1) of the host's CPU was idle over the last
    :data:`WINDOW_S`; returns True then, False after ``max_wait_s`` seconds of a busier host.
    ``min_share`` ≤ 0, or no reading (not Linux), returns True at once. Never raises."""
    if min_share <= 0:
        return True
    sampler = sampler or _sampler
    deadline = time.monotonic() + max_wait_s
    while True:
        share = sampler.idle_share()
        if share is None or share >= min_share:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(sampler.window_s / 2)
