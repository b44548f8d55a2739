"""An operator in a real browser sees a killed task's checkpoint and each run's peak memory
and CPU time, and starts it over (issue 39)."""

import pytest

from devtools.servers import wait_for
from django_blueque.core import Client
from tests.browser.test_admin_browser import log_in

pytestmark = pytest.mark.browser


def test_a_killed_task_shows_its_checkpoint_and_resources_then_starts_over(page, site, shot):
    engine = Client(site["redis_url"])
    # its first run SIGKILLs itself after checkpointing 2 rows; no retry is allowed
    task_id = engine.get_queue("demo.resumable").enqueue('{"rows": 4, "crash_after": 2}',
                                                        retries=0)
    wait_for(lambda: engine.get_task(task_id).status == "failed", 30, "the killed run")
    log_in(page, site, f"/admin/django_blueque/queue/tasks/{task_id}/")
    assert "process killed by signal 9" in page.inner_text("#field-error")
    assert '"done": 2' in page.inner_text("#field-checkpoint")
    assert "the next run resumes from it" in page.inner_text("#checkpoint-time")
    run = page.inner_text("#usage tbody tr")  # recorded by the listener, from wait4
    assert run.split()[0] == "1" and "MiB" in run and " s" in run
    shot(page, "09-checkpoint-and-resources")

    page.click("#action-start_over")
    assert "Are you sure?" in page.inner_text("#content")
    page.click("#confirm")
    assert "Started 1 task over" in page.inner_text(".messagelist")
    page.wait_for_selector(".blueque-status.status-complete", timeout=30_000)
    assert '"resumed_at": 0' in page.inner_text("#field-result")  # from nothing, not row 2
    assert page.locator("#usage tbody tr").count() == 2
