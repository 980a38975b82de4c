from django.apps import AppConfig


class TranscriptsConfig(AppConfig):
    name = "routing.transcripts"
    label = "transcripts"
    verbose_name = "Transcripts and training data"
