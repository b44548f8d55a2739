"""Issue 13's acceptance in a real browser: the task page follows its task live (without a
reload until its status changes), a cancelled task shows as cancelled, the dashboard draws
the last hour's throughput; and every page, at 1280 px and 390 px wide, light and dark, fits
its width (screenshots in test-artifacts/screenshots/, for a person to look at)."""

import time

import pytest

from devtools.servers import wait_for
from django_blueque.core import Client
from django_blueque.core.admission import Admission

from .conftest import ARTIFACTS
from .test_admin_browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-live-browser")]
SCREENSHOTS = ARTIFACTS / "screenshots"


def mark_page(page):
    """Mark the document: the mark survives live updates and disappears on a reload."""
    page.evaluate("window.bluequeMark = 1")


def marked(page):
    return page.evaluate("window.bluequeMark === 1")


def test_the_task_page_follows_its_task_live(page, site):
    engine = Client(site["redis_url"])
    task_id = engine.get_queue("demo.long").enqueue('{"steps": 30, "delay": 0.4}')
    wait_for(lambda: engine.get_task(task_id).status == "started", 30, "the start")
    log_in(page, site, f"/admin/django_blueque/queue/tasks/{task_id}/")
    mark_page(page)
    updated = page.inner_text("[data-bq-live='ago updated']")
    page.wait_for_function("document.querySelector('#blueque-progress').value > 10")
    page.wait_for_function(
        f"document.querySelector(\"[data-bq-live='ago updated']\").textContent !== {updated!r}")
    assert marked(page), "the page reloaded instead of refreshing its data"
    assert "step" in page.inner_text("[data-bq-live='field progress_message']")
    assert "live" in page.inner_text("#content-main dl")  # its node, running it
    page.wait_for_selector(".blueque-status.status-complete", timeout=60_000)
    assert not marked(page)  # the status changed: the page reloaded to show the result
    assert "live" not in page.inner_text(".blueque-summary")
    assert '"steps": 30' in page.inner_text("#field-result")


def test_live_updates_can_be_turned_off(page, site):
    engine = Client(site["redis_url"])
    task_id = engine.get_queue("demo.long").enqueue('{"steps": 20, "delay": 0.3}')
    log_in(page, site, f"/admin/django_blueque/queue/tasks/{task_id}/")
    page.uncheck("#blueque-live")
    mark_page(page)
    wait_for(lambda: engine.get_task(task_id).status == "complete", 60, "the end")
    time.sleep(4)  # more than a poll period
    assert marked(page) and page.inner_text(".blueque-status") != "complete"
    page.reload()
    assert not page.is_checked("#blueque-live")  # remembered
    page.check("#blueque-live")
    page.wait_for_selector(".blueque-status.status-complete")


def test_a_cancelled_task_shows_as_cancelled(page, site, shot):
    engine = Client(site["redis_url"])
    task_id = engine.get_queue("demo.long").enqueue('{"steps": 200, "delay": 0.2}')
    wait_for(lambda: engine.get_task(task_id).status == "started", 30, "the start")
    log_in(page, site, f"/admin/django_blueque/queue/tasks/{task_id}/")
    page.click("#action-cancel")
    page.click("#confirm")
    page.wait_for_selector(".blueque-status.status-failed", timeout=30_000)
    assert page.inner_text(".blueque-summary .blueque-cancelled") == "cancelled"
    assert engine.get_task(task_id).error_type == "django_blueque.Cancelled"
    page.goto(f"{site['url']}/admin/django_blueque/queue/?name=demo.long&state=failed&cancelled=only")
    page.wait_for_selector(f"#result_list tr:has-text('{task_id}') .blueque-cancelled")
    page.goto(f"{site['url']}/admin/django_blueque/queue/?name=demo.long&state=failed&cancelled=no")
    assert task_id not in page.inner_text("#result_list")


