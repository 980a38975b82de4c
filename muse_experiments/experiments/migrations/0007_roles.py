"""The shipped roles: Django groups and their permissions (README "Roles").

The roles span every app, so this migration depends on the other apps' latest migrations (their
models and custom permissions must exist) and names their permissions as ``app_label.codename``
strings: no routing or analytics code is imported. It lives in the experiments app, which also
holds the API's session-permission table (``muse_experiments.api.auth.SESSION_PERMISSIONS``) that
these roles are written against. The roles are frozen here; changing one is a new migration.

Forwards is idempotent: it creates any missing permission first (Django creates them only after
``migrate``, in ``post_migrate``), then gives each group exactly its role's permissions (an
existing group of that name is reset to the role). Backwards deletes the five groups.
"""

from django.db import migrations


def _perms(app_label: str, actions: tuple[str, ...], *models: str) -> list[str]:
    return [f"{app_label}.{action}_{model}" for model in models for action in actions]


VIEW = ("view",)
ADD_CHANGE = ("add", "change")

ANALYST = [
    *_perms(
        "muse_experiments",
        VIEW,
        "experiment",
        "variant",
        "experimentphase",
        "forcedassignment",
        "exposure",
        "layer",
        "auditentry",
        "platformconfig",
    ),
    *_perms(
        "analytics",
        VIEW,
        "outcomeevent",
        "metricdefinition",
        "experimentanalysissettings",
        "resultsnapshot",
        "guardrailaction",
        "callrollup",
        "liftpoint",
    ),
    *_perms("routing", VIEW, "provider", "modelendpoint", "callrecord", "attempt", "killswitch"),
]

ROLES: dict[str, list[str]] = {
    # reads experiments, results and routing data (not jobs: they hold users' prompts); no writes
    "Analyst": ANALYST,
    # + experiments (variants and QA pins with them), layers, metrics, analysis settings, recompute
    "Product manager": [
        *ANALYST,
        *_perms("muse_experiments", ADD_CHANGE, "experiment", "layer"),
        *_perms("analytics", ADD_CHANGE, "metricdefinition", "experimentanalysissettings"),
        "analytics.add_resultsnapshot",
    ],
    # + completion jobs (read) and kill switches (turn on and off)
    "Operator": [
        *ANALYST,
        "routing.view_completionjob",
        *_perms("routing", ADD_CHANGE, "killswitch"),
    ],
    # the model catalogue only
    "Catalogue admin": _perms("routing", ("view", "add", "change"), "provider", "modelendpoint"),
    # transcripts (read), opt-outs, export and ingestion
    "Training-data steward": [
        *_perms(
            "transcripts", VIEW, "transcript", "transcriptturn", "trainingoptout", "trainingrecord", "gatecounter"
        ),
        *_perms("transcripts", ("add", "delete"), "trainingoptout"),
        "transcripts.export_training_data",
        "transcripts.ingest_training_data",
    ],
}


def create_permissions_now(apps, schema_editor) -> None:
    """Every model's permissions, as ``post_migrate`` would create them after ``migrate``."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        # a historical app has no models module, which create_permissions takes as "no models"
        models_module = getattr(app_config, "models_module", None)
        app_config.models_module = models_module or True
        try:
            create_permissions(app_config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
        finally:
            app_config.models_module = models_module


def create_roles(apps, schema_editor) -> None:
    """Each group with exactly its role's permissions. Raises ``LookupError`` naming any
    permission that does not exist (a role must not silently lose one)."""
    create_permissions_now(apps, schema_editor)
    alias = schema_editor.connection.alias
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    wanted = {name for perms in ROLES.values() for name in perms}
    found = {
        f"{p.content_type.app_label}.{p.codename}": p
        for p in Permission.objects.using(alias)
        .select_related("content_type")
        .filter(codename__in={name.split(".", 1)[1] for name in wanted})
    }
    missing = sorted(wanted - set(found))
    if missing:
        raise LookupError(f"Permissions the roles need do not exist: {', '.join(missing)}")
    for name, perms in ROLES.items():
        group, _ = Group.objects.using(alias).get_or_create(name=name)
        group.permissions.set([found[p] for p in perms])


def delete_roles(apps, schema_editor) -> None:
    Group = apps.get_model("auth", "Group")
    Group.objects.using(schema_editor.connection.alias).filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("muse_experiments", "0006_exposure_first_exposed_idx"),
        ("routing", "0008_completion_request_permission"),
        ("transcripts", "0003_training_data_permissions"),
        ("analytics", "0007_event_id_per_source"),
    ]

    operations = [migrations.RunPython(create_roles, delete_roles)]
