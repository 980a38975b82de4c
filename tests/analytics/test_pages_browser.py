"""The analyst pages in a real browser: Playwright driving Debian's Chromium, headless.

Each page renders without a JavaScript error, its charts draw (a canvas with pixels, forest-plot
intervals with a width), switches and filters change what is shown, Swagger UI and Redoc work
with every request to another host blocked, and a full-page screenshot of each is saved under
``var/artifacts/screenshots/`` for people to look at.

Without Chromium (``apt-get install chromium``) or the ``playwright`` package these tests skip,
saying why; under ``CI=true`` they fail instead (:func:`tests.conftest.need_service`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.analytics.dashboard_data import build_dashboard_experiment
from tests.conftest import REPO, need_service

CHROMIUM = os.environ.get("MUSE_CHROMIUM", "/usr/bin/chromium")
SHOTS = REPO / "var" / "artifacts" / "screenshots"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium for this module (Debian's, never a downloaded build)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        need_service("Playwright", f"the playwright package is not installed ({exc})")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        need_service("Chromium", f"{CHROMIUM} not found: apt-get install chromium")
    # Playwright's sync API keeps an event loop in this thread, which Django's async-safety check
    # mistakes for async code; the ORM calls here are plain synchronous test set-up (Django docs,
    # "Async safety": DJANGO_ALLOW_ASYNC_UNSAFE for such environments).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def site(request, chromium, live_server, transactional_db, client):
    """A logged-in staff browser page on the live server with the dashboard data loaded
    (``build_dashboard_experiment(**request.param)`` when parametrised indirectly).

    Yields ``(page, base_url, problems)``: ``problems`` collects console errors, page errors,
    failed requests and any request to another host (all blocked: the pages must work offline).
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from analytics.views import VIEW_RESULTS, VIEW_ROUTING_HEALTH

    build_dashboard_experiment(**getattr(request, "param", {}))
    user = get_user_model().objects.create_user("analyst", "a@example.com", "pw", is_staff=True)
    # the pages' view permissions (not the Analyst group: a transactional test's flush drops
    # the groups the migration made, and keeps the permissions post_migrate recreates)
    for name in (*VIEW_RESULTS, *VIEW_ROUTING_HEALTH):
        app_label, codename = name.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client.force_login(user)
    client.get("/results/")  # warm the URL conf and imports (slow on a busy machine) before timing out
    context, page, problems = logged_in_page(chromium, live_server.url, client)
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on(
        "requestfailed",
        lambda r: _aborted_by_navigation(r) or problems.append(f"failed: {r.url} {r.failure}"),
    )
    yield page, live_server.url, problems
    context.close()


def _aborted_by_navigation(request) -> bool:
    """A request the browser itself cancelled because the page navigated away (Chromium's
    ``net::ERR_ABORTED``: e.g. the favicon still loading when a filter form is submitted), not a
    fault of the page; a blocked foreign request fails with ``net::ERR_FAILED`` instead."""
    return request.failure == "net::ERR_ABORTED" and "/favicon" in urlparse(request.url).path


def logged_in_page(chromium, base_url: str, client, *, width: int = 1400):
    """A page of a new browser context at ``width`` × 900 px, with the session of ``client`` (a
    Django test client that is logged in), every request to another host than ``base_url``'s
    blocked and page errors collected. Returns ``(context, page, problems)``: ``problems`` lists
    the off-site requests and page errors (add listeners for more); close the context after."""
    host = urlparse(base_url).hostname
    context = chromium.new_context(viewport={"width": width, "height": 900})
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "domain": host, "path": "/"}]
    )
    problems: list[str] = []

    def only_local(route):
        if urlparse(route.request.url).hostname != host:
            problems.append(f"off-site request: {route.request.url}")
            return route.abort()
        return route.continue_()

    context.route("**/*", only_local)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    return context, page, problems


