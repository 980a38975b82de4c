"""Server-side session store for encrypted provider reasoning (multi-turn continuity without leakage).

Providers that reason (OpenAI/Azure Responses with ``store=false``, Anthropic with thinking) need
their reasoning items passed back *exactly* on the next turn of a tool-using session. Those items
(:class:`~routing.providers.types.ReasoningState`) must never reach the database, transcripts,
logs, API responses or error messages, so they live here only:

* with ``REASONING_STORE_URL`` (default: ``REDIS_URL``) set: a Redis list per session, key
  ``muse:reasoning:<sha256(owner NUL session id)>`` (:attr:`OwnedSession.store_key`), expiring
  ``REASONING_SESSION_TTL_S`` seconds (default 3600) after the last save; each element is one
  state as JSON.
* without it (the embedded laptop default), ``REASONING_STORE_DIR``: one file per session in a
  folder shared by the machine's processes (by default under ``/dev/shm``, a memory file
  system, so the blobs stay off disk), mode 0600 in a 0700 folder; the file's modification time
  is its expiry. The web processes (streamed turns, session end) and the workers (the other
  turns) of one machine see the same sessions; a file lock serialises each session's updates.
* with neither (``REASONING_STORE_DIR=""``, and the test suite's default): an in-process
  dictionary with the same TTL semantics, for a single process only (a session's next turn
  served by another process finds no reasoning, and its end does not reach the others).

Prefer a Redis without persistence (no RDB/AOF) so the blobs never touch a disk.

A session belongs to whoever started it: the API key its calls came with, or, for calls without
a key (a signed-in user's session cookie), the keyless source (:func:`session_owner`).
Every function takes an :class:`OwnedSession` (owner + the caller's session id) and the store key
is derived from both, so two keys that use the same session id have two separate sessions: key B
never receives key A's reasoning and cannot end A's session. Keys written before sessions had
owners (``sha256(session id)`` alone, and the ``muse:reasoning-pin:`` keys of older versions)
are no longer read or deleted; they simply expire by their TTL (``REASONING_SESSION_TTL_S``).

Functions (the router calls them):

* :func:`reasoning_load` -- before the provider call: the states bound to *this* endpoint
  fingerprint (endpoint + credential); states from any other endpoint/credential are dropped
  (counted in one log line, content never logged) and never forwarded.
* :func:`reasoning_save` -- after a successful call: append the result's state (``None`` only
  refreshes the TTL, at most once a minute per session and process: :class:`_Renewals`). At most :data:`MAX_STATES` states are kept per session (oldest dropped).
* :func:`session_end` -- delete everything of a session (``POST /api/v1/sessions/{id}/end``).

Reasoning follows the endpoint, never the other way round: the assignment (experiment, sticky,
kill switch, fallback) decides which endpoint serves a turn, and only that endpoint's states are
replayed. There is deliberately no session-to-endpoint pin: preferring the endpoint that holds
a session's reasoning would move a unit off its assigned variant after one fallback. A session
that moves loses the earlier reasoning (dropped by fingerprint); the Anthropic client then sends
an in-progress tool loop without ``thinking``, as Anthropic documents.

Store failures (Redis down) are logged without content and degrade to "no reasoning": the call
still goes out, without the previous turn's reasoning.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from routing.providers.types import EndpointConfig, ReasoningState

log = logging.getLogger(__name__)

#: States kept per session (a long tool loop keeps only the newest).
MAX_STATES = 64
DEFAULT_TTL_S = 3600
KEY_PREFIX = "muse:reasoning:"
#: The owner of sessions whose calls came without an API key (signed-in users' session cookies).
KEYLESS_OWNER = "keyless"


def session_owner(*, api_key_id: int | None) -> str:
    """Who a session's stored state belongs to: ``"key:<ApiKey id>"`` for calls made with an API
    key (:attr:`routing.models.CompletionJob.api_key`), :data:`KEYLESS_OWNER` for calls made
    without one (every signed-in user of the API shares it)."""
    return KEYLESS_OWNER if api_key_id is None else f"key:{int(api_key_id)}"


@dataclass(frozen=True)
class OwnedSession:
    """A session as the store knows it: the caller's ``session_id`` under its ``owner``
    (:func:`session_owner`). The same session id under two owners is two separate sessions.

    Raises ``ValueError`` for an empty owner or session id (an owner holding NUL is refused too:
    NUL separates the two in :attr:`store_key`)."""

    owner: str
    session_id: str

    def __post_init__(self) -> None:
        if not self.owner or "\x00" in self.owner:
            raise ValueError("a session needs an owner (routing.reasoning_store.session_owner)")
        if not self.session_id:
            raise ValueError("a session needs a session id")

    @property
    def store_key(self) -> str:
        """``sha256(owner NUL session id)`` in hex: the session's name in every backend (neither
        the owner nor the session id appears in Redis or in a file name)."""
        return hashlib.sha256(f"{self.owner}\x00{self.session_id}".encode()).hexdigest()


def _ttl_s() -> int:
    return int(getattr(settings, "REASONING_SESSION_TTL_S", DEFAULT_TTL_S))


def state_to_json(state: ReasoningState) -> str:
    """Serialise a state for the store only (never for logs or responses)."""
    return json.dumps(
        {
            "endpoint_fingerprint": state.endpoint_fingerprint,
            "provider_kind": state.provider_kind,
            "api_style": state.api_style,
            "items": [dict(item) for item in state.items],
            "tool_call_ids": list(state.tool_call_ids),
            "native_ids": dict(state.native_ids),
            "turn_digest": state.turn_digest,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def state_from_json(text: str | bytes) -> ReasoningState:
    data = json.loads(text)
    return ReasoningState(
        endpoint_fingerprint=data["endpoint_fingerprint"],
        provider_kind=data["provider_kind"],
        api_style=data["api_style"],
        items=tuple(data["items"]),
        tool_call_ids=tuple(data.get("tool_call_ids") or ()),
        native_ids=dict(data.get("native_ids") or {}),
        turn_digest=data.get("turn_digest") or "",
    )


class _LocalStore:
    """In-process TTL store: session hash -> (expires at, [state json])."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, tuple[float, list[str]]] = {}

    def _purge(self, now: float) -> None:
        for key in [k for k, (exp, _) in self._data.items() if exp <= now]:
            del self._data[key]

    def load(self, key: str) -> list[str]:
        with self._lock:
            self._purge(time.monotonic())
            entry = self._data.get(key)
            return list(entry[1]) if entry else []

    def save(self, key: str, item: str | None, ttl_s: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._purge(now)
            _, items = self._data.get(key, (0.0, []))
            if item is not None:
                items = [*items, item][-MAX_STATES:]
            if items:
                self._data[key] = (now + ttl_s, items)

    def delete(self, key: str) -> int:
        with self._lock:
            entry = self._data.pop(key, None)
            return len(entry[1]) if entry else 0

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class _FileStore:
    """Cross-process store: ``<folder>/<session hash>``, one state JSON per line, oldest first;
    the file's mtime is when the session expires. Readers take a shared lock, writers an
    exclusive one (``flock``). An expired file reads as empty and is removed by the next save
    that sweeps the folder (at most once a minute per process)."""

    SWEEP_EVERY_S = 60.0

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        self._next_sweep = 0.0

    def _path(self, key: str) -> Path:
        return self.folder / key

    @staticmethod
    def _read(fd: int) -> list[str]:
        if os.fstat(fd).st_mtime <= time.time():  # expired
            return []
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return [line for line in b"".join(chunks).decode().split("\n") if line]

    def load(self, key: str) -> list[str]:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            return self._read(fd)
        finally:
            os.close(fd)

    def _open_locked(self, key: str) -> int:
        """The session's file, created if missing, under an exclusive lock (never a file that a
        concurrent delete unlinked while we waited for the lock)."""
        while True:
            fd = os.open(self._path(key), os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink:
                return fd
            os.close(fd)

    def save(self, key: str, item: str | None, ttl_s: int) -> None:
        now = time.time()
        if item is None and not self._path(key).exists():
            return
        fd = self._open_locked(key)
        try:
            items = self._read(fd)
            if item is not None:
                items = [*items, item][-MAX_STATES:]
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, "".join(f"{i}\n" for i in items).encode())
            if items:
                os.utime(fd, (now, now + ttl_s))
            else:
                os.unlink(self._path(key))
        finally:
            os.close(fd)
        if now >= self._next_sweep:
            self._next_sweep = now + self.SWEEP_EVERY_S
            self._sweep(now)

    def _sweep(self, now: float) -> None:
        for path in self.folder.iterdir():
            try:
                if path.stat().st_mtime <= now:
                    self.delete(path.name, only_if_expired=True)
            except FileNotFoundError:
                continue

    def delete(self, key: str, only_if_expired: bool = False) -> int:
        try:
            fd = os.open(self._path(key), os.O_RDWR)
        except FileNotFoundError:
            return 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not os.fstat(fd).st_nlink:
                return 0
            if only_if_expired and os.fstat(fd).st_mtime > time.time():
                return 0
            n = len(self._read(fd))
            os.unlink(self._path(key))
            return n
        finally:
            os.close(fd)

    def clear(self) -> None:
        for path in self.folder.iterdir():
            self.delete(path.name)


class _RedisStore:
    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def load(self, key: str) -> list[bytes]:
        return self.client.lrange(KEY_PREFIX + key, 0, -1)

    def save(self, key: str, item: str | None, ttl_s: int) -> None:
        pipe = self.client.pipeline(transaction=True)
        if item is not None:
            pipe.rpush(KEY_PREFIX + key, item)
            pipe.ltrim(KEY_PREFIX + key, -MAX_STATES, -1)
        pipe.expire(KEY_PREFIX + key, ttl_s)
        pipe.execute()

    def delete(self, key: str) -> int:
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(KEY_PREFIX + key)
        pipe.delete(KEY_PREFIX + key)
        n, _ = pipe.execute()
        return int(n)


_local = _LocalStore()
_redis: dict[str, _RedisStore] = {}
_files: dict[str, _FileStore] = {}
_redis_lock = threading.Lock()


def _store_url() -> str:
    url = getattr(settings, "REASONING_STORE_URL", None)
    return getattr(settings, "REDIS_URL", "") if url is None else url


def _store() -> _LocalStore | _FileStore | _RedisStore:
    url = _store_url()
    if not url:
        folder = getattr(settings, "REASONING_STORE_DIR", "")
        if not folder:
            return _local
        with _redis_lock:
            store = _files.get(folder)
            if store is None:
                store = _files[folder] = _FileStore(folder)
            return store
    with _redis_lock:
        store = _redis.get(url)
        if store is None:
            store = _redis[url] = _RedisStore(url)
        return store


def _store_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError, OSError)


