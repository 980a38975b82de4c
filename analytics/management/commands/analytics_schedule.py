"""Create or change the periodic recomputation of running experiments' results (django-celery-beat).

Usage: ``manage.py analytics_schedule --every 15`` (minutes) or ``--disable``.
"""

from django.core.management.base import BaseCommand, CommandError

from analytics.services import results_schedule_ensure


class Command(BaseCommand):
    help = "Schedule result snapshots of every running experiment every N minutes (celery beat)."

    def add_arguments(self, parser):
        parser.add_argument("--every", type=int, default=15, help="minutes between runs (default 15)")
        parser.add_argument("--disable", action="store_true", help="keep the task but stop running it")

    def handle(self, *args, every: int, disable: bool, **options):
        try:
            task = results_schedule_ensure(every_minutes=every, enabled=not disable)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        state = "disabled" if disable else f"every {every} min"
        self.stdout.write(f"{task.name}: {task.task} on queue {task.queue}, {state}")
