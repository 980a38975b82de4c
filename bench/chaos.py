"""Load and fault suite (``make chaos``; ``make chaos-short`` in CI): nothing may be lost.

Everything runs on this machine, on loopback, bounded in time and count, against PRIVATE
instances this script starts and always stops (never the machine's shared services):

* Redis (``redis-server`` on its own port, append-only file so a restart keeps queued tasks),
* PostgreSQL (``initdb`` + ``pg_ctl`` from ``/usr/lib/postgresql/*/bin``, as the ``postgres`` user
  via ``runuser`` when run as root, in a data directory under ``var/chaos``),
* RabbitMQ (its own node name, ports, Mnesia and log directories, no plugins) for the pass where
  it is the Celery broker (results and streams stay on Redis),
* two simulated upstream processes (``routing.simulated``): the in-house Avocado service and
  the external providers (Azure OpenAI, Anthropic) on another port, so one can be taken down,
* the platform as the ``Procfile`` runs it (``muse_experiments.infra.prodshape``: gunicorn, two Celery
  workers, beat), on those services.

A load generator (asyncio) sends requests at a fixed rate, round robin over the native REST API
(``POST /api/v1/completions``), the OpenAI drop-in (``/v1/chat/completions`` through the official
``openai`` SDK) and the Anthropic drop-in (``/v1/messages`` through the ``anthropic`` SDK), under
a running three-arm experiment (Avocado control, Azure, Anthropic); beside every third request the
same SDK calls the Avocado upstream directly (the figure each platform figure is compared with).
Faults, one after another, each with a window before, during and after::

    worker SIGKILL mid-call (twice), worker restart (SIGTERM), Redis restart, PostgreSQL restart,
    upstream 429 storm, 5xx storm, timeouts, connection resets, one upstream down,
    kill switch for the external providers; then, with RabbitMQ as the broker: worker SIGKILL,
    RabbitMQ restart.

Per fault it prints: requests sent, succeeded, failed with a clear error (an HTTP error with a
JSON error body, or a job that ended ``failed`` with a reason), lost (no answer, a 5xx without an
error body, or a job that never finished — must be 0), duplicate upstream calls for one attempt
(must be 0), records missing from the database after the drain (must be 0), calls served by a
killed provider later than 1 s after the flip (must be 0), p50/p99 before/during/after next to
the direct SDK's in the same windows, and the time to recover (last failed request's end minus
the fault's end). Exit status 1 when any must-be-0 figure is not 0. ``--short`` is the CI size.

Each fault's window opens only once every worker the supervisor (re)started has logged ``ready.``
(under load a worker's boot outlasts a short after window, and faults would pile up); RabbitMQ is
launched with the other services and boots during the migrations and the Redis pass.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from muse_experiments.infra.prodshape import Supervisor, processes, signal_group  # noqa: E402

PORTS = {"redis": 18610, "postgres": 18611, "rabbit": 18612, "rabbit_dist": 18613}
PORTS |= {"upstream_internal": 18614, "upstream_external": 18615, "web": 18616}
CONTROL_MODEL, AZURE_MODEL, ANTHROPIC_MODEL = "avocado-v14", "muse-special", "claude-sonnet-5-5"
UPSTREAM_KEYS = {f: f"chaos-{f}-{secrets.token_hex(8)}" for f in ("native", "azure", "anthropic", "openai")}
#: Settings that make recovery fast enough to observe in seconds (all documented in README).
PLATFORM_TUNING = {
    "COMPLETION_LEASE_S": "4",
    "COMPLETION_REAP_INTERVAL_S": "2",
    "COMPLETION_REQUEUE_AFTER_S": "10",
    "CELERY_VISIBILITY_TIMEOUT_S": "30",
    "CELERY_UNACKED_RESTORE_INTERVAL_S": "2",
    "CELERY_UNACKED_RESTORE_THROTTLE": "1",
    "COMPLETION_SYNC_WAIT_S": "20",
    "DROPIN_WAIT_S": "20",
    "ROUTING_BACKOFF_BASE_MS": "50",
    "ROUTING_BACKOFF_CAP_MS": "400",
    "ROUTING_RETRY_AFTER_CAP_S": "0.5",
    "ROUTING_CIRCUIT_COOLDOWN_S": "3",
}
ENDPOINT_TIMEOUT_S = 2.0
#: Attempt outcomes that never reached an upstream (refusals before the call).
REFUSALS = {"disabled", "circuit_open", "concurrency_limited", "missing_credential"}


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


def port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


# ---- private services -------------------------------------------------------------------------


class PrivateRedis:
    """redis-server on its own port; append-only file (fsync every write) so a restart keeps data."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.url = f"redis://127.0.0.1:{PORTS['redis']}/0"

    def start(self) -> None:
        argv = ["redis-server", "--port", str(PORTS["redis"]), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        argv += ["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"]
        with open(self.dir / "redis.log", "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: port_open(PORTS["redis"]), 20, "private redis")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: redis flushes the AOF and exits
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class PrivatePostgres:
    """A throw-away PostgreSQL cluster (initdb/pg_ctl), as the postgres OS user when run as root."""

    def __init__(self, root: Path) -> None:
        # a temp dir the postgres user can reach whatever the checkout's permissions; removed at the end
        self.dir = Path(tempfile.mkdtemp(prefix="muse-chaos-pg-"))
        os.chmod(self.dir, 0o755)
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            raise RuntimeError("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin")
        self.bin = bins[-1].parent
        self.url = f"postgres://postgres@127.0.0.1:{PORTS['postgres']}/muse_chaos"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def init(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.dir / "data"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        )
        self.start()
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(PORTS["postgres"]), "-U", "postgres", "-qc", "CREATE DATABASE muse_chaos"],
            check=True,
        )  # fmt: skip

    def start(self) -> None:
        opts = f"-p {PORTS['postgres']} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.dir / "data"),
            "-l",
            str(self.dir / "log"),
            "-o",
            opts,
            "-w",
            "start",
        )

    def stop(self) -> None:
        if (self.dir / "data" / "postmaster.pid").exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRabbit:
    """A RabbitMQ node of its own (name, ports, Mnesia/log dirs, cookie in its own HOME, no plugins)."""

    NODE = "muse_chaos@localhost"

    def __init__(self, root: Path) -> None:
        self.dir = root / "rabbitmq"
        self.proc: subprocess.Popen | None = None
        self.url = f"amqp://guest:guest@127.0.0.1:{PORTS['rabbit']}//"

    def env(self) -> dict[str, str]:
        d = self.dir
        return {
            **os.environ,
            "HOME": str(d),
            "RABBITMQ_CONF_ENV_FILE": str(d / "env.conf"),
            "RABBITMQ_NODENAME": self.NODE,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(PORTS["rabbit"]),
            "RABBITMQ_DIST_PORT": str(PORTS["rabbit_dist"]),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_PID_FILE": str(d / "pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_FLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the node without waiting for it (its boot overlaps other work; see ``wait_ready``)."""
        d = self.dir
        if not d.exists():
            d.mkdir(parents=True)
            (d / "enabled_plugins").write_text("[].\n")
            (d / "env.conf").write_text("")
            (d / "rabbitmq.conf").write_text(
                f"loopback_users = none\nlisteners.tcp.default = 127.0.0.1:{PORTS['rabbit']}\n"
            )
        with open(d / "server.log", "ab") as out:
            self.proc = subprocess.Popen(
                ["/usr/lib/rabbitmq/bin/rabbitmq-server"], env=self.env(), cwd=d, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def wait_ready(self) -> None:
        wait_until(lambda: port_open(PORTS["rabbit"]), 90, "private rabbitmq")

    def stop(self) -> None:
        """A graceful stop: ``rabbitmq-server`` in the foreground turns SIGTERM into the same
        stop as ``rabbitmqctl stop`` (its signal handlers), without booting a second Erlang VM
        for the CLI."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Upstream:
    """One simulated-upstream process, controlled over its ``/_fake`` HTTP API."""

    def __init__(self, name: str, port: int, logs: Path) -> None:
        self.name, self.port, self.logs = name, port, logs
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.launch()
        self.ready()

    def launch(self) -> None:
        """Start the process without waiting for it (see ``ready``)."""
        env = {**os.environ, "FAKE_UPSTREAM_KEYS_JSON": json.dumps(UPSTREAM_KEYS)}
        with open(self.logs / f"upstream-{self.name}.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "routing.simulated", "--port", str(self.port)], env=env,
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def ready(self) -> None:
        """Wait until it answers, then set the models' normal latencies."""
        wait_until(
            lambda: httpx.get(f"{self.url}/_fake/health").status_code == 200, 30, f"upstream {self.name}"
        )
        self.scenarios(
            {
                CONTROL_MODEL: {"latency_ms": 20},
                AZURE_MODEL: {"latency_ms": 30},
                ANTHROPIC_MODEL: {"latency_ms": 30},
            }
        )

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def scenarios(self, scenarios: dict) -> None:
        httpx.post(
            f"{self.url}/_fake/scenarios", json={"scenarios": scenarios}, timeout=10
        ).raise_for_status()

    def calls(self) -> list[dict]:
        r = httpx.get(f"{self.url}/_fake/calls", timeout=60)
        r.raise_for_status()
        return r.json()["calls"]


# ---- the platform -------------------------------------------------------------------------------


def platform_env(redis: PrivateRedis, pg: PrivatePostgres, broker_url: str, var: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("MUSE_", "CELERY_", "PROMETHEUS"))},
        **PLATFORM_TUNING,
        "DJANGO_DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": pg.url,
        "REDIS_URL": redis.url,
        "CELERY_BROKER_URL": broker_url,
        "MUSE_VAR_DIR": str(var),
        "PORT": str(PORTS["web"]),
        "WEB_CONCURRENCY": "2",
        "AVOCADO_API_KEY": UPSTREAM_KEYS["native"],
        "AZURE_OPENAI_API_KEY": UPSTREAM_KEYS["azure"],
        "ANTHROPIC_API_KEY": UPSTREAM_KEYS["anthropic"],
        # the keys may go to both simulated upstreams (routing.guards.credentials)
        "SIMULATED_UPSTREAMS": f"127.0.0.1:{PORTS['upstream_internal']},127.0.0.1:{PORTS['upstream_external']}",
    }


