"""The experiment admin page in a real browser (Playwright + Debian's Chromium): the variants table
fits the page, models show by version label with the id on hover, the page links to results and
preview, and a weight change asks to confirm the new phase before saving. Screenshots go to
``var/artifacts/screenshots/``."""

from __future__ import annotations

import pytest

from muse_experiments.experiments.models import Experiment
from muse_experiments.experiments.services.edits import experiment_update
from muse_experiments.experiments.services.variants import VariantInput
from routing.models import ModelEndpoint
from tests.analytics.test_pages_browser import (  # noqa: F401 (chromium: a fixture)
    TIMEOUT_MS,
    _shot,
    chromium,
    logged_in_page,
)
from tests.factories import make_experiment, seed_catalogue
from tests.muse_experiments.conftest import V2, V14, V15

pytestmark = [pytest.mark.slow]


@pytest.fixture
def admin_page(chromium, live_server, transactional_db, client):  # noqa: F811
    from django.contrib.auth import get_user_model

    seed_catalogue()
    experiment = make_experiment(key="browser-exp")
    v = list(experiment.variants.all())
    experiment_update(
        experiment=experiment,
        actor="pm",
        variants=[
            VariantInput(key=v[0].key, weight=0.34, endpoint=v[0].endpoint, is_control=True, id=v[0].pk),
            VariantInput(
                key=v[1].key,
                weight=0.33,
                endpoint=v[1].endpoint,
                id=v[1].pk,
                overrides={"reasoning_effort": "low"},
            ),
            VariantInput(key="third", weight=0.33, endpoint=ModelEndpoint.objects.get(public_id=V2)),
        ],
    )
    user = get_user_model().objects.create_superuser("pm-browser", "pm@example.com", "pw")
    client.force_login(user)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    host = live_server.url.split("//")[1].split(":")[0]
    context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "domain": host, "path": "/"}]
    )
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield (
        page,
        f"{live_server.url}/admin/muse_experiments/experiment/{experiment.pk}/change/",
        experiment,
        errors,
    )
    context.close()


def test_the_experiment_page_fits_and_confirms_a_new_phase(admin_page):
    page, url, experiment, errors = admin_page
    page.goto(url)
    _shot(page, "admin-experiment")
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px"
    table = page.evaluate(
        "() => { const t = document.querySelector('#variants-group table');"
        " return [t.getBoundingClientRect().right, window.innerWidth]; }"
    )
    assert table[0] <= table[1]
    assert (
        page.locator(f'#id_variants-0-endpoint option[title="{V14}"]').inner_text().startswith("avocado-v14")
    )
    assert page.locator("a.results-link").get_attribute("href") == "/results/browser-exp/"
    assert page.locator("text=Preview assignment").count() >= 1
    # a weight change: the save lists the change and asks to confirm, nothing saved yet
    page.fill("#id_variants-0-weight_percent", "50")
    page.fill("#id_variants-1-weight_percent", "25")
    page.fill("#id_variants-2-weight_percent", "25")
    page.click("input[name=_continue]")
    page.wait_for_load_state()
    _shot(page, "admin-experiment-confirm")
    text = page.locator(".inline-group .errorlist").first.inner_text()
    assert "starts phase 3" in text and "variant control weight: 34 % → 50 %" in text
    assert Experiment.objects.get(pk=experiment.pk).phase == 2
    page.check("#id_confirm_new_phase")
    page.click("input[name=_continue]")
    page.wait_for_load_state()
    assert Experiment.objects.get(pk=experiment.pk).phase == 3
    assert errors == []


# --- issue 32: admin pages at 1,400 px, snapshots, kill switches, history, Redoc, favicon ---------


@pytest.fixture
def admin_site(chromium, live_server, transactional_db, client, upstreams):  # noqa: F811
    """A superuser's browser at 1,400 px on the live server, with the catalogue, an experiment, a
    few routed calls and a results snapshot. Yields ``(page, base_url, problems)``: ``problems``
    collects page errors, 4xx/5xx answers (a missing favicon among them) and any request to
    another host (all blocked)."""
    from django.contrib.auth import get_user_model

    from analytics.models import ResultSnapshot
    from tests.routing.pipeline.test_router import job, run

    seed_catalogue(upstreams.url)
    experiment = make_experiment(key="wide", arms=[("control", V14, 0.5), ("treatment", V2, 0.5)])
    for i in range(4):
        run(job(session_id=f"wide-{i}"))
    ResultSnapshot.objects.create(
        experiment=experiment,
        phase=experiment.phase,
        inputs={
            f"metric_{m}": {v: {"n": 100 + m, "sum": 50, "sum_squares": 40} for v in ("control", "treatment")}
            for m in range(40)
        },
        results={"metrics": [{"name": f"metric_{m}", "lift": 0.01 * m} for m in range(40)], "srm": {}},
    )
    user = get_user_model().objects.create_superuser("ops-browser", "ops@example.com", "pw")
    client.force_login(user)
    context, page, problems = logged_in_page(chromium, live_server.url, client)
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"))
    yield page, live_server.url, problems
    context.close()


