"""Provider credentials: resolved at call time from the environment, sent only to their own hosts.

A provider names a variable, e.g. ``AZURE_OPENAI_API_KEY``. The value comes from that variable,
or from the file named by ``AZURE_OPENAI_API_KEY_FILE`` (Docker/Kubernetes secrets), which wins
when both are set. It is never stored or logged.

The *binding* (settings ``PROVIDER_CREDENTIAL_HOSTS`` and ``SIMULATED_UPSTREAMS``) says which
variables a provider may use at all and the hosts each may be sent to; a catalogue row outside
it is refused when it is written (:func:`credential_binding_validate`) and again, whatever wrote
it, immediately before every upstream call (:func:`credential_for`): nothing leaves the process.

Matching a base URL (:meth:`CredentialBinding.refusal`):

* the URL is ASCII ``http(s)://host[:port][/path]`` after IDNA-encoding the host: no user
  information (``user@``), query, fragment, backslash, whitespace or control character; the
  host is lowercased and IDNA-encoded (IDNA 2008, as ``httpx``/``urllib3`` encode it), every
  label non-empty (no trailing dot); a host whose last label is numeric must be a dotted-quad
  IPv4 address (``127.1`` or ``2130706433`` are refused, not guessed at);
* a simulated upstream (``SIMULATED_UPSTREAMS``: loopback ``host:port``) takes any bound
  variable, over ``http`` or ``https``, on exactly its port;
* otherwise the scheme is ``https`` and the host matches one of the variable's patterns:
  ``api.anthropic.com`` exactly, or ``*.openai.azure.com`` = exactly one more label in front;
  the port is the pattern's (``host:8443``) or 443. IP literals never match a pattern.

Exceptions::

    CredentialUnavailable      the call cannot carry its credential; nothing was sent
    ├── MissingCredential      the variable (or its _FILE) is not set in this process
    └── CredentialNotAllowed   the provider's variable or base URL is outside the binding
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import idna
from django.core.exceptions import ImproperlyConfigured, ValidationError

#: Variables a provider may never use, whatever the settings say (with every ``DJANGO_*`` one and
#: every variable the settings read, ``settings.SETTINGS_ENV_VARS``): some are read only in some
#: configurations (``CELERY_BROKER_URL`` only with ``REDIS_URL``).
RESERVED_ENV_VARS = frozenset(
    {
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
        "REASONING_STORE_URL",
        "METRICS_TOKEN",
    }
)
RESERVED_ENV_PREFIXES = ("DJANGO_",)
ENV_VAR_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
#: Characters allowed in a base URL's path (RFC 3986 ``pchar`` and ``/``; no ``?``/``#``).
_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")
_DEFAULT_PORTS = {"https": 443, "http": 80}
LOOPBACK_NAMES = frozenset({"localhost"})


class CredentialUnavailable(Exception):
    """The call cannot carry its credential, so nothing was sent upstream. ``kind`` is the
    attempt's outcome (``missing_credential`` | ``credential_not_allowed``); the message never
    holds a credential. Permanent: the attempt is not retried on the same endpoint."""

    kind = "credential_unavailable"


class MissingCredential(CredentialUnavailable):
    """The named credential is not configured in this process (the message names only the variable)."""

    kind = "missing_credential"


class CredentialNotAllowed(CredentialUnavailable):
    """The provider's credential variable or base URL is outside the binding (the message names
    the provider and the host, never the credential)."""

    kind = "credential_not_allowed"


def resolve_credential(env_name: str) -> str:
    """Return the secret for ``env_name``. Raises MissingCredential when neither source is set.

    This reads any variable: a call goes through :func:`credential_for`, which checks the binding
    first."""
    file_path = os.environ.get(f"{env_name}_FILE")
    if file_path:
        try:
            value = Path(file_path).read_text().strip()
        except OSError as exc:
            raise MissingCredential(f"{env_name}_FILE is set but unreadable ({exc.strerror}).") from None
        if value:
            return value
    value = os.environ.get(env_name, "").strip()
    if not value:
        raise MissingCredential(f"Credential {env_name} is not set.")
    return value


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag of a secret (first 12 hex of SHA-256) to tell credentials apart."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


# ---- hosts ---------------------------------------------------------------------------------------


def canonical_host(host: str) -> str:
    """``host`` lowercased and IDNA-encoded (``bücher.example`` → ``xn--bcher-kva.example``), or
    an IP address in its canonical text (``::1``). Raises ValueError for anything else: an empty
    label (``a..b``, a trailing dot), a character outside letters/digits/hyphens, a label over 63
    characters, or a numeric last label that is not a dotted-quad IPv4 address."""
    if not host:
        raise ValueError("the host is empty")
    if ":" in host:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
        return str(address)
    if not host.isascii():
        try:
            host = idna.encode(host.lower()).decode("ascii")
        except idna.IDNAError as exc:
            raise ValueError(f"{host!r} is not a valid internationalised host name ({exc})") from None
    host = host.lower()
    labels = host.split(".")
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise ValueError(f"{host!r} is not a dotted-quad IPv4 address") from None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError(
            f"{host!r} is not a host name (letters, digits and hyphens between dots; no trailing dot)"
        )
    return host


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def is_loopback(host: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` or ``::1`` (``host`` canonical, :func:`canonical_host`)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_port_text(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class ParsedUrl:
    scheme: str
    host: str  # canonical (canonical_host)
    port: int  # explicit, or the scheme's default

    @property
    def host_port(self) -> str:
        return host_port_text(self.host, self.port)


def parse_base_url(url: str) -> ParsedUrl:
    """Split a provider base URL into scheme, canonical host and port (default 443/80).

    Raises ValueError (message fit for a form) for a URL that is not plain
    ``http(s)://host[:port][/path]``: user information, a query or fragment, a backslash,
    whitespace or a control character anywhere, a bad port, a host :func:`canonical_host`
    refuses, or an IPv6 zone."""
    if not isinstance(url, str) or not url:
        raise ValueError("the URL is empty")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F or ch == "\\" for ch in url):
        raise ValueError("the URL holds whitespace, a control character or a backslash")
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("use an http:// or https:// URL")
    if "?" in url or "#" in url:
        raise ValueError("a provider URL takes no query (?) or fragment (#)")
    netloc = parts.netloc
    if "@" in netloc:
        raise ValueError("a provider URL takes no user information (user@host)")
    if not netloc:
        raise ValueError("the URL has no host")
    if netloc.startswith("["):
        raw_host, bracket, rest = netloc[1:].partition("]")
        if not bracket or "%" in raw_host:
            raise ValueError("malformed IPv6 address (zone ids are not allowed)")
        if rest and not rest.startswith(":"):
            raise ValueError("malformed host and port")
        raw_port = rest[1:] if rest else None
    else:
        raw_host, colon, raw_port = netloc.partition(":")
        raw_port = raw_port if colon else None
        if "[" in netloc or "]" in netloc:
            raise ValueError("malformed host")
    if raw_port is not None and not (_PORT.fullmatch(raw_port) and 0 < int(raw_port) < 65536):
        raise ValueError("the port must be a number from 1 to 65535")
    host = canonical_host(raw_host)
    if not _PATH.fullmatch(parts.path) or not parts.path.isascii():
        raise ValueError("the path holds characters a provider URL does not take")
    port = int(raw_port) if raw_port is not None else _DEFAULT_PORTS[scheme]
    return ParsedUrl(scheme, host, port)


@dataclass(frozen=True)
class HostPattern:
    """``api.anthropic.com`` (that host), or ``*.openai.azure.com`` (one label, any, in front of
    the rest); ``port`` None means 443. Always https."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        """Parse ``[*.]host[:port]``. Raises ValueError (naming the pattern) for a scheme or path,
        a ``*`` anywhere but a whole leading label, a wildcard over fewer than two labels
        (``*.com``), an IP address or a loopback name (loopback only in SIMULATED_UPSTREAMS)."""
        raw = text.strip()
        if "/" in raw or "@" in raw:
            raise ValueError(f"{text!r}: give a host name (and port), not a URL")
        wildcard = raw.startswith("*.")
        body = raw[2:] if wildcard else raw
        host_text, colon, port_text = body.partition(":")
        if "*" in body:
            raise ValueError(f"{text!r}: a wildcard is only allowed as a whole leading label ('*.')")
        if colon and not (_PORT.fullmatch(port_text) and 0 < int(port_text) < 65536):
            raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
        try:
            host = canonical_host(host_text)
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None
        if is_ip(host) or is_loopback(host):
            raise ValueError(
                f"{text!r}: IP addresses and loopback hosts cannot be bound "
                "(a simulated upstream belongs in SIMULATED_UPSTREAMS)"
            )
        if wildcard and host.count(".") < 1:
            raise ValueError(f"{text!r}: a wildcard needs at least two labels after '*.'")
        return cls(f"*.{host}" if wildcard else host, int(port_text) if colon else None)

    def matches(self, host: str, port: int) -> bool:
        """Whether the canonical ``host`` on ``port`` is this pattern's (https assumed)."""
        if port != (self.port or 443):
            return False
        if self.host.startswith("*."):
            first, dot, rest = host.partition(".")
            return bool(dot) and rest == self.host[2:] and bool(_LABEL.fullmatch(first))
        return host == self.host

    def __str__(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"


def parse_simulated_upstream(text: str) -> tuple[str, int]:
    """``127.0.0.1:8900`` / ``localhost:8900`` / ``[::1]:8900`` → (canonical host, port). Raises
    ValueError unless the host is loopback and the port is given."""
    try:
        parsed = parse_base_url(f"http://{text.strip()}")
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    if not re.search(r":[0-9]+$", text.strip()):
        raise ValueError(f"{text!r}: give host:port (the simulated upstreams' port)")
    if not is_loopback(parsed.host):
        raise ValueError(f"{text!r}: a simulated upstream must be on a loopback host")
    return parsed.host, parsed.port


def is_reserved_env_var(name: str, settings_env_vars: Iterable[str] = ()) -> bool:
    """Whether ``name`` (or, for ``X_FILE``, ``X``) is one of Django's or this platform's own
    variables: :data:`RESERVED_ENV_VARS`, ``DJANGO_*``, or one of ``settings_env_vars``."""
    reserved = RESERVED_ENV_VARS | frozenset(settings_env_vars)
    names = {name, name.removesuffix("_FILE")}
    return any(n in reserved or n.startswith(RESERVED_ENV_PREFIXES) for n in names)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per settings value
class CredentialBinding:
    """Which credential variables may be sent where. ``hosts``: variable name → its patterns
    (sorted by name); ``simulated``: loopback (host, port) pairs every bound variable may go to."""

    hosts: tuple[tuple[str, tuple[HostPattern, ...]], ...]
    simulated: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def build(
        cls,
        hosts: Mapping[str, Sequence[str]],
        simulated: Sequence[str] = (),
        settings_env_vars: Iterable[str] = (),
    ) -> CredentialBinding:
        """The binding from the settings' values. Raises ImproperlyConfigured, naming the setting
        and the entry, for a variable name that is not one or is reserved
        (:func:`is_reserved_env_var`), a bad host pattern (:meth:`HostPattern.parse`) or a bad
        simulated upstream (:func:`parse_simulated_upstream`)."""
        settings_env_vars = frozenset(settings_env_vars)
        bound = []
        for name, patterns in hosts.items():
            if not ENV_VAR_NAME.fullmatch(name):
                raise ImproperlyConfigured(
                    f"PROVIDER_CREDENTIAL_HOSTS: {name!r} is not an environment variable name."
                )
            if is_reserved_env_var(name, settings_env_vars):
                raise ImproperlyConfigured(
                    f"PROVIDER_CREDENTIAL_HOSTS names {name}, one of Django's or this platform's own "
                    "variables (SECRET_KEY, DATABASE_URL, REDIS_URL, DJANGO_*, every variable the "
                    "settings read): it can never be a provider credential."
                )
            try:
                parsed = tuple(HostPattern.parse(p) for p in patterns if p.strip())
            except ValueError as exc:
                raise ImproperlyConfigured(f"PROVIDER_CREDENTIAL_HOSTS[{name}]: {exc}") from None
            bound.append((name, parsed))
        try:
            loopback = frozenset(parse_simulated_upstream(s) for s in simulated if s.strip())
        except ValueError as exc:
            raise ImproperlyConfigured(f"SIMULATED_UPSTREAMS: {exc}") from None
        return cls(tuple(sorted(bound)), loopback)

    def patterns(self, env_name: str) -> tuple[HostPattern, ...] | None:
        """The variable's host patterns, or None when it is not bound."""
        return dict(self.hosts).get(env_name)

    def allowed_text(self, env_name: str) -> str:
        """Where ``env_name`` may be sent, for messages (``https://api.anthropic.com``, …)."""
        places = [f"https://{p}" for p in self.patterns(env_name) or ()]
        places += [f"the simulated upstream {host_port_text(*s)}" for s in sorted(self.simulated)]
        return ", ".join(places)

    def refusal(self, *, env_name: str, base_url: str) -> dict[str, str]:
        """``{}`` when a credential in ``env_name`` may be sent to ``base_url``; otherwise the
        reasons by field (``credential_env`` and/or ``base_url``), naming what is allowed."""
        patterns = self.patterns(env_name)
        if patterns is None:
            names = ", ".join(name for name, _ in self.hosts) or "none"
            return {
                "credential_env": f"{env_name} is not a provider credential variable; allowed: {names} "
                "(setting PROVIDER_CREDENTIAL_HOSTS)."
            }
        try:
            url = parse_base_url(base_url)
        except ValueError as exc:
            return {"base_url": f"Not a usable provider URL: {exc}."}
        if (url.host, url.port) in self.simulated:
            return {}
        if (
            url.scheme == "https"
            and not is_ip(url.host)
            and any(p.matches(url.host, url.port) for p in patterns)
        ):
            return {}
        return {
            "base_url": f"{env_name} may not be sent to {url.scheme}://{url.host_port}; allowed: "
            f"{self.allowed_text(env_name) or 'no host yet'} "
            "(settings PROVIDER_CREDENTIAL_HOSTS, AVOCADO_HOSTS, SIMULATED_UPSTREAMS)."
        }


@functools.lru_cache(maxsize=8)
def _binding(hosts: tuple, simulated: tuple, settings_env_vars: frozenset) -> CredentialBinding:
    return CredentialBinding.build(dict(hosts), simulated, settings_env_vars)


def credential_binding() -> CredentialBinding:
    """The binding of the current settings (``PROVIDER_CREDENTIAL_HOSTS``, ``SIMULATED_UPSTREAMS``,
    ``SETTINGS_ENV_VARS``), parsed once per distinct value. Raises ImproperlyConfigured (at
    start-up: :meth:`routing.apps.RoutingConfig.ready`)."""
    from django.conf import settings

    return _binding(
        tuple((name, tuple(hosts)) for name, hosts in settings.PROVIDER_CREDENTIAL_HOSTS.items()),
        tuple(settings.SIMULATED_UPSTREAMS),
        settings.SETTINGS_ENV_VARS,
    )


def credential_binding_validate(*, credential_env: str, base_url: str) -> None:
    """Check a provider's credential variable and base URL against the binding, for everything
    that writes the catalogue (admin form, services, seed command). Raises ValidationError keyed
    by ``credential_env`` / ``base_url``, naming the allowed variables or hosts."""
    errors = credential_binding().refusal(env_name=credential_env, base_url=base_url)
    if errors:
        raise ValidationError(errors)


@functools.lru_cache(maxsize=256)
def _refusal(binding: CredentialBinding, env_name: str, base_url: str) -> tuple[tuple[str, str], ...]:
    return tuple(binding.refusal(env_name=env_name, base_url=base_url).items())


def credential_for(*, provider: str, env_name: str, base_url: str) -> str:
    """The secret a call of ``provider`` to ``base_url`` carries: the binding is checked first
    (whatever wrote the catalogue row), then :func:`resolve_credential`. Every upstream call
    gets its credential here (:func:`routing.pipeline.attempts._guard`: worker attempts, streams, the
    native transport; the drop-ins' early check).

    Raises :class:`CredentialNotAllowed` (message: the provider and the host, never the
    credential or its variable) or :class:`MissingCredential`."""
    refused = _refusal(credential_binding(), env_name, base_url)
    if refused:
        try:
            where = parse_base_url(base_url).host_port
        except ValueError:
            where = "a malformed base URL"
        raise CredentialNotAllowed(
            f"Provider {provider!r} may not send its credential to {where}: the base URL or "
            "credential variable is outside the binding (PROVIDER_CREDENTIAL_HOSTS, SIMULATED_UPSTREAMS); "
            "nothing was sent."
        )
    return resolve_credential(env_name)