def prepare_database(env: dict[str, str], internal: Upstream, external: Upstream) -> str:
    """Migrate, seed the catalogue, start a three-arm experiment; returns an API key. (Migrates in
    this process, which sets Django up for the checks anyway: a ``manage.py`` subprocess paid a
    second Django start-up, ~3 s of CPU.)"""
    os.environ.update(env)
    os.environ["DJANGO_SETTINGS_MODULE"] = "muse_experiments.settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    call_command("migrate", interactive=False, verbosity=0)

    from muse_experiments.api.auth import api_key_create
    from muse_experiments.experiments.services.edits import experiment_create
    from muse_experiments.experiments.services.lifecycle import experiment_start
    from muse_experiments.experiments.services.variants import VariantInput
    from routing.catalogue import avocado_id
    from routing.models import ModelEndpoint, Provider

    call_command("seed_catalogue", simulated_base_url=internal.url, stdout=open(os.devnull, "w"))  # noqa: SIM115
    Provider.objects.exclude(key="avocado").update(base_url=external.url)  # the external providers
    ModelEndpoint.objects.update(timeout_s=ENDPOINT_TIMEOUT_S)
    arms = [
        ("control", avocado_id(14), 0.4),
        ("azure", "azure/muse-special", 0.3),
        ("claude", "anthropic/claude-sonnet-5-5", 0.3),
    ]
    endpoints = {e.public_id: e for e in ModelEndpoint.objects.filter(public_id__in=[a[1] for a in arms])}
    experiment = experiment_create(
        key="chaos",
        name="chaos",
        actor="chaos",
        variants=[
            VariantInput(key=k, weight=w, endpoint=endpoints[pid], is_control=(i == 0))
            for i, (k, pid, w) in enumerate(arms)
        ],
    )
    experiment_start(experiment=experiment, actor="chaos")
    _, key = api_key_create(name="chaos", scopes=["completions", "ops"], rate_limit_per_minute=10**9)
    connections.close_all()
    return key


