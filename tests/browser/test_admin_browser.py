"""An operator in a real browser: logs in, watches a long task's progress bar move, opens a
failed task, retries it (confirming) and sees it complete."""

import time
from urllib.parse import quote

import pytest

from devtools.servers import wait_for
from django_blueque.core import Client

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-admin-browser")]


def log_in(page, site, next_url="/admin/django_blueque/queue/"):
    page.goto(f"{site['url']}/admin/login/?next={quote(next_url)}")
    page.fill("#id_username", site["user"])
    page.fill("#id_password", site["password"])
    page.click("input[type=submit]")
    page.wait_for_url(f"{site['url']}{next_url}")


def progress_of(page):
    return page.evaluate("document.querySelector('#blueque-progress').value")


def test_operator_follows_a_long_task_then_retries_a_failed_one(page, site, shot):
    log_in(page, site)
    assert page.title().startswith("Blueque")
    page.goto(f"{site['url']}/admin/")
    assert page.locator("a", has_text="Queues and tasks").count() == 1
    shot(page, "01-admin-index")

    # a long task, started from the demo page, followed on its task page
    page.goto(f"{site['url']}/")
    page.select_option("#id_kind", "long")
    page.fill("#id_steps", "24")
    page.click("#start")
    page.click("#started a[href*='/admin/django_blueque/queue/tasks/']")
    page.wait_for_selector(".blueque-status.status-started")  # the page reloads itself
    page.wait_for_function("document.querySelector('#blueque-progress').value > 0")
    first = progress_of(page)
    shot(page, "02-task-running")
    page.wait_for_function(f"document.querySelector('#blueque-progress').value > {first}")
    second = progress_of(page)
    assert second > first
    assert "step" in page.inner_text("[data-bq-live=message]")
    shot(page, "03-task-progress-moved")

    page.goto(f"{site['url']}/admin/django_blueque/queue/")
    page.wait_for_selector("tr[data-queue='demo.long'] td.state-started a")
    shot(page, "04-dashboard")

    # a task that fails once (no automatic retry) and succeeds when retried
    engine = Client(site["redis_url"])
    task_id = engine.get_queue("demo.flaky").enqueue('{"succeed_on": 2}', retries=0)
    wait_for(lambda: engine.get_task(task_id).status == "failed", 30, "the failure")
    page.reload()
    page.click("tr[data-queue='demo.flaky'] td.state-failed a")
    page.wait_for_selector(f"#result_list a:has-text('{task_id}')")
    shot(page, "05-failed-list")
    page.click(f"#result_list a:has-text('{task_id}')")
    assert page.inner_text(".blueque-status") == "failed"
    assert "attempt 1 failed" in page.inner_text("#field-error")
    assert "Traceback" in page.inner_text("#field-traceback")
    shot(page, "06-failed-task")

    page.click("#action-retry")
    assert "Are you sure?" in page.inner_text("#content")
    shot(page, "07-retry-confirmation")
    page.click("#confirm")
    assert "Retried 1 task" in page.inner_text(".messagelist")
    page.wait_for_selector(".blueque-status.status-complete", timeout=30_000)
    assert '"attempt": 2' in page.inner_text("#field-result")
    assert engine.get_task(task_id).status == "complete"
    shot(page, "08-retried-task-complete")


def test_dark_mode_and_a_narrow_screen(browser, site, shot):
    context = browser.new_context(viewport={"width": 420, "height": 900}, color_scheme="dark")
    page = context.new_page()
    try:
        log_in(page, site)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background != "rgb(255, 255, 255)"
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 440  # wide tables scroll inside their box, not the page
        shot(page, "09-dashboard-dark-narrow")
    finally:
        context.close()


def test_delete_all_failed_runs_to_the_end_from_its_page(page, site, shot):
    engine = Client(site["redis_url"])
    keys = engine.keys
    now = repr(time.time())  # recent: the reaper would expire old ones on its own
    with engine.redis.pipeline(transaction=False) as pipe:
        for n in range(3000):
            pipe.hset(keys.task(f"bulk-{n}"), mapping={"status": "failed", "queue": "bulk.q",
                                                       "error": "boom", "updated": now})
            pipe.lpush(keys.failed("bulk.q"), f"bulk-{n}")
        pipe.zincrby(keys.queues, 0, "bulk.q")
        pipe.execute()
    log_in(page, site, "/admin/django_blueque/queue/?name=bulk.q&state=failed")
    page.click("button:has-text('Delete all 3000 failed tasks')")
    assert "3000 tasks now" in page.inner_text("#content")
    page.click("#confirm")
    page.wait_for_selector("[data-bq-field=status]:has-text('done')")
    assert page.inner_text("[data-bq-field=affected]") == "3000"
    shot(page, "10-bulk-delete-done")
    assert engine.redis.llen(keys.failed("bulk.q")) == 0
