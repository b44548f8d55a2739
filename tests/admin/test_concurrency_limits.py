"""What the admin, the metrics and the JSON API show of a queue's concurrency and rate limits
(issue 39), with Django's test client: each queue's limits from the settings, its running
tasks and its tasks held for their concurrency key; the page of a held task names its key."""

import re

import pytest

from django_blueque.core.admission import Admission

from .helpers import as_json, body, url

LIMITED = {"MAX_RUNNING": 2, "MAX_RUNNING_PER_KEY": 1, "RATE_LIMIT": "30/m"}


@pytest.fixture
def limited(settings, blueque):
    """Queue "imports" with every limit, running one task of customer-7 and holding two
    more of that key; queue "plain" with one pending task and no limit. Returns
    (running id, held ids)."""
    settings.BLUEQUE = {**settings.BLUEQUE, "QUEUES": {"imports": LIMITED}}
    imports = blueque.get_queue("imports")
    ids = [imports.enqueue(str(n), concurrency_key="customer-7") for n in range(3)]
    blueque.get_queue("plain").enqueue("x")
    admission = Admission.of({name.lower(): value for name, value in LIMITED.items()})
    listener = "node-1~a_4242"
    assert blueque.protocol.take("imports", listener, "tok-1", 4343, admission)[:2] == (
        ids[0], "ok")
    assert blueque.protocol.take("imports", listener, "tok-2", 4344, admission) is None
    return ids[0], ids[1:]


def queue_row(page, queue):
    return re.search(rf'<tr data-queue="{re.escape(queue)}"[^>]*>(.*?)</tr>', page, re.S)[1]


def test_the_dashboard_shows_each_queues_limits_running_and_held_tasks(admin, limited):
    page = body(admin.get(url("")))
    held = dict(re.findall(r'data-bq-held="([^"]+)"><span data-bq-live="[^"]+">(\d+)<', page))
    assert (held["imports"], held["plain"]) == ("2", "0")
    limits = dict(re.findall(r'data-bq-limits="([^"]+)"><span data-bq-live="[^"]+">([^<]*)<',
                             page))
    assert limits["imports"] == "1 of 2 running, 1 per key, 30/m" and limits["plain"] == "—"
    # held tasks are not counted as pending: the row's pending count is the list's
    assert 'data-bq-live="count pending imports">0<' in queue_row(page, "imports")
    assert 'data-bq-live="count started imports">1<' in queue_row(page, "imports")
    live = as_json(admin.get(url("", live=1)))["text"]
    assert live["keyheld imports"] == "2" and live["keyheld plain"] == "0"
    assert live["limits imports"] == "1 of 2 running, 1 per key, 30/m"


def test_metrics_and_the_api_count_held_tasks_and_give_the_limits(admin, limited):
    prometheus = body(admin.get(url("metrics/")))
    assert 'blueque_held_tasks{queue="imports"} 2' in prometheus
    assert 'blueque_held_tasks{queue="plain"} 0' in prometheus
    for path in ("metrics.json", "api/queues/"):
        queues = {queue["name"]: queue for queue in as_json(admin.get(url(path)))["queues"]}
        assert queues["imports"]["held"] == 2 and queues["plain"]["held"] == 0, path
        assert queues["imports"]["limits"] == {
            "max_running": 2, "max_running_per_key": 1, "rate_limit": "30/m"}, path
        assert queues["plain"]["limits"] == {
            "max_running": None, "max_running_per_key": None, "rate_limit": None}, path


def test_a_held_tasks_page_says_it_waits_for_a_run_of_its_key(admin, limited):
    running, (held, _) = limited
    page = body(admin.get(url(f"tasks/{held}/")))
    assert 'data-bq-field="status">pending<' in page
    summary = page.split('class="blueque-summary"')[1].split("</dl>")[0]
    assert "<code>customer-7</code>" in summary
    assert 'id="held-for-key"' in summary and "waits for a run of this key to end" in summary
    assert "held: its concurrency key was full" in page  # on the timeline
    page = body(admin.get(url(f"tasks/{running}/")))
    assert "<code>customer-7</code>" in page and 'id="held-for-key"' not in page


def test_garbage_in_the_held_set_reads_as_none_held(admin, limited, r):
    r.delete("blueque_held_imports")
    r.set("blueque_held_imports", "garbage")
    response = admin.get(url(""))
    assert response.status_code == 200
    assert re.search(r'data-bq-held="imports"><span data-bq-live="[^"]+">0<', body(response))
    assert 'blueque_held_tasks{queue="imports"} 0' in body(admin.get(url("metrics/")))