def _fits(page) -> tuple[float, float]:
    """(width of the change list's table, width it is shown in): the admin puts the table in a
    box that scrolls sideways, so a table wider than its box is clipped, not the page."""
    return page.evaluate(
        "() => { const box = document.querySelector('#changelist .results');"
        " return [box.scrollWidth, box.clientWidth]; }"
    )


def test_the_wide_admin_lists_fit_at_1400_px_and_name_models_by_label(admin_site):
    page, base, problems = admin_site
    for name, url in (
        ("admin-model-endpoints", "/admin/routing/modelendpoint/"),
        ("admin-call-records", "/admin/routing/callrecord/"),
        ("admin-attempts", "/admin/routing/attempt/"),
    ):
        page.goto(f"{base}{url}")
        _shot(page, name)
        right, width = _fits(page)
        assert right <= width, f"{url}: the table is {right} px wide in a {width} px box"
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{url} scrolls sideways by {overflow} px"
    page.goto(f"{base}/admin/routing/modelendpoint/")
    labels = page.locator("#result_list tbody th a").all_inner_texts()
    avocado = [label for label in labels if label.startswith("avocado-v")]
    assert avocado[:3] == ["avocado-v1", "avocado-v2", "avocado-v3"] and avocado[-1] == "avocado-v15"
    page.goto(f"{base}/admin/routing/callrecord/")
    served = set(page.locator("#result_list td.field-served_model").all_inner_texts())
    assert served <= {"avocado-v14", "avocado-v2"} and served
    assert problems == []


def test_a_snapshot_is_read_only_and_its_json_collapsed(admin_site):
    from analytics.models import ResultSnapshot

    page, base, problems = admin_site
    snapshot = ResultSnapshot.objects.get()
    page.goto(f"{base}/admin/analytics/resultsnapshot/")
    assert page.locator("a.addlink").count() == 0
    page.goto(f"{base}/admin/analytics/resultsnapshot/{snapshot.pk}/change/")
    _shot(page, "admin-snapshot")
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height < 1500, f"the snapshot page is {height} px tall"
    assert page.locator("input[type=submit]").count() == 0 and page.locator("a.deletelink").count() == 0
    assert page.locator("details.json").count() == 2
    page.locator("details.json summary").first.click()
    assert '"metric_0": {' in page.locator("details.json pre").first.inner_text()
    _shot(page, "admin-snapshot-open")
    assert problems == []


def test_a_kill_switch_is_picked_by_label_and_its_history_read(admin_site):
    from routing.models import KillSwitch

    page, base, problems = admin_site
    page.goto(f"{base}/admin/routing/killswitch/add/")
    page.select_option("#id_scope", "endpoint")
    page.select_option("#id_target", label="avocado-v15")
    page.fill("#id_reason", "quota exhausted")
    _shot(page, "admin-kill-switch-add")
    page.click("input[name=_save]")
    page.wait_for_url("**/admin/routing/killswitch/")
    _shot(page, "admin-kill-switches")
    switch = KillSwitch.objects.get()
    assert switch.target == V15 and switch.active
    row = page.locator("#result_list tbody tr").first
    assert row.locator(".field-scope_name").inner_text() == "model"
    assert row.locator(".field-target_shown").inner_text() == "avocado-v15"
    page.goto(f"{base}/admin/routing/killswitch/{switch.pk}/change/")
    page.click("a.historylink")
    _shot(page, "admin-kill-switch-history")
    assert "doesn’t have a change history" not in page.content()
    assert page.locator("table.audit-history tbody tr").count() == 1
    assert "kill_switch_on" in page.locator("table.audit-history").inner_text()
    assert problems == []


def test_redoc_names_operations_and_nothing_loads_from_another_host(admin_site):
    page, base, problems = admin_site
    page.goto(f"{base}/api/redoc/")
    page.wait_for_selector(".menu-content", state="attached")
    page.wait_for_selector("text=Create a routed completion", state="attached")
    _shot(page, "redoc-named")
    page.screenshot(path=str(_shot(page, "redoc-named").with_name("redoc-named-top.png")))
    menu = page.locator(".menu-content").text_content()
    assert "Compute new results" in menu and "v1_" not in menu
    assert page.locator('img[alt="redocly logo"][src^="http"]').count() == 0
    assert problems == []  # no CDN logo, no favicon 404


def test_every_page_has_a_favicon(admin_site):
    page, base, problems = admin_site
    for url in ("/admin/", "/results/", "/api/docs/"):
        page.goto(f"{base}{url}")
    icon = page.request.get(f"{base}/favicon.ico")
    assert icon.ok and icon.headers["content-type"].startswith("image/svg")
    page.goto(f"{base}/admin/")
    href = page.locator("link[rel=icon]").get_attribute("href")
    assert href.endswith("favicon.svg")
    assert problems == []
