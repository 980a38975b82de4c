"""Result dashboards (staff only)."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import get_object_or_404, render

from muse_experiments.models import Experiment

from .apis import ANALYSIS_CHOICES
from .models import GuardrailAction
from .selectors import snapshot_latest


@staff_member_required
def results_page(request, key):
    """One experiment's latest snapshot; ``?phase=`` and ``?analysis=itt|served`` pick what to show."""
    experiment = get_object_or_404(Experiment, key=key)
    analysis = request.GET.get("analysis", "itt")
    analysis = analysis if analysis in ANALYSIS_CHOICES else "itt"
    try:
        phase = int(request.GET.get("phase") or experiment.phase or 0)
    except ValueError:
        phase = experiment.phase or 0
    snapshot = snapshot_latest(experiment=experiment, phase=phase) if phase else None
    results = None
    if snapshot is not None:
        results = dict(snapshot.results)
        if analysis == "served":
            results.update(results.get("analyses", {}).get("served", {}))
    actions = GuardrailAction.objects.filter(experiment=experiment, phase=phase)[:20]
    return render(
        request,
        "analytics/results.html",
        {
            "experiment": experiment,
            "snapshot": snapshot,
            "r": results,
            "analysis": analysis,
            "phase": phase,
            "phases": list(range(1, (experiment.phase or 0) + 1)),
            "guardrail_actions": actions,
        },
    )


@staff_member_required
def results_index(request):
    experiments = Experiment.objects.order_by("-started_at", "key")
    return render(request, "analytics/index.html", {"experiments": experiments})
