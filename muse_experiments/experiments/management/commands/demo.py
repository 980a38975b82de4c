"""``manage.py demo [--no-serve] [--sessions N]``: the main job, end to end, on one machine.

Runs the production shape on one machine: the web server (gunicorn), Celery workers, the records
drainer and the scheduler (celery beat), on SQLite and Redis — the private Redis server it starts
itself when ``REDIS_URL`` is unset (:mod:`muse_experiments.infra.private_redis`), stopped with it —
plus the simulated upstreams. Seeds the model catalogue; creates a four-arm experiment (Avocado
v14 control, Avocado v15, ``azure/muse-special``, Claude); sends N subagent sessions through the
real REST API; waits until the drainer has written every session's records; posts an outcome event
per session; computes the analysis through the results API and prints the table. Then a bandit
among three Avocado versions and a progressive rollout run a few rounds of their own sessions on a
short schedule (:mod:`muse_experiments.experiments.demo.adaptive`), and a shadow test's comparison
is printed. Then it keeps serving and prints the URLs (Ctrl-C stops everything it started), or
exits with ``--no-serve``.

The simulated users' success rates per served model are the demo's ground truth
(:data:`muse_experiments.experiments.demo.config.TRUE_SUCCESS`), so the printed lifts can be
checked against them. The parts live in :mod:`muse_experiments.experiments.demo`.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from muse_experiments.infra import private_redis

from ...demo import config, report, setup, traffic
from ...demo.adaptive import adaptive_run, adaptive_start
from ...demo.platform import DemoPlatform, port_free
from ...demo.shadow import shadow_report, shadow_start


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
        logs = Path(settings.VAR_DIR) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.platform = DemoPlatform(logs)
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
            self.platform.stop()
            if redis_server is not None:
                redis_server.stop()

    def _run(self, *, no_serve, sessions, concurrency, port, workers, web):
        write, platform = self.stdout.write, self.platform
        platform.prepare_env()
        upstream = platform.start_upstreams()
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("seed_catalogue", simulated_base_url=upstream, stdout=self.stdout)
        demo = setup.create_experiments(write)
        key, writer_key = setup.api_keys(demo.main.key)
        admin_password = setup.ensure_admin()
        base = platform.start_platform(port=port, workers=workers, web=web, concurrency=concurrency)

        shadow = shadow_start(base, writer_key, experiment_key=demo.main.key)
        write(f"Experiment {demo.main.key}: sending {sessions} sessions through {base}/api/v1/completions …")
        started = time.monotonic()
        outcomes = traffic.drive(base, key, sessions, concurrency)
        elapsed = time.monotonic() - started
        failed = sum(1 for o in outcomes if o is None)
        write(
            f"{sessions - failed} completions in {elapsed:.1f}s ({(sessions - failed) / elapsed:.0f}/s); {failed} failed"
        )
        traffic.wait_records_written(platform.check_alive)
        write(f"posted {traffic.post_events(base, key, [o for o in outcomes if o])} task_success events")
        results = httpx.get(
            f"{base}/api/v1/experiments/{demo.main.key}/results",
            params={"refresh": "1"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )
        results.raise_for_status()
        report.print_table(results.json(), write)

        write(
            f"\nBandit {demo.bandit.key} and rollout {demo.rollout.key}: {config.ROUNDS} rounds of their own "
            f"sessions, the schedule every {config.SCHEDULE_S:g} s …"
        )
        adaptive_start(bandit=demo.bandit, rollout=demo.rollout)
        adaptive = adaptive_run(
            base,
            key,
            bandit=demo.bandit,
            rollout=demo.rollout,
            alive=platform.check_alive,
            concurrency=concurrency,
            write=write,
        )
        report.print_bandit(adaptive, write)
        report.print_rollout(adaptive, write)
        shadow_report(base, key, shadow, write)
        computed = report.compute_phases(base, key, [demo.bandit, demo.rollout.experiment])
        write(f"computed results for {computed} bandit and rollout phases (their pages open on them)")

        if no_serve:
            return
        write(
            "\nServing. Ctrl-C stops everything.\n"
            f"  Admin:        {base}/admin/   (user admin, password {admin_password})\n"
            f"  API schema:   {base}/api/schema/   Swagger UI: {base}/api/docs/\n"
            f"  Results:      {base}/results/{demo.main.key}/   all experiments: {base}/results/\n"
            f"  Bandit:       {base}/results/{demo.bandit.key}/   (weights and P(best) per update)\n"
            f"  Rollout:      {base}/results/{demo.rollout.key}/   {base}/admin/muse_experiments/rollout/\n"
            f"  Shadow test:  {base}/results/shadow/{shadow}/\n"
            f"  Models and routing health: {base}/routing/health/   Redoc: {base}/api/redoc/\n"
            f"  API key (completions, events, analytics:read): {key}\n"
        )
        while all(p.poll() is None for p in platform.procs):
            time.sleep(0.5)
        raise CommandError("A platform process exited; see var/logs/.")
