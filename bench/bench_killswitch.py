"""Benchmark kill-switch propagation across processes.

Run (against the real services; the database is migrated first)::

    DJANGO_DEBUG=true DATABASE_URL=postgres://postgres@127.0.0.1:5432/muse_b \\
    REDIS_URL=redis://127.0.0.1:6379/2 .venv/bin/python bench/bench_killswitch.py [--procs 4] [--flips 10]

Starts ``--procs`` worker-like processes. Each loops the way a Celery worker does just before an
upstream call: read :func:`routing.guards.killswitch.kill_state` (the in-process snapshot, refreshed when
the cluster configuration version moves), then "work" for ``--work-ms``. The parent flips the
``all_external`` switch through the audited service (:func:`routing.ops_services.kill_switch_set`)
and measures, per process, the time from the start of the flip (the operator's click) until that
process first sees the new state. Prints every flip and per-process / overall figures in ms.
The requirement is < 1000 ms in every process.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    import django

    django.setup()


def child(work_ms: float) -> None:
    """Worker-like loop: print a line whenever the observed switch state changes."""
    _setup()
    from routing.guards.killswitch import kill_state

    last = None
    while True:
        off = kill_state().external_off
        if off != last:
            print(json.dumps({"pid": os.getpid(), "external_off": off, "t": time.time()}), flush=True)
            last = off
        time.sleep(work_ms / 1000.0)


def parent(procs: int, flips: int, work_ms: float) -> int:
    _setup()
    from django.conf import settings
    from django.core.management import call_command

    from routing.ops_services import kill_switch_set

    call_command("migrate", verbosity=0, interactive=False)
    kill_switch_set(scope="all_external", active=False, reason="bench reset", actor="bench")
    db = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(
        f"backend: db={db} redis={'yes' if settings.REDIS_URL else 'no'} "
        f"CONFIG_REFRESH_INTERVAL_S={settings.CONFIG_REFRESH_INTERVAL_S} procs={procs} work_ms={work_ms}"
    )
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", "--work-ms", str(work_ms)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(procs)
    ]
    seen: queue.Queue = queue.Queue()

    def reader(p):
        for line in p.stdout:
            seen.put(json.loads(line))

    for p in children:
        threading.Thread(target=reader, args=(p,), daemon=True).start()
    try:
        ready = set()
        while len(ready) < procs:  # every child has read the initial (off) state
            ready.add(seen.get(timeout=60)["pid"])
        pids = sorted(ready)
        per_proc: dict[int, list[float]] = {pid: [] for pid in pids}
        for flip in range(flips):
            time.sleep(random.uniform(0.3, 0.9))  # de-phase from the refresh interval
            active = flip % 2 == 0
            t0 = time.time()
            kill_switch_set(scope="all_external", active=active, reason=f"bench flip {flip}", actor="bench")
            t_written = time.time()
            got: dict[int, float] = {}
            while len(got) < procs:
                msg = seen.get(timeout=10)
                if msg["external_off"] == active and msg["pid"] not in got:
                    got[msg["pid"]] = (msg["t"] - t0) * 1000.0
            for pid, ms in got.items():
                per_proc[pid].append(ms)
            row = " ".join(f"{got[pid]:7.1f}" for pid in pids)
            print(
                f"flip {flip + 1:2d} ({'on ' if active else 'off'}) write {1000 * (t_written - t0):5.1f} ms | "
                f"seen after ms: {row} | max {max(got.values()):7.1f}"
            )
        print("per process (ms): median / max")
        for i, pid in enumerate(pids):
            values = per_proc[pid]
            print(f"  process {i + 1} (pid {pid}): {statistics.median(values):7.1f} / {max(values):7.1f}")
        everything = [v for values in per_proc.values() for v in values]
        print(
            f"overall: median {statistics.median(everything):.1f} ms, "
            f"p95 {sorted(everything)[int(0.95 * (len(everything) - 1))]:.1f} ms, "
            f"max {max(everything):.1f} ms over {flips} flips x {procs} processes"
        )
        kill_switch_set(scope="all_external", active=False, reason="bench done", actor="bench")
        return 0 if max(everything) < 1000 else 1
    finally:
        for p in children:
            p.terminate()
        for p in children:
            p.wait(timeout=10)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--flips", type=int, default=10)
    parser.add_argument("--work-ms", type=float, default=5.0, help="pause between checks in each process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.work_ms)
        return 0
    return parent(args.procs, args.flips, args.work_ms)


if __name__ == "__main__":
    sys.exit(main())
