"""A shadow test's results: ``GET /api/v1/shadow-tests/{key}/results`` (scope ``analytics:read``;
``?export=csv|json`` downloads the comparison table) and the staff results page
(``/results/shadow/<key>/``: the comparison, charts of the verdicts and per-call figures, the same
exports). Exports: ``table=comparison`` (default) or ``table=pairs`` (each pair's figures), CSV
cells that a spreadsheet would run as formulas neutralised (:mod:`muse_experiments.infra.csv_export`). Both read :func:`routing.shadow.results.shadow_results`."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required
from django.http import Http404
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from analytics.tables import EXPORT_FORMATS, Column, Table, export_response
from muse_experiments.api.auth import HasScope
from muse_experiments.experiments.models import ShadowPair, ShadowTest

from .apis import shadow_payload
from .results import results_rows, shadow_results

VIEW_SHADOW_TESTS = ("muse_experiments.view_shadowtest",)


def comparison_table(results: dict) -> Table:
    """The comparison as a table (one row per measure) for the page and the exports."""
    return Table(
        id="comparison",
        title="Candidate against primary (95 % intervals clustered by session)",
        columns=[
            Column("measure", "Measure"),
            Column("primary", "Primary", "num"),
            Column("candidate", "Candidate", "num"),
            Column("estimate", "Estimate", "num", help="Ratio candidate / primary, or a rate"),
            Column("ci_low", "CI low", "num"),
            Column("ci_high", "CI high", "num"),
        ],
        rows=results_rows(results),
        note="Ratios: delta method (means) or session bootstrap (p50); rates: clustered Wald, t(k-1).",
    )


PAIR_COLUMNS = (
    ("session_id", "Session", "text"),
    ("job_id", "Primary job", "text"),
    ("primary_model", "Primary", "model"),
    ("candidate_model", "Candidate", "model"),
    ("candidate_ok", "Candidate answered", "text"),
    ("primary_latency_ms", "Primary latency", "ms"),
    ("candidate_latency_ms", "Candidate latency", "ms"),
    ("primary_cost_usd", "Primary cost", "money"),
    ("candidate_cost_usd", "Candidate cost", "money"),
    ("primary_output_tokens", "Primary output tokens", "int"),
    ("candidate_output_tokens", "Candidate output tokens", "int"),
    ("judge_candidate_first", "Candidate shown first", "text"),
    ("judge_verdict", "Verdict", "text"),
    ("judge_cost_usd", "Judge cost", "money"),
)


def pairs_table(test: ShadowTest) -> Table:
    """Every pair's figures (no answer text: a shadow answer is shown to no one)."""
    rows = ShadowPair.objects.filter(test=test).order_by("id").values(*(c[0] for c in PAIR_COLUMNS))
    return Table(
        id="pairs",
        title="Pairs",
        columns=[Column(*c) for c in PAIR_COLUMNS],
        rows=[{k: float(v) if isinstance(v, Decimal) else v for k, v in r.items()} for r in rows],
    )


def _export(test: ShadowTest, results: dict, fmt: str, table_id: str):
    tables = {"comparison": lambda: comparison_table(results), "pairs": lambda: pairs_table(test)}
    if fmt not in EXPORT_FORMATS or table_id not in tables:
        return None
    return export_response(tables[table_id](), fmt, f"shadow-{test.key}")


class ResultsOutputSerializer(serializers.Serializer):
    pairs = serializers.IntegerField()
    sessions = serializers.IntegerField()
    candidate_failed = serializers.IntegerField()
    dropped = serializers.IntegerField()
    spent_usd = serializers.FloatField()
    latency_ms = serializers.JSONField()
    cost_usd_per_call = serializers.JSONField()
    output_tokens_per_call = serializers.JSONField()
    tool_call_agreement = serializers.JSONField()
    judge = serializers.JSONField(allow_null=True)


class ShadowTestResultsApi(APIView):
    """The comparison of a shadow test (shape: :mod:`routing.shadow.results`)."""

    permission_classes = [HasScope]
    required_scope = "analytics:read"

    @extend_schema(
        parameters=[
            OpenApiParameter("export", str, enum=list(EXPORT_FORMATS), description="Download a table"),
            OpenApiParameter(
                "table", str, enum=["comparison", "pairs"], description="Which (default comparison)"
            ),
        ],
        responses={200: ResultsOutputSerializer, 404: OpenApiResponse(description="Unknown shadow test")},
    )
    def get(self, request, key):
        test = get_object_or_404(ShadowTest, key=key)
        results = shadow_results(test)
        fmt = request.query_params.get("export")
        if fmt is not None:
            exported = _export(test, results, fmt, request.query_params.get("table", "comparison"))
            if exported is None:
                raise serializers.ValidationError(
                    {"export": [f"export is one of {', '.join(EXPORT_FORMATS)}; table comparison or pairs."]}
                )
            return exported
        return Response(ResultsOutputSerializer(results).data)


@staff_member_required
@permission_required(VIEW_SHADOW_TESTS, raise_exception=True)
def shadow_results_page(request, key):
    """One shadow test: status, spend, the comparison table and charts; ``?export=csv|json&table=comparison``."""
    test = get_object_or_404(ShadowTest.objects.select_related("candidate", "judge", "source_model"), key=key)
    results = shadow_results(test)
    table = comparison_table(results)
    fmt = request.GET.get("export")
    if fmt:
        exported = _export(test, results, fmt, request.GET.get("table", table.id))
        if exported is None:
            raise Http404("No such table or export format.")
        return exported
    judge = results["judge"]
    verdicts = {
        "labels": ["candidate wins", "primary wins", "ties", "invalid"],
        "series": {
            "verdicts": [judge["candidate_wins"], judge["primary_wins"], judge["ties"], judge["invalid"]]
            if judge
            else []
        },
    }
    per_call = {
        "labels": ["latency p50 (ms)", "cost per call (µUSD)", "output tokens per call"],
        "series": {
            side: [
                results["latency_ms"][f"{side}_p50"],
                (results["cost_usd_per_call"][side] or 0) * 1e6,
                results["output_tokens_per_call"][side],
            ]
            for side in ("primary", "candidate")
        },
    }
    return render(
        request,
        "analytics/shadow.html",
        {
            "test": test,
            "config": shadow_payload(test),
            "results": results,
            "t": table,
            "verdicts": verdicts,
            "per_call": per_call,
            "admin_url": reverse("admin:muse_experiments_shadowtest_change", args=[test.pk]),
        },
    )
