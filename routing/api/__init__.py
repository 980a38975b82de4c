"""The HTTP APIs of routing (web process): the native completion API
(:mod:`~routing.api.native`, ``/api/v1/completions``) and the operators' kill switches
(:mod:`~routing.api.ops`, ``/api/v1/ops/kill-switches``). The OpenAI and Anthropic drop-ins are in
:mod:`routing.dropin`. They hand jobs to workers through :mod:`routing.web` and never import
:mod:`routing.worker`.
"""
