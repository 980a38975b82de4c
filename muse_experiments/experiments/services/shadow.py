"""Shadow tests' lifecycle: create (draft), start, stop. Field errors raise ``ValidationError``
with a ``{field: message}`` dict (the REST API answers them as 400s, the admin as form errors).

Lifecycle: ``draft ──start──▶ running ──stop──▶ stopped ──start──▶ running``. Starting and
stopping bump the configuration version, so every routing process picks the change up within
``CONFIG_REFRESH_INTERVAL_S``.

An experiment-variant source must be able to get traffic: a test starts only while its variant
exists and its experiment is draft, running or paused (:data:`SOURCE_STARTABLE_STATUSES`);
stopping or archiving the experiment stops its running tests (:func:`shadow_tests_stop_for_source`);
the variant of a test that is not stopped cannot be deleted (:func:`shadow_tests_using_variants`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from muse_experiments.infra import config_version

from ..models import Experiment, ExperimentStatus, ShadowStatus, ShadowTest
from ..selectors import model_by_id_or_label
from .audit import audit_record
from .rules import key_taken_as_field_error

#: The provider kind of the in-house models; any other is external.
NATIVE_KIND = "native"

#: The source experiment's states a shadow test may start in: running or paused (it may resume),
#: or draft (it may start later; the test mirrors its variant's calls from its first one). A
#: stopped or archived experiment never serves a call again.
SOURCE_STARTABLE_STATUSES = (ExperimentStatus.DRAFT, ExperimentStatus.RUNNING, ExperimentStatus.PAUSED)


def model_resolve(ref: str) -> Any | None:
    """The model endpoint named by its public id or its version label (``avocado-v15``), provider
    loaded; ``None`` when none is (or the label is ambiguous), and for an empty ``ref`` (which
    would otherwise match a model without a label)."""
    return model_by_id_or_label(ref)[0] if ref else None


def _is_external(endpoint: Any) -> bool:
    return endpoint.provider.kind != NATIVE_KIND


def shadow_model_problems(
    *, candidate: Any | None, source_endpoint: Any | None, judge: Any | None, allow_external: bool
) -> dict[str, str]:
    """``{field: message}`` for the model rules (the REST API and the admin share them): the
    candidate is not the source's model; an external candidate or judge needs ``allow_external``."""
    errors: dict[str, str] = {}
    if candidate is not None and source_endpoint is not None and candidate.pk == source_endpoint.pk:
        errors["candidate"] = "The candidate is the source's own model; shadow a different one."
    if not allow_external:
        if candidate is not None and _is_external(candidate):
            errors["candidate"] = 'An external candidate needs "allow_external": true.'
        if judge is not None and _is_external(judge):
            errors["judge"] = 'An external judge needs "allow_external": true.'
    return errors


def shadow_test_create(
    *,
    key: str,
    name: str,
    candidate: str,
    source: Mapping[str, str],
    sample_percent: float,
    judge: Mapping[str, str] | None,
    max_usd_per_day: Decimal,
    allow_external: bool,
    actor: str,
) -> ShadowTest:
    """Create a shadow test in ``draft``.

    ``candidate`` / ``source["model"]`` / ``judge["model"]``: a model public id or version label.
    ``source``: ``{"model": ...}`` or ``{"experiment": key, "variant": key}``. Raises
    ``ValidationError({field: message})`` for: an unknown model, experiment or variant; a candidate
    equal to the source's model; an external candidate or judge without ``allow_external``; a
    percent outside 0–100; a negative budget; a key already used.
    """
    errors: dict[str, str] = {}
    cand = model_resolve(candidate)
    if cand is None:
        errors["candidate"] = f"Unknown model {candidate!r}."
    source_model = source_experiment = None
    source_variant = ""
    source_endpoint = None
    if "model" in source:
        source_model = model_resolve(source["model"])
        source_endpoint = source_model
        if source_model is None:
            errors["source"] = f"Unknown model {source['model']!r}."
    else:
        source_experiment = Experiment.objects.filter(key=source.get("experiment", "")).first()
        source_variant = source.get("variant", "")
        variant = (
            source_experiment.variants.select_related("endpoint").filter(key=source_variant).first()
            if source_experiment is not None
            else None
        )
        if source_experiment is None:
            errors["source"] = f"Unknown experiment {source.get('experiment')!r}."
        elif variant is None:
            errors["source"] = f"Experiment {source_experiment.key!r} has no variant {source_variant!r}."
        else:
            source_endpoint = variant.endpoint
    judge_model = None
    if judge is not None:
        judge_model = model_resolve(judge.get("model", ""))
        if judge_model is None:
            errors["judge"] = f"Unknown model {judge.get('model')!r}."
    errors |= shadow_model_problems(
        candidate=cand, source_endpoint=source_endpoint, judge=judge_model, allow_external=allow_external
    )
    if not 0.0 <= sample_percent <= 100.0:
        errors["sample_percent"] = "Must be between 0 and 100."
    if max_usd_per_day < 0:
        errors["max_usd_per_day"] = "Must not be negative."
    if ShadowTest.objects.filter(key=key).exists():
        errors["key"] = "A shadow test with this key exists."
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        with key_taken_as_field_error(ShadowTest, key, "A shadow test with this key exists."):
            test = ShadowTest.objects.create(
                key=key,
                name=name,
                candidate=cand,
                source_model=source_model,
                source_experiment=source_experiment,
                source_variant=source_variant,
                sample_percent=sample_percent,
                judge=judge_model,
                judge_instructions=(judge or {}).get("instructions", ""),
                max_usd_per_day=max_usd_per_day,
                allow_external=allow_external,
                created_by=actor,
            )
        audit_record(actor=actor, action="shadow_test_create", obj=test, changes={"key": [None, key]})
    return test


