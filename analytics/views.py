"""Analyst pages (staff login): experiments list, results of one experiment, routing health.

Views stay thin: :mod:`analytics.dashboards` reads, :mod:`analytics.tables` exports. Every table
answers ``?export=csv|json&table=<id>`` with its raw values. Each page needs the Django
permissions below (403 without them, as in the admin; README "Roles"); recomputing needs what
``POST /api/v1/experiments/{key}/results/compute`` needs (``muse_experiments.api.auth``).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required
from django.db import transaction
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from muse_experiments.api.auth import SESSION_PERMISSIONS
from muse_experiments.experiments.models import Experiment, ExperimentStatus, Layer

from .bandit_tables import bandit_page
from .bandits import bandit_results
from .dashboards import (
    ANALYSES,
    ENGINES,
    endpoint_labels,
    experiment_list,
    results_dashboard,
    results_options,
    routing_health,
    shadow_test_list,
)
from .models import SnapshotTrigger
from .rollout_page import rollout_section
from .tables import EXPORT_FORMATS, Table, export_response
from .tasks import compute_results

#: Django permissions each page needs (all of them).
VIEW_EXPERIMENTS = SESSION_PERMISSIONS[("experiment-list", "GET")]
VIEW_RESULTS = SESSION_PERMISSIONS[("experiment-results", "GET")]
RECOMPUTE_RESULTS = SESSION_PERMISSIONS[("experiment-results-compute", "POST")]
VIEW_ROUTING_HEALTH = ("routing.view_modelendpoint", "analytics.view_callrollup")
#: What the experiments list needs to list the shadow tests (their results page needs the same).
VIEW_SHADOW_TESTS = ("muse_experiments.view_shadowtest",)


def _export(request, tables: dict[str, Table], filename: str):
    """The export response when the query asks for one, else None (404 for an unknown table)."""
    fmt = request.GET.get("export")
    if not fmt:
        return None
    table = tables.get(request.GET.get("table", ""))
    if fmt not in EXPORT_FORMATS or table is None:
        raise Http404("No such table or export format.")
    return export_response(table, fmt, filename)


def _common() -> dict:
    return {"zone": timezone.get_current_timezone_name(), "labels": endpoint_labels()}


@staff_member_required
@permission_required(VIEW_EXPERIMENTS, raise_exception=True)
def results_index(request):
    """Experiments list with status/layer filters and a search box (each experiment linking to its
    results, a bandit's or rollout's to that section), then the shadow tests linking to theirs
    (for users who may view shadow tests)."""
    status = request.GET.get("status", "")
    layer = request.GET.get("layer", "")
    search = request.GET.get("q", "").strip()
    table = experiment_list(status=status, layer=layer, search=search)
    shadow = shadow_test_list() if request.user.has_perms(VIEW_SHADOW_TESTS) else None
    exported = _export(request, {t.id: t for t in (table, shadow) if t is not None}, "experiments")
    if exported:
        return exported
    return render(
        request,
        "analytics/index.html",
        {
            **_common(),
            "table": table,
            "shadow": shadow,
            "status": status,
            "layer": layer,
            "q": search,
            "statuses": ExperimentStatus.choices,
            "layers": list(Layer.objects.order_by("key").values_list("key", flat=True)),
        },
    )


@staff_member_required
@permission_required(VIEW_RESULTS, raise_exception=True)
def results_page(request, key):
    """One experiment phase: health, metrics with forest plot, cumulative lift, power, distributions."""
    experiment = get_object_or_404(Experiment, key=key)
    options, problems = results_options(query=request.GET, experiment=experiment)
    data = results_dashboard(experiment=experiment, options=options)
    bandit = None
    if experiment.type == "bandit" and experiment.phase:
        bandit = bandit_page(bandit_results(experiment=experiment))
        data = {**data, "tables": {**data["tables"], **bandit["tables"]}}
    exported = _export(request, data["tables"], f"{experiment.key}-phase{options.phase}")
    if exported:
        return exported
    for problem in problems:
        messages.warning(request, problem)
    return render(
        request,
        "analytics/results.html",
        {
            **_common(),
            **data,
            "experiment": experiment,
            "bandit": bandit,
            "bandit_minute_s": settings.BANDIT_MINUTE_S if settings.BANDIT_MINUTE_S != 60 else None,
            "options": options,
            "phases": list(range(1, (experiment.phase or 0) + 1)),
            "engines": ENGINES,
            "analyses": ANALYSES,
            "admin_url": reverse("admin:muse_experiments_experiment_change", args=[experiment.pk]),
            "rollout": rollout_section(experiment=experiment),
        },
    )


@staff_member_required
@permission_required(RECOMPUTE_RESULTS, raise_exception=True)
@require_POST
def results_recompute(request, key):
    """ "Recompute now": enqueue the same task as ``POST /api/v1/experiments/<key>/results/compute``."""
    experiment = get_object_or_404(Experiment, key=key)
    back = reverse("results-page", args=[experiment.key])
    if not experiment.phase:
        messages.error(request, "The experiment has not started: nothing to compute.")
        return HttpResponseRedirect(back)
    request_id = str(uuid.uuid4())
    transaction.on_commit(
        lambda: compute_results.apply_async(
            args=(experiment.id, experiment.phase, SnapshotTrigger.MANUAL, request_id), task_id=request_id
        )
    )
    messages.success(
        request, f"Recomputing phase {experiment.phase} (request {request_id[:8]}); reload in a moment."
    )
    return HttpResponseRedirect(back)


@staff_member_required
@permission_required(VIEW_ROUTING_HEALTH, raise_exception=True)
def routing_health_page(request):
    """Model catalogue with per-endpoint health over the last hour and day."""
    data = routing_health()
    exported = _export(request, {data["table"].id: data["table"]}, "routing-health")
    if exported:
        return exported
    return render(request, "analytics/routing.html", {**_common(), **data})