# ---- load -------------------------------------------------------------------------------------


@dataclass
class Req:
    n: int
    kind: str
    t0: float
    t1: float = 0.0
    outcome: str = "pending"  # ok | clear | lost | pending
    job_id: str | None = None
    detail: str = ""


async def _parsed(raw) -> object:
    """The parsed body of an SDK raw response (sync in one SDK, a coroutine in the other)."""
    parsed = raw.parse()
    return await parsed if inspect.isawaitable(parsed) else parsed


MARK = re.compile(r"ck(\d+)x")


class Load:
    """Open-loop load at ``rate`` requests/s (bounded in flight), plus direct SDK calls."""

    def __init__(self, base: str, key: str, upstream: str, rate: float, first_n: int = 0) -> None:
        import anthropic
        import openai

        self.base, self.rate = base, rate
        self.http = httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        self.oa = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)
        self.an = anthropic.AsyncAnthropic(base_url=base, api_key=key, max_retries=0, timeout=60)
        self.direct = openai.AsyncOpenAI(
            base_url=f"{upstream}/v1", api_key=UPSTREAM_KEYS["native"], max_retries=0, timeout=60
        )
        self.reqs: list[Req] = []
        self.direct_reqs: list[Req] = []
        self.stop = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()
        self.skipped = 0
        self.first_n = first_n

    async def run(self) -> None:
        kinds = ("native", "chat", "messages")
        n = self.first_n
        start = time.monotonic()
        while not self.stop.is_set():
            due = start + (n - self.first_n) / self.rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            if len(self.tasks) >= 400:
                self.skipped += 1
            else:
                self._spawn(self.one(Req(n, kinds[n % 3], time.time())))
                if n % 3 == 0:
                    self._spawn(self.one_direct(Req(n, "direct", time.time())))
            n += 1
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=90)

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def one(self, r: Req) -> None:
        import anthropic
        import openai

        self.reqs.append(r)
        text = f"chaos request ck{r.n}x"
        sid = f"chaos-{r.n}"
        try:
            if r.kind == "native":
                resp = await self.http.post(
                    "/api/v1/completions",
                    json={
                        "session_id": sid,
                        "user_id": sid,
                        "messages": [{"role": "user", "content": text}],
                        "idempotency_key": sid,
                    },
                )
                self._native(r, resp)
            elif r.kind == "chat":
                raw = await self.oa.chat.completions.with_raw_response.create(
                    model="muse-default",
                    messages=[{"role": "user", "content": text}],
                    extra_headers={"X-Muse-Session-Id": sid},
                )
                r.job_id = raw.headers.get("x-muse-job-id")
                await _parsed(raw)
                r.outcome = "ok"
            else:
                raw = await self.an.messages.with_raw_response.create(
                    model="muse-default", max_tokens=64, messages=[{"role": "user", "content": text}],
                    extra_headers={"X-Muse-Session-Id": sid},
                )  # fmt: skip
                r.job_id = raw.headers.get("x-muse-job-id")
                await _parsed(raw)
                r.outcome = "ok"
        except (openai.APIStatusError, anthropic.APIStatusError) as exc:
            r.job_id = exc.response.headers.get("x-muse-job-id")
            self._error(r, exc.response.status_code, exc.body)
        except Exception as exc:  # noqa: BLE001 - no answer at all: lost
            r.outcome, r.detail = "lost", f"{type(exc).__name__}: {str(exc)[:120]}"
        r.t1 = time.time()

    def _native(self, r: Req, resp: httpx.Response) -> None:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code in (200, 201) and isinstance(body, dict):
            r.job_id = body.get("id")
            if body.get("status") == "succeeded":
                r.outcome = "ok"
            elif body.get("status") == "failed" and body.get("error"):
                r.outcome, r.detail = "clear", f"job failed: {str(body['error'])[:80]}"
            else:
                r.outcome, r.detail = "lost", f"200 without a final status: {str(body)[:80]}"
        elif resp.status_code == 202 and isinstance(body, dict):
            r.job_id, r.outcome = body.get("id"), "pending"
        else:
            self._error(r, resp.status_code, body)

    @staticmethod
    def _error(r: Req, status: int, body) -> None:
        """A clear error names what went wrong: ``{"error": {"message": …}}`` (our API, the
        Anthropic shape) or the error object itself (what the OpenAI SDK hands over)."""
        err = body.get("error", body) if isinstance(body, dict) else None
        message = err.get("message") if isinstance(err, dict) else err
        if message and isinstance(message, str):
            r.outcome, r.detail = "clear", f"{status}: {message[:80]}"
        else:
            r.outcome, r.detail = "lost", f"{status} without an error body: {str(body)[:80]}"

    async def one_direct(self, r: Req) -> None:
        self.direct_reqs.append(r)
        try:
            await self.direct.chat.completions.create(
                model=CONTROL_MODEL, messages=[{"role": "user", "content": f"direct dk{r.n}x"}]
            )
            r.outcome = "ok"
        except Exception as exc:  # noqa: BLE001
            r.outcome, r.detail = "clear", type(exc).__name__
        r.t1 = time.time()

    async def resolve_pending(self, timeout_s: float = 60) -> None:
        """Poll 202-answered jobs until they finish (bounded); unfinished ones are lost."""
        deadline = time.monotonic() + timeout_s
        pending = [r for r in self.reqs if r.outcome == "pending"]
        while pending and time.monotonic() < deadline:
            for r in pending:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    body = (await self.http.get(f"/api/v1/completions/{r.job_id}")).json()
                    if body.get("status") == "succeeded":
                        r.outcome = "ok"
                    elif body.get("status") == "failed":
                        r.outcome, r.detail = "clear", f"job failed: {str(body.get('error'))[:80]}"
            pending = [r for r in pending if r.outcome == "pending"]
            if pending:
                await asyncio.sleep(0.5)
        for r in pending:
            r.outcome, r.detail = "lost", "job never finished"

    async def close(self) -> None:
        await self.http.aclose()


