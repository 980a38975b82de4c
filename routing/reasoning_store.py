"""Server-side session store for encrypted provider reasoning (multi-turn continuity without leakage).

Providers that reason (OpenAI/Azure Responses with ``store=false``, Anthropic with thinking) need
their reasoning items passed back *exactly* on the next turn of a tool-using session. Those items
(:class:`~routing.providers.types.ReasoningState`) must never reach the database, transcripts,
logs, API responses or error messages, so they live here only:

a Redis list per session on ``REASONING_STORE_URL`` (default: ``REDIS_URL``), key
``muse:reasoning:<sha256(owner NUL session id)>`` (:attr:`OwnedSession.store_key`), expiring
``REASONING_SESSION_TTL_S`` seconds (default 3600) after the last save; each element is one state
as JSON. Prefer a Redis without persistence (no RDB/AOF; the private server of a run without
``REDIS_URL`` has none) so the blobs never touch a disk.

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

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass

from django.conf import settings

from muse_experiments.infra.redis_client import redis_client
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


class _RedisStore:
    def __init__(self, url: str) -> None:
        self.client = redis_client(url)

    def load(self, key: str) -> list[bytes]:
        return self.client.lrange(KEY_PREFIX + key, 0, -1)

    def save(self, key: str, item: str | None, ttl_s: int) -> None:
        if item is None:  # a renewal: one command needs no MULTI
            self.client.expire(KEY_PREFIX + key, ttl_s)
            return
        pipe = self.client.pipeline(transaction=True)
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


def _store() -> _RedisStore:
    return _RedisStore(settings.REASONING_STORE_URL)


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

    Raises :class:`ReasoningStoreUnavailable` when Redis is unreachable.
    """
    key = session.store_key
    _renewals.forget(key)
    try:
        return _store().delete(key)
    except _store_errors() as exc:
        raise ReasoningStoreUnavailable(f"reasoning store unavailable ({type(exc).__name__})") from None
