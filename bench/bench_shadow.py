"""What shadowing every session adds to the caller's latency: p50/p99 with no shadow test, then
with shadow tests mirroring every call (issue 33: added p50/p99 ≤ 1.05× of none).

Starts the instant upstream and the platform exactly as ``bench/bench_proxy.py`` does (the
Procfile shape, its ``shadow`` worker included, on ``BENCH_DATABASE_URL`` + ``BENCH_REDIS_URL``,
or ``--embedded``), warms up, then alternates rounds ``none`` / ``shadowed`` (order reversed every
other round) of ``--requests`` chat completions by ``--concurrency`` clients with the official
``openai`` SDK. "Added" latency is the platform's minus a direct call to the upstream (measured in
the same rounds). ``shadowed``: two running shadow tests, Avocado v13 on each variant's traffic
of the bench experiment (Avocado v14 / v15), 100 % of sessions, judge Avocado v12: every call gets a
candidate and a judge call on the shadow queue after its answer. Prints the figures, the ratios,
how many shadow calls were made and dropped (backlog), the load average, and per mode the CPU
milliseconds per primary call of each process type (web, worker, drainer, shadow, the upstreams):
CPU per call depends far less on the machine's other load than latency does.

Where the candidate and the judge run. In production their inference runs on other hosts: the
shadow worker only waits for them. Here every upstream is a process on this machine, so by
default the candidate and the judge (Avocado v13, v12) are served by a **second** instant upstream
(a provider of its own, ``avocado-remote``, pointing at it) started under Linux ``SCHED_IDLE``
(``chrt --idle 0``): a stand-in for a remote host whose CPU is not ours -- it runs only when the
primaries' processes leave a core idle. That is a modelling choice of this bench, not something
the platform does. ``--shared-upstream`` serves them from the primaries' upstream as before
(every shadowed call then costs two more calls on the same normal-priority process).

The Procfile's shadow worker waits for 60 % of the host's CPU to be idle before each shadow call
(``SHADOW_MIN_IDLE_CPU=0.6``): from 1 client on, the primaries keep this machine's two cores at
least half busy, so the shadowed round's shadow calls wait and run after it (``wait_shadow_queue_empty``); a round of more
than ``SHADOW_MAX_BACKLOG`` (1,000) calls drops the rest, counted ``backlog``. The offers are made by
the records drainer (its CPU column), not the primaries' worker.

    BENCH_DATABASE_URL=postgres://…/muse_bench_shadow BENCH_REDIS_URL=redis://…/3 \\
        .venv/bin/python bench/bench_shadow.py [--requests 400] [--concurrency 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from decimal import Decimal

import openai
from bench_proxy import (
    MODEL_ALIAS,
    UPSTREAM_KEY,
    UPSTREAM_MODEL,
    bench_dir,
    drive,
    git_revision,
    start_platform,
    start_upstream,
)
from benchlib import Processes, pct, tree_cpu_s

#: The candidate's and the judge's provider in the default mode (their own upstream process).
REMOTE_PROVIDER = "avocado-remote"
#: Process types whose CPU per primary call is printed (the Procfile's, the upstreams, and the
#: PostgreSQL backends connected to the bench database: "postgres").
CPU_GROUPS = ("web", "worker", "drainer", "shadow", "upstream", "remote", "postgres")


def postgres_counters() -> dict[str, float]:
    """The bench database's transactions and written rows so far (``pg_stat_database``; in
    autocommit every statement is a transaction) and the CPU seconds of its current backends
    (``pg_stat_activity`` pids, ``/proc``: pooled connections live across a round; a backend that
    ends mid-round takes its CPU with it). Empty on SQLite."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
        xacts, rows = cur.fetchone()
        cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        pids = [r[0] for r in cur.fetchall()]
    return {"xacts": float(xacts), "rows": float(rows), "cpu_s": tree_cpu_s(pids)}


async def run(target: tuple[str, str], model: str, n: int, concurrency: int):
    """:func:`bench_proxy.drive` with a client made in this event loop (one per ``asyncio.run``)."""
    base_url, key = target
    async with openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60) as client:
        return await drive(client, model, n, concurrency)


def idle_prefix() -> tuple[str, ...]:
    """``chrt --idle 0`` where the machine has it (Linux util-linux), else nothing (said on output)."""
    return ("chrt", "--idle", "0") if shutil.which("chrt") else ()


def move_to_remote(remote: str) -> None:
    """Serve Avocado v13 and v12 (candidate and judge) from the upstream at ``remote``: a copy of
    the ``avocado`` provider pointing there, the two endpoints moved to it, the configuration
    version bumped (in this process, where ``start_platform`` set Django up)."""
    from django.db import transaction

    from muse_experiments.infra.config_version import bump
    from routing.catalogue import avocado_id
    from routing.models import ModelEndpoint, Provider

    with transaction.atomic():
        base = Provider.objects.get(key="avocado")
        Provider.objects.filter(key=REMOTE_PROVIDER).delete()
        remote_provider = Provider.objects.create(
            key=REMOTE_PROVIDER, kind=base.kind, base_url=remote, credential_env=base.credential_env,
            api_version=base.api_version, enabled=True,
        )  # fmt: skip
        for version in (13, 12):
            endpoint = ModelEndpoint.objects.get(public_id=avocado_id(version))
            endpoint.provider = remote_provider
            endpoint.save()
        bump()


