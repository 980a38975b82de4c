"""Celery queue names, in one place (PostHog ``posthog/tasks/utils.py`` style)."""

from enum import StrEnum


class Queue(StrEnum):
    COMPLETIONS = "completions"
    ANALYTICS = "analytics"
    MAINTENANCE = "maintenance"
    SHADOW = "shadow"  # shadow tests' calls: their own workers, never delaying a primary
