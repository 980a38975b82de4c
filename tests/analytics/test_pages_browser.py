"""The analyst pages in a real browser: Playwright driving Debian's Chromium, headless.

Each page renders without a JavaScript error, its charts draw (a canvas with pixels, forest-plot
intervals with a width), switches and filters change what is shown, Swagger UI and Redoc work
with every request to another host blocked, and a full-page screenshot of each is saved under
``var/artifacts/screenshots/`` for people to look at.

Without Chromium (``apt-get install chromium``) or the ``playwright`` package these tests skip,
saying why; under ``CI=true`` they fail instead (:func:`tests.conftest.need_service`).
"""

from __future__ import annotations

import os
import shutil
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
def site(chromium, live_server, transactional_db, client):
    """A logged-in staff browser page on the live server with the dashboard data loaded.

    Yields ``(page, base_url, problems)``: ``problems`` collects console errors, page errors,
    failed requests and any request to another host (all blocked: the pages must work offline).
    """
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from analytics.views import VIEW_RESULTS, VIEW_ROUTING_HEALTH

    build_dashboard_experiment()
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
    host = urlparse(live_server.url).hostname
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
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
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))
    yield page, live_server.url, problems
    context.close()


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
    page.wait_for_function("window.museCharts && window.museCharts.length >= 5")
    _shot(page, "results")
    drawn = set(_drawn_canvases(page))
    assert {"chart-exposures", "chart-lift", "chart-latency", "chart-cost", "chart-tokens"} <= drawn
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
    page.wait_for_function("window.museCharts && window.museCharts.length >= 5")
    _shot(page, "results-bayesian-latency")
    page.select_option("#sw-analysis", "served")
    page.wait_for_url("**analysis=served**")
    page.goto(page.url.replace("from=", "from=2099-01-01"))  # the date range, as the form sends it
    page.wait_for_function("document.querySelectorAll('.chart.no-data').length >= 4")  # said, not blank
    assert page.locator("#sw-from").input_value() == "2099-01-01"
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
    page.goto(f"{base}/routing/health/")
    page.wait_for_function("window.museCharts && window.museCharts.length >= 1")
    assert _drawn_canvases(page) == ["chart-calls"]
    assert page.locator("table[data-table=endpoints] tbody tr").count() >= 10
    _shot(page, "routing-health")
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