def _shot(page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def _drawn_canvases(page) -> list[str]:
    """Ids of canvases that Chart.js drew and that have at least one non-transparent pixel."""
    return page.evaluate(
        """() => (window.museCharts || []).filter(c => {
              const ctx = c.canvas.getContext('2d');
              const px = ctx.getImageData(0, 0, c.canvas.width, c.canvas.height).data;
              for (let i = 3; i < px.length; i += 4) { if (px[i] !== 0) return true; }
              return false;
           }).map(c => c.canvas.id)"""
    )


def test_results_page_draws_every_chart_and_the_forest_plot(site):
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function("window.museCharts && window.museCharts.length >= 6")
    _shot(page, "results")
    drawn = set(_drawn_canvases(page))
    lift = {"chart-lift-1", "chart-lift-2"}  # one panel per treatment
    assert {"chart-exposures", *lift, "chart-latency", "chart-cost", "chart-tokens"} <= drawn
    widths = page.eval_on_selector_all("svg.forest rect.ci", "els => els.map(e => e.getBBox().width)")
    assert len(widths) == page.locator("svg.forest:not(.empty)").count() >= 4
    assert all(w > 0 for w in widths)
    assert page.locator("#snapshot-time").inner_text().endswith("UTC")
    assert page.locator("span.model[title]").first.get_attribute("title") != ""
    assert problems == []


def test_results_switches_change_the_page(site):
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.select_option("#sw-engine", "bayesian")
    page.wait_for_url("**engine=bayesian**")
    assert page.locator("table[data-table=metrics] th", has_text="Chance to beat control").count() == 1
    page.select_option("#sw-metric", "latency_ms")
    page.wait_for_url("**metric=latency_ms**")
    assert "Cumulative relative lift of latency_ms" in page.content()
    assert "engine=bayesian" in page.url  # switches keep each other
    page.wait_for_function("window.museCharts && window.museCharts.length >= 6")
    _shot(page, "results-bayesian-latency")
    page.select_option("#sw-analysis", "served")
    page.wait_for_url("**analysis=served**")
    page.goto(page.url.replace("from=", "from=2099-01-01"))  # the date range, as the form sends it
    page.wait_for_function("document.querySelectorAll('.chart.no-data').length >= 4")  # said, not blank
    assert page.locator("#sw-from").input_value() == "2099-01-01"
    assert problems == []


#: The page's script has drawn its charts (all in one task: never a part of them).
CHARTS_DRAWN = "window.museCharts && window.museCharts.length >= 5"
#: The latency guardrail of the ``cheap`` arm 68.19× slower than control: about +6,719 %.
HUGE_GUARDRAIL = {"latency": {"cheap": 900.0 * 68.19}}
#: ``[+1.2 %, −3.4 %]``-like interval text.
INTERVAL_TEXT = re.compile(r"^\[[+−±][\d,.]+ %, [+−±][\d,.]+ %\]$")


def _forest_rows(page) -> list[dict]:
    """Per metric-table row: metric, treatment, the interval's pixel width, clip markers, the
    interval text and the bounding boxes of the tick labels."""
    return page.eval_on_selector_all(
        "table[data-table=metrics] tbody tr",
        """rows => rows.map(r => {
             const svg = r.querySelector('svg.forest:not(.empty)');
             const rect = svg && svg.querySelector('rect.ci');
             return {
               metric: r.cells[0].innerText, variant: r.cells[1].innerText,
               width: rect ? rect.getBoundingClientRect().width : null,
               clipped: svg ? svg.querySelectorAll('.clip').length : 0,
               text: (r.querySelector('.ci-text') || {}).innerText || null,
               ticks: svg ? [...svg.querySelectorAll('.ticks text')].map(t => {
                 const b = t.getBoundingClientRect(); return [b.left, b.right, t.textContent]; }) : [],
               cuped: r.cells[r.cells.length - 2].innerText,
             };
           })""",
    )


@pytest.mark.parametrize("site", [HUGE_GUARDRAIL], indirect=True)
def test_each_metric_has_its_own_forest_scale_and_prints_its_interval(site):
    """One guardrail at about +6,719 % no longer squeezes the primary metric's interval to a dot:
    each metric is drawn on its own scale, an interval past it is clipped with a marker, every
    interval is printed, ticks never overlap; the guardrail action reads like the table."""
    from analytics.models import ExperimentAnalysisSettings, GuardrailAction, ResultSnapshot
    from analytics.services import guardrails_apply
    from muse_experiments.experiments.models import Experiment

    experiment = Experiment.objects.get(key="ana")
    ExperimentAnalysisSettings.objects.create(experiment=experiment, guardrail_min_units=10)
    guardrails_apply(snapshot=ResultSnapshot.objects.filter(experiment=experiment).latest("computed_at"))
    assert GuardrailAction.objects.filter(variant_key="cheap", metric="latency_ms").exists()
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function(CHARTS_DRAWN)
    _shot(page, "results-huge-guardrail")
    rows = _forest_rows(page)
    guardrail = next(r for r in rows if r["metric"].startswith("Latency") and r["variant"] == "cheap")
    assert re.match(r"^\[\+\d,\d{3} %, \+\d,\d{3} %\]$", guardrail["text"]), guardrail  # +4,467 %…
    assert guardrail["clipped"] >= 1  # beyond the metric's readable scale: a marker, not a dot
    primary = [r for r in rows if r["metric"].startswith("Task success")]
    assert len(primary) == 2 and all(r["width"] > 40 for r in primary), primary
    drawn = [r for r in rows if r["width"] is not None]
    assert len(drawn) >= 4 and all(INTERVAL_TEXT.match(r["text"]) for r in drawn), drawn
    for r in drawn:  # tick labels side by side, never on top of each other
        ticks = sorted(r["ticks"])
        assert all(a[1] <= b[0] for a, b in zip(ticks, ticks[1:], strict=False)), r
    assert all(r["cuped"] == "yes" or r["cuped"].startswith("no: ") for r in drawn)  # says why not
    actions = page.locator("#guardrail-actions").inner_text()
    assert "Latency (ms" in actions and "p < 0.001" in actions and "+6," in actions
    assert "p=" not in actions and "e-" not in actions and "latency_ms" not in actions
    assert problems == []


def _lift_panels(page) -> list[dict]:
    """Per lift panel: the treatment, the snapshot times, the x pixel of each lift point and the
    pixel height of each interval bar."""
    return page.evaluate(
        """() => window.museCharts.filter(c => c.canvas.id.startsWith('chart-lift-')).map(c => ({
             variant: c.canvas.dataset.variant,
             times: c.data.datasets[3].data.map(p => p.x),
             xs: c.getDatasetMeta(3).data.map(e => e.x),
             bars: c.getDatasetMeta(2).data.map(e => Math.abs(e.base - e.y)),
           }))"""
    )


def test_cumulative_lift_is_plotted_on_real_time_one_panel_per_treatment(site):
    """A fourth snapshot 30 minutes after the third (the others a day apart) sits 30 minutes to
    the right, not one even step; each treatment has its own panel."""
    from analytics.models import LiftPoint
    from analytics.services import results_compute
    from muse_experiments.experiments.models import Experiment

    snapshot = results_compute(experiment=Experiment.objects.get(key="ana"))
    at = LiftPoint.objects.order_by("-computed_at").exclude(snapshot=snapshot).first().computed_at
    LiftPoint.objects.filter(snapshot=snapshot).update(computed_at=at + timedelta(minutes=30))
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function(CHARTS_DRAWN)
    _shot(page, "results-lift-time")
    panels = _lift_panels(page)
    assert sorted(p["variant"] for p in panels) == ["cheap", "fast"]
    for p in panels:
        t, x = p["times"], p["xs"]
        assert len(t) == 4
        for i in range(1, 4):  # pixel steps proportional to time steps
            assert (x[i] - x[0]) / (x[-1] - x[0]) == pytest.approx((t[i] - t[0]) / (t[-1] - t[0]), abs=0.005)
        assert all(h > 2 for h in p["bars"])
    assert problems == []


def test_one_snapshot_still_shows_its_interval(site):
    from analytics.models import LiftPoint

    newest = LiftPoint.objects.order_by("-computed_at").first().snapshot_id
    LiftPoint.objects.exclude(snapshot_id=newest).delete()
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function(CHARTS_DRAWN)
    _shot(page, "results-lift-one-snapshot")
    panels = _lift_panels(page)
    assert len(panels) == 2 and all(len(p["bars"]) == 1 and p["bars"][0] > 10 for p in panels), panels
    assert problems == []


def test_distributions_are_histograms_and_costs_read_per_1000_calls(site):
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function(CHARTS_DRAWN)
    charts = page.evaluate(
        """() => Object.fromEntries(window.museCharts.map(c => [c.canvas.id, {
             type: c.config.type, labels: c.data.labels,
             tension: Math.max(0, ...c.data.datasets.map(d => d.tension || 0))}]))"""
    )
    for name in ("chart-latency", "chart-cost", "chart-tokens"):
        assert charts[name]["type"] == "bar" and charts[name]["tension"] == 0, name
        assert all("–" in label or label[0] in "<≥" for label in charts[name]["labels"]), name
    assert not any(re.search(r"\$0\.0000", label) for label in charts["chart-cost"]["labels"])
    calls = page.locator("table[data-table=calls]")
    assert calls.locator("th", has_text="Cost per 1,000 calls").count() == 1
    assert "$0.00000" not in calls.inner_text() and "$0.00800" in calls.inner_text()  # the cheap arm
    assert "$0.00000" not in page.locator("table[data-table=metrics]").inner_text()
    note = page.locator("#same-populations").inner_text()
    assert "same numbers" in note and "90 analysed units" in note
    assert problems == []


def test_experiments_list_filters_and_search(site):
    page, base, problems = site
    page.goto(f"{base}/results/")
    assert page.locator("table[data-table=experiments] tbody tr").count() == 1
    _shot(page, "experiments")
    page.fill("input[name=q]", "no-such-experiment")
    page.click("#filters button")
    page.wait_for_url("**q=no-such-experiment**")
    assert "No experiment matches." in page.locator("table[data-table=experiments]").inner_text()
    page.goto(f"{base}/results/")
    page.select_option("select[name=status]", "running")
    page.click("#filters button")
    page.wait_for_url("**status=running**")
    assert page.locator("table[data-table=experiments] tbody tr").count() == 1
    assert problems == []


def test_routing_health_page_draws(site):
    page, base, problems = site
    before = datetime.now(UTC)
    page.goto(f"{base}/routing/health/")
    after = datetime.now(UTC)
    page.wait_for_function("window.museCharts && window.museCharts.length >= 1")
    assert _drawn_canvases(page) == ["chart-calls"]
    assert page.locator("table[data-table=endpoints] tbody tr").count() >= 10
    _shot(page, "routing-health")
    # the 24 hours of the day window, ending with the current one: no hour in the future
    hours = [datetime.fromisoformat(h) for h in json.loads(page.locator("#data-calls").inner_text())["hours"]]
    labels = page.evaluate("window.museCharts[0].data.labels")
    assert len(labels) == len(hours) == 24
    assert hours[-1] <= after and before < hours[-1] + timedelta(hours=1)
    assert problems == []


def test_api_docs_render_offline(site):
    page, base, problems = site
    page.goto(f"{base}/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", state="attached")
    assert page.locator(".swagger-ui .opblock").count() >= 5
    _shot(page, "swagger-ui")
    page.goto(f"{base}/api/redoc/")
    page.wait_for_selector(".menu-content", state="attached")
    assert page.locator("h1").first.inner_text().startswith("Muse Experiments API")
    _shot(page, "redoc")
    # Redoc's bundle always tries its footer logo from its CDN (and hides it when that fails);
    # nothing else may leave the host.
    logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
    assert [p for p in problems if logo not in p and "Failed to load resource" not in p] == []


def test_results_page_shows_time_to_first_token_of_streamed_calls(site):
    """The TTFT histogram sits next to the latency one, on the same grid, and reads the streamed
    calls only (one per unit in the dashboard data, at a quarter of its call's latency)."""
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function(CHARTS_DRAWN)
    _shot(page, "results-ttft")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#ttft-block").screenshot(path=str(SHOTS / "results-ttft-chart.png"))
    assert "chart-ttft" in _drawn_canvases(page)
    data = json.loads(page.locator("#data-ttft").inner_text())
    latency = json.loads(page.locator("#data-latency").inner_text())
    assert data["labels"] and all("–" in label or label[0] in "<≥" for label in data["labels"])
    assert set(data["series"]) == {"control", "fast", "cheap"}
    assert all(abs(sum(shares) - 1.0) < 1e-9 for shares in data["series"].values())
    # a quarter of the latency: the first-token bins start below the latency ones
    assert data["labels"][0] != latency["labels"][0]
    calls = page.locator("table[data-table=calls]")
    assert calls.locator("th", has_text="First token p50").count() == 1
    assert problems == []


@pytest.mark.parametrize("site", [{"streamed": False}], indirect=True)
def test_results_page_says_when_no_call_was_streamed(site):
    page, base, problems = site
    page.goto(f"{base}/results/ana/")
    page.wait_for_function(CHARTS_DRAWN)
    block = page.locator("#ttft-block")
    assert "No streamed calls" in block.inner_text() and block.locator("canvas").count() == 0
    assert "chart-latency" in _drawn_canvases(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#ttft-block").screenshot(path=str(SHOTS / "results-no-streamed-calls.png"))
    assert problems == []


def test_routing_health_shows_first_token_percentiles_next_to_latency(site):
    """Per model and window: latency p50/p95 then first-token p50/p95 (streamed calls only, a
    quarter of the latency in the dashboard data), under one header per window."""
    page, base, problems = site
    page.goto(f"{base}/routing/health/")
    page.wait_for_function("window.museCharts && window.museCharts.length >= 1")
    _shot(page, "routing-health-ttft")
    table = page.locator("table[data-table=endpoints]")
    groups = [g.strip() for g in table.locator("thead tr.groups th.group").all_inner_texts()]
    assert len(groups) == 2 and groups[0].startswith("Since ") and groups[1].startswith("Last 24 hours")
    heads = [h.strip() for h in table.locator("thead tr:not(.groups) th").all_inner_texts()]
    hour = ["Calls", "Failed", "Latency p95", "First token p95", "Cost"]
    day = ["Calls", "Failed", "Latency p50", "Latency p95", "First token p50", "First token p95", "Cost"]
    assert heads[5:17] == hour + day
    cells = {r.split("\t")[0]: r.split("\t") for r in table.locator("tbody tr").all_inner_texts()}
    v15 = cells["avocado-v15"]
    latency_p50, ttft_p50 = (float(v15[i].split()[0]) for i in (12, 14))  # the 24-hour window
    assert v15[14].endswith(" ms") and 0.2 < ttft_p50 / latency_p50 < 0.3, v15
    assert cells["avocado-v1"][14] == "—"  # no call, no streamed call
    scroll = page.locator("#table-endpoints .scroll")
    assert scroll.evaluate("s => s.scrollWidth <= s.clientWidth")  # fits a 1,400 px window
    assert problems == []
