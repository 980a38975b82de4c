"""Optimistic-concurrency version on experiments; per-layer hash choice.

Existing layers keep the GrowthBook namespace hash (version 1) so no unit changes assignment; new
layers default to the unbiased hash (version 2).
"""

from django.db import migrations, models


def existing_layers_keep_the_growthbook_hash(apps, schema_editor):
    apps.get_model("muse_experiments", "Layer").objects.update(hash_version=1)


class Migration(migrations.Migration):
    dependencies = [
        ("muse_experiments", "0004_reserved_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="experiment",
            name="version",
            field=models.PositiveIntegerField(
                default=1,
                editable=False,
                help_text="Bumped by every change; an edit based on an older version is refused "
                "(optimistic concurrency, shared by the admin and the API).",
            ),
        ),
        migrations.AddField(
            model_name="layer",
            name="hash_version",
            field=models.PositiveSmallIntegerField(
                choices=[
                    (1, "GrowthBook namespace hash (compatible; correlated for similar layer keys)"),
                    (2, "Unbiased hash (independent layers whatever their keys; the default)"),
                ],
                default=2,
                help_text="Unbiased keeps layers independent. Choose the GrowthBook hash only to match "
                "units with a GrowthBook namespace of the same key; it correlates layers whose keys "
                "differ in a few characters (layer-a / layer-b). Fixed once an experiment uses the layer.",
            ),
        ),
        migrations.RunPython(existing_layers_keep_the_growthbook_hash, migrations.RunPython.noop),
    ]
