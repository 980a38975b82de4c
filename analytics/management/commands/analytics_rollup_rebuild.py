"""Rebuild the dashboards' call rollup from the call records now.

Usage: ``manage.py analytics_rollup_rebuild``. The analytics task does the same on its next run
whenever the stored rows were cut in another time zone than ``MUSE_REPORTING_TIME_ZONE`` (after
changing it, or after migration ``analytics.0008``); this command does not wait for it.
"""

from django.core.management.base import BaseCommand
from django.utils import timezone

from analytics.rollups import call_rollup_refresh


class Command(BaseCommand):
    help = "Recompute every call rollup row (hours and reporting-zone days) from the call records."

    def handle(self, *args, **options):
        rows = call_rollup_refresh(rebuild=True)
        self.stdout.write(f"call rollup rebuilt: {rows} rows, days in {timezone.get_default_timezone_name()}")
