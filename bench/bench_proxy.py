"""The routed-completion hot path next to LiteLLM's proxy, side by side in one run (issue 10).

Starts ONE instant upstream (``bench/instant_upstream.py``: a fixed chat completion at once), then

* **direct SDK**: the official ``openai`` SDK → the instant upstream;
* **LiteLLM proxy** ``litellm[proxy]==1.108.7`` in its own virtualenv (``var/litellm-1.108.7``,
  created on first use, as ``bench_gbstats_compare.py`` installs gbstats): one worker, no
  database, master-key auth, model alias ``muse-default`` → the upstream as an OpenAI-compatible
  endpoint;
* **this platform** in the production shape read from the ``Procfile`` (every process type but
  ``beat``; ``DJANGO_DEBUG=false`` with a ``SECRET_KEY``) on ``BENCH_DATABASE_URL`` (PostgreSQL,
  dropped and created anew) and ``BENCH_REDIS_URL`` (flushed), with a running 50/50 experiment
  between Avocado v14 and v15 whose endpoints point at the upstream, and an API key; or, with
  ``--embedded``, the embedded default (SQLite + private Redis in a fresh folder, as
  ``make demo`` runs it);

and drives all three with ``openai.AsyncOpenAI`` (``chat.completions.create``, model
``muse-default`` for both proxies) at each concurrency (default 1 and 32 clients), ``--rounds``
rounds per level, the targets' order alternating between rounds, after a warm-up that is not
counted. Prints p50/p99 per target, the added p50/p99 over the direct call, throughput, the
ratios against LiteLLM and the issue's goals. Bounded by ``--requests``/``--rounds`` and
``--timeout``; every process it starts is stopped on exit (also on Ctrl-C or SIGTERM).

    make bench-proxy BENCH_DATABASE_URL=postgres://…/muse_bench_proxy BENCH_REDIS_URL=redis://…/2
    .venv/bin/python bench/bench_proxy.py [--embedded] [--requests 400] [--rounds 2] [--concurrency 1 32]

Every process shares this machine's cores with the load generator, so figures are only
comparable within one run; the ratios are what to quote.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import (
    REPO,
    Processes,
    bench_ports,
    ensure_venv,
    free_port,
    pct,
    recreate_database,
    tree_cpu_s,
    wait_http,
)

LITELLM_VERSION = "1.108.7"
LITELLM_VENV = REPO / "var" / f"litellm-{LITELLM_VERSION}"
TARGETS = ("direct", "litellm", "platform")
LABELS = {"direct": "direct SDK", "litellm": "LiteLLM proxy", "platform": "this platform"}
MODEL_ALIAS = "muse-default"
UPSTREAM_MODEL = "avocado-v14"
UPSTREAM_KEY = "sk-instant-upstream"
#: Ports this harness binds: ``BENCH_PORTS=18200-18299`` (your fixed range on a shared machine;
#: a taken port is skipped), else ports the kernel picks. Two developers running the harness at
#: once on one hard-coded range raced for the same port.
PORTS = bench_ports(os.environ.get("BENCH_PORTS", ""))
#: Process types of the Procfile not started unless ``$MUSE_FORMATION`` names them: scheduled
#: work, off the request path.
SKIP_PROCESSES = frozenset({"beat"})
#: Issue 10's goals: ``(text, metric, concurrency, bound on platform / LiteLLM, "le" | "ge")``.
GOALS = (
    ("added p50 at 1 client ≤ 0.5× LiteLLM's", "added_p50", 1, 0.5, "le"),
    ("added p99 at 1 client ≤ 1× LiteLLM's", "added_p99", 1, 1.0, "le"),
    ("throughput at 32 clients ≥ 1.5× LiteLLM's", "throughput", 32, 1.5, "ge"),
    ("p99 at 32 clients ≤ 1× LiteLLM's", "p99", 32, 1.0, "le"),
)


# ----------------------------------------------------------------------------------------------
# Figures (pure: unit-tested in tests/bench/test_bench_proxy.py)
# ----------------------------------------------------------------------------------------------
@dataclass
class Sample:
    """Latencies (ms) of one target at one concurrency, pooled over rounds, and the wall time (s)."""

    latencies_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    #: CPU seconds the target's own processes used meanwhile (``None``: not measured, e.g. direct).
    cpu_s: float | None = None
    #: The same per process (``{"web.1": s, …}``), with its descendants.
    cpu_parts_s: dict[str, float] = field(default_factory=dict)

    def add(
        self,
        latencies_ms: list[float],
        wall_s: float,
        failures: list[str],
        cpu_s: float | None = None,
        cpu_parts_s: dict[str, float] | None = None,
    ) -> None:
        self.latencies_ms += latencies_ms
        self.wall_s += wall_s
        self.failures += failures
        if cpu_s is not None:
            self.cpu_s = (self.cpu_s or 0.0) + cpu_s
        for name, seconds in (cpu_parts_s or {}).items():
            self.cpu_parts_s[name] = self.cpu_parts_s.get(name, 0.0) + seconds

    def cpu_parts_ms_per_call(self) -> dict[str, float]:
        """CPU milliseconds per completed call of each of the target's processes."""
        n = len(self.latencies_ms)
        return {name: s * 1000 / n for name, s in self.cpu_parts_s.items()} if n else {}

    @property
    def cpu_ms_per_call(self) -> float | None:
        """The target's own CPU milliseconds per completed call."""
        if self.cpu_s is None or not self.latencies_ms:
            return None
        return self.cpu_s * 1000 / len(self.latencies_ms)

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def p99(self) -> float:
        return pct(self.latencies_ms, 99)

    @property
    def throughput(self) -> float:
        """Completed requests per second of wall time."""
        return len(self.latencies_ms) / self.wall_s if self.wall_s else 0.0


