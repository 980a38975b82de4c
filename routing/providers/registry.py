"""Resolve provider client classes from dotted paths (the DRF ``APISettings`` way).

Keys are ``"<provider_kind>:<api_style>"`` (most specific) or ``"<provider_kind>"``;
values are dotted paths to :class:`~routing.providers.base.ProviderClient` subclasses.
Pass your own mapping (e.g. from Django settings later) to :class:`ProviderRegistry`, or
``overrides=`` to :func:`get_client`; entries override :data:`DEFAULT_PROVIDER_CLIENTS`.

    >>> get_client("anthropic")                      # -> AnthropicMessagesClient
    >>> get_client("azure_openai", "responses")      # -> OpenAIResponsesClient
    >>> client_for(endpoint).complete(endpoint, request)
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping

from routing.providers.base import ProviderClient
from routing.providers.types import EndpointConfig

DEFAULT_PROVIDER_CLIENTS: dict[str, str] = {
    "native": "routing.providers.openai_chat.OpenAIChatClient",
    "native:chat_completions": "routing.providers.openai_chat.OpenAIChatClient",
    "openai": "routing.providers.openai_chat.OpenAIChatClient",
    "openai:chat_completions": "routing.providers.openai_chat.OpenAIChatClient",
    "openai:responses": "routing.providers.openai_responses.OpenAIResponsesClient",
    "azure_openai": "routing.providers.openai_responses.OpenAIResponsesClient",
    "azure_openai:responses": "routing.providers.openai_responses.OpenAIResponsesClient",
    "azure_openai:chat_completions": "routing.providers.openai_chat.OpenAIChatClient",
    "anthropic": "routing.providers.anthropic_messages.AnthropicMessagesClient",
    "anthropic:messages": "routing.providers.anthropic_messages.AnthropicMessagesClient",
}


def import_from_string(path: str) -> type:
    """Import ``"package.module.Attr"``; raises ``ImportError`` with the path on failure."""
    module_path, _, attr = path.rpartition(".")
    if not module_path:
        raise ImportError(f"{path!r} is not a dotted path")
    try:
        module = importlib.import_module(module_path)
        return getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"Could not import provider client {path!r}: {exc}") from exc


class ProviderRegistry:
    """Mapping of kind[:api_style] -> client class (lazy import, cached instances)."""

    def __init__(self, mapping: Mapping[str, str] | None = None) -> None:
        self.mapping = {**DEFAULT_PROVIDER_CLIENTS, **(mapping or {})}
        self._classes: dict[str, type[ProviderClient]] = {}
        self._instances: dict[type[ProviderClient], ProviderClient] = {}
        self._lock = threading.Lock()

    def get_client(self, kind: str, api_style: str | None = None) -> type[ProviderClient]:
        """Client class for ``kind`` (and ``api_style``). Raises ``KeyError`` if unmapped."""
        key = f"{kind}:{api_style}" if api_style and f"{kind}:{api_style}" in self.mapping else kind
        if key not in self.mapping:
            raise KeyError(f"no provider client configured for {kind!r} (api_style={api_style!r})")
        with self._lock:
            cls = self._classes.get(key)
            if cls is None:
                cls = import_from_string(self.mapping[key])
                if not (isinstance(cls, type) and issubclass(cls, ProviderClient)):
                    raise TypeError(f"{self.mapping[key]} is not a ProviderClient subclass")
                self._classes[key] = cls
            return cls

    def client_for(self, endpoint: EndpointConfig) -> ProviderClient:
        """Shared client instance able to serve ``endpoint``."""
        cls = self.get_client(endpoint.provider_kind, endpoint.api_style)
        with self._lock:
            inst = self._instances.get(cls)
            if inst is None:
                inst = self._instances[cls] = cls()
            return inst


default_registry = ProviderRegistry()


def get_client(
    kind: str, api_style: str | None = None, *, overrides: Mapping[str, str] | None = None
) -> type[ProviderClient]:
    """Client class for a provider kind (optionally per api_style / with overrides)."""
    registry = ProviderRegistry(overrides) if overrides else default_registry
    return registry.get_client(kind, api_style)


def client_for(endpoint: EndpointConfig) -> ProviderClient:
    return default_registry.client_for(endpoint)
