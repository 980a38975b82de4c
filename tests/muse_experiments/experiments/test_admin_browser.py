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
from tests.analytics.test_pages_browser import TIMEOUT_MS, _shot, chromium  # noqa: F401 (fixture)
from tests.factories import make_experiment, seed_catalogue
from tests.muse_experiments.conftest import V2, V14

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