def figures(samples: dict[tuple[str, int], Sample], level: int) -> dict[str, dict[str, float]]:
    """``{metric: {target: value}}`` at one concurrency: p50, p99, throughput, ``cpu`` (the target's
    own CPU ms per call, where measured) and ``added_p50`` / ``added_p99`` (the target's percentile
    minus the direct call's; absent for direct)."""
    metrics = ("p50", "p99", "added_p50", "added_p99", "throughput", "cpu")
    out: dict[str, dict[str, float]] = {m: {} for m in metrics}
    for target in TARGETS:
        s = samples.get((target, level))
        if s is None or not s.latencies_ms:
            continue
        out["p50"][target], out["p99"][target], out["throughput"][target] = s.p50, s.p99, s.throughput
        if s.cpu_ms_per_call is not None:
            out["cpu"][target] = s.cpu_ms_per_call
    for q in ("p50", "p99"):
        if "direct" in out[q]:
            for target in ("litellm", "platform"):
                if target in out[q]:
                    out[f"added_{q}"][target] = out[q][target] - out[q]["direct"]
    return out


def ratio(figs: dict[str, dict[str, float]], metric: str) -> float | None:
    """The platform's ``metric`` over LiteLLM's (``None`` when either is missing or LiteLLM's is ≤ 0)."""
    ours, theirs = figs[metric].get("platform"), figs[metric].get("litellm")
    if ours is None or theirs is None or theirs <= 0:
        return None
    return ours / theirs


