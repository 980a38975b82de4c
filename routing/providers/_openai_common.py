"""Construction of official OpenAI SDK clients for native / OpenAI / Azure OpenAI endpoints.

* ``native`` / ``openai``: ``OpenAI(base_url=endpoint.base_url, api_key=...)`` (Bearer auth).
* ``azure_openai`` with ``api_version``: ``AzureOpenAI(azure_endpoint=base_url,
  api_version=..., api_key=...)``. The SDK sends the key in the ``api-key`` header and builds
  ``{base_url}/openai/responses?api-version=...`` for Responses and
  ``{base_url}/openai/deployments/{model}/chat/completions?api-version=...`` for chat
  (see ``openai/lib/azure.py``: ``_deployments_endpoints``).
* ``azure_openai`` without ``api_version``: the v1 GA surface,
  ``OpenAI(base_url=f"{base_url}/openai/v1/", api_key=...)``
  (https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle).

All clients: ``max_retries=0`` (retries are the caller's job), ``timeout=endpoint.timeout_s``, and
an HTTP client whose calls can be cut off (:func:`~routing.providers.transport.watched_http_client`).
Clients are cached per (endpoint transport, credential fingerprint) in :data:`sdk_clients`: one
warm client (and connection pool) per endpoint.

Calls go through the client's ``post`` with the body as built (the SDK's documented way to send
a body as it is), with :data:`INFERENCE_OPTIONS`, the request options the SDK's own ``create``
passes. ``create`` would also walk the body through its parameter transform, which is the
identity on our bodies (``tests/routing/test_providers_clients.py`` checks it against the
installed SDK) and cost 0.96 ms (Chat Completions) and 1.6 ms (Responses, with reasoning items)
of CPU per call, measured here.
"""

from __future__ import annotations

import openai

from routing.providers.base import client_cache_key, sdk_clients
from routing.providers.transport import watched_http_client
from routing.providers.types import EndpointConfig

#: The request options of the SDK's ``chat.completions.create`` and ``responses.create``: the
#: API key as bearer auth and nothing else (a ``post`` without options would also allow the
#: admin key the client may read from ``OPENAI_ADMIN_KEY``).
INFERENCE_OPTIONS = {"security": {"bearer_auth": True}}


def openai_sdk_client(endpoint: EndpointConfig) -> openai.OpenAI:
    """Cached ``openai.OpenAI`` / ``openai.AzureOpenAI`` for ``endpoint``."""

    def factory() -> openai.OpenAI:
        key = endpoint.credential.reveal()
        base = endpoint.base_url.rstrip("/")
        if endpoint.provider_kind == "azure_openai":
            if endpoint.api_version:
                return openai.AzureOpenAI(
                    azure_endpoint=base,
                    api_key=key,
                    api_version=endpoint.api_version,
                    max_retries=0,
                    timeout=endpoint.timeout_s,
                    http_client=watched_http_client(openai),
                )
            if not base.endswith("/openai/v1"):
                base = f"{base}/openai/v1"
            base = f"{base}/"
        return openai.OpenAI(
            base_url=base,
            api_key=key,
            max_retries=0,
            timeout=endpoint.timeout_s,
            http_client=watched_http_client(openai),
        )

    return sdk_clients.get(client_cache_key("openai-sdk", endpoint), factory)
