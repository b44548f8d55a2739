"""An operator in a real browser, on a Redis holding thousands of queues and data no engine of
ours wrote: the dashboard pages its queues and finds one by name, and says which keys it
could not read; a task page with a huge field says what it cut."""

import pytest
import redis

from .test_admin_browser import log_in

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-bad-data-browser")]


def test_many_queues_and_bad_data(page, site, shot):
    r = redis.Redis.from_url(site["redis_url"], decode_responses=True)
    r.zadd("blueque_queues", {f"imported-{n:05d}": 0 for n in range(3000)})
    r.set("blueque_listeners_imported-00042", "not a set")
    r.hset("blueque_task_huge", mapping={"status": "failed", "queue": "imported-00042",
                                         "node": "n" * 100_000, "created": "inf",
                                         "parameters": "[" * 5000 + "]" * 5000})
    try:
        log_in(page, site)
        assert page.locator("#queue-pages").is_visible()
        assert "Page 1 of" in page.inner_text("#queue-pages")
        shot(page, "20-dashboard-many-queues")
        page.fill("#blueque-queue-q", "imported-00042")
        page.click(".blueque-queue-search button")
        page.wait_for_url("**q=imported-00042")
        rows = page.locator("#queues tbody tr[data-queue]")
        assert rows.count() == 1 and rows.first.get_attribute("data-queue") == "imported-00042"
        assert "blueque_listeners_imported-00042" in page.inner_text("#blueque-unreadable")
        shot(page, "21-dashboard-search-and-unreadable")
        page.goto(f"{site['url']}/admin/django_blueque/queue/tasks/huge/")
        assert "(cut: 100000 bytes in all)" in page.inner_text("#fields")
        shot(page, "22-task-cut")
    finally:
        r.delete("blueque_queues", "blueque_listeners_imported-00042", "blueque_task_huge")
        r.close()
