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
identity on our bodies (``tests/routing/providers/test_clients.py`` checks it against the
installed SDK) and costs CPU on every call (``bench/bench_sdk_post.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import openai

from routing.providers.base import client_cache_key, sdk_clients
from routing.providers.contracts import OutputFormat
from routing.providers.transport import watched_http_client
from routing.providers.types import CompletionRequest, EndpointConfig

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


def contract_kwargs(request: CompletionRequest, *, style: str, has_tools: bool) -> dict[str, Any]:
    """The caller's output contracts as Chat Completions (``style="chat"``) or Responses
    (``style="responses"``) parameters.

    * ``output_format`` → ``response_format`` (chat: ``{"type": "json_schema", "json_schema":
      {name, schema, strict, description}}``) or ``text.format`` (Responses: the same fields flat);
      ``json_object`` as ``{"type": "json_object"}`` on both;
    * ``tool_choice`` → ``"none"`` / ``"required"`` / the named function (chat ``{"type":
      "function", "function": {"name"}}``, Responses ``{"type": "function", "name"}``); ``auto``
      is the default and is not sent; ``allowed`` is applied to the tools sent
      (:meth:`CompletionRequest.effective_tools`);
    * ``parallel_tool_calls: false`` → the same.

    The tool parameters are sent only with tools (``has_tools``): OpenAI refuses them otherwise,
    and without tools there is no call to force or to parallelise.
    Sources: https://platform.openai.com/docs/api-reference/chat/create ,
    https://platform.openai.com/docs/api-reference/responses/create
    """
    kwargs: dict[str, Any] = {}
    fmt = request.output_format
    if fmt is not None:
        wire: dict[str, Any] = {"type": fmt.type}
        if fmt.type == "json_schema":
            spec: dict[str, Any] = {"name": fmt.name, "schema": dict(fmt.schema or {})}
            if fmt.description:
                spec["description"] = fmt.description
            strict = openai_strict(fmt)
            if strict is not None:
                spec["strict"] = strict
            wire = {"type": "json_schema", "json_schema": spec} if style == "chat" else {**wire, **spec}
        if style == "chat":
            kwargs["response_format"] = wire
        else:
            kwargs["text"] = {"format": wire}
    choice = request.tool_choice
    if has_tools and choice is not None and choice.mode != "auto":
        if choice.name is None:
            kwargs["tool_choice"] = choice.mode
        elif style == "chat":
            kwargs["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            kwargs["tool_choice"] = {"type": "function", "name": choice.name}
    if has_tools and request.parallel_tool_calls is False:
        kwargs["parallel_tool_calls"] = False
    return kwargs


def openai_strict(fmt: OutputFormat) -> bool | None:
    """The ``strict`` flag sent with a JSON Schema: the caller's own; for a caller whose API has
    none (Anthropic, whose structured outputs are always enforced) ``True`` when the schema meets
    OpenAI's strict-mode rules (:func:`strict_compatible`), else ``None`` (not sent: OpenAI then
    follows the schema without the guarantee, rather than refusing it)."""
    if fmt.strict is not None:
        return fmt.strict
    return True if strict_compatible(fmt.schema or {}) else None


def strict_compatible(schema: Any) -> bool:
    """Whether every object schema in ``schema`` (a JSON Schema) lists all its ``properties`` in
    ``required`` and sets ``additionalProperties: false``: OpenAI's rules for ``strict: true``
    (https://platform.openai.com/docs/guides/structured-outputs#supported-schemas)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, Mapping):
            continue
        properties = node.get("properties")
        if node.get("type") == "object" or isinstance(properties, Mapping):
            props = properties if isinstance(properties, Mapping) else {}
            if node.get("additionalProperties") is not False or set(node.get("required") or ()) != set(props):
                return False
        stack.extend(v for v in node.values() if isinstance(v, Mapping | list))
    return True