def reasoning_load(*, session: OwnedSession, endpoint: EndpointConfig) -> tuple[ReasoningState, ...]:
    """The session's stored reasoning states that ``endpoint`` (same fingerprint and API style)
    may receive, oldest first. Other states are dropped and counted in a log line (no content).
    Only ``session.owner``'s states are read: another owner's session of the same id is not.

    Returns ``()`` for an unknown/expired session or when the store is unavailable.
    """
    try:
        raw = _store().load(session.store_key)
    except _store_errors() as exc:
        log.warning(
            "reasoning store unavailable on load (%s); continuing without reasoning", type(exc).__name__
        )
        return ()
    usable: list[ReasoningState] = []
    dropped = 0
    for text in raw:
        try:
            state = state_from_json(text)
        except (ValueError, KeyError, TypeError):
            dropped += 1
            continue
        if state.matches(endpoint):
            usable.append(state)
        else:
            dropped += 1
    if dropped:
        log.info(
            "reasoning store: %d state(s) of another endpoint/credential not forwarded to %s",
            dropped,
            endpoint.public_id,
        )
    return tuple(usable)


def reasoning_save(
    *, session: OwnedSession, state: ReasoningState | None, endpoint_id: str | None = None
) -> None:
    """Append ``state`` (a result's ``reasoning_state``) to the session (``session.owner``'s) and
    renew its TTL.

    ``state=None`` (the turn produced no reasoning) only renews the TTL. ``endpoint_id`` is
    accepted for the callers' convenience and not stored (no session pin: see the module
    docstring). Store failures are logged without content, never raised.
    """
    key = session.store_key
    ttl = _ttl_s()
    if state is None and _renewals.recent(key, ttl):
        return
    item = state_to_json(state) if state is not None else None
    try:
        _store().save(key, item, ttl)
    except _store_errors() as exc:
        log.warning("reasoning store unavailable on save (%s); reasoning not kept", type(exc).__name__)
        return
    _renewals.note(key)


