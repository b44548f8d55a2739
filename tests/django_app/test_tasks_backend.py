"""Django's Tasks framework (Django 6+) with BluequeBackend: enqueued with task.enqueue(), run by
a real bq_listen, results read back through the framework's TaskResult."""

import datetime
from pathlib import Path

import pytest

pytest.importorskip("django.tasks", reason="Django's Tasks framework is Django 6+")

from django.tasks import TaskResultStatus  # noqa: E402
from django.tasks.exceptions import TaskResultDoesNotExist  # noqa: E402
from django.utils import timezone  # noqa: E402

from tests.waiting import wait_for  # noqa: E402

TASKS = {"default": {"BACKEND": "django_blueque.backends.BluequeBackend",
                     "QUEUES": ["default", "other"]}}


@pytest.fixture
def tasks(settings, blueque, manage):
    settings.TASKS = TASKS
    from tests.django_app import tasks_framework

    manage.env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.tasks_settings"
    manage.env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return tasks_framework


def finished(result, timeout=30):
    def done():
        result.refresh()
        return result.is_finished
    wait_for(done, timeout, f"task {result.id} to finish")
    return result


def test_tasks_run_in_bq_listen_and_report_through_task_result(tasks, manage, r):
    added = tasks.add.enqueue(2, 3)
    assert added.status == TaskResultStatus.READY
    assert r.hget(f"blueque_task_{added.id}", "queue") == "django.tasks.default"
    failing = tasks.explode.enqueue("no luck")
    context = tasks.which_attempt.enqueue()
    other = tasks.shout.enqueue(text="hi")
    assert r.hget(f"blueque_task_{other.id}", "queue") == "django.tasks.other"
    manage.start("bq_listen", "--noreload")

    assert finished(added).status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5 and added.attempts == 1
    assert added.enqueued_at <= added.started_at <= added.finished_at
    assert finished(failing).status == TaskResultStatus.FAILED
    assert failing.errors[0].exception_class is ValueError
    assert "no luck" in failing.errors[0].traceback
    assert finished(context).return_value == {"attempt": 1, "id": context.id}
    assert finished(other).return_value == "HI"


def test_run_after_defers_the_task(tasks, manage):
    later = tasks.add.using(run_after=timezone.now() + datetime.timedelta(seconds=2)).enqueue(1, 1)
    assert later.status == TaskResultStatus.READY
    manage.start("bq_listen", "--noreload", "--with-scheduler")
    assert finished(later).return_value == 2
    assert later.started_at >= later.enqueued_at + datetime.timedelta(seconds=1.5)


def test_unknown_result_id_does_not_exist(tasks):
    for result_id in ("no-such-task", "bad id with spaces"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(result_id)


def test_arguments_that_are_not_json_fail_at_enqueue(tasks, r):
    with pytest.raises((TypeError, ValueError)):
        tasks.add.enqueue(object(), 1)
    assert r.dbsize() == 0
