"""``manage.py demo [--no-serve] [--sessions N]``: the main job, end to end, on one machine.

Runs the production shape on one machine: the web server (gunicorn), Celery workers, the records
drainer and the scheduler (celery beat), on SQLite and Redis — the private Redis server it starts
itself when ``REDIS_URL`` is unset (:mod:`muse_experiments.infra.private_redis`), stopped with it —
plus the simulated upstreams. Seeds the model catalogue; creates a four-arm experiment (Avocado v14 control, Avocado v15, ``azure/muse-special``,
Claude); sends N subagent sessions through the real REST API; waits until the drainer has written every
session's records; posts an outcome event per session; computes the analysis through the results
API and prints the table. Then it keeps serving and
prints the URLs (Ctrl-C stops everything it started), or exits with ``--no-serve``.

The simulated users' success rates per served model are the demo's ground truth
(:data:`TRUE_SUCCESS`), so the printed lifts can be checked against them.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from muse_experiments.api.auth import api_key_create
from muse_experiments.experiments import selectors
from muse_experiments.experiments.models import Experiment, ExperimentStatus
from muse_experiments.experiments.services.edits import experiment_create
from muse_experiments.experiments.services.lifecycle import experiment_start, experiment_stop
from muse_experiments.experiments.services.variants import VariantInput
from muse_experiments.infra import private_redis
from routing import writebehind
from routing.catalogue import avocado_id
from routing.models import ModelEndpoint

from ..demo_shadow import shadow_report, shadow_start

#: Probability that a session served by each upstream model succeeds (the simulation's truth).
TRUE_SUCCESS = {"avocado-v14": 0.60, "avocado-v15": 0.64, "muse-special": 0.68, "claude-sonnet-5-5": 0.66}
ARMS = [  # (variant key, endpoint public id, weight, control?)
    ("control", avocado_id(14), 0.4, True),
    ("avocado-v15", avocado_id(15), 0.2, False),
    ("azure-muse-special", "azure/muse-special", 0.2, False),
    ("claude-sonnet", "anthropic/claude-sonnet-5-5", 0.2, False),
]
SUBAGENTS = ("coder", "researcher", "planner")
TOOLS = [
    {
        "name": "search_docs",
        "description": "Search the documentation.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    }
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (with ``SO_REUSEADDR``, as gunicorn binds: a
    connection of a server that just stopped, in TIME_WAIT, does not make the port taken)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Command(BaseCommand):
    help = "Run the platform end to end on simulated upstreams and print an experiment's results."

    def add_arguments(self, parser):
        parser.add_argument("--no-serve", action="store_true", help="Exit after printing the results table.")
        parser.add_argument("--sessions", type=int, default=2000)
        parser.add_argument("--concurrency", type=int, default=16)
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--workers", type=int, default=1, help="Celery worker processes")
        parser.add_argument("--web", type=int, default=2, help="web (gunicorn) processes")

    def handle(
        self, *args, no_serve=False, sessions=2000, concurrency=16, port=8000, workers=1, web=2, **options
    ):
        if sessions < 1:
            raise CommandError("--sessions must be at least 1")
        if not port_free(port):
            raise CommandError(f"Port {port} is taken; pass --port.")
        self.procs: list[subprocess.Popen] = []
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        redis_server = None
        try:
            if settings.PRIVATE_REDIS_DIR:  # no REDIS_URL: the private server, stopped below
                redis_server = private_redis.ensure_running(settings.PRIVATE_REDIS_DIR)
            self._run(
                no_serve=no_serve,
                sessions=sessions,
                concurrency=concurrency,
                port=port,
                workers=workers,
                web=web,
            )
        except KeyboardInterrupt:
            self.stdout.write("\nStopping…")
        finally:
            self._stop_all()
            if redis_server is not None:
                redis_server.stop()

    # -- orchestration ---------------------------------------------------------------------
    def _run(self, *, no_serve, sessions, concurrency, port, workers, web):
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        keys = {
            family: f"demo-{family}-{secrets.token_hex(12)}"
            for family in ("native", "azure", "anthropic", "openai")
        }
        env = {
            **os.environ,
            # The platform runs as in production (no debug pages), on plain http on this machine.
            "DJANGO_DEBUG": "false",
            "SECRET_KEY": self._secret_key(),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "FAKE_UPSTREAM_KEYS_JSON": json.dumps(keys),
            "AVOCADO_API_KEY": keys["native"],
            "AZURE_OPENAI_API_KEY": keys["azure"],
            "ANTHROPIC_API_KEY": keys["anthropic"],
        }
        os.environ.update(
            {k: env[k] for k in ("AVOCADO_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
        )

        upstream_port = free_port()
        scenarios = logs / "demo-scenarios.json"
        scenarios.write_text(json.dumps(self._scenarios()))
        upstream = f"http://127.0.0.1:{upstream_port}"
        # the provider keys may go to the simulated upstreams (routing.credentials): in the web and
        # worker processes, and in this one, which seeds the catalogue pointing there
        env["SIMULATED_UPSTREAMS"] = f"127.0.0.1:{upstream_port}"
        settings.SIMULATED_UPSTREAMS = [env["SIMULATED_UPSTREAMS"]]
        self._spawn(
            [
                sys.executable,
                "-m",
                "routing.simulated",
                "--port",
                str(upstream_port),
                "--scenarios",
                str(scenarios),
            ],
            env,
            logs / "upstreams.log",
        )
        self._wait_http(f"{upstream}/_fake/health", "simulated upstreams")

        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("seed_catalogue", simulated_base_url=upstream, stdout=self.stdout)
        experiment = self._create_experiment()
        _, completions_key = api_key_create(
            name=f"demo {experiment.key}", scopes=["completions", "events", "analytics:read"]
        )
        _, writer_key = api_key_create(name=f"demo {experiment.key} shadow", scopes=["experiments:write"])
        admin_password = self._ensure_admin()

        bin_dir = Path(sys.executable).parent
        # as the Procfile runs them: the drainer process writes the records the workers buffer
        env["RECORDS_DRAINER"] = "false"
        self._spawn([sys.executable, "manage.py", "drain_records"], env, logs / "drainer.log")
        self._spawn([str(bin_dir / "celery"), "-A", "muse_experiments", "beat", "-l", "warning"],
                    env, logs / "beat.log")  # fmt: skip
        for n in range(1, workers + 1):
            self._spawn(
                [
                    str(bin_dir / "celery"),
                    "-A",
                    "muse_experiments",
                    "worker",
                    "-Q",
                    "completions,analytics,maintenance,shadow",
                    "--pool",
                    "threads",
                    "--concurrency",
                    str(max(-(-concurrency // workers), 4)),
                    "-l",
                    "warning",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-n",
                    f"demo{n}@%h",
                ],
                env,
                logs / f"worker{n}.log",
            )
        base = f"http://127.0.0.1:{port}"
        self._spawn(
            [
                str(bin_dir / "gunicorn"),
                "muse_experiments.wsgi",
                "-b",
                f"127.0.0.1:{port}",
                "--config",
                "python:muse_experiments.infra.gunicorn_conf",  # production's worker and client deadlines
                "--workers",
                str(web),
                "--threads",
                str(max(concurrency, 8)),
                "--timeout",
                "120",
            ],
            env,
            logs / "web.log",
        )
        self._wait_http(f"{base}/healthz", "web server")

        shadow = shadow_start(base, writer_key, experiment_key=experiment.key)
        self.stdout.write(
            f"Experiment {experiment.key}: sending {sessions} sessions through {base}/api/v1/completions …"
        )
        started = time.monotonic()
        outcomes = self._drive(base, completions_key, sessions, concurrency)
        elapsed = time.monotonic() - started
        failed = sum(1 for o in outcomes if o is None)
        self.stdout.write(
            f"{sessions - failed} completions in {elapsed:.1f}s ({(sessions - failed) / elapsed:.0f}/s); {failed} failed"
        )
        self._wait_records_written()
        self._post_events(base, completions_key, [o for o in outcomes if o])
        results = httpx.get(
            f"{base}/api/v1/experiments/{experiment.key}/results",
            params={"refresh": "1"},
            headers={"Authorization": f"Bearer {completions_key}"},
            timeout=120,
        )
        results.raise_for_status()
        self._print_table(results.json())
        shadow_report(base, completions_key, shadow, self.stdout.write)

        if no_serve:
            return
        self.stdout.write(
            "\nServing. Ctrl-C stops everything.\n"
            f"  Admin:        {base}/admin/   (user admin, password {admin_password})\n"
            f"  API schema:   {base}/api/schema/   Swagger UI: {base}/api/docs/\n"
            f"  Results:      {base}/results/{experiment.key}/   all experiments: {base}/results/\n"
            f"  Shadow test:  {base}/results/shadow/{shadow}/\n"
            f"  Models and routing health: {base}/routing/health/   Redoc: {base}/api/redoc/\n"
            f"  API key (completions, events, analytics:read): {completions_key}\n"
        )
        while all(p.poll() is None for p in self.procs):
            time.sleep(0.5)
        raise CommandError("A platform process exited; see var/logs/.")

    def _wait_records_written(self, timeout_s: float = 300) -> None:
        """Wait until the drainer has written every buffered call record (exposures, call
        records, jobs) to the database, so the results table counts every session."""
        deadline = time.monotonic() + timeout_s
        while writebehind.pending():
            if any(p.poll() is not None for p in self.procs):
                raise CommandError("A platform process exited; see var/logs/.")
            if time.monotonic() > deadline:
                raise CommandError(f"Call records still buffered after {timeout_s:.0f}s; see var/logs/.")
            time.sleep(0.1)

    def _scenarios(self) -> dict:
        models = [f"avocado-v{i}" for i in range(1, 16)] + [
            "muse-special",
            "claude-sonnet-5-5",
            "claude-haiku-5-5",
        ]
        latency = {"avocado-v14": 20, "avocado-v15": 25, "muse-special": 60, "claude-sonnet-5-5": 45}
        return {
            m: {
                "latency_ms": latency.get(m, 20),
                "quality": TRUE_SUCCESS.get(m, 0.5),
                "reasoning": m in ("muse-special", "claude-sonnet-5-5"),
            }
            for m in models
        }

    def _secret_key(self) -> str:
        """A per-machine secret key kept in ``var/`` (sessions survive demo restarts)."""
        path = Path(settings.VAR_DIR) / "demo-secret-key"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(50))
            path.chmod(0o600)
        return path.read_text().strip()

    def _stop_previous_demos(self) -> None:
        """Stop experiments left running by earlier demo runs: the oldest running experiment that
        includes a unit decides its model, so an old demo would take all the new one's traffic."""
        for old in Experiment.objects.filter(owner="demo", status=ExperimentStatus.RUNNING):
            experiment_stop(experiment=old, actor="demo")
            self.stdout.write(f"stopped the previous demo experiment {old.key}")

    def _create_experiment(self):
        self._stop_previous_demos()
        endpoints = {e.public_id: e for e in ModelEndpoint.objects.filter(public_id__in=[a[1] for a in ARMS])}
        key = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
        experiment = experiment_create(
            key=key,
            name="Avocado v15 and external models vs Avocado v14",
            hypothesis="Newer or external models raise the share of subagent sessions that succeed.",
            owner="demo",
            actor="demo",
            primary_metric="task_success",
            guardrail_metrics=["latency_ms", "cost_usd"],
            variants=[
                VariantInput(key=k, weight=w, endpoint=endpoints[pid], is_control=c) for k, pid, w, c in ARMS
            ],
        )
        return experiment_start(experiment=experiment, actor="demo")

    def _ensure_admin(self) -> str:
        """The ``admin`` superuser, with a fresh password each run (``DEMO_ADMIN_PASSWORD`` fixes it)."""
        user_model = get_user_model()
        password = os.environ.get("DEMO_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user = user_model.objects.filter(username="admin").first()
        if user is None:
            user_model.objects.create_superuser("admin", "admin@example.com", password)
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        return password

    def _drive(self, base: str, key: str, sessions: int, concurrency: int) -> list[dict | None]:
        client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        run = uuid.uuid4().hex[:8]

        def one(i: int) -> dict | None:
            session_id, user_id = f"sess-{run}-{i:05d}", f"user-{i % 700:04d}"
            body = {
                "session_id": session_id,
                "user_id": user_id,
                "subagent": SUBAGENTS[i % len(SUBAGENTS)],
                "attributes": {"tier": "pro" if i % 5 == 0 else "free", "locale": "en-US"},
                "messages": [{"role": "user", "content": f"Task {i}: summarise the release notes."}],
                "tools": TOOLS if i % 4 == 0 else [],
            }
            try:
                response = client.post("/api/v1/completions", json=body)
            except httpx.HTTPError:
                return None
            if response.status_code != 200 or response.json()["status"] != "succeeded":
                return None
            return {"session_id": session_id, "user_id": user_id, **response.json()["result"]}

        with client, ThreadPoolExecutor(concurrency) as pool:
            return list(pool.map(one, range(sessions)))

    def _post_events(self, base: str, key: str, outcomes: list[dict]) -> None:
        labels = dict(ModelEndpoint.objects.values_list("public_id", "version_label"))
        events = []
        for o in outcomes:
            truth = TRUE_SUCCESS.get(labels.get(o["served_model"], ""), 0.5)
            success = random.Random(o["session_id"]).random() < truth
            events.append(
                {
                    "event_id": f"{o['session_id']}:task_success",
                    "name": "task_success",
                    "session_id": o["session_id"],
                    "user_id": o["user_id"],
                    "value": 1.0 if success else 0.0,
                }
            )
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            for start in range(0, len(events), 1000):
                client.post(
                    "/api/v1/events", json={"events": events[start : start + 1000]}
                ).raise_for_status()
        self.stdout.write(f"posted {len(events)} task_success events")

    def _print_table(self, results: dict, labels: dict[str, str] | None = None) -> None:
        """Print the task_success table of a results API answer, models by version label
        (``labels``: public id → label; read from the catalogue when not given)."""
        if labels is None:
            labels = selectors.model_labels()
        success = next(m for m in results["metrics"] if m["name"] == "task_success")
        latency = next(m for m in results["metrics"] if m["name"] == "latency_ms")
        lat = {v["key"]: v["mean"] for v in latency["variants"]}
        cmp = {c["variant"]: c for c in success["comparisons"]}
        srm = results["srm"]
        self.stdout.write(
            f"\nResults: {results['experiment']} (phase {results['phase']}), metric task_success, 95% CI"
        )
        header = f"{'variant':<20}{'model':<20}{'units':>7}{'success':>9}{'latency':>10}{'lift':>9}{'95% CI (relative)':>22}{'p-value':>9}"
        self.stdout.write(header)
        self.stdout.write("-" * len(header))
        for v, s in zip(results["variants"], success["variants"], strict=True):
            c = cmp.get(v["key"])
            rate = f"{s['mean'] * 100:.1f}%" if s["mean"] is not None else "—"
            latency_ms = f"{lat[v['key']]:.0f}ms" if lat.get(v["key"]) is not None else "—"
            if c is None:
                lift, ci, p = "control", "", ""
            else:
                lift = _pct(c["relative_lift"])
                ci = (
                    f"[{_pct(c['relative_ci'][0])}, {_pct(c['relative_ci'][1])}]" if c["relative_ci"] else "—"
                )
                p = f"{c['p_value']:.4f}" if c["p_value"] is not None else "—"
            self.stdout.write(
                f"{v['key']:<20}{labels.get(v['endpoint'], v['endpoint']):<20}{v['units']:>7}{rate:>9}{latency_ms:>10}{lift:>9}{ci:>22}{p:>9}"
            )
        p_srm = srm["p_value"]
        verdict = "MISMATCH — do not trust" if srm["flagged"] else "no mismatch"
        self.stdout.write(
            f"SRM check: chi-square p = {p_srm:.4f} ({verdict})"
            if p_srm is not None
            else f"SRM check: {srm['status']}"
        )

    # -- processes ---------------------------------------------------------------------------
    def _spawn(self, cmd: list[str], env: dict, log_path: Path) -> None:
        log = open(log_path, "ab")  # noqa: SIM115 - closed when the process is stopped
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=settings.BASE_DIR, start_new_session=True
        )
        proc.log_file = log
        self.procs.append(proc)

    def _wait_http(self, url: str, what: str, timeout_s: float = 180) -> None:
        """Wait for ``url`` to answer 200. Fails at once if a started process exits; the generous
        bound is for a loaded 2-core machine, where gunicorn's workers took ~40 s to import."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise CommandError(f"A process exited while starting the {what}; see var/logs/.")
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise CommandError(f"The {what} did not come up within {timeout_s:.0f}s; see var/logs/.")

    def _stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            p.log_file.close()


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.1f}%"