class _Renewals:
    """When this process last renewed each session's TTL, to skip renewals that change nothing.

    A turn without reasoning (every Avocado turn) only renews the session's TTL: one store round
    trip before the call is recorded. Renewing again within ``min(RENEW_EVERY_S, 5% of the TTL)``
    is skipped, so a session's reasoning lives at least ``TTL − 60 s`` after its last turn instead
    of ``TTL`` (3,540 of 3,600 s by default). Bounded: the :data:`MAX_SESSIONS` most recent
    sessions are remembered (a forgotten one is simply renewed).
    """

    RENEW_EVERY_S = 60.0
    MAX_SESSIONS = 50_000

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._lock = threading.Lock()

    def recent(self, key: str, ttl_s: float) -> bool:
        at = self._at.get(key)
        return at is not None and time.monotonic() - at < min(self.RENEW_EVERY_S, 0.05 * ttl_s)

    def note(self, key: str) -> None:
        with self._lock:
            self._at.pop(key, None)
            self._at[key] = time.monotonic()  # newest last (dicts keep insertion order)
            while len(self._at) > self.MAX_SESSIONS:
                del self._at[next(iter(self._at))]

    def forget(self, key: str) -> None:
        with self._lock:
            self._at.pop(key, None)


_renewals = _Renewals()


class ReasoningStoreUnavailable(Exception):
    """The configured store (Redis) could not be reached. The message never holds content."""


def session_end(*, session: OwnedSession) -> int:
    """Delete the session's reasoning: ``session.owner``'s only (the same session id under another
    owner is untouched). Returns how many states were deleted (0 if none).

    Raises :class:`ReasoningStoreUnavailable` when Redis is configured but unreachable.
    """
    key = session.store_key
    _renewals.forget(key)
    try:
        return _store().delete(key)
    except _store_errors() as exc:
        raise ReasoningStoreUnavailable(f"reasoning store unavailable ({type(exc).__name__})") from None


def store_backend() -> str:
    """``"redis"``, ``"files"`` (this machine's processes) or ``"local"`` (in-process; single-process only)."""
    store = _store()
    return (
        "redis" if isinstance(store, _RedisStore) else "files" if isinstance(store, _FileStore) else "local"
    )


def local_store_clear() -> None:
    """Empty the in-process store and the configured folder store (used between tests; no
    effect on Redis)."""
    _local.clear()
    store = _store()
    if isinstance(store, _FileStore):
        store.clear()
