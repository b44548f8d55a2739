"""The admin's rough edges of issue 42 (items 11 to 16), with Django's test client; the browser
tests are in tests/browser/test_rough_edges_browser.py."""

import re

from django_blueque.charts import nice_ceiling
from django_blueque.templatetags.blueque_admin import bq_time

from .helpers import as_json, body, complete_task, start_task, url


def test_a_queue_link_opens_the_tab_that_has_tasks(admin, blueque):
    start_task(blueque, "all.started")
    response = admin.get(url("", name="all.started"))
    assert response.status_code == 302
    assert response["Location"] == url("", name="all.started", state="started")
    complete_task(blueque, "all.done")
    assert admin.get(url("", name="all.done"))["Location"] == url(
        "", name="all.done", state="complete")


def test_pending_stays_the_tab_when_it_has_tasks_or_was_asked_for(admin, blueque):
    start_task(blueque, "busy")
    blueque.get_queue("busy").enqueue('{"n": 1}')
    response = admin.get(url("", name="busy"))
    assert response.status_code == 200 and response.context["state"] == "pending"
    start_task(blueque, "only.started")
    asked = admin.get(url("", name="only.started", state="pending"))
    assert asked.status_code == 200 and asked.context["state"] == "pending"
    assert asked.context["tasks"] == []


def test_runs_say_the_retries_plainly(admin, blueque):
    never = blueque.get_queue("q").enqueue('{"n": 1}', retries=0)
    twice = blueque.get_queue("q").enqueue('{"n": 2}', retries=2)
    assert "(no automatic retry)" in body(admin.get(url(f"tasks/{never}/")))
    page = body(admin.get(url(f"tasks/{twice}/")))
    assert "(up to 2 automatic retries)" in page and "retries a failure" not in page


def test_one_task_is_the_singular_and_the_confirmation_is_djangos(admin, blueque):
    complete_task(blueque, "q")
    page = body(admin.get(url("", name="q", state="complete")))
    assert "Delete the 1 complete task…" in page and "all 1" not in page
    complete_task(blueque, "q")
    assert "Delete all 2 complete tasks…" in body(admin.get(url("", name="q",
                                                                state="complete")))
    confirm = body(admin.post(url("bulk/start/"), {"action": "delete", "state": "complete",
                                                   "queue": "q"}))
    assert 'value="Yes, I’m sure" id="confirm"' in confirm
    assert 'class="button cancel-link">No, take me back</a>' in confirm
    assert "Yes: " not in confirm


def test_a_running_task_page_updates_its_clock_times_live(admin, blueque, r):
    task_id, _token = start_task(blueque, "q")
    page = body(admin.get(url(f"tasks/{task_id}/")))
    assert 'data-bq-live="time updated"' in page and 'data-bq-live="ago updated"' in page
    r.hset(f"blueque_task_{task_id}", "updated", "1893456000.0")  # 2030-01-01 00:00 UTC
    text = as_json(admin.get(url(f"tasks/{task_id}/", live=1)))["text"]
    assert text["time updated"] == bq_time(1893456000.0)
    assert "2030" in text["time updated"]


def test_a_failed_task_shows_its_traceback_once_and_readable_values(admin, blueque, r):
    first = 'Traceback (most recent call last):\n  File "a.py"\nValueError: first\n'
    task_id = blueque.get_queue("q").enqueue('{"n": 1}', retries=1)
    proto = blueque.protocol
    for attempt, trace in ((1, first), (2, 'Traceback (most recent call last):\n  File '
                                           '"b.py"\nValueError: second\n')):
        proto.reserve("q", "node-1_4242", "tok")
        proto.start("q", task_id, "node-1_4242", 4343, "tok")
        proto.finish("q", task_id, listener_id="node-1_4242", pid=4343, token="tok",
                     outcome="failed", value=f"run {attempt}", error_type="builtins.ValueError",
                     traceback=trace)
    r.hset(f"blueque_task_{task_id}", "progress", "12.083333333333334")
    page = body(admin.get(url(f"tasks/{task_id}/")))
    assert page.count("File &quot;b.py&quot;") == 1  # the traceback field, not again in JSON
    assert page.count("File &quot;a.py&quot;") == 1  # the earlier run's, under its run
    assert "\\n" not in page.split('id="fields"')[0]  # no escaped newline of JSON
    assert ">12.08<" in page and ">12.083333333333334<" not in page
    finished = r.hget(f"blueque_task_{task_id}", "finished")
    assert f">{finished}<" not in page and f'title="{finished}"' in page


def test_the_last_hour_chart_has_axes_labels_and_hover_values(admin, blueque):
    for _ in range(3):
        complete_task(blueque, "charted")
    page = body(admin.get(url("")))
    chart = re.search(r'<div data-bq-chart="charted">(<svg.*?</svg>)</div>', page, re.S)[1]
    labels = re.findall(r'<text class="blueque-chart-label"[^>]*>([^<]*)</text>', chart)
    counts, times = labels[:3], labels[3:]
    assert len(times) == 5 and all(re.fullmatch(r"\d\d:\d\d", label) for label in times)
    titles = re.findall(r"<title>(\d\d:\d\d): (\d+) complete, (\d+) failed</title>", chart)
    assert len(titles) == 60 and sum(int(complete) for _, complete, _ in titles) == 3
    assert titles[-1][0] == times[-1]  # the last minute is now
    busiest = max(int(complete) + int(failed) for _, complete, failed in titles)
    assert counts == ["0", str(nice_ceiling(busiest) // 2), str(nice_ceiling(busiest))]
    assert 'role="img" aria-label="Tasks of queue charted ended per minute' in chart
    live = as_json(admin.get(url(""), {"live": "1"}))["charts"]["charted"]
    assert live.startswith("<svg") and live.count("<title>") == 60


def test_nice_ceiling_makes_whole_axis_labels():
    assert [nice_ceiling(n) for n in (0, 1, 2, 3, 6, 11, 99, 101)] == [2, 2, 2, 5, 10, 20,
                                                                      100, 200]
