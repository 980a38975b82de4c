"""Provider error hierarchy (Django-free). Every SDK/transport failure maps onto it.

Exception tree (``retryable`` default in brackets)::

    ProviderError(message, *, retryable, status_code=None, retry_after_s=None, ...)
    ├── RateLimited              429                                   [retryable]
    ├── UpstreamUnavailable      500/502/503/504/529, overloaded_error [retryable]
    ├── UpstreamTimeout          client-side timeout, 408              [retryable]
    ├── ConnectionFailed         connect error, reset, protocol error  [retryable]
    ├── BadResponse              malformed/unparseable upstream body   [retryable]
    ├── ClientRequestError       other 4xx (400/404/409/413/422...)    [not retryable]
    │   └── AuthFailed           401/403                               [not retryable]
    └── StreamFailed(after_content)  failure after HTTP 200 of a stream
                                 [retryable only if no content was delivered yet
                                  and the underlying cause was retryable]

Retry policy belongs to the caller (our SDK clients run with ``max_retries=0``): retry /
fail over when ``err.retryable``; honour ``err.retry_after_s`` (seconds, from
``retry-after``/``retry-after-ms``) when set.

Security: messages are built by :func:`safe_message`, which removes the endpoint credential
and anything that looks like an API key (``sk-...``, OpenAI's masked ``sk-abc***wxyz``).
Mapped exceptions are raised ``from None`` so SDK exceptions (whose ``request`` carries
auth headers) are not chained into tracebacks/logs.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

#: Longest message kept (characters); the rest is cut off.
MAX_MESSAGE_CHARS = 500
#: Only this much of an upstream text is looked at (it is cut to MAX_MESSAGE_CHARS anyway).
_SCAN_CHARS = 4000
#: Substrings of a credential at least this long count as the credential.
_MIN_SECRET_PART = 8
REDACTED = "[redacted]"
#: Replaces an upstream text in which the reasoning detector found encrypted reasoning.
WITHHELD = "upstream error (details withheld: they held encrypted reasoning)"

_KEYLIKE = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|pk|rk)-[A-Za-z0-9_\-*]{4,}|[A-Za-z0-9_\-]*\*{3,}[A-Za-z0-9_\-]*"
)
_KEY_PROVIDED = re.compile(r"(API key provided:)\s*\S+", re.IGNORECASE)
#: ``api-key=...``, ``x-api-key: ...``, ``"access_token": "..."``, ``password=...`` and the like.
_KEY_VALUE = re.compile(
    r"(?<![A-Za-z0-9])((?:x-)?api[-_ ]?key|(?:access|auth|refresh|id|session)[-_]?token|secret"
    r"|client[-_]?secret|password|passwd|authorization|ocp-apim-subscription-key|signature)"
    r"""(["']?\s*[:=]\s*["']?)(?:(?:Bearer|Basic)\s+)?(?!\[redacted\])[^\s"'`,;&)\]}]+""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+(?!\[redacted\])[A-Za-z0-9\-._~+/=:]{4,}", re.IGNORECASE)
#: Fernet tokens (OpenAI ``encrypted_content``) and their starts.
_FERNET = re.compile(r"gAAAAA[A-Za-z0-9_\-+/=]*")
#: Reasoning item ids (``rs_...``; Azure sometimes ``rs-...``).
_REASONING_ID = re.compile(r"(?<![A-Za-z0-9])rs[_-][A-Za-z0-9]{8,}", re.IGNORECASE)
_REDACTED_RUN = re.compile(r"(?:\[redacted\]){2,}")


def _secret_variants(secrets: Iterable[str]) -> list[str]:
    """Whole secrets, each without its last 4 characters (masked forms), and each as an upstream
    may echo it encoded (percent-encoded, base64 either alphabet, hex, reversed); longest first.
    Matching is case-insensitive (:func:`safe_upstream_message`)."""
    out: set[str] = set()
    for secret in secrets:
        if not secret or len(secret) < 4:
            continue
        raw = secret.encode()
        out |= {
            secret,
            urllib.parse.quote(secret, safe=""),
            base64.b64encode(raw).decode().rstrip("="),
            base64.urlsafe_b64encode(raw).decode().rstrip("="),
            raw.hex(),
            secret[::-1],
        }
        if len(secret) - 4 >= _MIN_SECRET_PART:
            out.add(secret[:-4])
    return sorted(out, key=len, reverse=True)


def _redact_secret_parts(text: str, secret: str) -> str:
    """Replace every run of ``text`` of at least :data:`_MIN_SECRET_PART` characters that is a
    substring of ``secret`` (a credential quoted in part, or cut off) by ``[redacted]``."""
    if len(secret) < _MIN_SECRET_PART:
        return text
    windows = {secret[i : i + _MIN_SECRET_PART] for i in range(len(secret) - _MIN_SECRET_PART + 1)}
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i : i + _MIN_SECRET_PART] in windows:
            end = i + _MIN_SECRET_PART
            while end < len(text) and text[i : end + 1] in secret:
                end += 1
            out.append(REDACTED)
            i = end
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


#: Encrypted reasoning in plain text, without decoding: Fernet tokens (OpenAI
#: ``encrypted_content``), ``encrypted_content``/``signature``/``data`` keys with a blob,
#: Anthropic ``redacted_thinking``.
_REASONING_TEXT = re.compile(
    r"gAAAAA[A-Za-z0-9_\-+/=]{16,}|redacted_?thinking"
    r"""|(?:encrypted_?content|signature|data)[\"'\\]*\s*[:=]\s*[\"'\\]*[A-Za-z0-9+/_=\-]{16,}""",
    re.IGNORECASE,
)
#: Further detectors (text -> True when it holds encrypted reasoning), see
#: :func:`register_reasoning_detector`.
_REASONING_DETECTORS: list[Callable[[str], bool]] = []


def register_reasoning_detector(detector: Callable[[str], bool]) -> None:
    """Have :func:`safe_upstream_message` also ask ``detector`` whether a text holds encrypted
    reasoning. ``routing.apps`` registers the project's detector
    (:func:`routing.transcripts.gate.find_encrypted_reasoning`, which also decodes base64, hex,
    JSON... layers) when Django starts; this package may not import it (it imports no Django)."""
    if detector not in _REASONING_DETECTORS:
        _REASONING_DETECTORS.append(detector)


def _holds_encrypted_reasoning(text: str) -> bool:
    if _REASONING_TEXT.search(text):
        return True
    return any(detector(text) for detector in _REASONING_DETECTORS)


def safe_upstream_message(text: str, secrets: Iterable[str] = ()) -> str:
    """Make an upstream (or upstream-derived) error text safe to store, log and show to clients.

    The one sanitiser of provider error messages (every :class:`ProviderError` message passes
    through it). In order:

    1. every occurrence of a credential the call used (``secrets``) -- the whole value, the
       value without its last 4 characters, and the value percent-encoded, in base64, in hex or
       reversed, in any letter case -- becomes ``[redacted]``;
    2. when the text holds encrypted reasoning (a plain-text check here, and the project's
       detector :func:`routing.transcripts.gate.find_encrypted_reasoning` once registered, see
       :func:`register_reasoning_detector`), the whole text is replaced by :data:`WITHHELD`;
    3. anything that looks like a secret becomes ``[redacted]``: ``sk-...``/``pk-...`` keys,
       OpenAI's masked ``sk-abc***wxyz``, ``API key provided: ...``, ``api-key=...``,
       ``x-api-key: ...``, ``access_token=...``, ``Authorization: Bearer ...``, ``Bearer ...``;
       so do Fernet-like ``gAAAAA...`` runs, reasoning item ids (``rs_...``) and any run of 8+
       characters of a credential (quoted in part);
    4. the result is cut to :data:`MAX_MESSAGE_CHARS` characters (a credential cut in two at
       the end is redacted too).

    Idempotent: sanitising a sanitised text changes nothing.
    """
    out = str(text)[:_SCAN_CHARS]
    variants = _secret_variants(secrets)
    for secret in variants:
        out = re.sub(re.escape(secret), REDACTED, out, flags=re.IGNORECASE)
    if _holds_encrypted_reasoning(out):
        return WITHHELD
    out = _KEY_PROVIDED.sub(rf"\1 {REDACTED}", out)
    out = _KEY_VALUE.sub(rf"\1\2{REDACTED}", out)
    out = _BEARER.sub(rf"\1 {REDACTED}", out)
    out = _KEYLIKE.sub(REDACTED, out)
    out = _FERNET.sub(REDACTED, out)
    out = _REASONING_ID.sub(REDACTED, out)
    for secret in variants:
        out = _redact_secret_parts(out, secret)
    out = _REDACTED_RUN.sub(REDACTED, out)
    if len(out) > MAX_MESSAGE_CHARS:
        out = out[:MAX_MESSAGE_CHARS]
        cut = next((k for k in range(len(REDACTED) - 1, 0, -1) if out.endswith(REDACTED[:k])), 0)
        out = out[: len(out) - cut]  # no half "[redacted]" marker
        for secret in variants:  # a credential cut off at the end: its start is still secret
            cut = next((k for k in range(len(secret) - 1, 3, -1) if out.endswith(secret[:k])), 0)
            if cut:
                out = out[: min(len(out) - cut, MAX_MESSAGE_CHARS - len(REDACTED))] + REDACTED
                break
    return out


#: The former name of :func:`safe_upstream_message`.
safe_message = safe_upstream_message

_ERROR_TYPE = re.compile(r"[A-Za-z0-9_.:\-]{1,80}")


def safe_error_type(error_type: object) -> str | None:
    """The provider's error type/code as sent (``rate_limit_exceeded``, ``overloaded_error``...),
    or ``None`` when it is not a short identifier or the sanitiser would change it."""
    if error_type is None:
        return None
    text = str(error_type)
    if not _ERROR_TYPE.fullmatch(text) or safe_upstream_message(text) != text:
        return None
    return text


class ProviderError(Exception):
    """Base class. ``message`` is safe to log and show (no credentials, no reasoning).

    Attributes: ``retryable`` (bool), ``status_code`` (HTTP status or ``None``),
    ``retry_after_s`` (float seconds or ``None``), ``upstream_request_id``,
    ``provider_kind``, ``endpoint_id``, ``error_type`` (provider error type/code, e.g.
    ``rate_limit_exceeded``, ``overloaded_error``), ``usage`` (tokens billed for the failed
    attempt, when the upstream reported or streamed any; ``None`` otherwise).
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        status_code: int | None = None,
        retry_after_s: float | None = None,
        upstream_request_id: str | None = None,
        provider_kind: str | None = None,
        endpoint_id: str | None = None,
        error_type: str | None = None,
        usage: Any = None,
    ) -> None:
        # Every message passes the sanitiser, whoever formed it (builders that know the call's
        # credential have already redacted it; this catches key-like text and reasoning).
        message = safe_upstream_message(message)
        super().__init__(message)
        self.message = message
        self.retryable = self.default_retryable if retryable is None else retryable
        self.status_code = status_code
        self.retry_after_s = retry_after_s
        self.upstream_request_id = upstream_request_id
        self.provider_kind = provider_kind
        self.endpoint_id = endpoint_id
        self.error_type = safe_error_type(error_type)
        #: :class:`~routing.providers.types.Usage` the provider billed for this failed attempt
        #: (``response.failed`` usage, or the tokens a broken stream had delivered), else ``None``.
        self.usage = usage

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, retryable={self.retryable}, "
            f"status_code={self.status_code}, retry_after_s={self.retry_after_s}, "
            f"endpoint_id={self.endpoint_id!r})"
        )

    def to_public_dict(self) -> dict[str, object]:
        return {
            "class": type(self).__name__,
            "message": self.message,
            "retryable": self.retryable,
            "status_code": self.status_code,
            "retry_after_s": self.retry_after_s,
            "error_type": self.error_type,
            "upstream_request_id": self.upstream_request_id,
            "endpoint_id": self.endpoint_id,
        }


class RateLimited(ProviderError):
    """HTTP 429 (rate or quota limit). ``retry_after_s`` from the response when sent."""

    default_retryable = True


class UpstreamUnavailable(ProviderError):
    """HTTP 5xx, 529 / Anthropic ``overloaded_error`` / ``api_error``."""

    default_retryable = True


class UpstreamTimeout(ProviderError):
    """The request exceeded ``EndpointConfig.timeout_s`` (or HTTP 408)."""

    default_retryable = True


class ConnectionFailed(ProviderError):
    """Could not connect, or the connection was reset/closed without a response."""

    default_retryable = True


class BadResponse(ProviderError):
    """The upstream answered with something unparseable (invalid JSON, bad SSE data)."""

    default_retryable = True


class ClientRequestError(ProviderError):
    """A 4xx other than 401/403/408/429: our request is wrong; retrying will not help."""

    default_retryable = False


class AuthFailed(ClientRequestError):
    """HTTP 401/403: the credential is missing, wrong, or lacks permission."""

    default_retryable = False


class StreamFailed(ProviderError):
    """A stream failed after HTTP 200 (in-stream ``error`` event, reset, bad data).

    ``after_content`` is True when text/tool deltas had already been delivered to the
    caller: then the request must not be transparently retried (the client saw output).
    ``cause_class`` names the equivalent non-stream error class (e.g. ``UpstreamUnavailable``).
    """

    def __init__(
        self, message: str, *, after_content: bool, cause_class: str | None = None, **kwargs
    ) -> None:
        retryable = kwargs.pop("retryable", True)
        super().__init__(message, retryable=bool(retryable and not after_content), **kwargs)
        self.after_content = after_content
        self.cause_class = cause_class

    def to_public_dict(self) -> dict[str, object]:
        data = super().to_public_dict()
        data["after_content"] = self.after_content
        data["cause_class"] = self.cause_class
        return data


def class_for_status(status: int, error_type: str | None = None) -> type[ProviderError]:
    """Map an HTTP status (and provider error type) to an error class."""
    if error_type in ("overloaded_error", "api_error", "server_error"):
        return UpstreamUnavailable
    if error_type == "rate_limit_error":
        return RateLimited
    if status == 429:
        return RateLimited
    if status in (401, 403):
        return AuthFailed
    if status == 408:
        return UpstreamTimeout
    if status >= 500 or status == 529:
        return UpstreamUnavailable
    if 400 <= status < 500:
        return ClientRequestError
    return BadResponse