def render_table(samples: dict[tuple[str, int], Sample], levels: list[int]) -> str:
    """The issue's table in Markdown: a column per target, ratios against LiteLLM in the platform's."""
    header = "| | " + " | ".join(LABELS[t] for t in TARGETS) + " |"
    lines = [header, "|---|" + "---:|" * len(TARGETS)]
    rows = (
        ("p50 at {c} client{s}", "p50", "{:.2f} ms", False),
        ("p99 at {c} client{s}", "p99", "{:.2f} ms", True),
        ("added p50 at {c} client{s} (minus direct)", "added_p50", "{:.2f} ms", True),
        ("added p99 at {c} client{s} (minus direct)", "added_p99", "{:.2f} ms", True),
        ("throughput at {c} client{s}", "throughput", "{:,.0f}/s", True),
        ("proxy CPU per call at {c} client{s}", "cpu", "{:.2f} ms", True),
    )
    for c in levels:
        figs = figures(samples, c)
        for label, metric, fmt, with_ratio in rows:
            cells = []
            for target in TARGETS:
                value = figs[metric].get(target)
                cell = "—" if value is None else fmt.format(value)
                r = ratio(figs, metric) if target == "platform" and with_ratio else None
                cells.append(f"{cell} ({r:.2f}×)" if r is not None else cell)
            lines.append(f"| {label.format(c=c, s='' if c == 1 else 's')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goal_lines(samples: dict[tuple[str, int], Sample], levels: list[int]) -> list[str]:
    """One line per issue-10 goal whose level was measured: the ratio and ``met`` / ``NOT met``."""
    out = []
    for name, metric, level, bound, sense in GOALS:
        if level not in levels:
            continue
        r = ratio(figures(samples, level), metric)
        if r is None:
            out.append(f"  {name}: not measured")
            continue
        ok = r <= bound if sense == "le" else r >= bound
        out.append(f"  {name}: {r:.2f}× — {'met' if ok else 'NOT met'}")
    return out


def litellm_config(*, upstream: str, master_key: str) -> dict:
    """LiteLLM proxy config: ``muse-default`` → the upstream's ``/v1`` as an OpenAI-compatible
    model, master-key auth, no database (written as JSON, which is YAML)."""
    return {
        "model_list": [
            {
                "model_name": MODEL_ALIAS,
                "litellm_params": {
                    "model": f"openai/{UPSTREAM_MODEL}",
                    "api_base": f"{upstream}/v1",
                    "api_key": UPSTREAM_KEY,
                },
            }
        ],
        "general_settings": {"master_key": master_key},
    }


def schedule(levels: list[int], rounds: int) -> list[tuple[int, int, tuple[str, ...]]]:
    """``[(level, round, target order)]``: every level × round, the order reversed every other round."""
    return [
        (c, r, TARGETS if r % 2 == 0 else tuple(reversed(TARGETS))) for c in levels for r in range(rounds)
    ]


# ----------------------------------------------------------------------------------------------
# Load (the official openai SDK, asyncio: one coroutine per concurrent client)
# ----------------------------------------------------------------------------------------------
async def drive(client, model: str, n: int, concurrency: int) -> tuple[list[float], float, list[str]]:
    """``n`` chat completions through ``client`` by ``concurrency`` clients in parallel; returns
    (latencies in ms of the successes, wall seconds, failure messages)."""
    counter = itertools.count()
    latencies: list[float] = []
    failures: list[str] = []

    async def one_client() -> None:
        while (i := next(counter)) < n:
            started = time.perf_counter()
            try:
                await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": f"Benchmark request {i}: answer briefly."}],
                    user=f"bench-user-{i % 1000}",
                )
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none retried
                failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                continue
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return latencies, time.perf_counter() - started, failures


