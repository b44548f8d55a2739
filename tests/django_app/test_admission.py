"""Concurrency limits from Django's settings (issue 39): BLUEQUE["QUEUES"]'s MAX_RUNNING and
MAX_RUNNING_PER_KEY obeyed by real ``manage.py bq_listen`` processes, for @blueque_task queues
(with ``.using(concurrency_key=...)``) and for the queues of Django's Tasks backend; the tasks
mark their own runs (limits_app), and a test counts how many ran at once."""

import json
from pathlib import Path

import pytest

from django_blueque import get_result
from django_blueque.services import run_policy

from .conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def listen(manage, blueque):
    """listen(queues_setting, *bq_listen arguments): a real bq_listen whose BLUEQUE has those
    QUEUES, on the limits' settings (testproject's, a Tasks backend, the limits' tasks)."""
    manage.env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.limits_settings"
    manage.env["PYTHONPATH"] = str(ROOT)

    def start(queues, *arguments):
        manage.env["BLUEQUE_TEST_QUEUES"] = json.dumps(queues)
        return manage.start("bq_listen", "--noreload", *arguments)

    return start


@pytest.fixture
def marked():
    from tests.django_app.limits_app import tasks

    return tasks


def runs_of(r, marks_key):
    """{task id: (start, end)} from the tasks' own marks."""
    runs = {}
    for line in r.lrange(marks_key, 0, -1):
        mark = json.loads(line)
        runs.setdefault(mark["id"], {})[mark["event"]] = mark["at"]
    return {task_id: (mark["start"], mark["end"]) for task_id, mark in runs.items()}


def most_at_once(spans):
    edges = sorted([(end, -1) for _, end in spans] + [(start, 1) for start, _ in spans])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def completed(task_ids, timeout=60):
    for task_id in task_ids:
        assert get_result(task_id).wait(timeout=timeout).status == "complete", task_id


def test_bq_listen_runs_at_most_max_running_of_a_queue(listen, marked, r):
    queues = {"limits.encode": {"MAX_RUNNING": 2}}
    for _ in range(2):
        listen(queues, "limits.encode", "-c", "3")
    task_ids = [marked.encode.enqueue(seconds=0.3) for _ in range(10)]
    completed(task_ids)
    runs = runs_of(r, marked.MARKS)
    assert set(runs) == set(task_ids)
    assert most_at_once(runs.values()) == 2, runs


def test_tasks_of_one_concurrency_key_never_overlap(listen, marked, r):
    listen({"limits.import": {"MAX_RUNNING_PER_KEY": 1}}, "limits.import", "-c", "4")
    key_of = {}
    for n in range(9):
        key = f"customer-{n % 3}"
        key_of[marked.import_rows.using(concurrency_key=key).enqueue(seconds=0.3)] = key
    assert r.hget(f"blueque_task_{next(iter(key_of))}", "concurrency_key") == "customer-0"
    completed(key_of)
    runs = runs_of(r, marked.MARKS)
    for key in set(key_of.values()):
        assert most_at_once([runs[t] for t, k in key_of.items() if k == key]) == 1, key
    assert most_at_once(runs.values()) >= 2  # the other keys ran beside it


def test_a_concurrency_key_is_checked_before_anything_is_written(marked, blueque, r):
    with pytest.raises(ValueError, match="concurrency_key"):
        marked.import_rows.using(concurrency_key="two words")
    assert r.keys("*") == []


def test_the_queue_settings_reach_the_listeners_policy(settings):
    settings.BLUEQUE = {"QUEUES": {"video.encode": {"MAX_RUNNING": 2, "MAX_RUNNING_PER_KEY": 1,
                                                    "RATE_LIMIT": "30/m"}}}
    assert {name: run_policy("video.encode")[name] for name in (
        "max_running", "max_running_per_key", "rate_limit")} == {
        "max_running": 2, "max_running_per_key": 1, "rate_limit": "30/m"}
    assert run_policy("other")["max_running"] is None


def test_a_tasks_backend_queue_honours_max_running(listen, settings, r):
    from django_blueque.tasks_compat import TaskResultStatus

    settings.TASKS = {"default": {"BACKEND": "django_blueque.backends.BluequeBackend",
                                  "QUEUES": ["default", "other"],
                                  "OPTIONS": {"TASK_MODULES": [
                                      "tests.django_app.tasks_framework"]}}}
    from tests.django_app import tasks_framework
    from tests.django_app.limits_app.tasks import MARKS

    results = [tasks_framework.marked.enqueue(0.3) for _ in range(6)]
    listen({"django.tasks.other": {"MAX_RUNNING": 1}}, "-c", "3")
    for result in results:
        wait_for(lambda result=result: result.refresh() or result.is_finished, 60)
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    runs = runs_of(r, MARKS)
    assert set(runs) == {result.id for result in results}
    assert most_at_once(runs.values()) == 1, runs
