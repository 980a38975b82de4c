"""Services: every write to experiments goes through these functions (Django-Styleguide).

Each is keyword-only, runs in one transaction, records an :class:`~..models.AuditEntry` (actor,
action and a field-level ``{field: [before, after]}`` diff, :mod:`.audit`), and bumps the
configuration version so every routing process picks the change up within about a second. Invalid
input raises :class:`django.core.exceptions.ValidationError` with field errors and writes nothing.

By responsibility:

* :mod:`.rules` -- which fields may change when, and the cross-field checks of an experiment;
* :mod:`.variants` -- the variant set (its checks and writes) and the phases it runs in;
* :mod:`.edits` -- creating and editing experiments, with optimistic concurrency;
* :mod:`.lifecycle` -- start, pause, stop, archive, re-randomise;
* :mod:`.forced` -- QA pins (forced assignments);
* :mod:`.layers` -- layers and the global holdout;
* :mod:`.exposures` -- first exposures and their sticky cache.
"""