async def measure(
    clients: dict,
    levels: list[int],
    requests: int,
    rounds: int,
    warmup: int,
    cpu_pids: dict[str, dict[str, int]],
):
    """Warm every target up (not counted), then run the :func:`schedule`; ``{(target, level): Sample}``.
    ``cpu_pids``: per target, its processes by name (each with its descendants), whose CPU time
    counts as the target's own."""
    for client, model in clients.values():
        await drive(client, model, warmup, max(levels))
        await drive(client, model, max(5, warmup // 10), 1)
    samples: dict[tuple[str, int], Sample] = {}
    for level, rnd, order in schedule(levels, rounds):
        for target in order:
            client, model = clients[target]
            pids = cpu_pids.get(target) or {}
            before = {name: tree_cpu_s([pid]) for name, pid in pids.items()}
            lat, wall, failures = await drive(client, model, requests, level)
            parts = {name: tree_cpu_s([pid]) - before[name] for name, pid in pids.items()}
            cpu = sum(parts.values()) if pids else None
            samples.setdefault((target, level), Sample()).add(
                lat, wall, failures, cpu, parts if len(pids) > 1 else None
            )
            print(
                f"  round {rnd + 1} {level:>3} client(s) {LABELS[target]:<14} {len(lat)} ok in {wall:.1f}s"
                + (f", {len(failures)} FAILED: {failures[0]}" if failures else ""),
                file=sys.stderr,
            )
    return samples


# ----------------------------------------------------------------------------------------------
# Processes
# ----------------------------------------------------------------------------------------------
def bench_dir(name: str, *, embedded: bool) -> Path:
    """Check the services' settings (``SystemExit`` if missing), stop on SIGTERM as on Ctrl-C
    (cleaning up), and return a fresh ``var/<name>[-embedded]`` folder for state and logs."""
    if not embedded and not (
        os.environ.get("BENCH_DATABASE_URL", "").startswith("postgres") and os.environ.get("BENCH_REDIS_URL")
    ):
        raise SystemExit(
            "set BENCH_DATABASE_URL (PostgreSQL, recreated) and BENCH_REDIS_URL (flushed), or pass --embedded"
        )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    var = REPO / "var" / (f"{name}-embedded" if embedded else name)
    shutil.rmtree(var, ignore_errors=True)
    var.mkdir(parents=True)
    return var


def start_upstream(procs: Processes, *, name: str = "upstream", prefix: tuple[str, ...] = ()) -> str:
    """The instant upstream on a free port (its command after ``prefix``, e.g. ``("chrt", "--idle",
    "0")``; its log ``<name>.log``); returns its base URL."""
    port = free_port(PORTS)
    procs.spawn([*prefix, sys.executable, str(REPO / "bench" / "instant_upstream.py"), "--port", str(port)],
                name, env=dict(os.environ))  # fmt: skip
    upstream = f"http://127.0.0.1:{port}"
    wait_http(f"{upstream}/health", procs=procs.procs)
    return upstream


def start_litellm(procs: Processes, *, upstream: str, var: Path, venv: Path) -> tuple[str, str, int]:
    """LiteLLM's proxy (one worker, no database) on a free port; returns (base URL, master key, pid)."""
    python = ensure_venv(
        venv,
        requirement=f"litellm[proxy]=={LITELLM_VERSION}",
        probe=f"import importlib.metadata as m, litellm.proxy.proxy_server; assert m.version('litellm') == '{LITELLM_VERSION}'",
    )
    master_key = f"sk-litellm-{secrets.token_hex(8)}"
    config = var / "litellm.yaml"
    config.write_text(json.dumps(litellm_config(upstream=upstream, master_key=master_key), indent=2))
    port = free_port(PORTS)
    env = {
        "PATH": f"{python.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the price list at start-up
        "LITELLM_TELEMETRY": "False",
    }
    cmd = [str(python.parent / "litellm"), "--config", str(config), "--host", "127.0.0.1",
           "--port", str(port), "--num_workers", "1"]  # fmt: skip
    proc = procs.spawn(cmd, "litellm", env=env)
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/health/liveliness", timeout_s=180, procs=procs.procs)
    return base, master_key, proc.pid


def platform_env(*, var: Path, embedded: bool, port: int) -> dict[str, str]:
    """The environment of the platform's processes: production settings, services or embedded."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")
    }
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "DJANGO_SETTINGS_MODULE": "muse_experiments.settings",
            "DJANGO_DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "MUSE_VAR_DIR": str(var / "platform"),
            "AVOCADO_API_KEY": UPSTREAM_KEY,
            "AZURE_OPENAI_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "HOST": "127.0.0.1",
            "PORT": str(port),
        }
    )
    if not embedded:
        env["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]
        env["REDIS_URL"] = os.environ["BENCH_REDIS_URL"]
    return env


def prepare_platform(env: dict[str, str], *, upstream: str, extra_upstreams: tuple[str, ...] = ()) -> str:
    """Migrate, seed the catalogue at the upstream, start a 50/50 Avocado v14/v15 experiment and
    create an API key (scope completions, no practical rate limit), in this process; returns the key.
    ``env`` gets ``SIMULATED_UPSTREAMS`` (the provider keys may go to the upstream, and to each of
    ``extra_upstreams``) for the processes started with it after."""
    env["SIMULATED_UPSTREAMS"] = ",".join(u.removeprefix("http://") for u in (upstream, *extra_upstreams))
    os.environ.update(env)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from muse_experiments.api.auth import api_key_create
    from muse_experiments.experiments.services.edits import experiment_create
    from muse_experiments.experiments.services.lifecycle import experiment_start
    from muse_experiments.experiments.services.variants import VariantInput
    from routing.catalogue import avocado_id
    from routing.models import ModelEndpoint

    call_command("migrate", verbosity=0)
    call_command("seed_catalogue", simulated_base_url=upstream, stdout=open(os.devnull, "w"))  # noqa: SIM115
    v14, v15 = (ModelEndpoint.objects.get(public_id=avocado_id(i)) for i in (14, 15))
    experiment = experiment_create(
        key="bench-proxy",
        name="Avocado v15 vs v14 (bench)",
        owner="bench",
        actor="bench",
        variants=[
            VariantInput(key="control", weight=0.5, endpoint=v14, is_control=True),
            VariantInput(key="avocado-v15", weight=0.5, endpoint=v15),
        ],
    )
    experiment_start(experiment=experiment, actor="bench")
    _, key = api_key_create(name="bench-proxy", scopes=["completions"], rate_limit_per_minute=10**9)
    connections.close_all()
    return key


def bench_formation(formation: str, *, embedded: bool = False) -> str:
    """``$MUSE_FORMATION`` for the bench: as given, with ``beat=0`` unless it names beat
    (scheduled work is off the request path); the embedded default runs one worker, as
    ``make demo`` does (SQLite has one writer: a second worker only waits for its lock)."""
    named = {part.split("=", 1)[0].strip() for part in formation.split(",") if part.strip()}
    extra = [f"{name}=0" for name in sorted(SKIP_PROCESSES - named)]
    if embedded and "worker" not in named:
        extra.append("worker=1")
    return ",".join(filter(None, [formation.strip(), *extra]))


def start_platform(
    procs: Processes, *, upstream: str, var: Path, embedded: bool, extra_upstreams: tuple[str, ...] = ()
) -> tuple[str, str, dict[str, str], dict[str, int]]:
    """The platform as ``make run-prod`` runs it (:mod:`muse_experiments.infra.prodshape`: the Procfile
    times ``$MUSE_FORMATION``, without beat); returns (base URL, API key, {process: command},
    {process: pid}). The supervisor is stopped with ``procs``. ``extra_upstreams``: more upstream
    base URLs the provider keys may go to (:func:`prepare_platform`)."""
    from muse_experiments.infra.prodshape import Supervisor, processes

    port = free_port(PORTS)
    env = platform_env(var=var, embedded=embedded, port=port)
    if embedded:  # the private Redis server the settings point at (muse_experiments.infra.private_redis)
        from muse_experiments.infra.private_redis import ensure_running

        procs.stoppers.append(ensure_running(Path(env["MUSE_VAR_DIR"]) / "redis").stop)
    else:
        import redis

        recreate_database(env["DATABASE_URL"])
        redis.Redis.from_url(env["REDIS_URL"]).flushdb()
    key = prepare_platform(env, upstream=upstream, extra_upstreams=extra_upstreams)
    shape = processes(formation=bench_formation(os.environ.get("MUSE_FORMATION", ""), embedded=embedded))
    supervisor = Supervisor(shape, run_dir=var / "run", restart=False, env=env, output=procs.log_dir)
    procs.stoppers.append(supervisor.stop_all)
    supervisor.start_all()
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", timeout_s=120, procs=list(supervisor.children.values()))
    return (
        base,
        key,
        {p.name: p.command for p in shape},
        {name: child.pid for name, child in supervisor.children.items()},
    )


def start_floor(procs: Processes, *, upstream: str, var: Path) -> tuple[str, dict[str, str], dict[str, int]]:
    """The architecture's floor (``bench/floor_app.py``) in the Procfile's shape — gunicorn
    ``gthread`` 2 × 48 threads, two Celery workers × 32 threads — on ``BENCH_REDIS_URL`` (flushed);
    returns (base URL, {process: command}, {process: pid})."""
    import redis

    redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]).flushdb()
    port = free_port(PORTS)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": str(REPO / "bench"),
        "DJANGO_SETTINGS_MODULE": "floor_app",
        "REDIS_URL": os.environ["BENCH_REDIS_URL"],
        "FLOOR_UPSTREAM": upstream,
        "FLOOR_UPSTREAM_KEY": UPSTREAM_KEY,
    }
    worker = (
        "celery -A floor_app --quiet worker -l info -Q floor --pool threads --concurrency 32 "
        "--without-gossip --without-mingle --without-heartbeat -n floor{n}@%h"
    )
    shape = {
        "web.1": f"gunicorn floor_app:application -b 127.0.0.1:{port} -k gthread --workers 2 --threads 48",
        "worker.1": worker.format(n=1),
        "worker.2": worker.format(n=2),
    }
    pids = {name: procs.spawn(cmd, name, env=env, cwd=REPO / "bench").pid for name, cmd in shape.items()}
    base = f"http://127.0.0.1:{port}"
    wait_http(f"{base}/healthz", timeout_s=60, procs=procs.procs)
    return base, shape, pids


def git_revision() -> str:
    """``<short commit>`` of the working tree, ``+dirty`` when it has uncommitted changes."""
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], cwd=REPO, capture_output=True, text=True)
    return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedded", action="store_true", help="platform on SQLite + private Redis")
    parser.add_argument("--requests", type=int, default=400, help="requests per target, level and round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per level (order alternates)")
    parser.add_argument("--warmup", type=int, default=200, help="uncounted requests per target first")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole measurement")
    parser.add_argument("--litellm-venv", type=Path, default=LITELLM_VENV)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="in the platform's place, the architecture's floor (bench/floor_app.py): web → Celery → SDK → back, nothing else",
    )
    args = parser.parse_args()
    if args.floor and args.embedded:
        parser.error("--floor runs on Redis; it has no embedded form")
    var = bench_dir("bench-proxy", embedded=args.embedded)
    if args.floor:
        LABELS["platform"] = "architecture floor"

    import openai

    with Processes(var / "logs") as procs:
        upstream = start_upstream(procs)
        litellm_url, master_key, litellm_pid = start_litellm(
            procs, upstream=upstream, var=var, venv=args.litellm_venv
        )
        if args.floor:
            platform_url, shape, platform_pids = start_floor(procs, upstream=upstream, var=var)
            api_key = "unused"
        else:
            platform_url, api_key, shape, platform_pids = start_platform(
                procs, upstream=upstream, var=var, embedded=args.embedded
            )

        def client(base: str, key: str):
            return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)

        clients = {
            "direct": (client(upstream, UPSTREAM_KEY), UPSTREAM_MODEL),
            "litellm": (client(litellm_url, master_key), MODEL_ALIAS),
            "platform": (client(platform_url, api_key), MODEL_ALIAS),
        }
        print(f"measuring (bounded by --timeout {args.timeout:.0f}s)…", file=sys.stderr)
        load_before = os.getloadavg()
        try:
            samples = asyncio.run(
                asyncio.wait_for(
                    measure(
                        clients,
                        args.concurrency,
                        args.requests,
                        args.rounds,
                        args.warmup,
                        {"litellm": {"litellm": litellm_pid}, "platform": dict(platform_pids)},
                    ),
                    args.timeout,
                )
            )
        except TimeoutError:
            raise SystemExit(f"the measurement did not finish within --timeout {args.timeout:.0f}s") from None

    mode = "embedded default (SQLite + private Redis)" if args.embedded else "PostgreSQL + Redis"
    mode = "the architecture's floor (bench/floor_app.py) on Redis" if args.floor else mode
    print(
        f"\nbench-proxy at {git_revision()} on {os.cpu_count()} cores; platform: {mode}, DJANGO_DEBUG=false"
    )
    formation = (
        "floor"
        if args.floor
        else bench_formation(os.environ.get("MUSE_FORMATION", ""), embedded=args.embedded)
    )
    print(
        f"  Procfile × MUSE_FORMATION={formation!r} "
        f"(WEB_CONCURRENCY={os.environ.get('WEB_CONCURRENCY', 'unset')}; load average before/after: "
        f"{load_before[0]:.1f}/{os.getloadavg()[0]:.1f} — other work on the machine skews absolute figures):"
    )
    for name, cmd in shape.items():
        print(f"    {name}: {cmd}")
    print(
        f"  LiteLLM {LITELLM_VERSION} proxy: 1 worker, no database, master key; all three → one instant upstream"
    )
    print(f"  {args.requests} requests × {args.rounds} rounds per target and level, order alternating; "
          f"{args.warmup} warm-up requests each, not counted\n")  # fmt: skip
    print(render_table(samples, args.concurrency))
    print(
        "(proxy CPU: the LiteLLM process; every process of the platform's shape above, with their children,"
        " without PostgreSQL/Redis)"
    )
    for level in args.concurrency:
        sample = samples.get(("platform", level))
        parts = sample.cpu_parts_ms_per_call() if sample else {}
        if parts:
            print(f"  platform CPU per call at {level} client{'s' if level > 1 else ''}, by process: "
                  + ", ".join(f"{name} {ms:.2f} ms" for name, ms in parts.items()))  # fmt: skip
    print("\nissue 10 goals (platform / LiteLLM, same run):")
    print("\n".join(goal_lines(samples, args.concurrency)))
    failed = {k: len(s.failures) for k, s in samples.items() if s.failures}
    if failed:
        print(
            f"\nFAILED requests: {failed}; first: {next(s.failures[0] for s in samples.values() if s.failures)}"
        )
    names = ("BENCH_PORTS", "MUSE_FORMATION", "WEB_CONCURRENCY")
    names += () if args.embedded else ("BENCH_DATABASE_URL", "BENCH_REDIS_URL")
    env_prefix = "".join(f"{n}={os.environ[n]} " for n in names if os.environ.get(n))
    print(f"\nreproduce: git checkout {git_revision().removesuffix('+dirty')} && {env_prefix}.venv/bin/python "
          f"bench/bench_proxy.py {' '.join(sys.argv[1:])}".rstrip())  # fmt: skip
    print(f"logs: {var / 'logs'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
