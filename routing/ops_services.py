"""Operator writes: kill switches, admin edits of the model catalogue and its seeding.

Each function is keyword-only, runs in one transaction, records an
:class:`~muse_experiments.experiments.models.AuditEntry` (who, what, why) and bumps the cluster configuration
version, so every web and worker process picks the change up within about a second. Invalid input
raises :class:`django.core.exceptions.ValidationError` with field errors and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from muse_experiments.experiments.models import AuditEntry
from muse_experiments.experiments.selectors import experiment_by_key
from muse_experiments.infra import config_version
from routing.catalogue import EndpointSeed, ProviderSeed
from routing.guards.credentials import credential_binding_validate
from routing.guards.killswitch import build_kill_state
from routing.models import KillScope, KillSwitch, ModelEndpoint, Provider
from routing.selectors import catalogue, endpoint_public_id

REASON_MAX = 500


def _audit(*, actor: str, action: str, obj: Any, changes: Mapping[str, Any] | None = None) -> None:
    AuditEntry.objects.create(
        actor=actor or "system",
        action=action,
        object_type=type(obj).__name__,
        object_id=str(obj.pk),
        changes=dict(changes or {}),
    )


#: The permission to add a provider or change where its credential goes (its base URL or
#: credential variable); superusers hold it, no shipped group does.
PROVIDER_ENDPOINT_PERMISSION = "routing.change_provider_endpoint"


@transaction.atomic
def catalogue_entry_save(
    *,
    obj: Provider | ModelEndpoint,
    actor: str,
    changed: Sequence[str] = (),
    may_change_endpoint: bool = False,
) -> None:
    """Save an admin-edited provider or endpoint, audit it, and bump the configuration version.

    A provider's base URL and credential variable must be in the credential binding
    (:func:`routing.guards.credentials.credential_binding_validate`), whether they changed or not.
    Adding a provider or changing either field needs ``may_change_endpoint`` (the actor holds
    :data:`PROVIDER_ENDPOINT_PERMISSION`); the stored row is read under a lock to tell.

    The audit entry holds the ``changed`` fields' new values, and ``[old, new]`` for a
    provider's base URL and credential variable whenever they changed (``old`` None on create);
    the catalogue holds no secrets (a variable's name, never its value).

    Raises ValidationError (field errors; nothing written) or PermissionDenied.
    """
    obj.full_clean()
    created = obj.pk is None
    endpoint_changes: dict[str, list[str | None]] = {}
    if isinstance(obj, Provider):
        before = None if created else Provider.objects.select_for_update().filter(pk=obj.pk).first()
        endpoint_changes = {
            name: [getattr(before, name) if before else None, getattr(obj, name)]
            for name in Provider.ENDPOINT_FIELDS
            if before is None or getattr(before, name) != getattr(obj, name)
        }
        if endpoint_changes and not may_change_endpoint:
            raise PermissionDenied(
                "Adding a provider or changing its base URL or credential variable needs the "
                f"{PROVIDER_ENDPOINT_PERMISSION} permission."
            )
        credential_binding_validate(credential_env=obj.credential_env, base_url=obj.base_url)
    obj.save()
    changes: dict[str, Any] = {name: str(getattr(obj, name, "")) for name in changed}
    changes.update(endpoint_changes)
    _audit(actor=actor, action="create" if created else "update", obj=obj, changes=changes)
    config_version.bump()


def kill_switch_validate(
    *, scope: str, target: str, active: bool = False, control_traffic_to: str = ""
) -> str:
    """Check a kill switch's scope and target; returns the normalised (stripped) target.

    Targets: ``all_external`` none; ``provider`` an existing provider key; ``endpoint`` an existing
    endpoint by public id or by version label (``avocado-v15``, when one model has it; the public
    id is returned); ``experiment`` an existing experiment key; ``variant``
    ``<experiment key>/<variant key>`` naming an existing variant. Turning on (``active``) a kill
    of an experiment's *control* variant sends its units to the platform default endpoint (which
    may be another experiment's treatment): it is refused unless ``control_traffic_to`` names that
    endpoint (public id or version label), as the operator's confirmation, and refused while that
    endpoint is itself killed. Raises ValidationError keyed by ``scope`` / ``target`` /
    ``control_traffic_to``.
    """
    target = (target or "").strip()
    if scope not in KillScope.values:
        raise ValidationError(
            {"scope": f"Unknown scope {scope!r}; use one of {', '.join(KillScope.values)}."}
        )
    if scope == KillScope.ALL_EXTERNAL:
        if target:
            raise ValidationError({"target": "Leave the target empty for all_external."})
        return ""
    if not target:
        raise ValidationError({"target": f"A {scope} kill switch needs a target."})
    if scope == KillScope.ENDPOINT:
        target = endpoint_public_id(target) or target
    exists = {
        KillScope.PROVIDER: lambda: Provider.objects.filter(key=target).exists(),
        KillScope.ENDPOINT: lambda: ModelEndpoint.objects.filter(public_id=target).exists(),
        KillScope.EXPERIMENT: lambda: experiment_by_key(target) is not None,
        KillScope.VARIANT: lambda: _variant_exists(target),
    }[scope]()
    if not exists:
        hint = " (use <experiment key>/<variant key>)" if scope == KillScope.VARIANT else ""
        raise ValidationError({"target": f"No {scope} {target!r}{hint}."})
    if scope == KillScope.VARIANT and active:
        _confirm_control_kill(target, (control_traffic_to or "").strip())
    return target


def _confirm_control_kill(target: str, control_traffic_to: str) -> None:
    experiment_key, _, variant_key = target.partition("/")
    experiment = experiment_by_key(experiment_key)
    if experiment is None or not any(
        v.key == variant_key and v.is_control for v in experiment.variants.all()
    ):
        return
    default = catalogue().default_id or "(no platform default: the calls would fail)"
    if (endpoint_public_id(control_traffic_to) if control_traffic_to else "") != default:
        raise ValidationError(
            {
                "control_traffic_to": (
                    f"{variant_key!r} is the control of {experiment_key!r}: killing it sends its units to "
                    f"the platform default {default}. To confirm, give control_traffic_to={default!r}."
                )
            }
        )
    endpoint = ModelEndpoint.objects.select_related("provider").filter(public_id=default).first()
    if endpoint is not None and build_kill_state().endpoint_killed(
        public_id=endpoint.public_id,
        provider_key=endpoint.provider.key,
        is_external=endpoint.provider.is_external,
    ):
        raise ValidationError(
            {
                "control_traffic_to": (
                    f"The platform default {default} is itself killed: the units of {experiment_key!r}'s "
                    "control would fail. Lift that kill or change the platform default first."
                )
            }
        )


def _variant_exists(target: str) -> bool:
    experiment_key, _, variant_key = target.partition("/")
    experiment = experiment_by_key(experiment_key) if variant_key else None
    return experiment is not None and any(v.key == variant_key for v in experiment.variants.all())


@transaction.atomic
def kill_switch_set(
    *, scope: str, target: str = "", active: bool, reason: str, actor: str, control_traffic_to: str = ""
) -> KillSwitch:
    """Turn a kill switch on (``active=True``) or off, audited, effective cluster-wide within ~1 s.

    ``reason`` (why; required, at most 500 characters) and ``actor`` (who) are stored on the switch
    and in an AuditEntry (action ``kill_switch_on`` / ``kill_switch_off``). One row per
    (scope, target), locked while it changes so concurrent toggles serialise. Raises ValidationError
    with field errors (``scope``, ``target``, ``reason``, ``control_traffic_to``: see
    :func:`kill_switch_validate`) on bad input; nothing is written then. ``active_since`` is set
    when the switch goes on and cleared when it goes off.
    """
    target = kill_switch_validate(
        scope=scope, target=target, active=active, control_traffic_to=control_traffic_to
    )
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why the switch is being changed."})
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": f"At most {REASON_MAX} characters."})
    switch = KillSwitch.objects.select_for_update().filter(scope=scope, target=target).first()
    before = switch.active if switch else None
    if switch is None:
        switch = KillSwitch(scope=scope, target=target)
    if active and not before:
        switch.active_since = timezone.now()
    elif not active:
        switch.active_since = None
    switch.active, switch.reason, switch.updated_by = active, reason, actor or "system"
    switch.save()
    _audit(
        actor=actor,
        action="kill_switch_on" if active else "kill_switch_off",
        obj=switch,
        changes={"scope": scope, "target": target, "active": [before, active], "reason": reason},
    )
    config_version.bump()
    return switch


@transaction.atomic
def catalogue_seed(
    *, providers: Sequence[ProviderSeed], endpoints: Sequence[EndpointSeed], actor: str
) -> tuple[int, int]:
    """Create or update providers and endpoints by key/public id. Returns ``(n_providers, n_endpoints)``.

    Every provider's credential variable and base URL must be in the credential binding
    (:func:`routing.guards.credentials.credential_binding_validate`): otherwise ValidationError, keyed
    ``<provider key>.<field>``, and nothing is written.
    """
    errors: dict[str, Any] = {}
    for p in providers:
        try:
            credential_binding_validate(credential_env=p.credential_env, base_url=p.base_url)
        except ValidationError as exc:
            errors.update({f"{p.key}.{name}": messages for name, messages in exc.message_dict.items()})
    if errors:
        raise ValidationError(errors)
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
                "supports_structured_output": e.supports_structured_output,
                "supports_json_mode": e.supports_json_mode,
                **e.price_fields(),
                "is_platform_default": e.is_platform_default,
            },
        )
        obj.full_clean()
    config_version.bump()
    return len(providers), len(endpoints)
