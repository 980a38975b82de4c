"""The kill switch as routing reads it: which endpoints, experiments and variants are off.

Scopes (rows of :class:`routing.models.KillSwitch`, written by
:func:`routing.jobs.kill_switch_set`):

* ``all_external`` — every provider whose kind is not ``native``;
* ``provider`` — one provider (target: provider key, e.g. ``azure``);
* ``endpoint`` — one model endpoint (target: public id, e.g. ``azure/muse-special``);
* ``experiment`` — the experiment's traffic is served by its control (target: experiment key);
* ``variant`` — that variant's units are served by the control (target: ``<experiment>/<variant>``).

Enrolment stops at a kill of the experiment or of the unit's variant: no exposure is recorded and
no sticky assignment written for a call whose assigned variant is killed (or whose experiment is
killed, control included); the call is served by the control and its CallRecord keeps the
assigned variant with ``reason`` ``experiment_killed`` / ``variant_killed``. Units exposed before
the kill keep their exposure (and sticky variant) for analysis. Endpoint-level kills give
``endpoint_killed`` / ``provider_killed`` / ``external_killed`` (see
:class:`~routing.models.RoutingReason`). Each switch's ``active_since`` is when it went on; the
results page reads the kills in force on an experiment through
:func:`routing.selectors.experiment_kills_in_force`.

Propagation: the state is an in-process :class:`~muse_experiments.infra.config_version.VersionedSnapshot`
rebuilt whenever the cluster configuration version moves (checked every
``CONFIG_REFRESH_INTERVAL_S``, 0.5 s by default), so every web and worker process sees a change
within about a second. Workers read it immediately before each upstream call, so queued jobs obey
a switch flipped after they were enqueued.

**Fails closed**: if the state cannot be read (database or version-check failure),
:func:`kill_state` returns a state with every external provider off (``unreadable=True``), so
calls are served by native endpoints. ``settings.MUSE_KILL_EXTERNAL`` (env
``MUSE_KILL_EXTERNAL=true``) forces external providers off regardless of the database.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from django.conf import settings
from django.db import transaction

from muse_experiments.infra.config_version import VersionedSnapshot
from routing.models import KillScope, KillSwitch, RoutingReason

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KillState:
    """Active kill switches. ``unreadable``: the state could not be read, so we failed closed.

    ``forced_by_env``: ``MUSE_KILL_EXTERNAL`` is on. ``variants`` holds
    ``(experiment key, variant key)`` pairs. ``since`` maps ``(scope, target)`` to when that
    switch went on (``None`` for rows written before ``active_since`` existed).
    """

    external_off: bool = False
    providers: frozenset[str] = frozenset()
    endpoints: frozenset[str] = frozenset()
    experiments: frozenset[str] = frozenset()
    variants: frozenset[tuple[str, str]] = frozenset()
    unreadable: bool = False
    forced_by_env: bool = False
    since: Mapping[tuple[str, str], datetime | None] = field(default_factory=dict)

    def endpoint_kill(self, *, public_id: str, provider_key: str, is_external: bool) -> KillInForce | None:
        """The switch that keeps this endpoint from being called (the narrowest first), or ``None``.

        Failing closed and ``MUSE_KILL_EXTERNAL`` count as ``all_external`` (``since`` ``None``)."""
        if public_id in self.endpoints:
            key = (KillScope.ENDPOINT, public_id)
            return KillInForce(*key, RoutingReason.ENDPOINT_KILLED, self.since.get(key))
        if provider_key in self.providers:
            key = (KillScope.PROVIDER, provider_key)
            return KillInForce(*key, RoutingReason.PROVIDER_KILLED, self.since.get(key))
        if is_external and (self.external_off or self.unreadable or self.forced_by_env):
            key = (KillScope.ALL_EXTERNAL, "")
            return KillInForce(*key, RoutingReason.EXTERNAL_KILLED, self.since.get(key))
        return None

    def enrolment_kill(self, experiment_key: str | None, variant_key: str | None) -> KillInForce | None:
        """The kill that stops new enrolment of a unit assigned ``variant_key`` of
        ``experiment_key``: the experiment's (any variant, control included), else the variant's."""
        if not experiment_key:
            return None
        if experiment_key in self.experiments:
            return KillInForce(
                KillScope.EXPERIMENT,
                experiment_key,
                RoutingReason.EXPERIMENT_KILLED,
                self.since.get((KillScope.EXPERIMENT, experiment_key)),
            )
        if (experiment_key, variant_key or "") in self.variants:
            target = f"{experiment_key}/{variant_key}"
            return KillInForce(
                KillScope.VARIANT,
                target,
                RoutingReason.VARIANT_KILLED,
                self.since.get((KillScope.VARIANT, target)),
            )
        return None

    def endpoint_killed(self, *, public_id: str, provider_key: str, is_external: bool) -> bool:
        """True when this endpoint must not be called."""
        return (
            (is_external and (self.external_off or self.unreadable or self.forced_by_env))
            or provider_key in self.providers
            or public_id in self.endpoints
        )

    def variant_killed(self, experiment_key: str | None, variant_key: str | None) -> bool:
        """True when traffic for this experiment variant must go elsewhere."""
        if not experiment_key:
            return False
        return experiment_key in self.experiments or (experiment_key, variant_key or "") in self.variants

    def experiment_killed(self, experiment_key: str | None) -> bool:
        return bool(experiment_key) and experiment_key in self.experiments


@dataclass(frozen=True)
class KillInForce:
    """One kill switch that is on: ``scope`` / ``target`` as stored, the ``reason`` a call it moves
    gets (:class:`~routing.models.RoutingReason`), and ``since`` (when it went on, UTC; ``None``
    if unknown)."""

    scope: str
    target: str
    reason: str
    since: datetime | None

    def to_public_dict(self) -> dict[str, str | None]:
        """JSON form for API responses: ``{"scope", "target", "reason", "since"}`` (ISO 8601)."""
        return {
            "scope": self.scope,
            "target": self.target,
            "reason": self.reason,
            "since": self.since.isoformat() if self.since else None,
        }


def build_kill_state() -> KillState:
    """Read active switches from the database (one query)."""
    rows = list(KillSwitch.objects.filter(active=True).values_list("scope", "target", "active_since"))
    by_scope: dict[str, set[str]] = {}
    since = {}
    for scope, target, active_since in rows:
        by_scope.setdefault(scope, set()).add(target)
        since[(scope, target)] = active_since
    variants = set()
    for target in by_scope.get(KillScope.VARIANT, ()):
        exp, _, var = target.partition("/")
        variants.add((exp, var))
    return KillState(
        external_off=KillScope.ALL_EXTERNAL in by_scope,
        providers=frozenset(by_scope.get(KillScope.PROVIDER, ())),
        endpoints=frozenset(by_scope.get(KillScope.ENDPOINT, ())),
        experiments=frozenset(by_scope.get(KillScope.EXPERIMENT, ())),
        variants=frozenset(variants),
        since=since,
    )


def _build_guarded() -> KillState:
    # A savepoint, so a failed read inside a caller's transaction does not poison it (PostgreSQL).
    with transaction.atomic():
        return build_kill_state()


_snapshot = VersionedSnapshot(_build_guarded)

#: What routing uses when the switch state cannot be read.
FAIL_CLOSED = KillState(unreadable=True)


def kill_state() -> KillState:
    """The current kill-switch state for this process; never raises (fails closed)."""
    try:
        state = _snapshot.get()
    except Exception as exc:  # noqa: BLE001 - any read failure: external providers off
        log.error("kill switch state unreadable (%s); external providers treated as off", type(exc).__name__)
        state = FAIL_CLOSED
    if settings.MUSE_KILL_EXTERNAL and not state.forced_by_env:
        state = replace(state, external_off=True, forced_by_env=True)
    return state


def enrolment_kill_info(experiment_key: str | None, variant_key: str | None) -> dict[str, str | None] | None:
    """The kill (if any) that stops enrolment in ``variant_key`` of ``experiment_key``, as JSON
    (:meth:`KillInForce.to_public_dict`). The experiments app reads kills through this function,
    named by ``settings.MUSE_ENROLMENT_KILL_LOOKUP`` (it may not import routing)."""
    kill = kill_state().enrolment_kill(experiment_key, variant_key)
    return kill.to_public_dict() if kill is not None else None
