"""Helpers shared by the ``bench/`` scripts: peer virtualenvs, services, processes, percentiles.

Nothing here imports Django or the project, so a script can use it before (or without) setting up
Django, and the pure parts are unit-tested in ``tests/bench/``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

# The Procfile is read in one place (the production supervisor); re-exported for the benches.
from muse_experiments.infra.prodshape import PROCFILE, read_procfile  # noqa: F401

REPO = Path(__file__).resolve().parent.parent


def ensure_venv(path: Path, *, requirement: str, probe: str) -> Path:
    """The python of a peer's own virtualenv at ``path``, created with ``pip install requirement``
    on first use. ``probe`` is Python source that must run without error in a ready venv (import the
    package, assert its version); a failing probe means (re)install. Raises ``CalledProcessError``
    when the venv or the install fails."""
    python = path / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0:
        return python
    print(f"creating {path} with {requirement} (once)…", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return python


def recreate_database(url: str) -> None:
    """Drop (forcing out sessions) and create the PostgreSQL database named by ``url``."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def wait_http(url: str, timeout_s: float = 60, procs: list[subprocess.Popen] | None = None) -> None:
    """Poll ``url`` until it answers below 500; ``SystemExit`` after ``timeout_s`` or as soon as one
    of ``procs`` has exited (its log says why)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        dead = [p for p in procs or [] if p.poll() is not None]
        if dead:
            raise SystemExit(f"{url}: {dead[0].args!r} exited with {dead[0].returncode} while starting")
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not come up within {timeout_s:.0f}s")
        time.sleep(0.2)


def free_port(candidates: range | None = None) -> int:
    """A port free on 127.0.0.1: the first free one of ``candidates``, else one the kernel picks."""
    for port in candidates or [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise SystemExit(f"no free port in {candidates}")


def bench_ports(text: str) -> range | None:
    """``"18200-18299"`` → ``range(18200, 18300)``; empty → ``None`` (kernel-chosen ports).
    Raises ``ValueError`` on anything else."""
    if not text.strip():
        return None
    low, sep, high = text.partition("-")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit() or int(low) > int(high):
        raise ValueError(f"BENCH_PORTS must look like 18200-18299, got {text!r}")
    return range(int(low), int(high) + 1)


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values`` by nearest rank on the sorted list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def tree_cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by ``pids`` and all their descendants, including
    children already reaped (Linux ``/proc``; 0.0 where it is unavailable)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        stats[int(entry.name)] = (int(fields[1]), ticks / os.sysconf("SC_CLK_TCK"))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo, seen = 0.0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total


class Processes:
    """Child processes started in their own session (so a whole tree stops together), each with a
    log file; :meth:`stop_all` (also on ``with`` exit) sends SIGTERM, then SIGKILL after
    ``grace_s``."""

    def __init__(self, log_dir: Path, grace_s: float = 15) -> None:
        self.log_dir = log_dir
        self.grace_s = grace_s
        self.procs: list[subprocess.Popen] = []
        self.stoppers: list = []  # callables run first by stop_all (e.g. a Supervisor's stop_all)

    def spawn(
        self, cmd: list[str] | str, name: str, *, env: dict[str, str], cwd: Path = REPO
    ) -> subprocess.Popen:
        """Start ``cmd`` (a list, or a string run by ``sh -c``) with output to ``<log_dir>/<name>.log``."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                cmd,
                shell=isinstance(cmd, str),
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        while self.stoppers:
            self.stoppers.pop()()
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # Children that outlived their leader (a gunicorn worker, say) share its group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
