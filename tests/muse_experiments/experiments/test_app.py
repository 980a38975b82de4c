"""The experiments app lives in ``muse_experiments/experiments/`` but keeps the label it had as the
project's top package, so a database migrated before the move needs no migration: same tables,
content types, permissions and ``django_migrations`` rows."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader

MIGRATIONS = [
    "0001_initial",
    "0002_initial",
    "0003_phases_sticky",
    "0004_reserved_keys",
    "0005_version_layer_hash",
    "0006_exposure_first_exposed_idx",
    "0007_roles",
    "0008_rollouts",
    "0009_shadow_tests",
    "0010_bandit",
    "0011_rollout_roles",
    "0012_exposure_time_not_write_time",
    "0013_rollout_event_waiting_reason",
]


def test_the_app_keeps_its_label_and_tables():
    config = apps.get_app_config("muse_experiments")
    assert config.name == "muse_experiments.experiments"
    tables = sorted(model._meta.db_table for model in config.get_models())
    assert tables == [
        "muse_experiments_apikey",
        "muse_experiments_auditentry",
        "muse_experiments_banditupdate",
        "muse_experiments_experiment",
        "muse_experiments_experimentphase",
        "muse_experiments_exposure",
        "muse_experiments_forcedassignment",
        "muse_experiments_layer",
        "muse_experiments_platformconfig",
        "muse_experiments_rollout",
        "muse_experiments_rolloutevent",
        "muse_experiments_shadowpair",
        "muse_experiments_shadowtest",
        "muse_experiments_variant",
    ]


@pytest.mark.django_db
def test_its_migrations_keep_their_names_and_the_models_need_no_new_one():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    names = sorted(name for label, name in loader.disk_migrations if label == "muse_experiments")
    assert names == MIGRATIONS
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # SystemExit(1) on a change


@pytest.mark.django_db
def test_permissions_keep_the_app_label():
    from django.contrib.auth.models import Permission

    codenames = set(
        Permission.objects.filter(content_type__app_label="muse_experiments").values_list(
            "codename", flat=True
        )
    )
    assert {"view_experiment", "change_experiment", "add_apikey", "view_platformconfig"} <= codenames
