"""The admin's rough edges of issue 42 in Debian's chromium: the started tab fits 1280 px, a
failed task shows its traceback once and its times and numbers readable, the "Last hour"
charts have axes, labels and hover values, a confirmation's two buttons are one size; at 1280
and 390 px, light and dark. Screenshots: test-artifacts/admin-rough-*.png."""


import re

import pytest

from django_blueque.core import Client
from tests.admin.helpers import complete_task, fail_task, start_task

from .test_admin_browser import log_in

pytestmark = pytest.mark.browser

TRACEBACK = ('Traceback (most recent call last):\n  File "/srv/app/jobs/tasks.py", line 12, '
             'in encode\n    raise RuntimeError("codec failed")\nRuntimeError: codec failed\n')
LONG_PARAMETERS = '{"video_id": 42, "source": "s3://bucket/uploads/2026/11/29/' + "x" * 60 + \
                  '.mov", "preset": "1080p-h264-high"}'
SIZES = [(1280, 900, "light"), (1280, 900, "dark"), (390, 844, "light"), (390, 844, "dark")]


@pytest.fixture(scope="module")
def data(site):
    engine = Client(site["redis_url"])
    for n in range(3):
        task_id, token = start_task(engine, "wide.q", LONG_PARAMETERS, listener=f"node-{n}_4{n}",
                                    pid=500 + n)
        engine.protocol.report_progress(task_id, token, 100 * (n + 1) / 12.0 + 4, "encoding")
    for _ in range(5):
        complete_task(engine, "wide.q")
    for _ in range(2):
        complete_task(engine, "other.q")
    engine.get_queue("jobs.encode").enqueue('{"n": 1}')  # its task in jobs.py: no listener
    failed = fail_task(engine, "wide.q", LONG_PARAMETERS, "codec failed", TRACEBACK)
    return {"failed": failed, "engine": engine}


def context_page(browser, width, height, scheme):
    context = browser.new_context(viewport={"width": width, "height": height},
                                  color_scheme=scheme)
    page = context.new_page()
    page.set_default_timeout(30_000)
    return context, page


def overflow(page, selector):
    """How far the element's content is wider than its box (0: it fits)."""
    return page.evaluate(f"(e => e.scrollWidth - e.clientWidth)"
                         f"(document.querySelector({selector!r}))")


@pytest.mark.parametrize("width,height,scheme", SIZES, ids=[f"{w}-{s}" for w, _, s in SIZES])
def test_started_tab_and_failed_task(browser, site, data, shot, width, height, scheme):
    context, page = context_page(browser, width, height, scheme)
    try:
        log_in(page, site, "/admin/django_blueque/queue/?name=wide.q&state=started")
        page.wait_for_selector("#result_list")
        if width >= 1280:
            assert overflow(page, ".blueque-scroll") <= 0  # ATTEMPTS and PARAMETERS shown
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        shot(page, f"rough-started-{width}-{scheme}")
        page.goto(f"{site['url']}/admin/django_blueque/queue/tasks/{data['failed']}/")
        text = page.inner_text("#content")
        assert text.count("codec failed\n") <= 2 and text.count("File \"/srv/app") == 1
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        shot(page, f"rough-failed-{width}-{scheme}")
    finally:
        context.close()


@pytest.mark.parametrize("width,height,scheme", SIZES, ids=[f"{w}-{s}" for w, _, s in SIZES])
def test_dashboard_charts(browser, site, data, shot, width, height, scheme):
    context, page = context_page(browser, width, height, scheme)
    try:
        log_in(page, site)
        page.wait_for_selector("#throughput")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert "jobs.encode" in page.inner_text("#blueque-unserved")  # item 9, flagged
        row = page.locator("tr.blueque-unserved[data-queue='jobs.encode'] td.blueque-warn").last
        assert row.is_visible()
        charts = page.locator("[data-bq-chart] svg")
        boxes = [charts.nth(n).bounding_box() for n in range(charts.count())]
        assert len(boxes) >= 2 and all(box["width"] >= 300 for box in boxes)
        assert all(box["x"] + box["width"] <= width for box in boxes)
        if width >= 1280:  # side by side, their plots at one height
            assert boxes[0]["y"] == boxes[1]["y"]
            assert abs(boxes[0]["height"] - boxes[1]["height"]) < 1
        labels = page.locator("[data-bq-chart='wide.q'] text.blueque-chart-label")
        assert labels.count() == 8  # 3 counts, 5 times
        hovers = page.locator("[data-bq-chart='wide.q'] g title").all_text_contents()
        figures = [re.search(r": (\d+) complete, (\d+) failed$", text) for text in hovers]
        assert len(figures) == 60 and all(figures)
        assert sum(int(found[1]) for found in figures) == 5
        # 1, and the started tasks the reaper fails once their fake listeners' beats lapse
        assert sum(int(found[2]) for found in figures) >= 1
        shot(page, f"rough-dashboard-{width}-{scheme}")
    finally:
        context.close()


def test_confirmation_buttons_are_one_size(page, site, data, shot):
    log_in(page, site, "/admin/django_blueque/queue/?name=wide.q&state=complete")
    page.click("button:has-text('Delete all 5 complete tasks')")
    yes, no = page.locator("#confirm"), page.locator(".submit-row a.cancel-link")
    assert yes.input_value() == "Yes, I’m sure" and no.inner_text() == "No, take me back"
    yes_box, no_box = yes.bounding_box(), no.bounding_box()
    assert yes_box["height"] == no_box["height"]
    assert yes_box["y"] == no_box["y"]
    sizes = [element.evaluate("e => getComputedStyle(e).fontSize") for element in (yes, no)]
    assert sizes[0] == sizes[1]
    shot(page, "rough-confirm-1280-light")
