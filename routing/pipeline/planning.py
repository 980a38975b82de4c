"""Routing step 1, plan: which endpoints may serve a job, in which order, with which overrides.

* :func:`decide` — the pure assignment engine on the cached configuration snapshot, with the
  unit's durable sticky assignments (one indexed query);
* :func:`candidate_chain` — assigned variant, the experiment's control, the platform default;
* :func:`job_plan` — both for a job, or the one pinned endpoint when the caller named a model;
* :func:`build_request` — the normalised provider request from a job's stored messages and tools;
* :func:`unhonoured_contract` — whether any candidate can honour the caller's output contracts.

Nothing here calls a provider or writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from muse_experiments.experiments.assignment.engine import route
from muse_experiments.experiments.assignment.specs import Decision
from muse_experiments.experiments.selectors import assignment_snapshot, assignment_state, sticky_variants
from routing.guards.killswitch import KillState, kill_state
from routing.models import CompletionJob, RoutingReason
from routing.providers.contracts import OutputFormat, ToolChoice, contract_needs
from routing.providers.types import CompletionRequest, ContentPart, Message, ToolCall, ToolSpec
from routing.reasoning_store import OwnedSession, session_owner
from routing.selectors import Catalogue, EndpointInfo, catalogue

#: Aliases a drop-in client may send as ``model``: the experiments decide the endpoint.
ROUTING_ALIASES = frozenset({"muse-default"})

OVERRIDE_FIELDS = (
    "reasoning_effort",
    "temperature",
    "max_output_tokens",
    "allowed_tools",
    "system_prompt_version",
)


@dataclass(frozen=True)
class Candidate:
    """An endpoint to try, why it is in the chain, and the variant it stands for.

    ``role``: ``assigned`` | ``control`` | ``default``. ``experiment_key`` / ``variant_key`` /
    ``is_control`` name the experiment variant this candidate serves (``None`` for the platform
    default), so the kill switch can be checked per variant at attempt time. ``overrides`` are that
    variant's request overrides (see :data:`OVERRIDE_FIELDS`).
    """

    endpoint: EndpointInfo
    role: str
    experiment_key: str | None = None
    variant_key: str | None = None
    is_control: bool = False
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def request_for(self, base: CompletionRequest) -> CompletionRequest:
        """``base`` (built without variant overrides) with this candidate's overrides applied."""
        changes = {k: self.overrides[k] for k in OVERRIDE_FIELDS if k in self.overrides}
        return dataclasses.replace(base, **changes) if changes else base


def is_anonymous(job: CompletionJob) -> bool:
    """The caller named neither a session nor a user, so its unit id was made fresh for this call
    (``request["anonymous"]``, set by the drop-ins): the unit has no history, and no later call
    can continue its session."""
    return bool(job.request.get("anonymous"))


def state_session(job: CompletionJob) -> OwnedSession | None:
    """The session whose server-side state (encrypted reasoning, :mod:`routing.reasoning_store`)
    the job's upstream calls read and keep: the job's session id under the job's owner (its API
    key, or the keyless source: :func:`~routing.reasoning_store.session_owner`), so a key never
    continues another key's session; ``None`` for an anonymous call (nothing can continue it, so
    nothing is read or kept)."""
    if is_anonymous(job) or not job.session_id:
        return None
    return OwnedSession(owner=session_owner(api_key_id=job.api_key_id), session_id=job.session_id)


def decide(job: CompletionJob) -> Decision:
    """Assignment for a job's unit (pure engine + sticky lookup). No provider is called.

    The sticky lookup covers only the experiments whose sticky entries can change a decision
    (:attr:`~muse_experiments.experiments.selectors.AssignmentState.sticky_experiment_ids`: a phase change
    since the seed run began), and none for an anonymous call (:func:`is_anonymous`): a unit id
    made for this call has no exposures yet."""
    state = assignment_state()
    snapshot = state.snapshot
    attributes = {
        **job.attributes,
        "subagent": job.subagent,
        "session_id": job.session_id,
        "user_id": job.user_id,
    }
    sticky = None
    if state.sticky_experiment_ids and not is_anonymous(job):
        sticky = (
            sticky_variants(
                experiment_ids=state.sticky_experiment_ids,
                session_id=job.session_id,
                user_id=job.user_id,
            )
            or None
        )
    return route(
        snapshot, session_id=job.session_id, user_id=job.user_id, attributes=attributes, sticky=sticky
    )


