"""Simulated LLM upstreams speaking the real provider wire formats (stdlib only): a development
and test tool, left out of the shipped image (``.dockerignore``) and imported by no product module
but the demo command.

One :class:`FakeUpstreams` HTTP server impersonates, at the same time:

* OpenAI-compatible Chat Completions -- ``POST /v1/chat/completions`` (OpenAI and our in-house
  "Avocado" native inference service), plus the Azure deployments form
  ``POST /openai/deployments/{deployment}/chat/completions?api-version=...``.
  Source: https://platform.openai.com/docs/api-reference/chat
* OpenAI Responses API -- ``POST /v1/responses``; Azure OpenAI Responses with a dated
  api-version -- ``POST /openai/responses?api-version=2025-04-01-preview`` (what
  ``AzureOpenAI(azure_endpoint=host, api_version=...).responses.create`` sends, with the
  ``api-key`` header) -- and the Azure v1 GA base URL ``POST /openai/v1/responses`` (what
  ``OpenAI(base_url=f"{host}/openai/v1/")`` sends, with ``Authorization: Bearer``).
  Source: https://platform.openai.com/docs/api-reference/responses and
  https://learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle
* Anthropic Messages -- ``POST /v1/messages`` (key in ``x-api-key`` or -- as anthropic>=2 sends
  it -- ``Authorization: Bearer``; ``anthropic-version`` header required).
  Source: https://docs.anthropic.com/en/api/messages and .../messages-streaming

Non-streaming bodies are sent with ``Content-Length``; streams (SSE) use HTTP/1.1 chunked
transfer encoding, so SDK connection pools can keep connections alive.

Output contracts are refused as the real APIs refuse them (:func:`routing.simulated.contracts.contract_problem`: e.g. a JSON
Schema format without its name, a forced tool call with Anthropic thinking) and honoured: the
text follows the JSON Schema (``response_format`` / ``text.format`` / ``output_config.format``)
or is a JSON object (JSON mode); a forced tool choice makes the call whatever the scenario says
(a named tool: that one), ``none`` makes none, and without parallel calls (``parallel_tool_calls:
false``, ``disable_parallel_tool_use``) at most one is made. Responses objects echo ``text``,
``tool_choice`` and ``parallel_tool_calls``. Conversations the real APIs refuse (an empty
Anthropic text block, a null assistant content without tool calls …) get their 400 in the API's
own error shape (:func:`routing.simulated.rules.conversation_problem`).

Behaviour is configured per model with a :class:`Scenario` (at construction, with
:meth:`FakeUpstreams.set_scenario`, or at runtime over HTTP)::

    POST /_fake/scenarios   {"model": "gpt-x", "failure": "rate_limit", "fail_first_n": 2}
                            or {"scenarios": {"gpt-x": {...}, "claude-y": {...}}}
    GET  /_fake/scenarios   -> {"scenarios": {model: {...}}, "default": {...}}
    GET  /_fake/calls?model=...&path=...   -> {"calls": [recorded request, ...]}
    POST /_fake/reset       -> clears recorded calls and attempt counters (scenarios kept;
                               body {"scenarios": true} also clears scenarios)
    GET  /_fake/health      -> {"ok": true}

Run for a demo::

    python -m routing.simulated --port 8900 [--scenarios scenarios.json]

Default credentials (override with ``api_keys=`` or ``--keys-json``): see :data:`DEFAULT_API_KEYS`.

Modules: :mod:`~routing.simulated.scenario` (the knobs), :mod:`~routing.simulated.server` (state and
thread), :mod:`~routing.simulated.handler` (HTTP, control API, refusals),
:mod:`~routing.simulated.rules`, :mod:`~routing.simulated.contracts` and
:mod:`~routing.simulated.reasoning` (what the real APIs refuse), :mod:`~routing.simulated.plan`
(what an answer holds), :mod:`~routing.simulated.openai` and :mod:`~routing.simulated.anthropic`
(wire formats; the Avocado native service speaks OpenAI Chat Completions),
:mod:`~routing.simulated.judge` (a shadow test's judge), :mod:`~routing.simulated.errors`.
"""

from .judge import JUDGE_MARKER, judge_verdict
from .scenario import DEFAULT_API_KEYS, DEFAULT_MODELS, FAILURES, TOOL_CALL_MODES, Scenario
from .server import FakeUpstreams

__all__ = [
    "DEFAULT_API_KEYS",
    "DEFAULT_MODELS",
    "FAILURES",
    "JUDGE_MARKER",
    "TOOL_CALL_MODES",
    "FakeUpstreams",
    "Scenario",
    "judge_verdict",
]
