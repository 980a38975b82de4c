"""API-key authentication and scope permissions for the REST API.

Keys look like ``muse_<prefix>_<secret>``. Only the SHA-256 digest of the whole key is stored; the
prefix (public) finds the key in the in-process snapshot of active keys (:func:`active_keys`, never
the database on the request path), and the digest is compared in constant time, against a
stand-in digest when the prefix is unknown, so an unknown prefix and a wrong secret do the same
work. Failed authentications are counted per client address and refused over a limit
(:mod:`muse_experiments.api.auth_failures`). SHA-256 without a salt is adequate because keys carry 192
bits of randomness (no dictionary to attack).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from muse_experiments.experiments.models import ApiKey
from muse_experiments.infra import config_version
from muse_experiments.infra.config_version import VersionedSnapshot

from . import auth_failures

KEY_PREFIX = "muse"
#: Every scope a key can hold: call completions, post events, read results, operate kill switches,
#: manage training opt-outs, export and ingest training data.
SCOPES = (
    "completions",
    "events",
    "analytics:read",
    "experiments:write",
    "ops",
    "training",
    "training:export",
    "training:ingest",
)


@dataclass(frozen=True)
class ApiClient:
    """The principal behind an API key (DRF's ``request.user`` for key-authenticated calls)."""

    key: ApiKey

    is_authenticated = True
    is_staff = False

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.key.scopes)


