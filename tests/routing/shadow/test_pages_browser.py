"""The shadow-test pages in a real browser (Playwright driving Debian's Chromium, headless): the
results page (pairs, the comparison's ratios and intervals, the judge's verdicts, both charts
drawn), the experiments list linking to it, and the admin's shadow tests (start and stop actions)
and pairs, which never show a shadow answer. Full-page screenshots go to
``var/artifacts/screenshots/shadow-*.png``. Skips without Chromium or Playwright (fails under
``CI=true``), as :mod:`tests.analytics.test_pages_browser` does."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from analytics.formatting import integer, number
from muse_experiments.experiments.models import ShadowPair, ShadowStatus, ShadowTest
from routing.catalogue import avocado_id
from routing.shadow.results import results_rows, shadow_results
from routing.shadow.results_apis import MEASURES
from tests.analytics.test_pages_browser import (  # noqa: F401 (chromium: a fixture)
    _drawn_canvases,
    _shot,
    chromium,
    logged_in_page,
)
from tests.routing.shadow.test_results import shadow  # noqa: F401 (fixture: test "sh" and its 7 pairs)

pytestmark = [pytest.mark.slow]

#: Written into every pair's candidate answer: no page may show it.
ANSWER = "SHADOW-ANSWER-NEVER-SHOWN"


@pytest.fixture
def shadow_site(chromium, live_server, transactional_db, client, shadow):  # noqa: F811
    """A superuser's browser at 1,400 px on the live server with shadow test ``sh`` (7 pairs, each
    with a candidate answer that must stay hidden). Yields ``(page, base_url, test, problems)``:
    ``problems`` collects page and console errors, 4xx/5xx answers and off-site requests (blocked)."""
    from django.contrib.auth import get_user_model

    ShadowPair.objects.filter(test=shadow).update(candidate_text=ANSWER)
    user = get_user_model().objects.create_superuser("shadow-browser", "s@example.com", "pw")
    client.force_login(user)
    client.get("/results/shadow/sh/")  # warm the URL conf and imports before the browser's timeouts
    context, page, problems = logged_in_page(chromium, live_server.url, client)
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status}: {r.url}"))
    yield page, live_server.url, shadow, problems
    context.close()


def _cells(page, table: str) -> list[list[str]]:
    """The text of each body row's cells of ``table[data-table=<table>]``."""
    return page.evaluate(
        """(id) => [...document.querySelectorAll(`table[data-table="${id}"] tbody tr`)]
              .map(tr => [...tr.cells].map(td => td.innerText.trim()))""",
        table,
    )


def _fits(page) -> int:
    """How far the page scrolls sideways (px); 0 when it fits."""
    return page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")


def test_the_results_page_shows_pairs_ratios_with_intervals_and_the_judges_verdicts(shadow_site):
    page, base, test, problems = shadow_site
    page.goto(f"{base}/results/shadow/sh/")
    page.wait_for_function("window.museCharts && window.museCharts.length >= 2")
    _shot(page, "shadow-results")
    results = shadow_results(test)
    assert page.locator("#shadow-pairs").inner_text() == "7"
    assert page.locator("#shadow-sessions").inner_text() == integer(results["sessions"]) == "5"
    candidate = page.locator("#shadow-candidate .model")  # by version label, the id on hover
    assert (candidate.inner_text(), candidate.get_attribute("title")) == ("avocado-v14", avocado_id(14))
    # the comparison: one row per measure, the estimate and its 95 % interval as computed
    rows = _cells(page, "comparison")
    expected = results_rows(results)
    assert [r[0] for r in rows] == [MEASURES[r["measure"]] for r in expected]  # in words, the code on hover
    codes = page.locator('table[data-table="comparison"] tbody td:first-child span')
    assert [codes.nth(i).get_attribute("title") for i in range(codes.count())] == [
        r["measure"] for r in expected
    ]
    for shown, want in zip(rows, expected, strict=True):
        assert shown[3:6] == [number(want["estimate"]), number(want["ci_low"]), number(want["ci_high"])]
    cost = next(r for r in rows if r[0] == MEASURES["cost_usd_per_call_ratio"])
    assert cost[3] == number(results["cost_usd_per_call"]["ratio"]["estimate"]) != "—"
    # the judge: 3 candidate wins, 1 primary win, 1 tie, 1 invalid; the win rate with its interval
    judge = {r[0]: r[1:] for r in _cells(page, "judge")}
    assert {k: v[0] for k, v in judge.items()} == {
        "candidate wins": "3",
        "primary wins": "1",
        "ties": "1",
        "invalid": "1",
    }
    win = results["judge"]["win_rate"]
    assert number(win["estimate"]) == number(3.5 / 5)
    assert page.locator("#judge-win-rate").inner_text() == (
        f"{number(win['estimate'])} [{number(win['ci'][0])}, {number(win['ci'][1])}]"
    )
    assert set(_drawn_canvases(page)) >= {"chart-per-call", "chart-verdicts"}
    assert _fits(page) <= 0
    assert ANSWER not in page.content()
    assert problems == []


