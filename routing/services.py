"""Routing services: writes to the catalogue and to completion jobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from muse_experiments import config_version

from .catalogue import EndpointSeed, ProviderSeed
from .models import CompletionJob, JobStatus, ModelEndpoint, Provider


@transaction.atomic
def catalogue_seed(
    *, providers: Sequence[ProviderSeed], endpoints: Sequence[EndpointSeed], actor: str
) -> tuple[int, int]:
    """Create or update providers and endpoints by key/public id. Returns ``(n_providers, n_endpoints)``."""
    by_key = {}
    for p in providers:
        obj, _ = Provider.objects.update_or_create(
            key=p.key,
            defaults={
                "kind": p.kind,
                "base_url": p.base_url,
                "credential_env": p.credential_env,
                "api_version": p.api_version,
            },
        )
        obj.full_clean()
        by_key[p.key] = obj
    for e in endpoints:
        pin, pcached, pwrite, pout = (Decimal(str(p)) for p in e.prices)
        if e.is_platform_default:
            ModelEndpoint.objects.filter(is_platform_default=True).exclude(public_id=e.public_id).update(
                is_platform_default=False
            )
        obj, _ = ModelEndpoint.objects.update_or_create(
            public_id=e.public_id,
            defaults={
                "version_label": e.version_label,
                "provider": by_key[e.provider],
                "upstream_model": e.upstream_model,
                "api_style": e.api_style,
                "supports_reasoning": e.supports_reasoning,
                "price_input_per_mtok": pin,
                "price_cached_input_per_mtok": pcached,
                "price_cache_write_per_mtok": pwrite,
                "price_output_per_mtok": pout,
                "is_platform_default": e.is_platform_default,
            },
        )
        obj.full_clean()
    config_version.bump()
    return len(providers), len(endpoints)


def completion_job_create(
    *,
    api_key: Any,
    session_id: str,
    user_id: str,
    subagent: str,
    attributes: Mapping[str, Any],
    request: Mapping[str, Any],
    idempotency_key: str = "",
) -> tuple[CompletionJob, bool]:
    """Create a queued job, or return the existing one for the same idempotency key.

    Returns ``(job, created)``. The caller enqueues the worker task on commit when ``created``.
    """
    if idempotency_key:
        existing = CompletionJob.objects.filter(api_key=api_key, idempotency_key=idempotency_key).first()
        if existing:
            return existing, False
    try:
        with transaction.atomic():
            job = CompletionJob.objects.create(
                api_key=api_key,
                idempotency_key=idempotency_key,
                session_id=session_id,
                user_id=user_id,
                subagent=subagent,
                attributes=dict(attributes),
                request=dict(request),
            )
    except IntegrityError:  # a concurrent request with the same idempotency key won
        return CompletionJob.objects.get(api_key=api_key, idempotency_key=idempotency_key), False
    return job, True


def completion_job_claim(*, job_id) -> CompletionJob | None:
    """Move a queued job to running, under a row lock. Returns None if another worker has it or it
    is finished, so a redelivered task never runs a job twice."""
    with transaction.atomic():
        job = CompletionJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != JobStatus.QUEUED:
            return None
        job.status = JobStatus.RUNNING
        job.started_at = timezone.now()
        job.save(update_fields=["status", "started_at"])
        return job


def completion_job_fail(*, job_id, reason: str) -> None:
    """Mark a job failed unless it already finished (Celery failure hook)."""
    CompletionJob.objects.filter(pk=job_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]).update(
        status=JobStatus.FAILED, error=reason[:2000], finished_at=timezone.now()
    )
