"""The kill switch as routing reads it: which endpoints, experiments and variants are off.

Scopes (rows of :class:`routing.models.KillSwitch`, written by
:func:`routing.services.kill_switch_set`):

* ``all_external`` — every provider whose kind is not ``native``;
* ``provider`` — one provider (target: provider key, e.g. ``azure``);
* ``endpoint`` — one model endpoint (target: public id, e.g. ``azure/muse-special``);
* ``experiment`` — the experiment's traffic is served by its control (target: experiment key);
* ``variant`` — that variant's units are served by the control (target: ``<experiment>/<variant>``).

Assignment is not changed by a kill: exposures still record the assigned variant and the
CallRecord says ``reason="killed"`` with the served endpoint, so analytics can tell assigned from
served (intent-to-treat stays unbiased; the killed period can be excluded).

Propagation: the state is an in-process :class:`~muse_experiments.config_version.VersionedSnapshot`
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
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from muse_experiments.config_version import VersionedSnapshot

from .models import KillScope, KillSwitch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KillState:
    """Active kill switches. ``unreadable``: the state could not be read, so we failed closed.

    ``forced_by_env``: ``MUSE_KILL_EXTERNAL`` is on. ``variants`` holds
    ``(experiment key, variant key)`` pairs.
    """

    external_off: bool = False
    providers: frozenset[str] = frozenset()
    endpoints: frozenset[str] = frozenset()
    experiments: frozenset[str] = frozenset()
    variants: frozenset[tuple[str, str]] = frozenset()
    unreadable: bool = False
    forced_by_env: bool = False

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


def build_kill_state() -> KillState:
    """Read active switches from the database (one query)."""
    rows = list(KillSwitch.objects.filter(active=True).values_list("scope", "target"))
    by_scope: dict[str, set[str]] = {}
    for scope, target in rows:
        by_scope.setdefault(scope, set()).add(target)
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
        state = KillState(
            external_off=True,
            providers=state.providers,
            endpoints=state.endpoints,
            experiments=state.experiments,
            variants=state.variants,
            unreadable=state.unreadable,
            forced_by_env=True,
        )
    return state
