"""Small builders for tests: the seeded catalogue, experiments, API keys."""

from __future__ import annotations

from muse_experiments.api.auth import api_key_create
from muse_experiments.experiments.services.edits import experiment_create
from muse_experiments.experiments.services.lifecycle import experiment_start
from muse_experiments.experiments.services.variants import VariantInput
from muse_experiments.infra import config_version
from routing.catalogue import avocado_id, endpoint_seeds, provider_seeds
from routing.models import ModelEndpoint
from routing.ops_services import catalogue_seed

ALL_SCOPES = ["completions", "events", "analytics:read", "ops"]


#: Where :func:`seed_catalogue` points by default: nothing listens there.
UNUSED_UPSTREAM = "http://127.0.0.1:9"


def seed_catalogue(base_url: str = UNUSED_UPSTREAM) -> dict[str, ModelEndpoint]:
    """Seed the real catalogue pointing at ``base_url`` (a simulated upstream: see
    ``tests.conftest.allow_simulated_upstream``); returns endpoints by public id."""
    catalogue_seed(providers=provider_seeds(base_url), endpoints=endpoint_seeds(), actor="test")
    return {e.public_id: e for e in ModelEndpoint.objects.select_related("provider")}


def make_experiment(
    *,
    key: str = "exp",
    arms: list[tuple[str, str, float]] | None = None,
    start: bool = True,
    **kwargs,
):
    """An experiment whose arms are ``(variant key, endpoint public id, weight)``; the first is control."""
    arms = arms or [("control", avocado_id(14), 0.5), ("treatment", avocado_id(15), 0.5)]
    endpoints = {e.public_id: e for e in ModelEndpoint.objects.filter(public_id__in=[a[1] for a in arms])}
    experiment = experiment_create(
        key=key,
        name=key,
        actor="test",
        variants=[
            VariantInput(key=k, weight=w, endpoint=endpoints[pid], is_control=(i == 0))
            for i, (k, pid, w) in enumerate(arms)
        ],
        **kwargs,
    )
    return experiment_start(experiment=experiment, actor="test") if start else experiment


def variant_inputs(arms: list[tuple[str, str, float]], **overrides_by_key) -> list[VariantInput]:
    """``VariantInput``s for ``(key, endpoint public id, weight)`` arms; the first is control,
    ``overrides_by_key`` maps a variant key to its routing overrides."""
    endpoints = {e.public_id: e for e in ModelEndpoint.objects.filter(public_id__in=[a[1] for a in arms])}
    return [
        VariantInput(
            key=k,
            weight=w,
            endpoint=endpoints[pid],
            is_control=(i == 0),
            overrides=overrides_by_key.get(k, {}),
        )
        for i, (k, pid, w) in enumerate(arms)
    ]


def api_key(scopes: list[str] | None = None) -> str:
    """A raw API key with the given scopes (all by default), known to this process at once: its
    in-process key snapshot is dropped, as the configuration refresh would drop it within
    ``CONFIG_REFRESH_INTERVAL_S`` once the key's commit moved the version (a test's transaction
    never commits)."""
    _, raw = api_key_create(name="test", scopes=scopes or ALL_SCOPES)
    config_version.invalidate_all()
    return raw


def user_in_group(group: str, username: str = "pm"):
    """A staff user in one of the roles a migration ships (``Analyst``, ``Product manager`` …)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user = get_user_model().objects.create_user(username, f"{username}@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user
