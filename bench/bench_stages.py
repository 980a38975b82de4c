"""Where a routed completion's milliseconds go, stage by stage, from the job's own timestamps.

Starts the instant upstream and the platform exactly as ``bench/bench_proxy.py`` does (Procfile
shape on ``BENCH_DATABASE_URL`` + ``BENCH_REDIS_URL``, or ``--embedded``), sends ``--requests``
``POST /v1/chat/completions`` with the official ``openai`` SDK at ``--concurrency`` clients (after
an uncounted warm-up), notes each call's send and receive times on the client and its
``x-muse-job-id``, then reads the job's rows and prints, per stage, p50/p90/p99 and the share of
the mean end-to-end time:

==============================  ===============================================================
request in → job inserted       client send … ``CompletionJob.created_at``: HTTP, auth, parsing,
                                validation, model resolution
job inserted → worker claimed   ``created_at`` … ``started_at``: insert + commit, enqueue, broker,
                                worker pickup, claim (lease)
claimed → upstream called       ``started_at`` … upstream call start: routing decision, request build
upstream call                   the attempts' own ``latency_ms`` (as the worker timed them)
upstream → records written      upstream end … ``finished_at``: exposure, call record, attempts
records → response received     ``finished_at`` … client receive: commit, result hand-back,
                                reload, rendering, HTTP
==============================  ===============================================================

"upstream call start" is ``CallRecord.created_at`` minus the attempts' latency (the call record is
created right after the upstream answers); where records are written asynchronously (after the
response) the "records written" stage is printed as measured, possibly negative, and the last
stage then ends at the response. All clocks are this machine's wall clock.

With ``--profile DIR`` it also samples the web and worker processes with ``py-spy record`` (in its
own virtualenv under ``var/``) during the measured requests and writes ``DIR/web.svg`` and
``DIR/worker.svg`` flame graphs (``--profile-format raw``: collapsed stacks, ``.txt``; ``--idle``
adds waiting threads: wall time; ``--gil`` keeps only the thread holding the GIL: Python CPU).

    BENCH_DATABASE_URL=postgres://…/muse_bench_stages BENCH_REDIS_URL=redis://…/2 \\
        .venv/bin/python bench/bench_stages.py [--requests 1000] [--concurrency 32] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path

from bench_proxy import MODEL_ALIAS, bench_dir, git_revision, start_platform, start_upstream
from benchlib import REPO, Processes, ensure_venv, pct, tree_cpu_s

PY_SPY_VERSION = "0.4.3"
PY_SPY_VENV = REPO / "var" / f"py-spy-{PY_SPY_VERSION}"
STAGES = (
    ("request in → job inserted", "sent", "created"),
    ("job inserted → worker claimed", "created", "started"),
    ("claimed → upstream called", "started", "upstream_start"),
    ("upstream call", "upstream_start", "upstream_end"),
    ("upstream → records written", "upstream_end", "finished"),
    ("records → response received", "finished", "received"),
)


def stage_table(rows: list[dict[str, float]]) -> str:
    """Per stage p50/p90/p99 (ms) and share of the mean end-to-end time, from per-call timestamps
    in seconds (keys ``sent``, ``created``, ``started``, ``upstream_start``, ``upstream_end``,
    ``finished``, ``received``)."""
    total = statistics.fmean(r["received"] - r["sent"] for r in rows) * 1000
    lines = [f"{'stage':<32}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'mean share':>12}"]
    for name, a, b in (*STAGES, ("end to end (client)", "sent", "received")):
        ms = [(r[b] - r[a]) * 1000 for r in rows]
        share = statistics.fmean(ms) / total * 100 if total else 0.0
        lines.append(
            f"{name:<32}{statistics.median(ms):9.2f}{pct(ms, 90):9.2f}{pct(ms, 99):9.2f}{share:11.1f}%"
        )
    return "\n".join(lines)


async def drive(base: str, key: str, n: int, concurrency: int) -> list[tuple[str, float, float]]:
    """``n`` chat completions by ``concurrency`` clients; ``[(job id, sent, received)]`` (epoch s)."""
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)
    queue = iter(range(n))
    out: list[tuple[str, float, float]] = []

    async def one_client() -> None:
        for i in queue:
            sent = time.time()
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL_ALIAS,
                messages=[{"role": "user", "content": f"Benchmark request {i}: answer briefly."}],
                user=f"bench-user-{i % 1000}",
            )
            raw.parse()
            out.append((raw.headers["x-muse-job-id"], sent, time.time()))

    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    await client.close()
    return out


def wait_for_records(calls: list[tuple[str, float, float]], timeout_s: float = 60) -> float | None:
    """Seconds from the last response until every call's record is in the database (records may
    be written behind the response); ``None`` if they are not all there within ``timeout_s``."""
    from django.db import close_old_connections

    from routing.models import CallRecord

    ids = [c[0] for c in calls]
    last = max((c[2] for c in calls), default=time.time())
    deadline = time.monotonic() + timeout_s
    while True:
        close_old_connections()
        if CallRecord.objects.filter(job_id__in=ids).count() >= len(set(ids)):
            return max(0.0, time.time() - last)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def job_timestamps(calls: list[tuple[str, float, float]]) -> list[dict[str, float]]:
    """Join the client's times with the jobs' rows (Django is set up by ``start_platform``)."""
    from django.db.models import Sum

    from routing.models import Attempt, CallRecord, CompletionJob

    jobs = {str(j["id"]): j for j in CompletionJob.objects.filter(pk__in=[c[0] for c in calls]).values()}
    records = {str(c["job_id"]): c for c in CallRecord.objects.filter(job_id__in=list(jobs)).values()}
    upstream_ms = dict(
        Attempt.objects.filter(call__job_id__in=list(jobs))
        .values("call__job_id")
        .annotate(ms=Sum("latency_ms"))
        .values_list("call__job_id", "ms")
    )
    rows = []
    for job_id, sent, received in calls:
        job, record = jobs.get(job_id), records.get(job_id)
        if job is None or record is None or job["started_at"] is None or job["finished_at"] is None:
            continue
        upstream_end = record["created_at"].timestamp()
        rows.append(
            {
                "sent": sent,
                "created": job["created_at"].timestamp(),
                "started": job["started_at"].timestamp(),
                "upstream_start": upstream_end - (upstream_ms.get(record["job_id"]) or 0) / 1000,
                "upstream_end": upstream_end,
                "finished": job["finished_at"].timestamp(),
                "received": received,
            }
        )
    return rows


PROFILE_SUFFIX = {"flamegraph": "svg", "raw": "txt", "speedscope": "json"}


def start_py_spy(
    procs: Processes, out: Path, shape_pids: dict[str, int], *, idle: bool, gil: bool, rate: int, fmt: str
) -> None:
    """``py-spy record`` on each process type (its children too) until stopped, writing
    ``out/<type>.<svg|txt|json>`` (``fmt``: flamegraph, raw collapsed stacks, or speedscope)."""
    python = ensure_venv(
        PY_SPY_VENV,
        requirement=f"py-spy=={PY_SPY_VERSION}",
        probe=f"import importlib.metadata as m; assert m.version('py-spy') == '{PY_SPY_VERSION}'",
    )
    out.mkdir(parents=True, exist_ok=True)
    for name, pid in shape_pids.items():
        cmd = [str(python.parent / "py-spy"), "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
               "--rate", str(rate), "--format", fmt, "-o", str(out / f"{name}.{PROFILE_SUFFIX[fmt]}")] + (["--idle"] if idle else []) + (["--gil"] if gil else [])  # fmt: skip
        procs.spawn(cmd, f"py-spy-{name}", env=dict(os.environ))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedded", action="store_true", help="platform on SQLite + private Redis")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the measured requests")
    parser.add_argument("--profile", type=Path, help="write py-spy flame graphs (web.svg, worker.svg) here")
    parser.add_argument("--idle", action="store_true", help="py-spy: include idle (waiting) threads")
    parser.add_argument(
        "--gil", action="store_true", help="py-spy: only threads holding the GIL (Python CPU)"
    )
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--profile-format", choices=sorted(PROFILE_SUFFIX), default="flamegraph")
    args = parser.parse_args()
    var = bench_dir("bench-stages", embedded=args.embedded)
    with Processes(var / "logs") as procs:
        upstream = start_upstream(procs)
        base, key, shape, pids = start_platform(procs, upstream=upstream, var=var, embedded=args.embedded)
        asyncio.run(drive(base, key, args.warmup, args.concurrency))
        spies = Processes(var / "logs", grace_s=60)
        if args.profile:
            start_py_spy(
                spies,
                args.profile,
                pids,
                idle=args.idle,
                gil=args.gil,
                rate=args.rate,
                fmt=args.profile_format,
            )
            time.sleep(1)
        started = time.perf_counter()
        cpu_before = {name: tree_cpu_s([pid]) for name, pid in pids.items()}
        try:
            calls = asyncio.run(
                asyncio.wait_for(drive(base, key, args.requests, args.concurrency), args.timeout)
            )
        finally:
            wall = time.perf_counter() - started
            cpu = {name: tree_cpu_s([pid]) - cpu_before[name] for name, pid in pids.items()}
            for spy in spies.procs:  # SIGINT: py-spy writes its flame graph and exits
                if spy.poll() is None:
                    spy.send_signal(signal.SIGINT)
            for spy in spies.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    spy.wait(timeout=60)
            spies.stop_all()
        drained_s = wait_for_records(calls)
        rows = job_timestamps(calls)
    mode = "embedded default" if args.embedded else "PostgreSQL + Redis"
    print(f"\nbench-stages at {git_revision()}: {mode}, {args.concurrency} clients, {len(calls)} requests "
          f"in {wall:.1f}s ({len(calls) / wall:.0f}/s), {len(rows)} with every timestamp")  # fmt: skip
    for name, cmd in shape.items():
        print(f"  {name}: {cmd}")
    print(
        "every call's records in the database "
        + (f"{drained_s:.2f}s after the last response" if drained_s is not None else "NOT within 60 s")
        + " (polled every 50 ms; an upper bound on the write-behind lag of the last calls)"
    )
    if rows:
        print(stage_table(rows))
    per_call = ", ".join(
        f"{name} {seconds * 1000 / max(1, len(calls)):.2f} ms" for name, seconds in cpu.items()
    )
    print(f"CPU per call (user + system, process and children): {per_call}")
    if args.profile:
        print(
            f"profiles: {', '.join(str(p) for p in sorted(args.profile.glob('*.' + PROFILE_SUFFIX[args.profile_format])))}"
        )
    print(f"logs: {var / 'logs'}")
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
