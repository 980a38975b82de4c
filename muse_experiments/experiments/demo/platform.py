"""The processes of the demo's platform, started as the Procfile runs them in production: the
simulated upstreams, the web server (gunicorn), Celery workers, the records drainer and the
scheduler (celery beat). Each runs in its own process group with its log under ``var/logs/``;
:meth:`DemoPlatform.stop` stops them all (SIGTERM, then SIGKILL after 10 s).

The simulated upstreams' module is named once, in :data:`SIMULATED_UPSTREAMS_MODULE`.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management.base import CommandError

from . import config

#: The module run (``python -m``) as the simulated upstreams.
SIMULATED_UPSTREAMS_MODULE = "routing.simulated"
WORKER_QUEUES = "completions,analytics,maintenance,shadow"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
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


def scenarios() -> dict:
    """The simulated upstreams' scenario per model: latency, quality marker, reasoning."""
    return {
        m: {
            "latency_ms": config.LATENCY_MS.get(m, config.DEFAULT_LATENCY_MS),
            "quality": config.TRUE_SUCCESS.get(m, config.DEFAULT_SUCCESS),
            "reasoning": m in config.REASONING_MODELS,
        }
        for m in config.SIMULATED_MODELS
    }


def secret_key() -> str:
    """A per-machine secret key kept in ``var/`` (sessions survive demo restarts)."""
    path = Path(settings.VAR_DIR) / "demo-secret-key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


class DemoPlatform:
    """The demo's processes. ``logs``: the directory of their logs."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen] = []
        self.env: dict[str, str] = {}
        self.upstream_url = ""

    def prepare_env(self) -> None:
        """The environment of every process: production settings on plain http, fresh keys of the
        simulated providers (also set in this process, which seeds the catalogue), and the short
        bandit and rollout schedule of the demo (:data:`.config.SCHEDULE_S`)."""
        keys = {f: f"demo-{f}-{secrets.token_hex(12)}" for f in ("native", "azure", "anthropic", "openai")}
        schedule = str(config.SCHEDULE_S)
        self.env = {
            **os.environ,
            # The platform runs as in production (no debug pages), on plain http on this machine.
            "DJANGO_DEBUG": "false",
            "SECRET_KEY": secret_key(),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "FAKE_UPSTREAM_KEYS_JSON": json.dumps(keys),
            "AVOCADO_API_KEY": keys["native"],
            "AZURE_OPENAI_API_KEY": keys["azure"],
            "ANTHROPIC_API_KEY": keys["anthropic"],
            "BANDIT_MINUTE_S": schedule,
            "BANDIT_CHECK_INTERVAL_S": schedule,
            "ROLLOUT_CHECK_INTERVAL_S": schedule,
        }
        os.environ.update(
            {k: self.env[k] for k in ("AVOCADO_API_KEY", "AZURE_OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
        )
        settings.BANDIT_MINUTE_S = config.SCHEDULE_S  # this process reads the bandits' slots too

    def start_upstreams(self) -> str:
        """Start the simulated upstreams on a free port; returns their base URL."""
        port = free_port()
        path = self.logs / "demo-scenarios.json"
        path.write_text(json.dumps(scenarios()))
        self.upstream_url = f"http://127.0.0.1:{port}"
        # the provider keys may go to the simulated upstreams (routing.guards.credentials): in the web and
        # worker processes, and in this one, which seeds the catalogue pointing there
        self.env["SIMULATED_UPSTREAMS"] = f"127.0.0.1:{port}"
        settings.SIMULATED_UPSTREAMS = [self.env["SIMULATED_UPSTREAMS"]]
        cmd = [
            sys.executable,
            "-m",
            SIMULATED_UPSTREAMS_MODULE,
            "--port",
            str(port),
            "--scenarios",
            str(path),
        ]
        self.spawn(cmd, self.logs / "upstreams.log")
        self.wait_http(f"{self.upstream_url}/_fake/health", "simulated upstreams")
        return self.upstream_url

    def start_platform(self, *, port: int, workers: int, web: int, concurrency: int) -> str:
        """Drainer, beat, ``workers`` Celery workers and ``web`` gunicorn processes; returns the
        web server's base URL once ``/healthz`` answers."""
        bin_dir = Path(sys.executable).parent
        celery = [str(bin_dir / "celery"), "-A", "muse_experiments"]
        # as the Procfile runs them: the drainer process writes the records the workers buffer
        self.env["RECORDS_DRAINER"] = "false"
        self.spawn([sys.executable, "manage.py", "drain_records"], self.logs / "drainer.log")
        self.spawn([*celery, "beat", "-l", "warning"], self.logs / "beat.log")
        threads = str(max(-(-concurrency // workers), 4))
        for n in range(1, workers + 1):
            self.spawn(
                [*celery, "worker", "-Q", WORKER_QUEUES, "--pool", "threads", "--concurrency", threads,
                 "-l", "warning", "--without-gossip", "--without-mingle", "--without-heartbeat",
                 "-n", f"demo{n}@%h"],
                self.logs / f"worker{n}.log",
            )  # fmt: skip
        self.spawn(
            [str(bin_dir / "gunicorn"), "muse_experiments.wsgi", "-b", f"127.0.0.1:{port}",
             # production's worker and client deadlines
             "--config", "python:muse_experiments.infra.gunicorn_conf",
             "--workers", str(web), "--threads", str(max(concurrency, 8)), "--timeout", "120"],
            self.logs / "web.log",
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        self.wait_http(f"{base}/healthz", "web server")
        return base

    def check_alive(self) -> None:
        """Raise CommandError if a started process has exited."""
        if any(p.poll() is not None for p in self.procs):
            raise CommandError("A platform process exited; see var/logs/.")

    def spawn(self, cmd: list[str], log_path: Path) -> None:
        log = open(log_path, "ab")  # noqa: SIM115 - closed when the process is stopped
        proc = subprocess.Popen(
            cmd,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )
        proc.log_file = log
        self.procs.append(proc)

    def wait_http(self, url: str, what: str, timeout_s: float = 180) -> None:
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

    def stop(self) -> None:
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
