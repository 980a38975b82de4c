"""Run the production shape: the ``Procfile`` (the ONE definition of every process command line)
with a process count per type, under a small supervisor.

``make run-prod`` (``python -m muse_experiments.infra.prodshape run``), ``make bench-proxy``, the load and
fault suite (``bench/chaos.py``) and README's deployment guide all read the same ``Procfile``; any
Procfile runner (honcho, foreman) runs it too.

Formation (how many of each type): ``MUSE_FORMATION="worker=2,web=1"`` (honcho's ``-c`` syntax);
unnamed types run once; ``name=0`` leaves a type out. Replicas are named ``<type>.<n>``
(``worker.1``, ``worker.2``) like honcho names them.

The supervisor starts each process with ``sh -c 'exec <command>'`` (so ``${VAR:-default}`` expands)
in its own process group, with ``.venv/bin`` first on ``PATH``, ``MUSE_PROCESS_NAME`` (the
``process`` field of its JSON log lines and its Celery node name) and a shared, emptied
``PROMETHEUS_MULTIPROC_DIR``; it writes ``<run dir>/<name>.pid``, restarts a process that exits
(after 1 s), and on SIGINT/SIGTERM stops them all (SIGTERM to each group, SIGKILL after
``MUSE_STOP_TIMEOUT_S``). Its own log lines are JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROCFILE = REPO / "Procfile"
_PROC_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def read_procfile(path: Path = PROCFILE) -> dict[str, str]:
    """``{process type: shell command}`` from a Procfile (``name: command`` lines; ``#`` comments
    and blank lines skipped). Raises ``ValueError`` on any other line or a repeated name."""
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _PROC_LINE.match(line.strip())
        if not m:
            raise ValueError(f"{path}:{n}: expected 'name: command', got {line!r}")
        if m[1] in out:
            raise ValueError(f"{path}:{n}: process type {m[1]!r} repeated")
        out[m[1]] = m[2].strip()
    return out


def parse_formation(text: str, types: Mapping[str, str]) -> dict[str, int]:
    """``"worker=2,beat=0"`` → a count per Procfile type (unnamed types: 1). Raises ``ValueError``
    for an unknown type or a count that is not a non-negative integer.

    One of each is the default production shape: on 2 cores a second worker adds latency at 1
    client for little throughput (``make bench-proxy`` with ``MUSE_FORMATION=worker=2``;
    bench/README.md). Add workers for cores or redundancy (``worker=2``; ``bench/chaos.py`` runs
    two to test failover)."""
    counts = dict.fromkeys(types, 1)
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        name, _, value = part.partition("=")
        name = name.strip()
        if name not in types:
            raise ValueError(f"formation names {name!r}, not a Procfile type ({', '.join(types)})")
        if not value.strip().isdigit():
            raise ValueError(f"formation count for {name!r} must be a non-negative integer, got {value!r}")
        counts[name] = int(value)
    return counts


@dataclass(frozen=True)
class Process:
    """One process to run: its name (``worker.2``), its Procfile type and its shell command."""

    name: str
    type: str
    command: str
    env: Mapping[str, str] = field(default_factory=dict)


def processes(procfile: Path = PROCFILE, formation: str | None = None) -> list[Process]:
    """The processes of the Procfile times the formation (default ``$MUSE_FORMATION``)."""
    types = read_procfile(procfile)
    counts = parse_formation(os.environ.get("MUSE_FORMATION", "") if formation is None else formation, types)
    out = []
    for type_, command in types.items():
        for i in range(1, counts[type_] + 1):
            out.append(Process(f"{type_}.{i}", type_, command))
    return out


def default_run_dir() -> Path:
    """``$MUSE_RUN_DIR`` or ``var/run`` (pid files, metrics files)."""
    return Path(os.environ.get("MUSE_RUN_DIR", REPO / "var" / "run"))


def _log(event: str, **fields: object) -> None:
    line = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "level": "INFO"}
    line.update({"logger": "muse.supervisor", "msg": event, "process": "supervisor", **fields})
    print(json.dumps(line), flush=True)


class Supervisor:
    """Starts, watches, restarts and stops a list of processes (see the module docstring).

    ``env`` is the base environment of every child (default ``os.environ``); ``output`` a
    directory for one ``<name>.log`` per process (default: inherit this process's stdout).
    """

    def __init__(
        self,
        procs: list[Process],
        *,
        run_dir: Path,
        restart: bool = True,
        env: Mapping[str, str] | None = None,
        output: Path | None = None,
    ) -> None:
        self.procs = {p.name: p for p in procs}
        self.run_dir = run_dir
        self.restart = restart
        self.base_env = dict(os.environ if env is None else env)
        self.output = output
        self.children: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = dict.fromkeys(self.procs, 0)
        self.stopping = False
        self.metrics_dir = run_dir / "prometheus"

    def env_for(self, proc: Process) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return {
            **self.base_env,
            "PATH": bin_dir + os.pathsep + self.base_env.get("PATH", os.defpath),
            "MUSE_PROCESS_NAME": proc.name,
            "PROMETHEUS_MULTIPROC_DIR": str(self.metrics_dir),
            **proc.env,
        }

    def start_all(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.metrics_dir, ignore_errors=True)  # samples of a previous run are stale
        self.metrics_dir.mkdir(parents=True)
        for name in self.procs:
            self.start(name)

    def start(self, name: str) -> subprocess.Popen:
        """Start (or restart) one process by name; returns its Popen."""
        proc = self.procs[name]
        out = None
        if self.output is not None:
            self.output.mkdir(parents=True, exist_ok=True)
            out = open(self.output / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            child = subprocess.Popen(
                ["sh", "-c", f"exec {proc.command}"],
                env=self.env_for(proc),
                cwd=REPO,
                start_new_session=True,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
            )
        finally:
            if out is not None:
                out.close()
        self.children[name] = child
        (self.run_dir / f"{name}.pid").write_text(str(child.pid))
        _log("started", name=name, pid=child.pid)
        return child

    def poll(self) -> None:
        """Restart every child that exited (unless stopping)."""
        for name, child in list(self.children.items()):
            code = child.poll()
            if code is None or self.stopping:
                continue
            _log("exited", name=name, pid=child.pid, returncode=code)
            if self.restart:
                self.restarts[name] += 1
                time.sleep(1.0)
                self.start(name)

    def stop_all(self, timeout_s: float = 20.0) -> None:
        """SIGTERM every process group, SIGKILL those still alive after ``timeout_s``."""
        self.stopping = True
        for child in self.children.values():
            signal_group(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for name, child in self.children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _log("killing", name=name, pid=child.pid)
                signal_group(child.pid, signal.SIGKILL)
                child.wait()
            signal_group(child.pid, signal.SIGKILL)  # children the leader left behind
            (self.run_dir / f"{name}.pid").unlink(missing_ok=True)
        _log("stopped")


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid`` (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def exec_type(type_: str, procfile: Path = PROCFILE) -> None:
    """Replace this process with the Procfile's command for ``type_`` (one container or systemd
    unit per process type). Raises ``ValueError`` for an unknown type."""
    types = read_procfile(procfile)
    if type_ not in types:
        raise ValueError(f"{type_!r} is not a Procfile type ({', '.join(types)})")
    os.environ.setdefault("MUSE_PROCESS_NAME", type_)
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", os.defpath)
    if multiproc := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        Path(multiproc).mkdir(parents=True, exist_ok=True)
    os.chdir(REPO)
    os.execvp("sh", ["sh", "-c", f"exec {types[type_]}"])


def run(argv: list[str] | None = None) -> int:
    """``python -m muse_experiments.infra.prodshape run|print|exec TYPE``: supervise the shape, print it,
    or become one of its process types."""
    parser = argparse.ArgumentParser(prog="python -m muse_experiments.infra.prodshape")
    parser.add_argument("command", choices=["run", "print", "exec"])
    parser.add_argument("type", nargs="?", help="the Procfile type for exec")
    args = parser.parse_args(argv)
    if args.command == "exec":
        exec_type(args.type or "")
    procs = processes()
    if args.command == "print":
        for p in procs:
            print(f"{p.name}: {p.command}")
        return 0
    supervisor = Supervisor(procs, run_dir=default_run_dir())

    def _stop(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    try:
        supervisor.start_all()
        while True:
            supervisor.poll()
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        supervisor.stop_all(float(os.environ.get("MUSE_STOP_TIMEOUT_S", "20")))
    return 0


if __name__ == "__main__":
    sys.exit(run())
