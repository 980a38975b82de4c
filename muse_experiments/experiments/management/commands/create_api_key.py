"""``manage.py create_api_key --name NAME --scopes completions,events [--rate-limit 6000]``.

Prints the raw key once, on stdout; only its SHA-256 digest is stored, so it cannot be shown again.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from muse_experiments.api.auth import SCOPES, api_key_create


class Command(BaseCommand):
    help = "Create an API key and print it once (it is stored hashed and cannot be shown again)."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--scopes", default="completions,events", help=f"Comma-separated, from: {', '.join(SCOPES)}"
        )
        parser.add_argument("--rate-limit", type=int, default=6000, help="Requests per minute.")

    def handle(self, *args, name, scopes, rate_limit, **options):
        try:
            key, raw = api_key_create(
                name=name,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                rate_limit_per_minute=rate_limit,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Created key {key.prefix} ({key.name}) with scopes {', '.join(key.scopes)}; "
            "it is shown once, below:"
        )
        self.stdout.write(raw)
