"""Index ``Exposure.first_exposed_at`` (the rollups' scans). On PostgreSQL the index is built
``CONCURRENTLY`` so a large exposures table keeps taking writes meanwhile (the migration is
therefore not atomic); elsewhere it is a plain ``CREATE INDEX``."""

from django.db import migrations, models

INDEX = models.Index(fields=["first_exposed_at"], name="exposure_first_exposed_idx")


def create(apps, schema_editor):
    model = apps.get_model("muse_experiments", "Exposure")
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name(model._meta.db_table)
        schema_editor.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {schema_editor.quote_name(INDEX.name)} "
            f"ON {table} ({schema_editor.quote_name('first_exposed_at')})"
        )
    else:
        schema_editor.add_index(model, INDEX)


def drop(apps, schema_editor):
    model = apps.get_model("muse_experiments", "Exposure")
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(INDEX.name)}")
    else:
        schema_editor.remove_index(model, INDEX)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("muse_experiments", "0005_version_layer_hash")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="exposure", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        )
    ]