def start_shadow_tests() -> list[str]:
    """Two running shadow tests covering every call of the bench experiment (in this process,
    where ``start_platform`` set Django up); returns their keys."""
    from muse_experiments.experiments.services.shadow import shadow_test_create, shadow_test_start

    keys = []
    for variant in ("control", "avocado-v15"):
        test = shadow_test_create(
            key=f"bench-{variant}",
            name=f"v13 on {variant}",
            candidate="avocado-v13",
            source={"experiment": "bench-proxy", "variant": variant},
            sample_percent=100.0,
            judge={"model": "avocado-v12", "instructions": ""},
            max_usd_per_day=Decimal(1000),
            allow_external=False,
            actor="bench",
        )
        shadow_test_start(test=test, actor="bench")
        keys.append(test.key)
    time.sleep(2.5)  # every process sees the configuration change within CONFIG_REFRESH_INTERVAL_S
    return keys


def stop_shadow_tests(keys: list[str]) -> None:
    from muse_experiments.experiments.models import ShadowTest
    from muse_experiments.experiments.services.shadow import shadow_test_stop

    for test in ShadowTest.objects.filter(key__in=keys, status="running"):
        shadow_test_stop(test=test, actor="bench")
    time.sleep(2.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedded", action="store_true", help="platform on SQLite + private Redis")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--shared-upstream",
        action="store_true",
        help="candidate and judge on the primaries' upstream process (default: a second one at SCHED_IDLE)",
    )
    args = parser.parse_args()
    var = bench_dir("bench-shadow", embedded=args.embedded)
    samples: dict[str, list[float]] = {"none": [], "shadowed": [], "direct": []}
    cpu: dict[str, dict[str, float]] = {"none": {}, "shadowed": {}}
    load_before = os.getloadavg()
    with Processes(var / "logs") as procs:
        upstream = start_upstream(procs)
        pids = {"upstream": [procs.procs[-1].pid]}
        remote = None
        if not args.shared_upstream:
            remote = start_upstream(procs, name="remote", prefix=idle_prefix())
            pids["remote"] = [procs.procs[-1].pid]
        base, key, shape, platform_pids = start_platform(
            procs, upstream=upstream, var=var, embedded=args.embedded,
            extra_upstreams=(remote,) if remote else (),
        )  # fmt: skip
        for name, pid in platform_pids.items():
            pids.setdefault(name.split(".")[0], []).append(pid)
        if remote:
            move_to_remote(remote)
        platform = (f"{base}/v1", key)
        direct = (f"{upstream}/v1", UPSTREAM_KEY)
        asyncio.run(run(platform, MODEL_ALIAS, args.warmup, args.concurrency))
        shadow_keys: list[str] = []
        failures: dict[str, list[str]] = {"none": [], "shadowed": [], "direct": []}
        for rnd in range(args.rounds):
            order = ("none", "shadowed") if rnd % 2 == 0 else ("shadowed", "none")
            for mode in order:
                if mode == "shadowed":
                    shadow_keys = start_shadow_tests() if not shadow_keys else _restart(shadow_keys)
                cpu_before = {g: tree_cpu_s(p) for g, p in pids.items()}
                pg_before = postgres_counters()
                latencies, _, failed = asyncio.run(
                    run(platform, MODEL_ALIAS, args.requests, args.concurrency)
                )
                samples[mode] += latencies
                failures[mode] += failed
                if mode == "shadowed":
                    # every offered shadow call runs (a stopped test drops what is still queued), and
                    # the next round's primaries share no CPU with this round's shadow calls
                    wait_shadow_queue_empty()
                else:
                    time.sleep(2.0)  # as long as the shadowed round's settling (the drainer's writes)
                for g, p in pids.items():  # CPU of the round and what it left to do, per process type
                    cpu[mode][g] = cpu[mode].get(g, 0.0) + tree_cpu_s(p) - cpu_before[g]
                time.sleep(1.0)  # backends report their statistics at most once a second
                pg_after = postgres_counters()
                for k, v in pg_after.items():
                    name = "postgres" if k == "cpu_s" else f"pg_{k}"
                    cpu[mode][name] = cpu[mode].get(name, 0.0) + v - pg_before.get(k, v)
                if mode == "shadowed":
                    stop_shadow_tests(shadow_keys)
                latencies, _, failed = asyncio.run(
                    run(direct, UPSTREAM_MODEL, args.requests // 4, args.concurrency)
                )
                samples["direct"] += latencies
                failures["direct"] += failed
        made, dropped = _shadow_counts(shadow_keys)
    load_after = os.getloadavg()
    print(f"\nbench-shadow at {git_revision()}: {'embedded' if args.embedded else 'PostgreSQL + Redis'}, "
          f"{args.concurrency} clients, {args.rounds} rounds of {args.requests} requests per mode")  # fmt: skip
    print(f"load average before {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} / {load_after[1]:.2f} / {load_after[2]:.2f}")  # fmt: skip
    if remote:
        prefix = " ".join(idle_prefix()) or "normal priority (no chrt on this machine)"
        print(f"  candidate + judge upstream: a second instant upstream ({prefix}), a remote host's stand-in")
    else:
        print("  candidate + judge upstream: the primaries' upstream (--shared-upstream)")
    for name, cmd in shape.items():
        print(f"  {name}: {cmd}")
    d50, d99 = pct(samples["direct"], 50), pct(samples["direct"], 99)
    print(f"direct upstream: p50 {d50:.2f} ms, p99 {d99:.2f} ms")
    added = {}
    for mode in ("none", "shadowed"):
        p50, p99 = pct(samples[mode], 50), pct(samples[mode], 99)
        added[mode] = (p50 - d50, p99 - d99)
        print(
            f"{mode:>9}: p50 {p50:.2f} ms, p99 {p99:.2f} ms; added p50 {p50 - d50:.2f} ms, p99 {p99 - d99:.2f} ms"
        )
    for i, name in enumerate(("p50", "p99")):
        r = added["shadowed"][i] / added["none"][i] if added["none"][i] > 0 else float("nan")
        print(f"added {name} shadowed / none: {r:.3f}× ({'met' if r <= 1.05 else 'NOT met'}: ≤ 1.05×)")
    print(f"shadow calls made: {made} pairs; dropped: {dropped}")
    print(cpu_table(cpu, {m: len(samples[m]) for m in cpu}))
    for mode, failed in failures.items():
        if failed:
            print(f"{mode}: {len(failed)} failed calls, e.g. {failed[0]}")
    return 0 if not any(failures.values()) else 1


def cpu_table(cpu: dict[str, dict[str, float]], calls: dict[str, int]) -> str:
    """CPU milliseconds per primary call, per mode and process type, with web + worker (the
    primary's own path) and everything else summed; ``cpu``: ``{mode: {group: CPU seconds}}``."""
    groups = [g for g in CPU_GROUPS if any(g in cpu[m] for m in cpu)]
    lines = ["CPU ms per primary call (user + system; the round and its settling):",
             "  " + f"{'mode':>9} " + " ".join(f"{g:>9}" for g in groups) + f" {'web+worker':>11} {'all':>8}"]  # fmt: skip
    for mode, per in cpu.items():
        n = max(calls.get(mode, 0), 1)
        ms = {g: per.get(g, 0.0) * 1000 / n for g in groups}
        lines.append(
            "  " + f"{mode:>9} " + " ".join(f"{ms[g]:>9.2f}" for g in groups)
            + f" {ms.get('web', 0.0) + ms.get('worker', 0.0):>11.2f} {sum(ms.values()):>8.2f}"
        )  # fmt: skip
    pg = [m for m in cpu if "pg_xacts" in cpu[m]]
    if pg:
        lines.append(
            "PostgreSQL per primary call (bench database; postgres CPU above is its backends'): "
            + "; ".join(
                f"{m} {cpu[m]['pg_xacts'] / max(calls.get(m, 0), 1):.2f} transactions, "
                f"{cpu[m]['pg_rows'] / max(calls.get(m, 0), 1):.2f} rows written"
                for m in pg
            )
        )
    ww = {
        m: (per.get("web", 0.0) + per.get("worker", 0.0)) / max(calls.get(m, 0), 1) for m, per in cpu.items()
    }
    if ww.get("none"):
        lines.append(f"web+worker CPU per call shadowed / none: {ww['shadowed'] / ww['none']:.3f}×")
    return "\n".join(lines)


def wait_shadow_queue_empty(timeout_s: float = 300) -> None:
    """Wait until the shadow queue is empty and the shadow worker has stopped writing pairs (the
    calls it had already taken ran to their end; pairs are written a second apart)."""
    from django.conf import settings

    from muse_experiments.experiments.models import ShadowPair
    from muse_experiments.infra.queues import Queue
    from muse_experiments.infra.redis_client import client_url, redis_client

    broker = redis_client(client_url(settings.CELERY_BROKER_URL))
    deadline = time.monotonic() + timeout_s
    while broker.llen(Queue.SHADOW) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    pairs, still = -1, 0
    while still < 4 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = ShadowPair.objects.count()
        pairs, still = now, (still + 1 if now == pairs else 0)


def _restart(keys: list[str]) -> list[str]:
    from muse_experiments.experiments.models import ShadowTest
    from muse_experiments.experiments.services.shadow import shadow_test_start

    for test in ShadowTest.objects.filter(key__in=keys):
        shadow_test_start(test=test, actor="bench")
    time.sleep(2.5)
    return keys


def _shadow_counts(keys: list[str]) -> tuple[int, dict]:
    time.sleep(3)  # let the shadow queue drain what it holds
    from muse_experiments.experiments.models import ShadowPair
    from routing.shadow.budget import dropped_counts

    return ShadowPair.objects.filter(test__key__in=keys).count(), {k: dropped_counts(k) for k in keys}


if __name__ == "__main__":
    raise SystemExit(main())
