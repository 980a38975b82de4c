"""The experiments list page: one row per experiment with its latest snapshot summarised (and a
link to its bandit or rollout section), and one row per shadow test linking to its results page."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.db.models import Count, OuterRef, Q, Subquery
from django.urls import reverse
from django.utils import timezone

from muse_experiments.experiments.models import Experiment, Rollout, RolloutState, ShadowTest

from ..formatting import percent, status_words
from ..models import GuardrailAction, ResultSnapshot
from ..tables import Column, Table
from .common import kill_text, kills_by_experiment


def _primary(results: Mapping[str, Any]) -> tuple[dict | None, list[dict]]:
    metric = next((m for m in results.get("metrics", []) if m.get("role") == "primary"), None)
    return metric, (metric or {}).get("comparisons", [])


def _type_cell(experiment: Experiment, rollout: Rollout | None) -> dict[str, str]:
    """The "Type" cell: ``A/B``, or ``bandit`` / ``rollout <percent>: <state>`` linking to that
    section of the experiment's results page (``#bandit``, ``#rollout``)."""
    page = reverse("results-page", args=[experiment.key])
    if rollout is not None:
        text = f"rollout {percent(rollout.percent / 100)}: {RolloutState(rollout.state).label.lower()}"
        return {"type": text, "type_href": f"{page}#rollout"}
    if experiment.type == "bandit":
        return {"type": "bandit", "type_href": f"{page}#bandit"}
    return {"type": "A/B", "type__kind": "text"}


def experiment_list(*, status: str = "", layer: str = "", search: str = "") -> Table:
    """Every experiment with its current phase's latest snapshot summarised (one row each)."""
    latest = ResultSnapshot.objects.filter(experiment=OuterRef("pk"), phase=OuterRef("phase")).order_by(
        "-computed_at", "-id"
    )
    qs = Experiment.objects.select_related("layer").annotate(snapshot_id=Subquery(latest.values("id")[:1]))
    if status:
        qs = qs.filter(status=status)
    if layer:
        qs = qs.filter(layer__key=layer)
    if search:
        qs = qs.filter(Q(key__icontains=search) | Q(name__icontains=search) | Q(owner__icontains=search))
    experiments = list(qs.order_by("-started_at", "key"))
    snapshots = ResultSnapshot.objects.defer("inputs").in_bulk(
        [e.snapshot_id for e in experiments if e.snapshot_id]
    )
    kills = kills_by_experiment(experiments)
    rollouts = {r.experiment_id: r for r in Rollout.objects.filter(experiment__in=experiments)}
    alerts: dict[tuple[int, int], list[GuardrailAction]] = defaultdict(list)
    for a in GuardrailAction.objects.filter(experiment__in=experiments):
        alerts[(a.experiment_id, a.phase)].append(a)
    now = timezone.now()
    rows = []
    for e in experiments:
        snap = snapshots.get(e.snapshot_id)
        results = snap.results if snap else {}
        variants = results.get("variants", [])
        units = sum(v.get("units") or 0 for v in variants)
        split = " / ".join(f"{v['key']} {percent((v.get('units') or 0) / units)}" for v in variants if units)
        srm = results.get("srm") or {}
        metric, comparisons = _primary(results)
        verdict = "; ".join(
            f"{c['variant']} {percent(c.get('relative_lift'), signed=True)} ({status_words(c.get('verdict'))})"
            for c in comparisons
        )
        end = e.stopped_at if e.status != "running" and e.stopped_at else now
        rows.append(
            {
                "key": e.key,
                "key_href": reverse("results-page", args=[e.key]),
                "key_note": e.name if e.name != e.key else "",
                **_type_cell(e, rollouts.get(e.id)),
                "name": e.name,
                "status": e.status,
                "layer": e.layer.key if e.layer else "",
                "phase": e.phase,
                "days_running": (end - e.started_at).total_seconds() / 86400 if e.started_at else None,
                "units": units if snap else None,
                "split": split,
                "srm": ("mismatch" if srm.get("flagged") else srm.get("status")) if srm else None,
                "srm_p": srm.get("p_value"),
                "primary_metric": e.primary_metric,
                "primary_verdict": verdict or (status_words((metric or {}).get("status")) if metric else ""),
                "kill_switches": "; ".join(kill_text(k) for k in kills.get(e.id, [])),
                "guardrail_alerts": len(alerts.get((e.id, e.phase), [])),
                "snapshot_at": snap.computed_at if snap else None,
                "_class": "alert"
                if srm.get("flagged") or kills.get(e.id) or alerts.get((e.id, e.phase))
                else "",
            }
        )
    return Table(
        id="experiments",
        title="Experiments",
        row_class="_class",
        columns=[
            Column("key", "Experiment", "link"),
            Column("type", "Type", "link", help="A bandit or a rollout links to its section of the results"),
            Column("status", "Status", "status"),
            Column("layer", "Layer"),
            Column("days_running", "Running for", "days"),
            Column("units", "Units so far", "int"),
            Column("split", "Split (units per variant)"),
            Column("srm", "Sample ratio", "status", help="Chi-square test of the split against the weights"),
            Column("primary_metric", "Primary metric"),
            Column("primary_verdict", "Primary verdict (relative lift)"),
            Column("kill_switches", "Kill switches in force"),
            Column("guardrail_alerts", "Guardrail alerts", "int"),
            Column("snapshot_at", "Results as of", "when"),
        ],
        rows=rows,
    )


def shadow_test_list() -> Table:
    """Every shadow test, newest first, its key linking to its results page
    (``/results/shadow/<key>/``), with its candidate, source, sample and number of pairs."""
    tests = ShadowTest.objects.select_related("candidate", "source_model", "source_experiment").annotate(
        pair_count=Count("pairs")
    )
    rows = [
        {
            "key": t.key,
            "key_href": reverse("shadow-results-page", args=[t.key]),
            "key_note": t.name if t.name != t.key else "",
            "status": t.status,
            "candidate": t.candidate.public_id,
            "source": t.source_model.public_id
            if t.source_model
            else f"{t.source_experiment.key} / {t.source_variant}",
            "source__kind": "model" if t.source_model else "text",
            "sample_percent": t.sample_percent / 100,
            "pairs": t.pair_count,
            "started_at": t.started_at,
        }
        for t in tests.order_by("-created_at", "key")
    ]
    return Table(
        id="shadow-tests",
        title="Shadow tests",
        columns=[
            Column("key", "Shadow test", "link"),
            Column("status", "Status", "status"),
            Column("candidate", "Candidate", "model"),
            Column("source", "Mirrors", "model"),
            Column("sample_percent", "Sessions sampled", "pct"),
            Column("pairs", "Pairs", "int"),
            Column("started_at", "Started", "when"),
        ],
        rows=rows,
    )