def test_the_experiments_list_links_each_shadow_test_to_its_results(shadow_site):
    page, base, test, problems = shadow_site
    page.goto(f"{base}/results/")
    _shot(page, "shadow-index")
    row = _cells(page, "shadow-tests")[0]
    assert row[0].startswith("sh") and row[5] == "7"  # key, …, pairs
    page.click('table[data-table="shadow-tests"] a[href="/results/shadow/sh/"]')
    page.wait_for_load_state()
    assert urlparse(page.url).path == "/results/shadow/sh/"
    assert page.locator("#shadow-pairs").inner_text() == "7"
    assert problems == []


def _run_action(page, action: str) -> None:
    page.check('input[name="_selected_action"]')
    page.select_option('select[name="action"]', action)
    page.click('button[name="index"]')
    page.wait_for_load_state()


def test_the_admin_starts_and_stops_a_shadow_test_and_links_its_results(shadow_site):
    page, base, test, problems = shadow_site
    page.goto(f"{base}/admin/muse_experiments/shadowtest/")
    _shot(page, "shadow-admin-list")
    assert _fits(page) <= 0
    candidate = page.locator("#result_list td.field-candidate_name .model")
    assert (candidate.inner_text(), candidate.get_attribute("title")) == ("avocado-v14", avocado_id(14))
    assert page.locator("#result_list td.field-results a").get_attribute("href") == "/results/shadow/sh/"
    _run_action(page, "start_tests")
    assert ShadowTest.objects.get(pk=test.pk).status == ShadowStatus.RUNNING
    assert "running" in page.locator("#result_list").inner_text().lower()
    _run_action(page, "stop_tests")
    assert ShadowTest.objects.get(pk=test.pk).status == ShadowStatus.STOPPED
    page.goto(f"{base}/admin/muse_experiments/shadowtest/{test.pk}/change/")
    _shot(page, "shadow-admin-change")
    assert page.locator("a.results-link").get_attribute("href") == "/results/shadow/sh/"
    assert page.locator(".field-status .readonly").inner_text() == "Stopped"
    assert page.locator(".field-started_at .readonly").inner_text() != "-"
    assert page.locator("input[name=_save], input[name=_continue], input[name=_addanother]").count() == 0
    assert _fits(page) <= 0
    assert problems == []


def test_the_admin_pairs_never_show_the_candidates_answer(shadow_site):
    page, base, test, problems = shadow_site
    page.goto(f"{base}/admin/muse_experiments/shadowpair/")
    _shot(page, "shadow-admin-pairs")
    assert page.locator("#result_list tbody tr").count() == 7
    assert ANSWER not in page.content()
    pair = ShadowPair.objects.filter(test=test, judge_verdict="candidate").order_by("id").first()
    page.goto(f"{base}/admin/muse_experiments/shadowpair/{pair.pk}/change/")
    _shot(page, "shadow-admin-pair")
    text = page.locator("#content").inner_text()
    assert pair.job_id in text and "candidate" in text.lower()
    assert ANSWER not in page.content()
    # nor in an export of the pairs
    export = page.request.get(f"{base}/results/shadow/sh/?export=json&table=pairs")
    assert export.ok and ANSWER not in export.text()
    assert problems == []
