"""One shadow call: the candidate answers a primary call's request, a judge may compare the two,
and the pair is recorded. Runs on the ``shadow`` queue (:mod:`.tasks`), never on a caller's path.

Isolation, in order:

* the test must still be running (an in-process snapshot of the running tests, rebuilt when the
  configuration version moves, as the offer's: no query per call; a test stopped less than
  ``CONFIG_REFRESH_INTERVAL_S`` ago may still make a call), and the job not yet taken for the test
  (a Redis ``SET NX`` per test and job, kept two days, backed by the pair's unique constraint: a
  second delivery does nothing);
* an external candidate needs ``allow_external``, and never gets a session of a user who opted
  out of training (dropped ``opted_out``); the same holds for an external judge (no verdict);
* the host has room: each shadow call (candidate or judge) first waits until ``SHADOW_MIN_IDLE_CPU``
  of the host's CPU is idle (:func:`~muse_experiments.infra.idle_cpu.wait_for_idle_cpu`: the primaries
  on a shared host keep their CPU), both waits together at most ``SHADOW_MAX_WAIT_S``, else it is
  dropped ``busy`` (a judge call: no verdict, counted ``judge_busy``);
* the daily budget admits the call (:func:`~routing.shadow.budget.budget_admit`, else dropped
  ``budget``); the judge's call is admitted and costed the same way;
* the call is one guarded attempt (:func:`routing.pipeline.attempts.attempt`): kill switches, circuit
  breaker, concurrency slot and credential binding apply; a killed or disabled candidate gets no
  call (dropped ``killed``). No retry, no fallback, no session state: the candidate gets the
  client's messages, tools and output contracts exactly as the primary got them before its
  variant's overrides, translated by the candidate's provider adapter, never its own earlier
  outputs (none is kept), and its tool calls are recorded, never executed;
* the answer goes to a :class:`~muse_experiments.experiments.models.ShadowPair` only (written now,
  or in the next batch: :mod:`.pairs`): never to a
  job, a transcript or the training export (the gate refuses a record marked ``shadow``); an
  external candidate's encrypted reasoning is dropped with the result object.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings

from muse_experiments.experiments.models import ShadowPair, ShadowStatus, ShadowTest
from muse_experiments.infra.config_version import VersionedSnapshot
from muse_experiments.infra.idle_cpu import wait_for_idle_cpu
from muse_experiments.infra.redis_client import redis_client
from routing.guards.credentials import CredentialUnavailable
from routing.pipeline.attempts import EndpointRefused, attempt, usage_cost_usd
from routing.pipeline.planning import Candidate, stored_request
from routing.selectors import EndpointInfo, catalogue

from ..providers.errors import ProviderError
from ..transcripts.selectors import user_opted_out
from .budget import TTL_S, budget_admit, budget_settle, dropped_count
from .judge import judge_request, parse_verdict
from .pairs import pair_save

log = logging.getLogger(__name__)


def tool_calls_agree(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two answers call the same tools: the same multiset of tool names (arguments are
    not compared: equivalent arguments are rarely equal text)."""
    return Counter(c["name"] for c in a) == Counter(c["name"] for c in b)


def _build_running() -> dict[str, ShadowTest]:
    running = ShadowTest.objects.select_related("candidate", "judge").filter(status=ShadowStatus.RUNNING)
    return {t.key: t for t in running}


#: ``{key: ShadowTest}`` of the running tests (read-only: a running test's configuration is fixed).
_running = VersionedSnapshot(_build_running)


def _take(test_key: str, job_id: str) -> bool:
    """Whether this delivery is the first for the test and job (Redis ``SET NX``, two days)."""
    return bool(redis_client().set(f"muse:shadow:{test_key}:job:{job_id}", 1, nx=True, ex=TTL_S))


def _guarded_call(
    test: ShadowTest, info: EndpointInfo, request: Any, deadline: float
) -> tuple[Any | None, Decimal, str, bool]:
    """One budgeted, guarded attempt. ``(result or None, cost USD, error, called)``; ``called``
    False when nothing was sent: the host stayed busy (``busy``), the test was stopped meanwhile
    (``stopped``), the budget (``budget``) or a guard refused it (``killed`` for a kill switch or
    a disabled endpoint, else the guard's outcome: ``concurrency_limited``, ``circuit_open``,
    ``cooling``, ``unsupported_contract``), or no credential may go to the endpoint (its kind)."""
    max_wait_s = max(0.0, deadline - time.monotonic())  # the shadow call's waits share one limit
    if not wait_for_idle_cpu(settings.SHADOW_MIN_IDLE_CPU, max_wait_s=max_wait_s):
        return None, Decimal(0), "busy", False
    if test.key not in _running.get():  # stopped while the call waited for the host
        return None, Decimal(0), "stopped", False
    if not budget_admit(test_key=test.key, max_usd_per_day=test.max_usd_per_day):
        return None, Decimal(0), "budget", False
    cost = Decimal(0)
    try:
        result = attempt(Candidate(info, "shadow"), request)
        cost = result.cost_usd
        return result, cost, "", True
    except EndpointRefused as exc:
        return None, cost, "killed" if exc.outcome in ("killed", "disabled") else exc.outcome, False
    except CredentialUnavailable as exc:
        return None, cost, exc.kind, False
    except ProviderError as exc:
        cost = usage_cost_usd(info, exc.usage)
        return None, cost, type(exc).__name__, True
    finally:
        budget_settle(test_key=test.key, cost_usd=cost)


