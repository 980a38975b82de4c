"""The embedded default's Celery broker and result store: files under ``var/``, written atomically.

Used only when ``REDIS_URL`` is unset, so a laptop runs a web server and separate worker
processes with nothing else installed. Kombu's filesystem transport and Celery's filesystem
result backend write files in place, so a reader polling the folder can pick up a half-written
file (seen as ``JSONDecodeError`` in the worker under load). These subclasses write to a staging
file and ``os.replace`` it into place, which is atomic on POSIX, so readers see all or nothing.
Production uses Redis (``REDIS_URL``) instead.

Wake-ups (:class:`Doorbell`): both folders are polled, which costs a wait of up to one polling
interval per hand-over and CPU for every empty look. So each process that waits rings a
doorbell: a Unix datagram socket in ``<broker>/bells/``. Publishing a task message rings the
workers' bells (a waiting worker looks at the queue at once instead of after its sleep), and
storing a task result rings the web processes' bells with the task id (the request waiting for
it reads the result at once). A bell is only a hint: waiters still poll, at a slower pace
(``polling_interval``, ``READY_POLL_S``), so a lost or refused ring costs a delay, never a result.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from queue import Empty
from time import monotonic

from celery.backends.filesystem import FilesystemBackend
from kombu.transport import filesystem
from kombu.utils.encoding import ensure_bytes, str_to_bytes
from kombu.utils.json import dumps

log = logging.getLogger(__name__)


def _atomic_write(path: str | bytes, data: bytes) -> None:
    """Write ``data`` to a staging file beside ``path``'s folder, then rename it into place."""
    path = os.fsdecode(path)
    directory = os.path.dirname(path)
    fd, staging = tempfile.mkstemp(dir=os.path.join(directory, os.pardir), prefix=".staging-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.unlink(staging)
        raise


class Doorbell:
    """Wake-ups between the processes of one machine: Unix datagram sockets in one folder.

    ``listen(kind)`` binds ``<folder>/<kind>-<pid>.sock`` for this process (once; ``None`` if it
    cannot, e.g. a path over the 107-byte socket limit: the caller then just polls).
    ``ring(kind, message)`` sends ``message`` (bytes, under 200) to every bell of that kind;
    bells whose process is gone (connection refused) are removed, a full bell is skipped (its
    process is awake anyway). The folder is listed again whenever its mtime moves (a bell was
    bound or removed). Never raises.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = os.fsdecode(folder)
        self._lock = threading.Lock()
        self._sockets: dict[str, socket.socket] = {}
        self._sender: socket.socket | None = None
        self._listing: dict[str, tuple[int, float, list[str]]] = {}  # kind -> (mtime, listed at, bells)

    def listen(self, kind: str) -> socket.socket | None:
        """This process's bell of ``kind`` (non-blocking socket), bound on first use."""
        key = f"{kind}-{os.getpid()}"
        with self._lock:
            if key in self._sockets:
                return self._sockets[key]
            path = os.path.join(self.folder, f"{key}.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                os.makedirs(self.folder, exist_ok=True)
                if os.path.exists(path):
                    os.unlink(path)  # left by an earlier process with our pid
                sock.bind(path)
                sock.setblocking(False)
            except OSError as exc:
                log.info("no doorbell for %s (%s); polling only", kind, exc)
                sock.close()
                sock = None
            self._sockets[key] = sock
            return sock

    def ring(self, kind: str, message: bytes = b"") -> None:
        """Send ``message`` to every process listening on a bell of ``kind``."""
        try:
            version = os.stat(self.folder).st_mtime_ns  # a bell bound or removed changes it
        except OSError:
            return
        now = time.monotonic()
        with self._lock:
            cached = self._listing.get(kind)
            # also once a second: the mtime's clock is coarse (a bind in the same tick keeps it)
            if cached is None or cached[0] != version or now - cached[1] > 1.0:
                try:
                    names = [n for n in os.listdir(self.folder) if n.startswith(f"{kind}-")]
                except OSError:
                    names = []
                cached = self._listing[kind] = (version, now, names)
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            sender = self._sender
        for name in list(cached[2]):
            path = os.path.join(self.folder, name)
            try:
                sender.sendto(message, path)
            except (ConnectionRefusedError, FileNotFoundError):
                with self._lock:
                    if name in self._listing.get(kind, (0, 0.0, []))[2]:
                        self._listing[kind][2].remove(name)
                if not _pid_alive(name):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    log.debug("doorbell %s not rung: %s", name, exc)


def _pid_alive(bell_name: str) -> bool:
    """Whether the process named in ``<kind>-<pid>.sock`` still runs."""
    try:
        pid = int(bell_name.rsplit("-", 1)[1].split(".", 1)[0])
        os.kill(pid, 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def wait_for_ring(sock: socket.socket | None, timeout_s: float) -> list[bytes]:
    """Wait up to ``timeout_s`` for rings on ``sock`` (sleep without one); return the messages
    received (all pending ones, emptied)."""
    if sock is None:
        time.sleep(timeout_s)
        return []
    readable, _, _ = select.select([sock], [], [], max(timeout_s, 0))
    messages = []
    while readable:
        try:
            messages.append(sock.recv(256))
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
    return messages


_bells: dict[str, Doorbell] = {}
_bells_lock = threading.Lock()


def doorbell(folder: str | os.PathLike) -> Doorbell:
    """The process's :class:`Doorbell` for ``folder`` (one per folder)."""
    folder = os.fsdecode(folder)
    with _bells_lock:
        bell = _bells.get(folder)
        if bell is None:
            bell = _bells[folder] = Doorbell(folder)
        return bell


def bells_folder(data_folder: str | os.PathLike) -> str:
    """The bells' folder beside a broker data (or results) folder: ``<broker>/bells``."""
    return os.path.join(os.path.dirname(os.path.abspath(os.fsdecode(data_folder))), "bells")


class AtomicChannel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        _atomic_write(os.path.join(self.data_folder_out, name), str_to_bytes(dumps(payload)))
        doorbell(bells_folder(self.data_folder_out)).ring("worker")


class AtomicFilesystemTransport(filesystem.Transport):
    """Kombu's filesystem transport with atomic message files; a consumer waiting for messages
    sleeps on its doorbell (rung by every publish) instead of a plain sleep."""

    Channel = AtomicChannel

    def drain_events(self, connection, timeout=None):
        time_start = monotonic()
        get = self.cycle.get
        polling_interval = self.polling_interval
        if timeout and polling_interval and polling_interval > timeout:
            polling_interval = timeout
        bell = None
        while 1:
            try:
                get(self._deliver, timeout=timeout)
            except Empty:
                if timeout is not None and monotonic() - time_start >= timeout:
                    raise TimeoutError() from None
                if bell is None:
                    folder = self.client.transport_options.get("data_folder_in", "data_in")
                    bell = doorbell(bells_folder(folder)).listen("worker") or False
                wait_for_ring(bell or None, polling_interval or 0)
            else:
                break


class AtomicFilesystemBackend(FilesystemBackend):
    """Celery's filesystem result backend with atomic result files.

    URL: ``muse_experiments.embedded:AtomicFilesystemBackend:///absolute/path``.
    """

    def _find_path(self, url):
        if url and "://" in url:
            return url.split("://", 1)[1]
        return super()._find_path(url)

    def as_uri(self, include_password=False):
        return f"file://{os.fsdecode(self.path)}"

    #: How often (s) a process sweeps result files older than ``result_expires`` (Celery's
    #: ``CELERY_RESULT_EXPIRES``, 1 h here). Celery leaves this to ``celery.backend_cleanup``, a
    #: beat task; the embedded default runs no beat, so its result folder grew by one file a call.
    SWEEP_EVERY_S = 300.0

    def __init__(self, *args, **kwargs):
        self._sweep_lock = threading.Lock()  # before Celery's __init__, which stores a test value
        self._next_sweep = monotonic() + self.SWEEP_EVERY_S
        super().__init__(*args, **kwargs)

    def set(self, key, value):
        _atomic_write(self._filename(key), ensure_bytes(value))
        doorbell(bells_folder(self.path)).ring("web", ensure_bytes(key)[-120:])
        if monotonic() >= self._next_sweep and self._sweep_lock.acquire(blocking=False):
            try:
                self._next_sweep = monotonic() + self.SWEEP_EVERY_S
                self.sweep()
            finally:
                self._sweep_lock.release()

    def sweep(self, *, now: float | None = None) -> int:
        """Delete result files (and staging files a killed writer left beside the folders) whose
        mtime is more than ``result_expires`` seconds before ``now`` (epoch s; default the
        clock). Returns how many were deleted. Safe with other processes sweeping the same
        folder (a file gone meanwhile is skipped); never raises on a file it cannot remove.
        """
        if not self.expires:
            return 0
        cutoff = (time.time() if now is None else now) - self.expires
        path = os.fsdecode(self.path)
        deleted = 0
        for folder, prefixes in (
            (path, (self.task_keyprefix, self.group_keyprefix, self.chord_keyprefix)),
            (os.path.dirname(os.path.abspath(path)), (".staging-",)),
        ):
            prefixes = tuple(os.fsdecode(p) for p in prefixes)
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if not entry.name.startswith(prefixes):
                    continue
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        deleted += 1
        return deleted

    def result_bell(self) -> socket.socket | None:
        """This (web) process's bell, rung with the result key of every stored result."""
        return doorbell(bells_folder(self.path)).listen("web")


class _ResultWaiters:
    """The threads of this (web) process waiting for task results, and the one listener thread
    that reads the process's result bell and wakes the thread waiting for each rung key."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._events: dict[bytes, list[threading.Event]] = {}
        threading.Thread(target=self._listen, name="result-bell", daemon=True).start()

    def add(self, key: bytes) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events.setdefault(key, []).append(event)
        return event

    def remove(self, key: bytes, event: threading.Event) -> None:
        with self._lock:
            events = self._events.get(key, [])
            if event in events:
                events.remove(event)
            if not events:
                self._events.pop(key, None)

    def _listen(self) -> None:
        while True:
            for key in wait_for_ring(self._sock, 60.0):
                with self._lock:
                    for event in self._events.get(key, []):
                        event.set()


_waiters: dict[str, _ResultWaiters | None] = {}
_waiters_lock = threading.Lock()


@contextlib.contextmanager
def result_ring(backend, task_id: str) -> Iterator[threading.Event | None]:
    """An event set once ``task_id``'s result is stored (rung by :class:`AtomicFilesystemBackend`),
    for the duration of the block; ``None`` when the backend has no doorbell (then poll)."""
    if not isinstance(backend, AtomicFilesystemBackend):
        yield None
        return
    folder = bells_folder(backend.path)
    with _waiters_lock:
        if folder not in _waiters:
            sock = backend.result_bell()
            _waiters[folder] = _ResultWaiters(sock) if sock is not None else None
        waiters = _waiters[folder]
    if waiters is None:
        yield None
        return
    key = ensure_bytes(backend.get_key_for_task(task_id))[-120:]
    event = waiters.add(key)
    try:
        yield event
    finally:
        waiters.remove(key, event)
