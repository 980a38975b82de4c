"""The web process's publish of a completion task: ``Task.apply_async`` against what
``routing.web.dispatch._send`` does on a Redis broker (``as_task_v2`` + ``send_task_message``).

Run: ``DJANGO_DEBUG=true REDIS_URL=redis://127.0.0.1:6379/11 .venv/bin/python bench/bench_publish.py [--calls 3000]``

Publishes the same deferred job's message (a drop-in call's row: one short user message) to the
``completions`` list of the Redis database in ``REDIS_URL``, which it empties before and after
(no worker may consume that database meanwhile), alternating the two ways over ``--rounds``
rounds after a warm-up, and prints the process CPU per publish (ms) and the lean / apply_async
ratio. A raw ``LPUSH`` of a message of the same size is printed as the floor, and the Python
function calls of one lean publish (cProfile). Same-machine, same-run figures only; each publish
also records its job in ``muse:claim:*`` (kept 2 h): give it a Redis database of its own.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")

import django  # noqa: E402

django.setup()

from muse_experiments.celery import app  # noqa: E402,F401 - the app the task is bound to
from muse_experiments.infra.queues import Queue  # noqa: E402
from muse_experiments.infra.redis_client import redis_client  # noqa: E402
from routing.web import dispatch  # noqa: E402
from routing.worker.tasks import run_completion  # noqa: E402

ROW = {
    "api_key_id": 1, "session_id": "bench-user-1", "user_id": "bench-user-1", "subagent": "",
    "attributes": "{}", "created_at": "2026-12-01T17:35:10.257621+00:00",
    "request": '{"messages": [{"role": "user", "content": "Benchmark request 1: answer briefly."}], '
    '"tools": [], "cancellable": true}',
}  # fmt: skip
KWARGS = {"stream": False, "pinned": True, "row": ROW}


def apply_async() -> None:
    job_id = str(uuid.uuid4())
    run_completion.apply_async(
        args=[job_id], kwargs=KWARGS, task_id=job_id, queue=Queue.COMPLETIONS, ignore_result=True,
        argsrepr=repr([job_id]), kwargsrepr=repr({**KWARGS, "row": "…"}),
    )  # fmt: skip


def lean() -> None:
    dispatch._send(str(uuid.uuid4()), KWARGS)


def cpu_ms_per_call(call, n: int) -> float:
    started = time.process_time()
    for _ in range(n):
        call()
    return (time.process_time() - started) / n * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    client = redis_client()
    if client is None:
        sys.exit("REDIS_URL must name a Redis database this benchmark may empty")
    client.delete(Queue.COMPLETIONS)
    payload = b"x" * 1200
    ways = {
        "apply_async": apply_async,
        "lean (_send)": lean,
        "raw LPUSH": lambda: client.lpush("bench:raw", payload),
    }
    try:
        for call in ways.values():
            for _ in range(300):
                call()
        figures: dict[str, list[float]] = {name: [] for name in ways}
        for rnd in range(args.rounds):
            order = list(ways) if rnd % 2 == 0 else list(reversed(ways))
            for name in order:
                figures[name].append(cpu_ms_per_call(ways[name], args.calls))
                client.delete(Queue.COMPLETIONS, "bench:raw")
    finally:
        client.delete(Queue.COMPLETIONS, "bench:raw")
    best = {name: min(values) for name, values in figures.items()}
    print(f"CPU per publish, best of {args.rounds} rounds of {args.calls} (ms):")
    for name, value in best.items():
        print(f"  {name:<14} {value:6.3f}   rounds: {', '.join(f'{v:.3f}' for v in figures[name])}")
    print(f"lean / apply_async: {best['lean (_send)'] / best['apply_async']:.2f}x")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(500):
        lean()
    profiler.disable()
    client.delete(Queue.COMPLETIONS)
    print(f"Python function calls per lean publish (cProfile, no load disturbs it): "
          f"{pstats.Stats(profiler).total_calls / 500:.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
