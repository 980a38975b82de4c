"""Drop-in endpoints for the official SDKs: point ``base_url`` at the platform and change nothing else.

* ``POST /v1/chat/completions`` and ``POST /v1/responses`` — OpenAI shapes (:mod:`.openai_api`);
* ``POST /v1/messages`` — Anthropic shape (:mod:`.anthropic_api`).

Shared rules (auth, model aliases, session/user ids, errors): :mod:`.common`.
"""