def shadow_run(
    *,
    test_key: str,
    job_id: str,
    session_id: str,
    user_id: str,
    request: Mapping[str, Any],
    primary: Mapping[str, Any],
) -> str:
    """Make the shadow call (and judge call) for one primary call; returns what happened:
    ``recorded`` | ``candidate_failed`` | ``not_running`` (no such test) | ``duplicate`` |
    ``dropped:<reason>`` (``stopped``, ``budget``, ``killed``, ``opted_out``, ...).

    ``request``: the primary job's stored request; ``primary``:
    :func:`routing.shadow.sampling.primary_summary` (of its written records). Safe to run twice (one pair per job)."""
    test = _running.get().get(test_key)
    if test is None:
        if ShadowTest.objects.filter(key=test_key).exists():
            return _drop(test_key, "stopped")  # offered while running, stopped before its turn
        return "not_running"
    if not _take(test_key, job_id):
        return "duplicate"
    cat = catalogue()
    info = cat.get(test.candidate.public_id)
    if info is None:
        return _drop(test_key, "unknown_model")
    if info.is_external and not test.allow_external:
        return _drop(test_key, "external_disallowed")
    # the opt-out matters only to an external candidate or judge: no query for in-house ones
    judge_info = cat.get(test.judge.public_id) if test.judge_id else None
    opted_out = (info.is_external or bool(judge_info and judge_info.is_external)) and user_opted_out(user_id)
    if info.is_external and opted_out:
        return _drop(test_key, "opted_out")
    deadline = time.monotonic() + settings.SHADOW_MAX_WAIT_S  # for the candidate's and the judge's waits
    result, cost, error, called = _guarded_call(test, info, stored_request(request, {}), deadline)
    if not called:
        return _drop(test_key, error)
    pair = ShadowPair(
        test=test,
        job_id=job_id,
        session_id=session_id,
        user_id=user_id,
        primary_model=primary["model"],
        primary_latency_ms=primary["latency_ms"],
        primary_cost_usd=Decimal(primary["cost_usd"]),
        primary_output_tokens=primary["output_tokens"],
        primary_tool_calls=primary["tool_calls"],
        candidate_model=info.public_id,
        candidate_cost_usd=cost,
    )
    if result is None:
        pair.candidate_ok, pair.error = False, error[:300]
    else:
        candidate = {
            "text": result.text,
            "tool_calls": [{"name": c.name, "arguments": dict(c.arguments)} for c in result.tool_calls],
        }
        pair.candidate_latency_ms = result.latency_ms
        pair.candidate_output_tokens = result.usage.output_tokens
        pair.candidate_tool_calls = candidate["tool_calls"]
        pair.candidate_text = result.text
        del result  # its reasoning state (an external model's encrypted reasoning) goes with it
        if judge_info is not None:
            _judge(test, pair, request, primary, candidate, judge_info, opted_out, deadline)
    if not pair_save(pair):
        return "duplicate"
    return "recorded" if pair.candidate_ok else "candidate_failed"


def _judge(
    test, pair, request, primary, candidate, info: EndpointInfo, opted_out: bool, deadline: float
) -> None:
    if info.is_external and (opted_out or not test.allow_external):
        return
    candidate_first = secrets.randbelow(2) == 1
    req = judge_request(
        messages=request["messages"],
        primary=primary,
        candidate=candidate,
        candidate_first=candidate_first,
        instructions=test.judge_instructions,
    )
    result, cost, error, called = _guarded_call(test, info, req, deadline)
    if not called:  # no verdict; counted apart from the calls the test dropped
        dropped_count(test.key, f"judge_{error}")
        return
    pair.judge_model = info.public_id
    pair.judge_cost_usd = cost
    pair.judge_candidate_first = candidate_first
    # a failed judge call gives no verdict (blank); an answer that is not a verdict is ``invalid``
    pair.judge_verdict = parse_verdict(result.text, candidate_first=candidate_first) if result else ""


def _drop(test_key: str, reason: str) -> str:
    dropped_count(test_key, reason)
    return f"dropped:{reason}"


def shadow_training_record(pair: ShadowPair, request: Mapping[str, Any]) -> dict[str, Any]:
    """A shadow answer in the training export's record shape, marked ``"shadow": true``: what the
    ingestion gate refuses (:attr:`routing.transcripts.gate.RejectReason.SHADOW_CALL`) should one
    ever be offered to it. Shadow answers are kept in :class:`ShadowPair` only and no export reads
    them; this is the shape a copy would take."""
    return {
        "record_id": f"shadow-{pair.test_id}-{pair.job_id}",
        "session_id": pair.session_id,
        "user_id": pair.user_id,
        "provenance": "native",
        "provider_kind": "native",
        "shadow": True,
        "served_model": pair.candidate_model,
        "input": {"messages": list(request.get("messages", ())), "tools": list(request.get("tools", ()))},
        "output": {"text": pair.candidate_text, "tool_calls": pair.candidate_tool_calls},
    }
