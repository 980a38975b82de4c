"""Reads of the model catalogue, cached in process like the assignment snapshot."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property

from django.db.models import Q

from muse_experiments.experiments.selectors import experiment_by_key
from muse_experiments.infra.config_version import VersionedSnapshot
from routing.guards.killswitch import KillInForce
from routing.messages import job_from_row
from routing.models import CompletionJob, JobStatus, KillScope, KillSwitch, ModelEndpoint, RoutingReason
from routing.providers.contracts import JSON_MODE, STRUCTURED_OUTPUT, TOOLS
from routing.state import claims
from routing.state.handoff import apply_final, final_state

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EndpointInfo:
    """A catalogue entry as routing needs it. Prices in USD per million tokens; timeout in s;
    ``max_concurrency``: most calls in flight across all processes."""

    public_id: str
    version_label: str
    provider_key: str
    provider_kind: str
    base_url: str
    credential_env: str
    api_version: str
    upstream_model: str
    api_style: str
    price_input: Decimal
    price_cached_input: Decimal
    price_cache_write: Decimal  # 5-minute TTL
    price_output: Decimal
    timeout_s: float
    max_concurrency: int
    supports_tools: bool
    supports_reasoning: bool
    supports_streaming: bool
    enabled: bool
    is_platform_default: bool
    supports_structured_output: bool = False
    supports_json_mode: bool = False
    price_cache_write_1h: Decimal | None = None  # 1-hour TTL (Anthropic)

    @property
    def is_external(self) -> bool:
        return self.provider_kind != "native"

    @cached_property
    def capabilities(self) -> frozenset[str]:
        """The capability names of :class:`routing.providers.types.EndpointConfig`: ``tools``,
        ``reasoning``, ``streaming``, ``structured_output``, ``json_mode`` (never on a Messages
        endpoint: Anthropic has no JSON mode)."""
        flags = (
            (TOOLS, self.supports_tools),
            ("reasoning", self.supports_reasoning),
            ("streaming", self.supports_streaming),
            (STRUCTURED_OUTPUT, self.supports_structured_output),
            (JSON_MODE, self.supports_json_mode and self.api_style != "messages"),
        )
        return frozenset(name for name, on in flags if on)


@dataclass(frozen=True)
class Catalogue:
    endpoints: Mapping[str, EndpointInfo]
    default_id: str | None

    def get(self, public_id: str | None) -> EndpointInfo | None:
        return self.endpoints.get(public_id) if public_id else None


def build_catalogue() -> Catalogue:
    endpoints = {}
    default_id = None
    for e in ModelEndpoint.objects.select_related("provider"):
        info = EndpointInfo(
            public_id=e.public_id,
            version_label=e.version_label,
            provider_key=e.provider.key,
            provider_kind=e.provider.kind,
            base_url=e.provider.base_url,
            credential_env=e.provider.credential_env,
            api_version=e.provider.api_version,
            upstream_model=e.upstream_model,
            api_style=e.api_style,
            price_input=e.price_input_per_mtok,
            price_cached_input=e.price_cached_input_per_mtok,
            price_cache_write=e.price_cache_write_per_mtok,
            price_cache_write_1h=e.price_cache_write_1h_per_mtok,
            price_output=e.price_output_per_mtok,
            timeout_s=e.timeout_s,
            max_concurrency=e.max_concurrency,
            supports_tools=e.supports_tools,
            supports_reasoning=e.supports_reasoning,
            supports_streaming=e.supports_streaming,
            enabled=e.enabled and e.provider.enabled,
            is_platform_default=e.is_platform_default,
            supports_structured_output=e.supports_structured_output,
            supports_json_mode=e.supports_json_mode,
        )
        endpoints[e.public_id] = info
        if e.is_platform_default:
            default_id = e.public_id
    return Catalogue(endpoints=endpoints, default_id=default_id)


_catalogue = VersionedSnapshot(build_catalogue)


def catalogue() -> Catalogue:
    """The current catalogue (no database query between configuration-version checks)."""
    return _catalogue.get()


def kill_switch_list() -> list[KillSwitch]:
    """Every kill switch (active or not), by scope then target."""
    return list(KillSwitch.objects.order_by("scope", "target"))


def experiment_kills_in_force(*, experiment_key: str) -> list[KillInForce]:
    """The kill switches that are on now and touch ``experiment_key``, oldest first, each with
    when it went on (``since``, UTC; ``None`` for switches turned on before that was recorded).

    Touching: the experiment itself (``experiment_killed``: no new enrolment, traffic to control),
    one of its variants (``variant_killed``), or what serves one of its variants -- the endpoint
    (``endpoint_killed``), its provider (``provider_killed``), all external providers
    (``external_killed``, only when a variant is external). Three queries (experiment, variants,
    switches). Unknown experiment: ``[]``. For the results page (shown with the call reasons).
    """
    experiment = experiment_by_key(experiment_key)
    if experiment is None:
        return []
    variants = [
        (v.key, v.endpoint.public_id, v.endpoint.provider.key, v.endpoint.provider.kind)
        for v in experiment.variants.select_related("endpoint__provider")
    ]
    wanted = {
        (KillScope.EXPERIMENT, experiment_key): RoutingReason.EXPERIMENT_KILLED,
        **{(KillScope.VARIANT, f"{experiment_key}/{v[0]}"): RoutingReason.VARIANT_KILLED for v in variants},
        **{(KillScope.ENDPOINT, v[1]): RoutingReason.ENDPOINT_KILLED for v in variants},
        **{(KillScope.PROVIDER, v[2]): RoutingReason.PROVIDER_KILLED for v in variants},
    }
    if any(v[3] != "native" for v in variants):
        wanted[(KillScope.ALL_EXTERNAL, "")] = RoutingReason.EXTERNAL_KILLED
    rows = KillSwitch.objects.filter(active=True).values_list("scope", "target", "active_since")
    kills = [
        KillInForce(scope, target, wanted[(scope, target)], since)
        for scope, target, since in rows
        if (scope, target) in wanted
    ]
    return sorted(kills, key=lambda k: (k.since is None, k.since or 0, k.scope, k.target))


def completion_job_current(job: CompletionJob) -> CompletionJob:
    """``job`` with its final state, including one a worker published to Redis but the records
    drainer has not written yet (:mod:`routing.state.handoff`); the job row as stored otherwise."""
    unfinished = job.status in (JobStatus.QUEUED, JobStatus.RUNNING) or (
        job.status == JobStatus.FAILED and job.error.startswith("worker_lost")
    )
    if unfinished:
        state = final_state(str(job.id))
        if state is not None:
            return apply_final(job, state)
    return job


def completion_job_unwritten(job_id, *, api_key_id: int | None = None) -> CompletionJob | None:
    """A job published or claimed in Redis whose row is not written yet (:func:`routing.state.claims.unwritten`),
    ``queued`` or ``running`` and unsaved, for ``GET /api/v1/completions/{id}`` (which adds its final state if
    published: :func:`routing.selectors.completion_job_current`); None if there is none, if
    ``api_key_id`` is given and the job is another key's, or if Redis is unavailable (the caller
    answers 404)."""
    try:
        found = claims.unwritten(str(uuid.UUID(str(job_id))))
    except (ValueError, TypeError):
        return None
    except Exception as exc:  # noqa: BLE001 - Redis down: only written jobs can be found
        log.warning("reading the claim of job %s failed (%s)", job_id, type(exc).__name__)
        return None
    if found is None:
        return None
    row, started, worker = found
    if api_key_id is not None and row.get("api_key_id") != api_key_id:
        return None
    if started is None:  # published, not claimed yet
        return job_from_row(job_id, row, status=JobStatus.QUEUED)
    return job_from_row(
        job_id, row, status=JobStatus.RUNNING, started_at=started, deliveries=1, worker=worker
    )


def session_started(*, api_key_id: int | None, session_id: str) -> bool:
    """Whether any completion job of ``session_id`` was asked for with the API key ``api_key_id``
    (``None``: without a key, i.e. by a signed-in user). One query on the indexed session id.

    A job answered moments ago whose row the records drainer has not written yet
    (:mod:`routing.worker.drainer`: a few hundred ms, seconds under load) is not seen."""
    jobs = CompletionJob.objects.filter(session_id=session_id)
    jobs = jobs.filter(api_key__isnull=True) if api_key_id is None else jobs.filter(api_key_id=api_key_id)
    return jobs.exists()


def endpoint_public_id(name: str) -> str | None:
    """The public id of the model ``name`` names: its public id, or its version label when exactly
    one model has that label (``avocado-v15`` → ``avocado/<32 hex>``); ``None`` otherwise. One query."""
    ids = list(
        ModelEndpoint.objects.filter(Q(public_id=name) | Q(version_label=name)).values_list(
            "public_id", flat=True
        )[:2]
    )
    if name in ids:
        return name
    return ids[0] if len(ids) == 1 else None
