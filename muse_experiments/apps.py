from django.apps import AppConfig


class MuseExperimentsConfig(AppConfig):
    name = "muse_experiments"
    verbose_name = "Experiments"
