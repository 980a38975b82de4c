"""Transcript turns store only the messages new since the session's previous turn.

Existing turns (which each hold their call's whole input) are rewritten in place: a turn whose
input starts with the previous turn's whole input keeps only the rest and records how many
messages it inherits (``context_messages``); the others stay whole. Reversible.
"""

import hashlib
import json

from django.db import migrations, models


def _digest(messages):
    return hashlib.sha256(json.dumps(list(messages), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def to_deltas(apps, schema_editor):
    Transcript = apps.get_model("transcripts", "Transcript")
    Turn = apps.get_model("transcripts", "TranscriptTurn")
    for transcript in Transcript.objects.order_by("pk").iterator(chunk_size=200):
        previous = None
        for turn in Turn.objects.filter(transcript_id=transcript.pk).order_by("number"):
            whole = list(turn.input_messages)
            if previous and len(whole) >= len(previous) and whole[: len(previous)] == previous:
                turn.context_messages, turn.input_messages = len(previous), whole[len(previous) :]
                turn.save(update_fields=["context_messages", "input_messages"])
            previous = whole
        if previous is not None:
            transcript.last_input_count, transcript.last_input_digest = len(previous), _digest(previous)
            transcript.save(update_fields=["last_input_count", "last_input_digest"])


def to_whole(apps, schema_editor):
    Turn = apps.get_model("transcripts", "TranscriptTurn")
    Transcript = apps.get_model("transcripts", "Transcript")
    for transcript in Transcript.objects.order_by("pk").iterator(chunk_size=200):
        whole = []
        for turn in Turn.objects.filter(transcript_id=transcript.pk).order_by("number"):
            whole = (whole if turn.context_messages else []) + list(turn.input_messages)
            if turn.context_messages:
                turn.input_messages, turn.context_messages = whole, 0
                turn.save(update_fields=["context_messages", "input_messages"])


class Migration(migrations.Migration):
    dependencies = [("transcripts", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="transcript",
            name="last_input_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="transcript",
            name="last_input_digest",
            field=models.CharField(blank=True, max_length=64),
        ),
        migrations.AddField(
            model_name="transcriptturn",
            name="context_messages",
            field=models.PositiveIntegerField(
                default=0, help_text="How many messages of the input are the previous turn's whole input."
            ),
        ),
        migrations.AlterField(
            model_name="transcriptturn",
            name="input_messages",
            field=models.JSONField(default=list, help_text="Messages new in this turn."),
        ),
        migrations.RunPython(to_deltas, to_whole),
    ]
