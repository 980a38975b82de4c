"""Drop-in endpoints for the official SDKs: point ``base_url`` at the platform and change nothing else.

* ``POST /v1/chat/completions`` and ``POST /v1/responses`` — OpenAI shapes;
* ``POST /v1/messages`` — Anthropic shape.

A request goes through, one module per step: :mod:`.views` → the declared request shape
(:mod:`.shapes`; :mod:`.openai_shapes`, :mod:`.anthropic_shapes`) → :mod:`.identity` and
:mod:`.submission` (model, output contracts, the job) → the vendor's answer or stream
(:mod:`.openai_framing`, :mod:`.anthropic_framing`, :mod:`.streams`); errors in the vendor's
shape (:mod:`.errors`).
"""
