"""Result dashboards (staff only)."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.shortcuts import get_object_or_404, render

from muse_experiments.models import Experiment

from .models import ResultSnapshot


@staff_member_required
def results_page(request, key):
    experiment = get_object_or_404(Experiment, key=key)
    snapshot = ResultSnapshot.objects.filter(experiment=experiment).first()
    return render(request, "analytics/results.html", {"experiment": experiment, "snapshot": snapshot})


@staff_member_required
def results_index(request):
    experiments = Experiment.objects.order_by("-started_at", "key")
    return render(request, "analytics/index.html", {"experiments": experiments})