# ---- faults --------------------------------------------------------------------------------------


@dataclass
class Window:
    name: str
    broker: str
    t_before: float = 0.0
    t_inject: float = 0.0
    t_end: float = 0.0  # the fault is over (restarted, restored); recovery is measured from here
    t_during_end: float = 0.0
    t_after_end: float = 0.0
    flip_at: float | None = None  # kill switch: when the flip was acknowledged
    notes: list[str] = field(default_factory=list)


class Stack:
    """Everything one pass needs: services, upstreams, the supervised platform."""

    def __init__(self, args, root: Path) -> None:
        self.args, self.root = args, root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.redis, self.pg, self.rabbit = PrivateRedis(root), PrivatePostgres(root), PrivateRabbit(root)
        self.internal = Upstream("internal", PORTS["upstream_internal"], self.logs)
        self.external = Upstream("external", PORTS["upstream_external"], self.logs)
        self.supervisor: Supervisor | None = None
        self.key = ""
        self.env: dict[str, str] = {}

    def start_services(self, rabbit: bool) -> None:
        """Start Redis, PostgreSQL and the upstreams; with ``rabbit``, launch RabbitMQ too, whose
        boot (tens of seconds) then overlaps the migrations and the Redis pass."""
        for port in PORTS.values():
            if port_open(port):
                raise RuntimeError(
                    f"port {port} is taken: another chaos run? (ports {min(PORTS.values())}-{max(PORTS.values())})"
                )
        log(
            "starting private Redis, PostgreSQL and simulated upstreams"
            + (" (and RabbitMQ)" if rabbit else "")
        )
        if rabbit:
            self.rabbit.launch()
        self.internal.launch()
        self.external.launch()
        self.redis.start()
        self.pg.init()
        self.internal.ready()
        self.external.ready()

    def start_platform(self, broker: str) -> None:
        broker_url = self.rabbit.url if broker == "rabbitmq" else self.redis.url
        self.env = platform_env(self.redis, self.pg, broker_url, self.root / "var")
        started = time.monotonic()
        if not self.key:
            self.key = prepare_database(self.env, self.internal, self.external)
            log(f"migrated and seeded in {time.monotonic() - started:.0f}s")
        procs = processes(formation="worker=2,beat=1,web=1")
        self.supervisor = Supervisor(
            procs, run_dir=self.root / f"run-{broker}", env=self.env, output=self.logs / broker
        )
        self.supervisor.start_all()
        base = f"http://127.0.0.1:{PORTS['web']}"
        wait_until(lambda: httpx.get(f"{base}/readyz", timeout=5).status_code == 200, 120, "platform ready")
        wait_until(lambda: self.probe(base), 120, "a completion served end to end")
        log(f"platform ready in {time.monotonic() - started:.0f}s")

    def probe(self, base: str) -> bool:
        """One completion through the whole stack (web, broker, worker, upstream, database)."""
        body = {"session_id": "probe", "user_id": "probe", "messages": [{"role": "user", "content": "probe"}]}
        headers = {"Authorization": f"Bearer {self.key}"}
        r = httpx.post(f"{base}/api/v1/completions", json=body, headers=headers, timeout=30)
        return r.status_code == 200 and r.json()["status"] == "succeeded"

    def stop_platform(self) -> None:
        if self.supervisor:
            self.supervisor.stop_all(timeout_s=20)
            self.supervisor = None

    def stop_all(self) -> None:
        """Stop the platform, then every service at once (each in its own thread)."""

        def attempt(step) -> None:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - stop everything we can
                log(f"stopping: {type(exc).__name__}: {exc}")

        attempt(self.stop_platform)
        steps = (self.internal.stop, self.external.stop, self.rabbit.stop, self.redis.stop, self.pg.remove)
        threads = [threading.Thread(target=attempt, args=(step,)) for step in steps]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def workers_ready(self) -> bool:
        """Whether each worker process has logged ``ready.`` once per start (its current one too)."""
        sup = self.supervisor
        if sup is None or sup.output is None:
            return True
        for name, child in sup.children.items():
            if not name.startswith("worker") or child.poll() is not None:
                if name.startswith("worker"):
                    return False  # exited: the supervisor restarts it
                continue
            log_path = sup.output / f"{name}.log"
            ready = log_path.read_bytes().count(b" ready.") if log_path.exists() else 0
            if ready < sup.restarts[name] + 1:
                return False
        return True

    def wait_workers_ready(self, timeout_s: float) -> float:
        """Wait (up to ``timeout_s``) until :meth:`workers_ready`; returns the seconds waited.
        Raises ``RuntimeError`` on timeout."""
        started = time.monotonic()
        wait_until(self.workers_ready, timeout_s, "the workers to be ready")
        return time.monotonic() - started

    def worker_pid(self, name: str) -> int:
        return self.supervisor.children[name].pid

    async def supervise(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.supervisor:
                await asyncio.to_thread(self.supervisor.poll)
            await asyncio.sleep(0.3)


async def inject(stack: Stack, fault: str, w: Window, during_s: float) -> None:
    """Apply one fault for ``during_s`` (instant faults: once), recording its timeline in ``w``."""
    loop = asyncio.get_running_loop()
    sleep = asyncio.sleep
    w.t_inject = time.time()
    if fault.startswith("worker SIGKILL"):
        name = "worker.1" if fault.endswith("#1") else "worker.2"
        signal_group(stack.worker_pid(name), signal.SIGKILL)  # the supervisor restarts it
        w.t_end = time.time()
        await sleep(during_s)
    elif fault == "worker restart":
        signal_group(stack.worker_pid("worker.1"), signal.SIGTERM)  # warm shutdown, then restarted
        w.t_end = time.time()
        await sleep(during_s)
    elif fault == "Redis restart":
        await loop.run_in_executor(None, stack.redis.stop)
        await sleep(1.0)
        await loop.run_in_executor(None, stack.redis.start)
        w.t_end = time.time()
        await sleep(during_s)
    elif fault == "PostgreSQL restart":
        await loop.run_in_executor(None, stack.pg.stop)
        await sleep(1.0)
        await loop.run_in_executor(None, stack.pg.start)
        w.t_end = time.time()
        await sleep(during_s)
    elif fault == "RabbitMQ restart":
        await loop.run_in_executor(None, stack.rabbit.stop)
        await loop.run_in_executor(None, stack.rabbit.start)
        w.t_end = time.time()
        await sleep(during_s)
    elif fault.startswith("upstream "):
        failure = {"upstream 429 storm": "rate_limit", "upstream 5xx storm": "server_error",
                   "upstream timeouts": "timeout", "upstream resets": "reset"}[fault]  # fmt: skip
        knobs = {"failure": failure, "retry_after_s": 0.2, "hang_ms": int(ENDPOINT_TIMEOUT_S * 1000 + 3000)}
        await asyncio.to_thread(stack.external.scenarios, {AZURE_MODEL: knobs, ANTHROPIC_MODEL: knobs})
        await sleep(during_s)
        await asyncio.to_thread(
            stack.external.scenarios, {AZURE_MODEL: {"latency_ms": 30}, ANTHROPIC_MODEL: {"latency_ms": 30}}
        )
        w.t_end = time.time()
    elif fault == "one upstream down":
        await asyncio.to_thread(stack.external.stop)
        await sleep(during_s)
        await asyncio.to_thread(stack.external.start)
        w.t_end = time.time()
    elif fault == "kill switch external":
        await kill_switch(stack, True)
        w.flip_at = time.time()
        await sleep(during_s)
        await kill_switch(stack, False)
        w.t_end = time.time()
    else:
        raise ValueError(fault)


async def kill_switch(stack: Stack, active: bool) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{PORTS['web']}", timeout=30) as c:
        r = await c.post(
            "/api/v1/ops/kill-switches",
            headers={"Authorization": f"Bearer {stack.key}"},
            json={"scope": "all_external", "target": "", "active": active, "reason": "chaos"},
        )
        r.raise_for_status()


REDIS_FAULTS = [
    "worker SIGKILL #1", "worker SIGKILL #2", "worker restart", "Redis restart", "PostgreSQL restart",
    "upstream 429 storm", "upstream 5xx storm", "upstream timeouts", "upstream resets", "one upstream down",
    "kill switch external",
]  # fmt: skip
RABBIT_FAULTS = ["worker SIGKILL #1", "RabbitMQ restart"]


async def drive(
    stack: Stack, broker: str, faults: list[str], timing: tuple[float, float, float]
) -> tuple[Load, list[Window]]:
    before_s, during_s, after_s = timing
    first_n = 1_000_000 if broker == "rabbitmq" else 0  # markers stay unique across passes
    load = Load(f"http://127.0.0.1:{PORTS['web']}", stack.key, stack.internal.url, stack.args.rate, first_n)
    stop_supervising = asyncio.Event()
    supervising = asyncio.ensure_future(stack.supervise(stop_supervising))
    runner = asyncio.ensure_future(load.run())
    windows = []
    try:
        await asyncio.sleep(2.0)  # warm-up, not counted in any window
        for fault in faults:
            # each fault starts on a recovered platform: every worker the supervisor (re)started
            # is ready (a worker's boot can outlast the after window under load; faults would pile
            # up). The wait is in no window; its requests still count in the totals.
            waited = await asyncio.to_thread(stack.wait_workers_ready, 90)
            if waited > 0.5:
                log(f"[{broker}] waited {waited:.1f}s for the workers to be ready")
            w = Window(fault, broker, t_before=time.time())
            windows.append(w)
            log(f"[{broker}] {fault}")
            await asyncio.sleep(before_s)
            await inject(stack, fault, w, during_s)
            w.t_during_end = time.time()
            await asyncio.sleep(after_s)
            w.t_after_end = time.time()
    finally:
        load.stop.set()
        await runner
        await load.resolve_pending()
        stop_supervising.set()
        await supervising
        await load.close()
    return load, windows


# ---- verification --------------------------------------------------------------------------------


def database_checks(
    reqs: list[Req], calls: list[dict], drain_s: float
) -> tuple[dict[int, int], dict[int, str]]:
    """Per request: duplicate upstream calls, and what is missing from the database (after the
    write-behind drain, polled up to ``drain_s``)."""
    from django.db import connections

    from routing.jobs import WORKER_LOST
    from routing.models import CallRecord, CompletionJob, JobStatus
    from routing.web.dispatch import BROKER_UNAVAILABLE

    by_marker = Counter()
    for c in calls:
        m = MARK.search(c.get("raw_body") or "")
        if m:
            by_marker[int(m[1])] += 1
    with_job = {r.n: r for r in reqs if r.job_id}
    deadline = time.monotonic() + drain_s
    while True:
        connections.close_all()
        jobs = {
            str(j.id): j for j in CompletionJob.objects.filter(id__in=[r.job_id for r in with_job.values()])
        }
        records = {
            str(c.job_id): c
            for c in CallRecord.objects.filter(job_id__in=list(jobs)).prefetch_related("attempts")
        }
        missing: dict[int, str] = {}
        for n, r in with_job.items():
            job = jobs.get(r.job_id)
            if job is None:
                missing[n] = "no job row"
            elif r.outcome == "ok" and job.status != JobStatus.SUCCEEDED:
                missing[n] = f"answered ok, job {job.status}"
            elif job.status == JobStatus.SUCCEEDED and r.job_id not in records:
                missing[n] = "no call record"
            elif (
                job.status == JobStatus.FAILED
                and job.error != WORKER_LOST
                and not (r.outcome == "clear" and job.error == BROKER_UNAVAILABLE)
                and r.job_id not in records
            ):
                # a job failed broker_unavailable was never run (its task could not be published:
                # no plan, no attempt, nothing billed), and its caller got the 503: no call record
                missing[n] = "failed without a call record"
            elif job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
                missing[n] = f"job still {job.status}"
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    dup: dict[int, int] = {}
    for n, r in with_job.items():
        record = records.get(r.job_id)
        allowed = 0
        if record is not None:
            allowed = sum(
                1 for a in record.attempts.all() if a.outcome not in REFUSALS and "killed" not in a.outcome
            )
        job = jobs.get(r.job_id)
        if job is not None and job.error == WORKER_LOST and allowed == 0:
            allowed = 1  # the attempt in flight when its worker died
        extra = by_marker.get(n, 0) - allowed
        if extra > 0:
            dup[n] = extra
    return dup, missing


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def report(
    load: Load,
    windows: list[Window],
    dup: dict[int, int],
    missing: dict[int, str],
    external_calls: list[dict],
) -> tuple[list[dict], int]:
    rows, bad = [], 0
    for w in windows:
        in_w = [r for r in load.reqs if w.t_before <= r.t0 < w.t_after_end]
        phases = {
            "before": (w.t_before, w.t_inject),
            "during": (w.t_inject, w.t_during_end),
            "after": (w.t_during_end, w.t_after_end),
        }
        lat = {}
        for label, (a, b) in phases.items():
            plat = [(r.t1 - r.t0) * 1000 for r in load.reqs if a <= r.t0 < b and r.outcome == "ok"]
            direct = [(r.t1 - r.t0) * 1000 for r in load.direct_reqs if a <= r.t0 < b and r.outcome == "ok"]
            lat[label] = (pct(plat, 50), pct(plat, 99), pct(direct, 50), pct(direct, 99))
        failed = [r for r in in_w if r.outcome != "ok"]
        recover = max((r.t1 for r in failed), default=w.t_end) - w.t_end if failed else 0.0
        killed_late = 0
        if w.flip_at is not None:
            killed_late = sum(1 for c in external_calls if w.flip_at + 1.0 < c["time"] < w.t_end)
        row = {
            "fault": f"{w.name} [{w.broker}]",
            "sent": len(in_w),
            "ok": sum(r.outcome == "ok" for r in in_w),
            "clear": sum(r.outcome == "clear" for r in in_w),
            "lost": sum(r.outcome in ("lost", "pending") for r in in_w),
            "dup": sum(dup.get(r.n, 0) for r in in_w),
            "missing": sum(1 for r in in_w if r.n in missing),
            "killed_late": killed_late,
            "latency_ms": lat,
            "recover_s": round(max(0.0, recover), 2),
            "errors": Counter(
                r.detail.split(":")[0] if r.outcome == "lost" else r.detail[:40] for r in failed
            ).most_common(4),
        }
        bad += row["lost"] + row["dup"] + row["missing"] + row["killed_late"]
        rows.append(row)
    return rows, bad


def fmt(v: float | None) -> str:
    return "-" if v is None else (f"{v:.0f}" if v >= 10 else f"{v:.1f}")


def print_table(rows: list[dict], totals: dict) -> None:
    print(
        "\nPer fault (requests sent from its before window to its after window). Must be 0: lost, dup, missing, killed>1s."
    )
    print("Latency: p50/p99 ms of succeeded requests, platform | direct SDK to the upstream, same windows.\n")
    head = f"{'fault':34} {'sent':>5} {'ok':>5} {'clear':>5} {'lost':>4} {'dup':>3} {'miss':>4} {'kill>1s':>7} {'recover':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['fault']:34} {r['sent']:>5} {r['ok']:>5} {r['clear']:>5} {r['lost']:>4} {r['dup']:>3} "
            f"{r['missing']:>4} {r['killed_late']:>7} {r['recover_s']:>7.1f}s"
        )
        parts = []
        for label in ("before", "during", "after"):
            p50, p99, d50, d99 = r["latency_ms"][label]
            ratio = f" ({p50 / d50:.1f}x)" if p50 and d50 else ""
            parts.append(f"{label} {fmt(p50)}/{fmt(p99)} | {fmt(d50)}/{fmt(d99)}{ratio}")
        print("      " + ";  ".join(parts))
        if r["errors"]:
            print("      failures: " + "; ".join(f"{n}x {e}" for e, n in r["errors"]))
    print(
        f"\nAll requests: sent {totals['sent']}, succeeded {totals['ok']}, failed with a clear error {totals['clear']}, "
        f"lost {totals['lost']}, duplicate upstream calls {totals['dup']}, records missing {totals['missing']}, "
        f"not sent (client backlog) {totals['skipped']}; direct SDK calls {totals['direct']} "
        f"(p50 {fmt(totals['direct_p50'])} ms, p99 {fmt(totals['direct_p99'])} ms) vs platform "
        f"(p50 {fmt(totals['p50'])} ms, p99 {fmt(totals['p99'])} ms)"
    )


