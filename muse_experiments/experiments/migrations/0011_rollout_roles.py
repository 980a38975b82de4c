"""Rollouts join the shipped roles (0007_roles), as shadow tests did in 0009: the roles that read
experiments see rollouts and their ramp history; the Product manager also adds and changes them.

The rollout API itself is gated by the experiment permissions (a rollout is its experiment's
ramp: ``muse_experiments.api.auth.SESSION_PERMISSIONS``); these are the admin's rollout pages.
Roles deleted by an administrator stay deleted. Backwards removes exactly these grants.
"""

from importlib import import_module

from django.db import migrations

#: The roles that see rollouts, and those that also add and change them.
VIEWERS = ("Analyst", "Product manager", "Operator")
EDITORS = ("Product manager",)
VIEW = ("view_rollout", "view_rolloutevent")
EDIT = ("add_rollout", "change_rollout")


def _permissions(apps, alias: str) -> dict:
    Permission = apps.get_model("auth", "Permission")
    return {
        p.codename: p
        for p in Permission.objects.using(alias).filter(
            content_type__app_label="muse_experiments", codename__in=VIEW + EDIT
        )
    }


def grant_rollout_permissions(apps, schema_editor) -> None:
    """Viewers get ``view_rollout`` and ``view_rolloutevent``; editors also ``add_rollout`` and
    ``change_rollout``. Idempotent. Raises ``KeyError`` if a permission does not exist."""
    import_module("muse_experiments.experiments.migrations.0007_roles").create_permissions_now(
        apps, schema_editor
    )
    alias = schema_editor.connection.alias
    perms = _permissions(apps, alias)
    Group = apps.get_model("auth", "Group")
    for group in Group.objects.using(alias).filter(name__in=VIEWERS):
        group.permissions.add(*(perms[c] for c in VIEW))
        if group.name in EDITORS:
            group.permissions.add(*(perms[c] for c in EDIT))


def revoke_rollout_permissions(apps, schema_editor) -> None:
    alias = schema_editor.connection.alias
    perms = _permissions(apps, alias)
    Group = apps.get_model("auth", "Group")
    for group in Group.objects.using(alias).filter(name__in=VIEWERS):
        group.permissions.remove(*perms.values())


class Migration(migrations.Migration):
    dependencies = [
        ("muse_experiments", "0010_bandit"),
    ]

    operations = [migrations.RunPython(grant_rollout_permissions, revoke_rollout_permissions)]
