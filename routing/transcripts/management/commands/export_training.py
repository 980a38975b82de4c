"""``manage.py export_training --out FILE [--since T] [--until T] [--model-version V] [--dry-run]``.

Streams eligible transcript turns to FILE as JSONL (see :mod:`routing.transcripts.export`),
writes the manifest to ``FILE.manifest.json`` and prints it. The turns written are marked
exported only after FILE is complete and closed (not with ``--dry-run``).
``--since``/``--until`` take an ISO date or datetime (naive means UTC); the range is
``[since, until)``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date, parse_datetime

from routing.transcripts.export import TrainingExport


def parse_moment(value: str | None, option: str) -> datetime | None:
    """ISO date or datetime -> aware datetime (naive = UTC); ``None`` stays ``None``.

    Raises :class:`CommandError` naming ``option`` on a bad value.
    """
    if value is None:
        return None
    try:
        moment = parse_datetime(value)
        if moment is None:
            day = parse_date(value)
            moment = datetime.combine(day, time.min) if day else None
    except ValueError:
        moment = None
    if moment is None:
        raise CommandError(f"{option}: expected an ISO date or datetime, got {value!r}")
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Export eligible (native, not opted-out) transcript turns as JSONL with a manifest."

    def add_arguments(self, parser):
        parser.add_argument("--out", required=True, help="JSONL file to write")
        parser.add_argument("--since", help="ISO date/datetime, inclusive")
        parser.add_argument("--until", help="ISO date/datetime, exclusive")
        parser.add_argument("--model-version", help="catalogue version label or endpoint public id")
        parser.add_argument("--dry-run", action="store_true", help="do not mark turns exported")

    def handle(self, *args, **options):
        since = parse_moment(options["since"], "--since")
        until = parse_moment(options["until"], "--until")
        if since and until and since >= until:
            raise CommandError("--until must be after --since")
        out = Path(options["out"])
        if not out.parent.is_dir():
            raise CommandError(f"--out: directory {out.parent} does not exist")
        export = TrainingExport(since=since, until=until, model_version=options["model_version"])
        with open(out, "w", encoding="utf-8") as fh:
            for line in export.records():
                fh.write(line)
        if not options["dry_run"]:
            export.commit()
        manifest = export.manifest
        Path(f"{out}.manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        self.stdout.write(json.dumps(manifest))