def scrape_metrics(broker: str) -> bool:
    """After a pass, ``/metrics`` must see the broker up and count the routed calls."""
    text = httpx.get(f"http://127.0.0.1:{PORTS['web']}/metrics", timeout=30).text
    routed = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("muse_routed_calls_total{")
    )
    depth = [line for line in text.splitlines() if line.startswith("muse_queue_depth{")]
    up = "muse_broker_up 1.0" in text
    log(f"[{broker}] /metrics: broker up {up}, routed calls counted {routed:.0f}, {'; '.join(depth)}")
    return up and routed > 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="CI size: short windows, lower rate")
    parser.add_argument("--rate", type=float, help="requests per second (default 20; short 6)")
    parser.add_argument("--brokers", default="redis,rabbitmq", help="passes to run: redis, rabbitmq")
    parser.add_argument("--faults", help="comma-separated subset of the Redis pass's faults")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds for the whole run")
    args = parser.parse_args()
    args.rate = args.rate or (6.0 if args.short else 20.0)
    timing = (2.0, 3.0, 3.0) if args.short else (5.0, 10.0, 8.0)
    root = REPO / "var" / "chaos"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    if os.geteuid() == 0:
        shutil.chown(root, "root")
        os.chmod(root, 0o755)
    stack = Stack(args, root)
    faults = [f.strip() for f in args.faults.split(",")] if args.faults else REDIS_FAULTS

    def on_signal(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(int(args.timeout))
    started = time.monotonic()
    all_rows, bad = [], 0
    loads = []
    try:
        brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
        stack.start_services(rabbit="rabbitmq" in brokers)
        for broker in brokers:
            if broker == "rabbitmq":
                log("waiting for the private RabbitMQ (launched at the start)")
                stack.rabbit.wait_ready()
            log(f"starting the platform (Procfile, worker=2) with {broker} as the broker")
            stack.start_platform(broker)
            load, windows = asyncio.run(
                drive(stack, broker, faults if broker == "redis" else RABBIT_FAULTS, timing)
            )
            bad += 0 if scrape_metrics(broker) else 1
            stack.stop_platform()
            loads.append((load, windows))
        log("checking the database (waiting for the records to drain) and the upstreams' call logs")
        internal_calls, external_calls = stack.internal.calls(), stack.external.calls()
        reqs = [r for load, _ in loads for r in load.reqs]
        dup, missing = database_checks(reqs, internal_calls + external_calls, drain_s=30)
        for load, windows in loads:
            rows, b = report(load, windows, dup, missing, external_calls)
            all_rows += rows
            bad += b
    except KeyboardInterrupt:
        log("interrupted or out of time")
        bad += 1
    finally:
        stack.stop_all()
    reqs = [r for load, _ in loads for r in load.reqs]
    directs = [r for load, _ in loads for r in load.direct_reqs]
    ok_lat = [(r.t1 - r.t0) * 1000 for r in reqs if r.outcome == "ok"]
    d_lat = [(r.t1 - r.t0) * 1000 for r in directs if r.outcome == "ok"]
    totals = {
        "sent": len(reqs),
        "ok": sum(r.outcome == "ok" for r in reqs),
        "clear": sum(r.outcome == "clear" for r in reqs),
        "lost": sum(r.outcome in ("lost", "pending") for r in reqs),
        "dup": sum(r["dup"] for r in all_rows),
        "missing": sum(r["missing"] for r in all_rows),
        "skipped": sum(load.skipped for load, _ in loads),
        "direct": len(directs),
        "p50": pct(ok_lat, 50), "p99": pct(ok_lat, 99), "direct_p50": pct(d_lat, 50), "direct_p99": pct(d_lat, 99),
    }  # fmt: skip
    bad = max(
        bad, totals["lost"] + totals["dup"] + totals["missing"] + sum(r["killed_late"] for r in all_rows)
    )
    print_table(all_rows, totals)
    (root / "report.json").write_text(json.dumps({"rows": all_rows, "totals": totals}, indent=1, default=str))
    for r in reqs:
        if r.outcome in ("lost", "pending"):
            log(f"lost #{r.n} {r.kind} job={r.job_id}: {r.detail}")
    print(
        f"\nchaos: {'FAIL' if bad else 'PASS'} in {time.monotonic() - started:.0f}s (logs: {root / 'logs'})"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
