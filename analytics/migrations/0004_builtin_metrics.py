"""Seed the built-in metric definitions and the periodic results schedule (every 15 minutes)."""

from django.db import migrations

from analytics.builtin_metrics import seed_builtin_metrics

SCHEDULE_TASK_NAME = "analytics: results of running experiments"
DEFAULT_EVERY_MINUTES = 15


def seed(apps, schema_editor):
    seed_builtin_metrics(apps.get_model("analytics", "MetricDefinition"))
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = IntervalSchedule.objects.get_or_create(every=DEFAULT_EVERY_MINUTES, period="minutes")
    PeriodicTask.objects.get_or_create(
        name=SCHEDULE_TASK_NAME,
        defaults={
            "task": "analytics.compute_running_results",
            "interval": interval,
            "queue": "analytics",
            "description": "Recompute result snapshots of every running experiment.",
        },
    )


def unseed(apps, schema_editor):
    apps.get_model("analytics", "MetricDefinition").objects.filter(is_builtin=True).delete()
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=SCHEDULE_TASK_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("analytics", "0003_metrics_settings_guardrails"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(seed, unseed)]
