"""``manage.py seed_catalogue [--simulated-base-url URL]``: load the model catalogue (idempotent)."""

import urllib.parse

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from routing.catalogue import endpoint_seeds, provider_seeds
from routing.ops_services import catalogue_seed


class Command(BaseCommand):
    help = "Load 15 Avocado versions, azure/muse-special and Claude models into the catalogue."

    def add_arguments(self, parser):
        parser.add_argument(
            "--simulated-base-url",
            help="Point every provider at the simulated upstreams (their host:port must be in SIMULATED_UPSTREAMS).",
        )

    def handle(self, *args, simulated_base_url=None, **options):
        try:
            providers, endpoints = catalogue_seed(
                providers=provider_seeds(simulated_base_url),
                endpoints=endpoint_seeds(),
                actor="seed_catalogue",
            )
        except ValidationError as exc:
            lines = [f"  {name}: {' '.join(messages)}" for name, messages in exc.message_dict.items()]
            hint = ""
            if simulated_base_url:
                where = urllib.parse.urlsplit(simulated_base_url).netloc
                hint = (
                    f"\nFor the simulated upstreams, set SIMULATED_UPSTREAMS={where} for this command "
                    "and for the web and worker processes."
                )
            raise CommandError("The catalogue was not seeded:\n" + "\n".join(lines) + hint) from None
        self.stdout.write(f"catalogue: {providers} providers, {endpoints} model endpoints")