def test_the_dashboard_draws_the_last_hour(page, site):
    engine = Client(site["redis_url"])
    ids = [engine.get_queue("demo.report").enqueue("{}") for _ in range(3)]
    ids.append(engine.get_queue("demo.fail").enqueue("{}"))
    # and the periodic queue's, ended before the page loads: a run of the scheduler's (as it
    # starts, then at the top of each minute) that ended after would add its chart, a change
    # of the page's rows, which reloads it and loses the mark
    ids.append(engine.get_queue("demo.tick").enqueue("{}"))
    for task_id in ids:
        wait_for(lambda task_id=task_id: engine.get_task(task_id).status in ("complete",
                                                                             "failed"),
                 30, "the ends")
    log_in(page, site)
    chart = "[data-bq-chart='demo.report'] rect.blueque-bar-complete"
    page.wait_for_selector(chart, state="attached")
    heights = page.eval_on_selector_all(chart, "bars => bars.map(bar => bar.getBBox().height)")
    assert heights and max(heights) > 30  # the busiest minute, at least a third of the height
    failed = "[data-bq-chart='demo.fail'] rect.blueque-bar-failed"
    assert max(page.eval_on_selector_all(failed, "bars => bars.map(b => b.getBBox().height)")) > 0
    mark_page(page)
    engine.get_queue("demo.report").enqueue("{}")
    page.wait_for_function("document.querySelector(\"[data-bq-live='ended demo.report']\")"
                           ".textContent.startsWith('4 complete')")
    assert marked(page)


def test_the_dashboard_follows_the_tasks_held_for_their_key(page, site):
    """Tasks of a key taken as a listener with MAX_RUNNING_PER_KEY 1 takes them, on a queue
    the site's own listener does not serve: the end of the key's run puts one held task back
    in the queue, and the dashboard's counts follow without a reload."""
    engine, queue, listener = Client(site["redis_url"]), "limits.held", "browser~a_1"
    one_per_key = Admission(max_running_per_key=1)
    # a live listener of the queue and a run ended in the last hour: the page's rows stay
    # the same when the key's run ends (a change of them would reload it)
    engine.protocol.heartbeat(listener, [queue], {"host": "browser", "pid": 1})
    engine.get_queue(queue).enqueue("warm")
    warm = engine.protocol.take(queue, listener, "tok-0", 1, one_per_key)
    engine.protocol.finish(queue, warm[0], listener_id=listener, pid=1, token="tok-0",
                           outcome="complete", value="")
    ids = [engine.get_queue(queue).enqueue(str(n), concurrency_key="customer-7")
           for n in range(3)]
    assert engine.protocol.take(queue, listener, "tok-1", 2, one_per_key)[0] == ids[0]
    assert engine.protocol.take(queue, listener, "tok-2", 3, one_per_key) is None
    log_in(page, site)
    held, pending = f"[data-bq-live='keyheld {queue}']", f"[data-bq-live='count pending {queue}']"
    assert (page.inner_text(held), page.inner_text(pending)) == ("2", "0")
    mark_page(page)
    assert engine.protocol.finish(queue, ids[0], listener_id=listener, pid=2, token="tok-1",
                                  outcome="complete", value="") == "complete"
    page.wait_for_function(f"document.querySelector(\"{held}\").textContent === '1'")
    assert page.inner_text(pending) == "1"  # the same poll brought both
    assert marked(page)


MOUNT = "/admin/django_blueque/queue/"
PAGES = [("dashboard", MOUNT), ("listeners", f"{MOUNT}listeners/"),
         ("queue-failed", f"{MOUNT}?name=demo.long&state=failed"),
         ("queue-complete", f"{MOUNT}?name=demo.report&state=complete")]


OVERFLOWING = """width => [...document.querySelectorAll("body *")]
    .filter(element => element.getBoundingClientRect().right > width + 0.5
            && !element.closest(".blueque-scroll"))
    .slice(0, 5).map(element => element.tagName + "." + element.className + " "
                     + Math.round(element.getBoundingClientRect().right))"""
"""The elements past the right edge, but for those inside a box that scrolls sideways."""


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_fits_its_width(browser, site, width, scheme):
    engine = Client(site["redis_url"])
    long_id = engine.get_queue("demo.long").enqueue('{"steps": 400, "delay": 0.5}')
    failed_id = engine.get_queue("demo.fail").enqueue("{}")
    wait_for(lambda: engine.get_task(failed_id).status == "failed", 30, "the failure")
    wait_for(lambda: engine.get_task(long_id).status == "started", 30, "the start")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": 900},
                                  color_scheme=scheme)
    page = context.new_page()
    too_wide = {}
    try:
        log_in(page, site)
        for name, path in PAGES + [("task-running", f"{MOUNT}tasks/{long_id}/"),
                                   ("task-failed", f"{MOUNT}tasks/{failed_id}/")]:
            page.goto(site["url"] + path)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(SCREENSHOTS / f"{name}-{width}-{scheme}.png"),
                            full_page=True)
            overflow = page.evaluate(OVERFLOWING, width)
            if overflow:
                too_wide[name] = overflow
        assert not too_wide, f"wider than the screen: {too_wide}"
    finally:
        context.close()
        engine.cancel(long_id)
