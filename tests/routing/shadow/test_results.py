"""Results of a shadow test: the issue's exact shape, values from the clustered statistics, the
CSV/JSON exports (formula-like cells neutralised) and the staff page."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from analytics.stats.shadow import clustered_rate, median_ratio, ratio_of_means
from muse_experiments.experiments.models import ShadowPair
from muse_experiments.experiments.services.shadow import shadow_test_create
from routing.catalogue import avocado_id
from routing.shadow.budget import dropped_count
from tests.factories import api_key, seed_catalogue

pytestmark = pytest.mark.django_db
URL = "/api/v1/shadow-tests/sh/results"

# (session, primary latency, candidate latency, primary cost, candidate cost, primary tokens,
#  candidate tokens, primary tools, candidate tools, verdict)
ROWS = [
    ("=HYPERLINK(1)", 100, 130, "0.00010", "0.00012", 10, 14, ["search"], ["search"], "candidate"),
    ("=HYPERLINK(1)", 120, 150, "0.00020", "0.00030", 20, 22, [], [], "tie"),
    ("s-2", 90, 80, "0.00010", "0.00009", 12, 10, ["search"], [], "primary"),
    ("s-3", 200, 260, "0.00040", "0.00050", 30, 41, ["a", "b"], ["b", "a"], "invalid"),
    ("s-3", 210, 230, "0.00030", "0.00020", 25, 20, [], ["a"], "candidate"),
    ("s-4", 150, 170, "0.00020", "0.00028", 16, 19, [], [], "candidate"),
]


@pytest.fixture
def shadow(upstreams, redis_store):
    seed_catalogue(upstreams.url)
    test = shadow_test_create(
        key="sh", name="sh", candidate="avocado-v14", source={"model": avocado_id(15)}, sample_percent=100,
        judge={"model": "avocado-v13"}, max_usd_per_day=Decimal(1), allow_external=False, actor="t",
    )  # fmt: skip
    for i, (s, pl, cl, pc, cc, pt, ct, ptools, ctools, verdict) in enumerate(ROWS):
        ShadowPair.objects.create(
            test=test, job_id=f"j-{i}", session_id=s, user_id="u", primary_model=avocado_id(15),
            primary_latency_ms=pl, candidate_latency_ms=cl, primary_cost_usd=Decimal(pc),
            candidate_cost_usd=Decimal(cc), primary_output_tokens=pt, candidate_output_tokens=ct,
            primary_tool_calls=[{"name": n, "arguments": {}} for n in ptools],
            candidate_tool_calls=[{"name": n, "arguments": {}} for n in ctools],
            candidate_model=avocado_id(14), judge_model=avocado_id(13), judge_verdict=verdict,
            judge_candidate_first=i % 2 == 0, judge_cost_usd=Decimal("0.00001"),
        )  # fmt: skip
    ShadowPair.objects.create(
        test=test, job_id="j-failed", session_id="s-5", user_id="u", primary_model=avocado_id(15),
        primary_latency_ms=100, primary_cost_usd=Decimal("0.0001"), primary_output_tokens=5,
        candidate_model=avocado_id(14), candidate_ok=False, error="RateLimited",
    )  # fmt: skip
    dropped_count("sh", "budget", 3)
    dropped_count("sh", "backlog")
    return test


def flat(interval: dict) -> list:
    return [interval["estimate"], *interval["ci"]]


def client(scopes=None) -> APIClient:
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key(scopes or ['analytics:read'])}")
    return c


def test_the_results_have_the_issues_shape_and_the_clustered_statistics(shadow):
    got = client().get(URL).json()
    assert set(got) == {
        "pairs", "sessions", "candidate_failed", "dropped", "spent_usd", "latency_ms",
        "cost_usd_per_call", "output_tokens_per_call", "tool_call_agreement", "judge",
    }  # fmt: skip
    assert (got["pairs"], got["sessions"], got["candidate_failed"], got["dropped"]) == (7, 5, 1, 4)
    assert got["spent_usd"] == pytest.approx(0.00149 + 6 * 0.00001)
    by = {}
    for r in ROWS:
        by.setdefault(r[0], []).append(r)
    sessions = list(by.values())
    lat = median_ratio([[r[2] for r in s] for s in sessions], [[r[1] for r in s] for s in sessions])
    assert got["latency_ms"] == {"primary_p50": 135.0, "candidate_p50": 160.0, "ratio": lat.to_dict()}
    cost = ratio_of_means(
        [sum(float(r[4]) for r in s) for s in sessions], [sum(float(r[3]) for r in s) for s in sessions]
    )
    assert flat(got["cost_usd_per_call"]["ratio"]) == pytest.approx(flat(cost.to_dict()))
    assert got["cost_usd_per_call"]["primary"] == pytest.approx(0.00130 / 6)
    assert got["output_tokens_per_call"]["candidate"] == pytest.approx(126 / 6)
    agree = clustered_rate([2, 0, 1, 1], [2, 1, 2, 1])  # "b, a" agrees with "a, b": names as a multiset
    assert got["tool_call_agreement"]["rate"] == pytest.approx(4 / 6)
    assert got["tool_call_agreement"]["ci"] == pytest.approx([agree.lo, agree.hi])
    judge = got["judge"]
    assert (judge["candidate_wins"], judge["primary_wins"], judge["ties"], judge["invalid"]) == (3, 1, 1, 1)
    win = clustered_rate([1.5, 0, 1, 1], [2, 1, 1, 1])
    assert flat(judge["win_rate"]) == pytest.approx(flat(win.to_dict()))
    assert judge["win_rate"]["estimate"] == pytest.approx(3.5 / 5)


def test_exports_neutralise_formula_cells(shadow):
    c = client()
    pairs = c.get(URL, {"export": "csv", "table": "pairs"})
    assert pairs.status_code == 200 and pairs["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(pairs.content.decode())))
    assert [r["session_id"] for r in rows][:2] == ["'=HYPERLINK(1)", "'=HYPERLINK(1)"]
    assert "candidate_text" not in rows[0]
    comparison = c.get(URL, {"export": "json"}).json()
    assert [r["measure"] for r in comparison["rows"]] == [
        "latency_p50_ratio", "cost_usd_per_call_ratio", "output_tokens_per_call_ratio",
        "tool_call_agreement", "judge_win_rate",
    ]  # fmt: skip
    assert c.get(URL, {"export": "xml"}).status_code == 400
    assert client(["completions"]).get(URL).status_code == 403


def test_export_errors_name_the_wrong_parameter_and_a_missing_judge(shadow):
    """A bad ``table`` is an error on ``table`` (it was on ``export``, with a message listing the
    very table asked for), and a test without a judge says it has no judge table."""
    c = client()
    assert c.get(URL, {"export": "csv", "table": "judge"}).status_code == 200  # this test has a judge
    bad_table = c.get(URL, {"export": "csv", "table": "zzz"}).json()["error"]["fields"]
    assert bad_table == {"table": ["table is one of comparison, pairs, judge."]}
    shadow_test_create(
        key="no-judge", name="no judge", candidate="avocado-v14", source={"model": avocado_id(15)},
        sample_percent=100, judge=None, max_usd_per_day=Decimal(1), allow_external=False, actor="t",
    )  # fmt: skip
    no_judge = c.get("/api/v1/shadow-tests/no-judge/results", {"export": "json", "table": "judge"})
    assert no_judge.status_code == 400
    assert "has no judge" in no_judge.json()["error"]["fields"]["table"][0]
    assert (
        c.get("/api/v1/shadow-tests/no-judge/results", {"export": "csv", "table": "pairs"}).status_code == 200
    )


def test_the_pairs_export_labels_the_models_and_keeps_its_header_without_pairs(shadow):
    """``primary_model_label`` / ``candidate_model_label`` were always empty (the split export
    fills ``endpoint_label``), and a test without pairs had a header without them."""
    from routing.models import ModelEndpoint

    ModelEndpoint.objects.filter(public_id="azure/muse-special").update(version_label="")  # no label: the id
    ShadowPair.objects.create(
        test=shadow, job_id="j-ext", session_id="s-6", user_id="u", primary_model=avocado_id(15),
        primary_latency_ms=100, primary_cost_usd=Decimal("0.0001"), primary_output_tokens=5,
        candidate_model="azure/muse-special", candidate_latency_ms=90, candidate_output_tokens=4,
    )  # fmt: skip
    c = client()
    pairs = c.get(URL, {"export": "csv", "table": "pairs"}).content.decode()
    rows = list(csv.DictReader(io.StringIO(pairs)))
    labels = [(r["primary_model"], r["primary_model_label"], r["candidate_model_label"]) for r in rows]
    assert labels == [(avocado_id(15), "avocado-v15", "avocado-v14")] * 7 + [
        (avocado_id(15), "avocado-v15", "azure/muse-special")
    ]
    as_json = c.get(URL, {"export": "json", "table": "pairs"}).json()["rows"]
    assert (as_json[0]["primary_model_label"], as_json[-1]["candidate_model_label"]) == (
        "avocado-v15",
        "azure/muse-special",
    )
    shadow_test_create(
        key="empty", name="empty", candidate="avocado-v14", source={"model": avocado_id(15)},
        sample_percent=100, judge=None, max_usd_per_day=Decimal(1), allow_external=False, actor="t",
    )  # fmt: skip
    empty = c.get("/api/v1/shadow-tests/empty/results", {"export": "csv", "table": "pairs"}).content.decode()
    assert empty.splitlines() == [pairs.splitlines()[0]]
    assert "primary_model,primary_model_label,candidate_model,candidate_model_label" in empty


def test_the_results_page_shows_the_comparison_and_its_charts(shadow, admin_client):
    page = admin_client.get("/results/shadow/sh/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="shadow-pairs">7<' in html
    assert 'id="chart-verdicts"' in html and 'id="data-per-call"' in html
    assert "judge_win_rate" in html or "Judge" in html
    export = admin_client.get("/results/shadow/sh/", {"export": "csv", "table": "comparison"})
    assert export.status_code == 200 and b"cost_usd_per_call_ratio" in export.content
    assert admin_client.get("/results/shadow/missing/").status_code == 404
