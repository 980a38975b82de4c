# Lease and streaming bookkeeping on CompletionJob (engineer c). Written by hand so it holds only
# these fields; other routing changes come in their own migrations.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("routing", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="completionjob",
            name="deliveries",
            field=models.PositiveIntegerField(
                default=0, help_text="How many times a worker picked the task up (redeliveries count)."
            ),
        ),
        migrations.AddField(
            model_name="completionjob",
            name="lease_expires_at",
            field=models.DateTimeField(
                blank=True,
                null=True,
                help_text="A running job whose lease has expired belongs to a dead worker; it is failed, never re-run.",
            ),
        ),
        migrations.AddField(
            model_name="completionjob",
            name="stream",
            field=models.BooleanField(default=False, help_text="Deltas are published to the job's Redis stream."),
        ),
        migrations.AddField(
            model_name="completionjob",
            name="worker",
            field=models.CharField(blank=True, max_length=200, help_text="Worker holding the lease."),
        ),
        migrations.AddIndex(
            model_name="completionjob",
            index=models.Index(fields=["status", "lease_expires_at"], name="job_status_lease"),
        ),
    ]