def candidate_chain(decision: Decision, cat: Catalogue, kills: KillState | None = None) -> list[Candidate]:
    """Assigned variant, then the experiment's control, then the platform default.

    Candidates are deduplicated by endpoint, except that a candidate whose experiment variant is
    killed (``kills``, default :func:`kill_state`) stays in the chain — so the call record shows it
    was skipped — without hiding a later candidate on the same endpoint (a killed treatment that
    shares its endpoint with control must still reach control, with control's overrides).
    Unknown endpoint ids are dropped. The experiment-kill rule: every variant but the control is
    killed, so the experiment's traffic is served by its control.
    """
    kills = kills if kills is not None else kill_state()
    snapshot = assignment_snapshot()
    exp = None
    if decision.experiment_id is not None:
        exp = next((e for e in snapshot.experiments if e.id == decision.experiment_id), None)
    assigned_spec = (
        next((v for v in exp.variants if v.key == decision.variant_key), None) if exp is not None else None
    )
    control = next((v for v in exp.variants if v.is_control), None) if exp is not None else None
    exp_key = decision.experiment_key if exp is not None else None
    entries: list[tuple[str | None, str, str | None, bool, Mapping[str, Any]]] = [
        (
            decision.endpoint_id,
            "assigned",
            decision.variant_key if exp is not None else None,
            bool(assigned_spec and assigned_spec.is_control),
            dict(decision.overrides or {}),
        )
    ]
    if control is not None:
        entries.append((control.endpoint_id, "control", control.key, True, dict(control.overrides or {})))
    entries.append((cat.default_id, "default", None, False, {}))
    seen: set[str] = set()
    chain = []
    for public_id, role, variant_key, is_control, overrides in entries:
        info = cat.get(public_id)
        if info is None or info.public_id in seen:
            continue
        candidate = Candidate(
            info,
            role,
            experiment_key=exp_key if variant_key is not None else None,
            variant_key=variant_key,
            is_control=is_control,
            overrides=overrides,
        )
        if not candidate_kill_reason(candidate, kills):
            seen.add(info.public_id)
        chain.append(candidate)
    return chain


def candidate_kill_reason(candidate: Candidate, kills: KillState) -> str | None:
    """``experiment_killed`` / ``variant_killed`` when this candidate's experiment variant must not
    serve (an experiment kill leaves its control serving), else ``None``."""
    if candidate.experiment_key is None:
        return None
    if candidate.experiment_key in kills.experiments and not candidate.is_control:
        return RoutingReason.EXPERIMENT_KILLED
    if (candidate.experiment_key, candidate.variant_key or "") in kills.variants:
        return RoutingReason.VARIANT_KILLED
    return None


def build_request(job: CompletionJob, overrides: Mapping[str, Any]) -> CompletionRequest:
    """The normalised request from a job's stored messages, tools and output contracts
    (``output_format``, ``tool_choice``, ``parallel_tool_calls``, stored by the drop-ins when the
    caller sent them) plus ``overrides``.

    The router builds the base request with ``overrides={}`` and lets each :class:`Candidate`
    apply its own variant's overrides (:meth:`Candidate.request_for`)."""
    return stored_request(job.request, overrides)


def stored_request(stored: Mapping[str, Any], overrides: Mapping[str, Any]) -> CompletionRequest:
    """:func:`build_request` from a job's stored request (``job.request``: messages, tools, output
    contracts) rather than the job; shadow calls (:mod:`routing.shadow.run`) rebuild theirs so."""
    messages = tuple(
        Message(
            role=m["role"],
            content=m.get("content", ""),
            tool_calls=tuple(
                ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"])
                for c in m.get("tool_calls", ())
            ),
            tool_call_id=m.get("tool_call_id"),
            parts=tuple(ContentPart(p["text"], p.get("cache_control")) for p in m.get("parts", ())),
        )
        for m in stored["messages"]
    )
    tools = tuple(
        ToolSpec(
            name=t["name"],
            description=t.get("description", ""),
            parameters=t.get("parameters") or {"type": "object", "properties": {}},
            cache_control=t.get("cache_control"),
        )
        for t in stored.get("tools", ())
    )
    output_format, tool_choice = _contracts(stored)
    return CompletionRequest(
        messages=messages,
        tools=tools,
        output_format=output_format,
        tool_choice=tool_choice,
        parallel_tool_calls=stored.get("parallel_tool_calls"),
        **{k: overrides[k] for k in OVERRIDE_FIELDS if k in overrides},
    )


