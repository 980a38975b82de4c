from django.apps import AppConfig


class MuseExperimentsConfig(AppConfig):
    """The experiments app. Its label is the project's name, as when the app was the top package:
    tables (``muse_experiments_*``), content types, permissions and migration records keep it."""

    name = "muse_experiments.experiments"
    label = "muse_experiments"
    verbose_name = "Experiments"
