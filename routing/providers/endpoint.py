"""Where and how one upstream model is called: :class:`EndpointConfig` (provider kind, API style,
base URL, credential as a :class:`Secret`, capabilities, prices). Django-free; part of the
provider-neutral types (:mod:`routing.providers.types`)."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

ProviderKind = Literal["native", "openai", "azure_openai", "anthropic"]
ApiStyle = Literal["chat_completions", "responses", "messages"]

PROVIDER_KINDS: frozenset[str] = frozenset({"native", "openai", "azure_openai", "anthropic"})
API_STYLES: frozenset[str] = frozenset({"chat_completions", "responses", "messages"})


class Secret:
    """A credential string whose ``repr``/``str`` never reveal it.

    ``Secret("sk-...")``; :meth:`reveal` returns the value (only pass it to an SDK client);
    :attr:`fingerprint` is a short, non-reversible SHA-256 prefix usable in cache keys/logs.
    Equality compares values in constant time.
    """

    __slots__ = ("__value",)

    def __init__(self, value: str) -> None:
        if isinstance(value, Secret):
            value = value.reveal()
        if not isinstance(value, str):
            raise TypeError("Secret value must be a str")
        self.__value = value

    def reveal(self) -> str:
        return self.__value

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(b"muse-secret:" + self.__value.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self.__value, other.__value)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __bool__(self) -> bool:
        return bool(self.__value)

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __reduce__(self) -> Any:
        """Refuse pickling, so a credential is never written to a cache/queue by accident."""
        raise TypeError("Secret objects cannot be pickled")


@dataclass(frozen=True)
class EndpointConfig:
    """One upstream model endpoint.

    * ``public_id``: our stable id for the endpoint (what experiments reference).
    * ``provider_kind``: ``native`` (Avocado, OpenAI-compatible chat) | ``openai`` |
      ``azure_openai`` | ``anthropic``.
    * ``base_url``: for ``native``/``openai`` the API root incl. ``/v1`` (e.g.
      ``https://api.openai.com/v1``); for ``azure_openai`` the resource host
      (``https://res.openai.azure.com``); for ``anthropic`` the host
      (``https://api.anthropic.com``).
    * ``upstream_model``: model / Azure deployment name, verbatim (dots, underscores kept).
    * ``api_style``: ``chat_completions`` | ``responses`` | ``messages``.
    * ``api_version``: Azure only. A dated version (``2025-04-01-preview``) uses
      ``AzureOpenAI(azure_endpoint=base_url, api_version=...)`` ->
      ``POST {base_url}/openai/responses?api-version=...`` with an ``api-key`` header.
      ``None`` uses the v1 GA surface ``OpenAI(base_url=f"{base_url}/openai/v1/")``.
    * ``credential``: the secret itself (resolved by the caller, e.g. from an env var); a
      plain ``str`` is wrapped in :class:`Secret`.
    * prices in USD per million tokens: ``price_input_per_mtok`` (uncached input),
      ``price_cached_input_per_mtok`` (cache reads; ``None`` -> input price),
      ``price_cache_write_per_mtok`` (cache writes with the default 5-minute TTL; ``None`` ->
      input price), ``price_cache_write_1h_per_mtok`` (Anthropic cache writes with a 1-hour TTL;
      ``None`` -> the 5-minute write price),
      ``price_output_per_mtok`` (output incl. reasoning tokens).
    * ``timeout_s``: total request timeout in seconds (passed to the SDK).
    * ``capabilities``: e.g. ``{"tools", "streaming", "reasoning", "structured_output",
      "json_mode"}``; ``reasoning`` turns on encrypted-reasoning round-tripping / thinking; the
      output contracts need theirs (:func:`routing.providers.contracts.contract_needs`).
    """

    public_id: str
    provider_kind: str
    base_url: str
    upstream_model: str
    api_style: str
    credential: Secret
    api_version: str | None = None
    price_input_per_mtok: Decimal = Decimal(0)
    price_cached_input_per_mtok: Decimal | None = None
    price_cache_write_per_mtok: Decimal | None = None
    price_output_per_mtok: Decimal = Decimal(0)
    price_cache_write_1h_per_mtok: Decimal | None = None
    timeout_s: float = 60.0
    capabilities: frozenset[str] = frozenset({"tools", "streaming"})

    def __post_init__(self) -> None:
        if self.provider_kind not in PROVIDER_KINDS:
            raise ValueError(f"provider_kind must be one of {sorted(PROVIDER_KINDS)}")
        if self.api_style not in API_STYLES:
            raise ValueError(f"api_style must be one of {sorted(API_STYLES)}")
        if not isinstance(self.credential, Secret):
            object.__setattr__(self, "credential", Secret(self.credential))
        for name in (
            "price_input_per_mtok",
            "price_cached_input_per_mtok",
            "price_cache_write_per_mtok",
            "price_cache_write_1h_per_mtok",
            "price_output_per_mtok",
        ):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Decimal):
                object.__setattr__(self, name, Decimal(str(value)))
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))

    @property
    def fingerprint(self) -> str:
        """Identity of endpoint + credential (SHA-256 prefix; reveals nothing about the key).

        Reasoning state produced by one fingerprint is never forwarded to another.
        """
        ident = json.dumps(
            [
                self.provider_kind,
                self.api_style,
                self.base_url.rstrip("/"),
                self.upstream_model,
                self.api_version,
                self.credential.fingerprint,
            ]
        )
        return hashlib.sha256(ident.encode()).hexdigest()[:24]

    def has(self, capability: str) -> bool:
        return capability in self.capabilities
