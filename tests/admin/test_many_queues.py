"""100,000 names in blueque_queues (never pruned): the dashboard, the metrics, the listeners
page and bq_status read a bounded part of them, and a search finds any one."""

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.core.management import call_command

from django_blueque.core import bulk
from django_blueque.queries import LISTENER_QUEUES, METRICS_QUEUES, QUEUES_PER_PAGE
from django_blueque.registry import registered_tasks
from tests.core.helpers import calls_delta, command_calls

from .helpers import body, fail_task, fill_failed, start_task, url

MANY = 100_000


@pytest.fixture
def many_queues(blueque, r):
    """MANY idle queue names, one queue with work and a live listener among them."""
    r.eval("""for n = 1, tonumber(ARGV[1]) do
                redis.call('ZADD', KEYS[1], 0, string.format('queue-%06d', n)) end""",
           1, "blueque_queues", MANY)
    fail_task(blueque, "queue-054321")
    start_task(blueque, "queue-054321", listener="busy-host_9")
    return r


def test_the_dashboard_shows_one_page_of_queues_cheaply(admin, many_queues):
    """It costs what it shows: a bounded number of Redis commands, none reading the queues
    set whole (the time, under 100 ms, is measured by bench/admin_bench_scale.py)."""
    admin.get(url(""))  # warm
    before = command_calls(many_queues)
    response = admin.get(url(""))
    assert response.status_code == 200
    sent = calls_delta(before, command_calls(many_queues))
    overview = response.context["overview"]
    assert sum(sent.values()) < 15 * len(overview.queues), sent  # about 14 per queue shown
    assert overview.total >= MANY and overview.pages == -(-overview.total // QUEUES_PER_PAGE)
    pinned = len(registered_tasks())  # the registered queues are pinned to page 1
    assert len(overview.queues) <= QUEUES_PER_PAGE + pinned
    # the queue with a listener ranks first; the registered ones are on page 1
    assert {"queue-054321", "demo.long"} <= {queue.name for queue in overview.queues}
    page = body(response)
    assert "Page 1 of" in page and "?p=2" in page
    second = admin.get(url("", p=2)).context["overview"]
    assert second.page == 2 and not {q.name for q in second.queues} & {
        q.name for q in overview.queues}


def test_a_search_finds_one_queue_among_many(admin, many_queues):
    response = admin.get(url("", q="queue-099999"))
    assert [queue.name for queue in response.context["overview"].queues] == ["queue-099999"]
    partial = admin.get(url("", q="-0999")).context["overview"]
    assert {queue.name for queue in partial.queues} >= {"queue-099900", "queue-099999"}
    assert len(partial.queues) == 100
    assert admin.get(url("", q="no such [queue*")).context["overview"].queues == []


def test_metrics_report_a_bounded_number_of_queues_and_the_total(admin, many_queues):
    data = json.loads(admin.get(url("metrics.json")).content)
    assert len(data["queues"]) <= METRICS_QUEUES + len(registered_tasks())
    assert data["queues_total"] >= MANY
    busy = next(queue for queue in data["queues"] if queue["name"] == "queue-054321")
    assert busy["counts"]["failed"] == 1 and busy["listeners"]["live"] == 2
    text = body(admin.get(url("metrics/")))
    assert f"blueque_queues_known {data['queues_total']}" in text
    assert 'blueque_tasks{queue="queue-054321",state="failed"} 1' in text


def test_the_listeners_page_reads_only_queues_with_listeners(admin, many_queues, r):
    response = admin.get(url("listeners/"))
    assert {listener.id for listener in response.context["listeners"]} == {
        "busy-host_9", "node-1_4242"}
    assert LISTENER_QUEUES >= 1


def test_bq_status_prints_one_page_and_says_how_many_there_are(many_queues):
    out = io.StringIO()
    call_command("bq_status", "--limit", "10", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Redis: BLUEQUE['URL'] = redis://")
    queue_rows = lines[2:lines.index("")]
    # + the page line, + the registered queues, pinned
    assert len(queue_rows) <= 10 + 1 + len(registered_tasks())
    assert any(line.startswith("queue-054321 ") for line in queue_rows)
    assert "--page N" in out.getvalue()
    out = io.StringIO()
    call_command("bq_status", "--search", "queue-000007", stdout=out)
    assert out.getvalue().splitlines()[2].startswith("queue-000007 ")


def test_bq_status_json_has_the_dashboard_figures(blueque, r):
    fail_task(blueque, "q")
    start_task(blueque, "q")
    out = io.StringIO()
    call_command("bq_status", "--json", stdout=out)
    data = json.loads(out.getvalue())
    q = next(queue for queue in data["queues"] if queue["name"] == "q")
    assert q["counts"]["failed"] == 1 and q["counts"]["started"] == 1
    assert [task["queue"] for task in data["running"]] == ["q"]
    assert data["listeners"][0]["state"] == "live"


def test_bq_status_watch_prints_again_until_interrupted(blueque, redis_url):
    env = dict(os.environ, BLUEQUE_URL=redis_url, DJANGO_SETTINGS_MODULE="testproject.settings")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    process = subprocess.Popen(
        [sys.executable, "testproject/manage.py", "bq_status", "--watch", "0.2"], cwd=root,
        env=dict(env, PYTHONPATH=root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        seen, deadline = 0, time.monotonic() + 60
        while seen < 2 and time.monotonic() < deadline:
            line = process.stdout.readline()
            seen += line.startswith("Every 0.2s: ")
        assert seen == 2
    finally:
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err


def test_the_reaper_finds_running_bulk_jobs_without_reading_every_queue(admin, blueque,
                                                                        many_queues):
    fill_failed(blueque, "queue-000321", 1200)
    admin.post(url("bulk/start/"), {"action": "delete", "state": "failed",
                                     "queue": "queue-000321", "confirm": "yes"})
    many_queues.config_resetstat()
    while bulk.advance_jobs(blueque, budget=0.05):
        pass
    calls = {name.removeprefix("cmdstat_"): stats["calls"]
             for name, stats in many_queues.info("commandstats").items()}
    # one SMEMBERS per pass; a HGET per queue and kind of job would be 300,000
    assert calls["smembers"] <= 10 and calls.get("hget", 0) < 100
    assert many_queues.llen("blueque_failed_tasks_queue-000321") == 0
    assert not many_queues.exists("blueque_bulk_running")
