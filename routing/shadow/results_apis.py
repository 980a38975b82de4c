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

from analytics.dashboards import endpoint_labels
from analytics.formatting import number
from analytics.tables import EXPORT_FORMATS, Column, Table, export_response
from analytics.views import VIEW_SHADOW_TESTS
from muse_experiments.api.auth import HasScope
from muse_experiments.experiments.models import ShadowPair, ShadowTest

from .apis import shadow_payload
from .results import results_rows, shadow_results

#: How the page names each measure of the comparison (the exports keep the codes).
MEASURES = {
    "latency_p50_ratio": "Latency p50 (ms), candidate ÷ primary",
    "cost_usd_per_call_ratio": "Cost per call (USD), candidate ÷ primary",
    "output_tokens_per_call_ratio": "Output tokens per call, candidate ÷ primary",
    "tool_call_agreement": "Same tool calls (share of pairs)",
    "judge_win_rate": "Judge: candidate win rate (a tie counts half)",
}


def comparison_table(results: dict) -> Table:
    """The comparison as a table (one row per measure) for the page and the exports."""
    return Table(
        id="comparison",
        title="Candidate against primary (95 % intervals clustered by session)",
        columns=[
            Column("measure", "Measure", "code"),
            Column("primary", "Primary", "num"),
            Column("candidate", "Candidate", "num"),
            Column("estimate", "Estimate", "num", help="Ratio candidate / primary, or a rate"),
            Column("ci_low", "CI low", "num"),
            Column("ci_high", "CI high", "num"),
        ],
        rows=[{**r, "measure_label": MEASURES.get(r["measure"], "")} for r in results_rows(results)],
        note="Ratios: delta method (means) or session bootstrap (p50); rates: clustered Wald, t(k-1).",
    )


#: The judge's verdicts as the page names them: (label, key in ``results["judge"]``).
VERDICTS = (
    ("candidate wins", "candidate_wins"),
    ("primary wins", "primary_wins"),
    ("ties", "ties"),
    ("invalid", "invalid"),
)


def judge_table(results: dict) -> Table | None:
    """The judge's verdicts (pairs each, and their share of the judged pairs); None without a judge."""
    judge = results["judge"]
    if judge is None:
        return None
    judged = sum(judge[key] for _, key in VERDICTS)
    return Table(
        id="judge",
        title="Judge verdicts",
        columns=[
            Column("verdict", "Verdict"),
            Column("pairs", "Pairs", "int"),
            Column("share", "Share", "pct"),
        ],
        rows=[
            {"verdict": label, "pairs": judge[key], "share": judge[key] / judged if judged else None}
            for label, key in VERDICTS
        ],
        note=(
            "Pairs the candidate answered. Invalid: the judge did not answer with one VERDICT line. "
            f"Not judged (no judge call made or it failed): {judge['not_judged']}."
        ),
    )


def interval_text(interval: dict) -> str:
    """``{"estimate", "ci": [lo, hi]}`` as ``0.7 [0.45, 0.95]`` (three significant digits)."""
    return f"{number(interval['estimate'])} [{number(interval['ci'][0])}, {number(interval['ci'][1])}]"


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


def pairs_table(test: ShadowTest, labels: dict[str, str] | None = None) -> Table:
    """Every pair's figures (no answer text: a shadow answer is shown to no one). The models are
    public ids, exported with ``primary_model_label`` / ``candidate_model_label``: the version label
    (``avocado-v14``) from ``labels`` (``{public id: label}``, :func:`endpoint_labels` by
    default), else the id itself."""
    labels = endpoint_labels() if labels is None else labels
    rows = ShadowPair.objects.filter(test=test).order_by("id").values(*(c[0] for c in PAIR_COLUMNS))
    models = [c[0] for c in PAIR_COLUMNS if c[2] == "model"]
    return Table(
        id="pairs",
        title="Pairs",
        columns=[Column(*c) for c in PAIR_COLUMNS],
        rows=[
            {
                **{k: float(v) if isinstance(v, Decimal) else v for k, v in r.items()},
                **{f"{m}_label": labels.get(r[m], r[m]) for m in models},
            }
            for r in rows
        ],
    )


#: The tables ``?export=`` can download.
EXPORT_TABLES = ("comparison", "pairs", "judge")


def _export(test: ShadowTest, results: dict, fmt: str, table_id: str):
    tables = {
        "comparison": lambda: comparison_table(results),
        "pairs": lambda: pairs_table(test),
        "judge": lambda: judge_table(results),
    }
    table = tables[table_id]() if fmt in EXPORT_FORMATS and table_id in tables else None
    return export_response(table, fmt, f"shadow-{test.key}") if table is not None else None


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
                "table",
                str,
                enum=list(EXPORT_TABLES),
                description="Which (default comparison; judge: tests with a judge)",
            ),
        ],
        responses={200: ResultsOutputSerializer, 404: OpenApiResponse(description="Unknown shadow test")},
    )
    def get(self, request, key):
        test = get_object_or_404(ShadowTest, key=key)
        results = shadow_results(test)
        fmt = request.query_params.get("export")
        if fmt is not None:
            table_id = request.query_params.get("table", "comparison")
            errors = {}
            if fmt not in EXPORT_FORMATS:
                errors["export"] = [f"export is one of {', '.join(EXPORT_FORMATS)}."]
            if table_id not in EXPORT_TABLES:
                errors["table"] = [f"table is one of {', '.join(EXPORT_TABLES)}."]
            elif table_id == "judge" and results["judge"] is None:
                errors["table"] = [
                    "This shadow test has no judge, so no judge table: export comparison or pairs."
                ]
            if errors:
                raise serializers.ValidationError(errors)
            return _export(test, results, fmt, table_id)
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
        "labels": [label for label, _ in VERDICTS],
        "series": {"verdicts": [judge[key] for _, key in VERDICTS] if judge else []},
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
            "judge_table": judge_table(results),
            "labels": endpoint_labels(),
            "win_rate": interval_text(judge["win_rate"]) if judge else "",
            "verdicts": verdicts,
            "per_call": per_call,
            "admin_url": reverse("admin:muse_experiments_shadowtest_change", args=[test.pk]),
        },
    )
