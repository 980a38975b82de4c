"""``manage.py seed_catalogue [--simulated-base-url URL]``: load the model catalogue (idempotent)."""

from django.core.management.base import BaseCommand

from routing.catalogue import endpoint_seeds, provider_seeds
from routing.services import catalogue_seed


class Command(BaseCommand):
    help = "Load 15 Avocado versions, azure/muse-special and Claude models into the catalogue."

    def add_arguments(self, parser):
        parser.add_argument("--simulated-base-url", help="Point every provider at the simulated upstreams.")

    def handle(self, *args, simulated_base_url=None, **options):
        providers, endpoints = catalogue_seed(
            providers=provider_seeds(simulated_base_url), endpoints=endpoint_seeds(), actor="seed_catalogue"
        )
        self.stdout.write(f"catalogue: {providers} providers, {endpoints} model endpoints")