def _contracts(stored: Mapping[str, Any]) -> tuple[OutputFormat | None, ToolChoice | None]:
    """The output format and tool choice a job's stored request holds (``None`` when absent)."""
    fmt, choice = stored.get("output_format"), stored.get("tool_choice")
    return (
        OutputFormat.from_dict(fmt) if fmt is not None else None,
        ToolChoice.from_dict(choice) if choice is not None else None,
    )


def reason_for(decision: Decision, kills: KillState | None = None) -> str:
    """The routing reason when the first candidate serves: the decision's, in RoutingReason terms.

    A kill of the unit's experiment or assigned variant (``kills``, default :func:`kill_state`)
    says so instead (``experiment_killed`` / ``variant_killed``): the unit is not enrolled --
    :func:`routing.pipeline.recording.record_call` records no exposure (so no sticky assignment) for it.
    """
    kill = (kills if kills is not None else kill_state()).enrolment_kill(
        decision.experiment_key if decision.in_experiment else None, decision.variant_key
    )
    if kill is not None:
        return kill.reason
    if decision.in_experiment:
        return (
            decision.reason
            if decision.reason in (RoutingReason.FORCED, RoutingReason.STICKY)
            else RoutingReason.ASSIGNED
        )
    return RoutingReason.HOLDOUT if decision.reason == "holdout" else RoutingReason.DEFAULT


def _pinned_plan(job: CompletionJob) -> tuple[Decision, list[Candidate]] | None:
    """The decision and one-candidate chain for a job whose caller pinned an endpoint."""
    public_id = job.request.get("model")
    if not public_id:
        return None
    info = catalogue().get(public_id)
    decision = Decision(
        experiment_key=None,
        experiment_id=None,
        phase=None,
        variant_key=None,
        variant_index=None,
        endpoint_id=public_id,
        overrides={},
        in_experiment=False,
        reason=RoutingReason.FORCED,
        trace=("pinned_by_caller",),
    )
    return decision, ([Candidate(info, "assigned")] if info else [])


def job_plan(job: CompletionJob) -> tuple[Decision, list[Candidate], str]:
    """``(decision, candidate chain, reason when the first candidate serves)`` for a job.

    A pinned job (``request["model"]`` is an endpoint id) is served by that endpoint only, with
    reason ``forced`` and no experiment; otherwise the experiments decide (:func:`decide`).
    """
    pinned = _pinned_plan(job)
    if pinned is not None:
        return pinned[0], pinned[1], RoutingReason.FORCED
    decision = decide(job)
    return decision, candidate_chain(decision, catalogue()), reason_for(decision)


def unhonoured_contract(job: CompletionJob) -> str | None:
    """The output contract of ``job.request`` (``output_format`` or ``tool_choice``) that stops
    every candidate of the job's plan (:func:`job_plan`) from serving it, else ``None``.

    A candidate can serve when its endpoint has every capability the contracts need
    (:func:`~routing.providers.types.contract_needs`). Named: the first contract no candidate
    honours, else (each is honoured by some candidate, never all by one) the first. The drop-ins
    answer 400 naming it before the job exists; when some candidate can, the attempts skip the
    others (``unsupported_contract``, :func:`routing.pipeline.attempts.attempt`)."""
    needs = contract_needs(*_contracts(job.request))
    if not needs:
        return None
    _, chain, _ = job_plan(job)
    if any(set(needs.values()) <= c.endpoint.capabilities for c in chain):
        return None
    unmet = (n for n, cap in needs.items() if not any(cap in c.endpoint.capabilities for c in chain))
    return next(unmet, next(iter(needs)))