def digest_key(raw_key: str) -> str:
    """SHA-256 hex digest of a raw API key."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


def generate_key() -> tuple[str, str, str]:
    """Make a new key. Returns ``(raw_key, prefix, digest)``; only prefix and digest are stored."""
    prefix = secrets.token_hex(4)
    raw = f"{KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(24)}"
    return raw, prefix, digest_key(raw)


def _load_active_keys() -> dict[str, ApiKey]:
    return {k.prefix: k for k in ApiKey.objects.filter(revoked_at__isnull=True)}


_active_keys = VersionedSnapshot(_load_active_keys)


def active_keys() -> dict[str, ApiKey]:
    """Unrevoked keys by prefix, cached in process and rebuilt when the configuration version
    moves (:mod:`muse_experiments.infra.config_version`), so a new key, a revocation or a scope or
    rate-limit change reaches every process within ``CONFIG_REFRESH_INTERVAL_S`` (0.5 s by
    default) of its commit: :func:`api_key_create` bumps the version like every other change. It
    is the only source the request path asks; a prefix it does not hold is refused (401) without
    a database query, so a key works in every process within that bound of its creation."""
    return _active_keys.get()


#: Compared against when the prefix is unknown, so that costs what a wrong secret does.
_UNKNOWN_KEY_DIGEST = digest_key(f"{KEY_PREFIX}_unknown_{secrets.token_urlsafe(24)}")


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer muse_…`` or ``X-Api-Key: muse_…`` (also accepted: ``api-key``, ``x-api-key``
    as sent by the OpenAI/Anthropic SDKs' drop-in clients)."""

    keyword = "Bearer"

    def authenticate(self, request):
        """``(ApiClient, ApiKey)``, or None without a key. Raises ``AuthenticationFailed`` (401)
        for a malformed, unknown, wrong or revoked key, each counted against the client's address,
        and :class:`~muse_experiments.api.auth_failures.AuthFailuresThrottled` (429) from an address
        over its failure limit, before the key is looked at. No database query: keys come from
        :func:`active_keys`; an unknown prefix and a wrong secret run the same code."""
        raw = self._raw_key(request)
        if raw is None:
            return None
        address = auth_failures.client_address(request)
        auth_failures.check(address)
        parts = raw.split("_")
        if len(parts) < 3 or parts[0] != KEY_PREFIX:
            auth_failures.record(address)
            raise exceptions.AuthenticationFailed("Malformed API key.")
        key = active_keys().get(parts[1])
        expected = _UNKNOWN_KEY_DIGEST if key is None else key.digest
        matches = hmac.compare_digest(expected, digest_key(raw))
        if key is None or not matches:
            auth_failures.record(address)  # an address already at its limit: 429 instead
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return ApiClient(key), key

    def authenticate_header(self, request) -> str:
        return self.keyword

    @staticmethod
    def _raw_key(request) -> str | None:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            return header[len("Bearer ") :].strip() or None
        for name in ("X-Api-Key", "Api-Key"):
            if value := request.headers.get(name):
                return value.strip()
        return None


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Documents :class:`ApiKeyAuthentication` in the OpenAPI schema (Swagger's Authorize button)."""

    target_class = "muse_experiments.api.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "muse_<prefix>_<secret>"}


#: What a login session (the admin's cookie + CSRF token, DRF's ``SessionAuthentication``) needs
#: for each API operation, by URL name and method: Django permissions, all required (superusers
#: hold every one, as in the admin; ``is_staff`` alone grants nothing). ``None``: API keys only, no
#: session passes (the drop-ins, which authenticate API keys only anyway).
#: An operation missing here is refused to sessions. API keys are checked against the view's
#: ``required_scope`` instead (noted per row); a HEAD or OPTIONS request needs what GET needs.
#: The shipped roles (groups) are described in the README, "Roles".
SESSION_PERMISSIONS: dict[tuple[str, str], tuple[str, ...] | None] = {
    # scope completions
    ("completion-create", "POST"): ("routing.request_completion",),
    ("completion-detail", "GET"): ("routing.request_completion", "routing.view_completionjob"),
    ("session-end", "POST"): ("routing.request_completion",),
    ("dropin-chat-completions", "POST"): None,
    ("dropin-responses", "POST"): None,
    ("dropin-messages", "POST"): None,
    # scope events
    ("events-create", "POST"): ("analytics.add_outcomeevent",),
    # scope analytics:read
    ("experiment-list", "GET"): ("muse_experiments.view_experiment",),
    ("experiment-detail", "GET"): ("muse_experiments.view_experiment",),
    ("assignment-preview", "POST"): ("muse_experiments.view_experiment",),  # read-only
    ("experiment-results", "GET"): ("muse_experiments.view_experiment", "analytics.view_resultsnapshot"),
    # a new snapshot (also GET .../results?refresh=1); the results page's "Recompute now" alike
    ("experiment-results-compute", "POST"): (
        "muse_experiments.view_experiment",
        "analytics.add_resultsnapshot",
    ),
    # scope experiments:write (variants are edited as part of their experiment, as in the admin)
    ("experiment-detail", "PATCH"): ("muse_experiments.change_experiment",),
    # a rollout is its experiment's ramp: read with the experiment (scope analytics:read), created
    # with it and driven as an edit of it (scope experiments:write)
    ("rollout-detail", "GET"): ("muse_experiments.view_experiment",),
    ("rollout-create", "POST"): ("muse_experiments.add_experiment",),
    ("rollout-start", "POST"): ("muse_experiments.change_experiment",),
    ("rollout-pause", "POST"): ("muse_experiments.change_experiment",),
    ("rollout-rollback", "POST"): ("muse_experiments.change_experiment",),
    # shadow tests: reads need analytics:read, writes experiments:write
    ("shadow-test-list", "GET"): ("muse_experiments.view_shadowtest",),
    ("shadow-test-detail", "GET"): ("muse_experiments.view_shadowtest",),
    ("shadow-test-results", "GET"): ("muse_experiments.view_shadowtest",),
    ("shadow-test-list", "POST"): ("muse_experiments.add_shadowtest",),
    ("shadow-test-start", "POST"): ("muse_experiments.change_shadowtest",),
    ("shadow-test-stop", "POST"): ("muse_experiments.change_shadowtest",),
    ("experiment-list", "POST"): ("muse_experiments.add_experiment",),  # a draft, with its variants
    # scope ops: turning a switch on or off adds its row the first time, changes it after
    ("ops-kill-switches", "GET"): ("routing.view_killswitch",),
    ("ops-kill-switches", "POST"): ("routing.add_killswitch", "routing.change_killswitch"),
    # scope training (an opt-out is a TrainingOptOut row; opting back in deletes it)
    ("training-opt-out", "GET"): ("transcripts.view_trainingoptout",),
    ("training-opt-out", "POST"): ("transcripts.add_trainingoptout",),
    ("training-opt-out", "DELETE"): ("transcripts.delete_trainingoptout",),
    # scopes training:export and training:ingest
    ("training-export", "POST"): ("transcripts.export_training_data",),
    ("training-ingest", "POST"): ("transcripts.ingest_training_data",),
}


def session_permissions_missing(user, *, operation: tuple[str, str]) -> list[str] | None:
    """The Django permissions ``user`` (a logged-in session user) lacks for ``operation``
    (``(URL name, method)``, a row of :data:`SESSION_PERMISSIONS`): ``[]`` when allowed, the
    missing permission names otherwise, ``None`` when no session may do it at all (keys only,
    or an operation not in the table). Inactive and non-staff users hold nothing, as in the admin."""
    needed = SESSION_PERMISSIONS.get(operation)
    if needed is None:
        return None
    if not (user.is_active and user.is_staff):
        return list(needed)
    return [p for p in needed if not user.has_perm(p)]


def require_session_permission(request, *, operation: tuple[str, str]) -> None:
    """Raise ``PermissionDenied`` (403) unless the caller may do ``operation`` (a row of
    :data:`SESSION_PERMISSIONS`): for an API key, nothing more is checked (its scope was); for a
    session user, the row's permissions. For a view that does more than its method says (``GET
    …/results?refresh=1`` computes a snapshot, as ``POST …/results/compute`` does)."""
    if isinstance(request.user, ApiClient):
        return
    missing = session_permissions_missing(request.user, operation=operation)
    if missing is None:
        raise exceptions.PermissionDenied("Only an API key may do this.")
    if missing:
        raise exceptions.PermissionDenied(f"Your account lacks the permission(s): {', '.join(missing)}.")


class HasScope(permissions.BasePermission):
    """The API's one permission. An API key needs the view's ``required_scope``. A session user
    (admin login) needs the Django permissions :data:`SESSION_PERMISSIONS` lists for the route and
    method; a method the view does not implement passes, so the view answers 405."""

    message = "This API key lacks the required scope."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if isinstance(user, ApiClient):
            scope = getattr(view, "required_scope", None)
            return scope is None or scope in user.scopes
        if not (user and user.is_authenticated):
            return False
        method = "GET" if request.method in ("HEAD", "OPTIONS") else request.method
        match = getattr(request, "resolver_match", None)
        operation = (match.url_name if match else "", method)
        if operation not in SESSION_PERMISSIONS and not hasattr(view, request.method.lower()):
            return True  # not implemented: the view's 405
        require_session_permission(request, operation=operation)
        return True


#: The largest per-minute limit a key can have (the column is a PostgreSQL ``integer``).
MAX_RATE_LIMIT_PER_MINUTE = 2_147_483_647


def api_key_create(
    *, name: str, scopes: list[str], rate_limit_per_minute: int = 6000, owner=None
) -> tuple[ApiKey, str]:
    """Create a key. Returns ``(ApiKey, raw_key)``; the raw key is not recoverable afterwards. It
    authenticates in every process within ``CONFIG_REFRESH_INTERVAL_S`` (0.5 s by default) of
    the commit (:func:`active_keys`).

    ``scopes`` ⊆ :data:`SCOPES`; ``rate_limit_per_minute`` ≥ 0 requests per sliding minute (0
    refuses everything; at most :data:`MAX_RATE_LIMIT_PER_MINUTE`). Raises ``ValueError`` for an empty
    name, unknown scopes or a limit out of that range.
    """
    name = (name or "").strip()
    if not name:
        raise ValueError("A key needs a name.")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ValueError(f"Unknown scopes {unknown}; choose from {list(SCOPES)}.")
    if not 0 <= rate_limit_per_minute <= MAX_RATE_LIMIT_PER_MINUTE:
        raise ValueError(f"rate_limit_per_minute must be between 0 and {MAX_RATE_LIMIT_PER_MINUTE}.")
    raw, prefix, digest = generate_key()
    with transaction.atomic():
        key = ApiKey.objects.create(
            name=name[:100],
            prefix=prefix,
            digest=digest,
            scopes=sorted(set(scopes)),
            rate_limit_per_minute=rate_limit_per_minute,
            owner=owner,
        )
        config_version.bump()  # every process's active_keys learns the key
    return key, raw


def api_keys_delete(*, keys: Any) -> int:
    """Delete keys (a queryset or iterable of :class:`ApiKey`): like a revocation, every later
    request with them gets 401 within ``CONFIG_REFRESH_INTERVAL_S`` in every process; their jobs
    stay, without a key. Returns how many were deleted."""
    ids = [k.pk for k in keys]
    with transaction.atomic():
        deleted, _ = ApiKey.objects.filter(pk__in=ids).delete()
        config_version.bump()  # cached keys (active_keys) are rebuilt everywhere
    return deleted


def api_key_revoke(*, key: ApiKey) -> None:
    """Revoke a key: every later request with it gets 401 (within ``CONFIG_REFRESH_INTERVAL_S`` in
    every process). Idempotent (keeps the first time)."""
    if key.revoked_at is None:
        with transaction.atomic():
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
            config_version.bump()  # cached keys (active_keys) are rebuilt everywhere