def shadow_source_problem(test: ShadowTest) -> str | None:
    """Why ``test``'s source can get no traffic, else None: its experiment is stopped or archived
    (not in :data:`SOURCE_STARTABLE_STATUSES`), or no longer has the variant. A model source
    always can (models are never deleted from under a test)."""
    experiment = test.source_experiment
    if experiment is None:
        return None
    if experiment.status not in SOURCE_STARTABLE_STATUSES:
        return (
            f"Source experiment {experiment.key!r} is {experiment.status}, so this shadow test would get "
            "no traffic; a shadow test starts on a draft, running or paused experiment."
        )
    if not experiment.variants.filter(key=test.source_variant).exists():
        return (
            f"Experiment {experiment.key!r} has no variant {test.source_variant!r} any more: this shadow "
            "test cannot get traffic."
        )
    return None


@transaction.atomic
def shadow_test_start(*, test: ShadowTest, actor: str) -> ShadowTest:
    """draft/stopped → running. Raises ``ValidationError({"status": ...})`` when already running,
    ``ValidationError({"source": ...})`` when the source can get no traffic
    (:func:`shadow_source_problem`: the source experiment is stopped or archived, or its variant
    was deleted). The source experiment's row is locked first (the order its edits and stop use),
    so a concurrent variant delete or stop cannot slip in between the check and the start."""
    experiment_id = ShadowTest.objects.filter(pk=test.pk).values_list("source_experiment_id", flat=True).get()
    if experiment_id is not None:
        Experiment.objects.select_for_update().filter(pk=experiment_id).first()
    test = (
        ShadowTest.objects.select_for_update(of=("self",)).select_related("source_experiment").get(pk=test.pk)
    )
    if test.status == ShadowStatus.RUNNING:
        raise ValidationError({"status": "The shadow test is already running."})
    problem = shadow_source_problem(test)
    if problem is not None:
        raise ValidationError({"source": problem})
    before, test.status = test.status, ShadowStatus.RUNNING
    test.started_at = test.started_at or timezone.now()
    test.stopped_at = None
    test.save(update_fields=["status", "started_at", "stopped_at", "updated_at"])
    audit_record(actor=actor, action="shadow_test_start", obj=test, changes={"status": [before, test.status]})
    config_version.bump()
    return test


@transaction.atomic
def shadow_test_stop(*, test: ShadowTest, actor: str) -> ShadowTest:
    """running → stopped. Raises ``ValidationError({"status": ...})`` when not running."""
    test = ShadowTest.objects.select_for_update().get(pk=test.pk)
    if test.status != ShadowStatus.RUNNING:
        raise ValidationError({"status": f"Only a running shadow test can stop (it is {test.status})."})
    test.status = ShadowStatus.STOPPED
    test.stopped_at = timezone.now()
    test.save(update_fields=["status", "stopped_at", "updated_at"])
    audit_record(
        actor=actor,
        action="shadow_test_stop",
        obj=test,
        changes={"status": [ShadowStatus.RUNNING, test.status]},
    )
    config_version.bump()
    return test


def shadow_tests_using_variants(
    *, experiment: Experiment, variant_keys: Iterable[str]
) -> dict[str, list[str]]:
    """``{variant key: [shadow test keys]}``: the tests that are not stopped (draft or running)
    whose source is one of ``variant_keys`` of ``experiment``, keys sorted. Such a variant must
    not be deleted or re-keyed (:func:`..edits.experiment_update` refuses it); a stopped test's
    may go (its pairs stay; it cannot start again, :func:`shadow_source_problem`)."""
    keys = list(variant_keys)
    using: dict[str, list[str]] = {}
    rows = (
        ShadowTest.objects.filter(source_experiment=experiment, source_variant__in=keys)
        .exclude(status=ShadowStatus.STOPPED)
        .order_by("key")
        .values_list("source_variant", "key")
    )
    for variant, key in rows:
        using.setdefault(variant, []).append(key)
    return using


def shadow_tests_stop_for_source(*, experiment: Experiment, actor: str) -> list[str]:
    """Stop the running shadow tests whose source is ``experiment`` (called when it stops or is
    archived: its variants get no traffic any more), each with an audit entry giving the reason.
    Call inside the transaction that holds the experiment's row lock; returns the stopped keys."""
    stopped = []
    for test in ShadowTest.objects.select_for_update().filter(
        source_experiment=experiment, status=ShadowStatus.RUNNING
    ):
        test.status, test.stopped_at = ShadowStatus.STOPPED, timezone.now()
        test.save(update_fields=["status", "stopped_at", "updated_at"])
        audit_record(
            actor=actor,
            action="shadow_test_stop",
            obj=test,
            changes={
                "status": [ShadowStatus.RUNNING, test.status],
                "reason": f"source experiment {experiment.key} {experiment.status}",
            },
        )
        stopped.append(test.key)
    if stopped:
        config_version.bump()
    return stopped


def shadow_test_config(test: ShadowTest) -> dict[str, Any]:
    """The test's configuration as the REST API shows it (models by public id)."""
    source: dict[str, str] = (
        {"model": test.source_model.public_id}
        if test.source_model_id
        else {"experiment": test.source_experiment.key, "variant": test.source_variant}
    )
    return {
        "key": test.key,
        "name": test.name,
        "status": test.status,
        "candidate": test.candidate.public_id,
        "source": source,
        "sample_percent": test.sample_percent,
        "judge": {"model": test.judge.public_id, "instructions": test.judge_instructions}
        if test.judge_id
        else None,
        "max_usd_per_day": float(test.max_usd_per_day),
        "allow_external": test.allow_external,
        "started_at": test.started_at,
        "stopped_at": test.stopped_at,
        "created_at": test.created_at,
    }
