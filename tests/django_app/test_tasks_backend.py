"""Django's Tasks framework with BluequeBackend: enqueued with task.enqueue(), run by a real
bq_listen, results read back through the framework's TaskResult. Runs on Django 6 (django.tasks)
and on Django 5.2 (the django-tasks backport)."""

import datetime
import json
import sys
import time
from pathlib import Path

import pytest
from django.apps import apps
from django.utils import timezone

from devtools.servers import wait_for
from django_blueque.backends import _app_name
from django_blueque.tasks_compat import (
    DummyBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)

MODULES = {"TASK_MODULES": ["tests.django_app.tasks_framework"]}
BACKEND = "django_blueque.backends.BluequeBackend"
TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "other"], "OPTIONS": MODULES}}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def framework(settings, blueque, manage):
    """TASKS set here and in the settings of the manage.py processes (tasks_settings)."""
    settings.TASKS = TASKS
    manage.env["DJANGO_SETTINGS_MODULE"] = "tests.django_app.tasks_settings"
    manage.env["PYTHONPATH"] = str(ROOT)
    return manage


@pytest.fixture
def tasks(framework):
    """The tasks module, imported once TASKS names a backend with its queues."""
    from tests.django_app import tasks_framework

    return tasks_framework


def burst(manage, **overrides):
    """Run every queued task with a real `bq_listen --burst`; returns its output."""
    manage.env["BLUEQUE_TEST_TASKS"] = json.dumps(overrides)
    done = manage.run("bq_listen", "--burst", "--noreload", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def finished(result, timeout=30):
    def done():
        result.refresh()
        return result.is_finished
    wait_for(done, timeout, f"task {result.id} to finish")
    return result


def test_tasks_run_in_bq_listen_and_report_through_task_result(framework, r, tasks):
    added = tasks.add.enqueue(2, 3)
    assert added.status == TaskResultStatus.READY
    assert r.hget(f"blueque_task_{added.id}", "queue") == "django.tasks.default"
    failing = tasks.explode.enqueue("no luck")
    context = tasks.which_attempt.enqueue()
    other = tasks.shout.enqueue(text="hi")
    assert r.hget(f"blueque_task_{other.id}", "queue") == "django.tasks.other"
    framework.start("bq_listen", "--noreload")

    assert finished(added).status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5 and added.attempts == 1
    assert added.enqueued_at <= added.started_at <= added.finished_at
    assert finished(failing).status == TaskResultStatus.FAILED
    assert failing.errors[0].exception_class is ValueError
    assert "no luck" in failing.errors[0].traceback
    assert finished(context).return_value == {"attempt": 1, "id": context.id}
    assert finished(other).return_value == "HI"


def test_run_after_defers_the_task(framework, tasks):
    later = tasks.add.using(run_after=timezone.now() + datetime.timedelta(seconds=2)).enqueue(1, 1)
    assert later.status == TaskResultStatus.READY
    framework.start("bq_listen", "--noreload", "--with-scheduler")
    assert finished(later).return_value == 2
    assert later.started_at >= later.enqueued_at + datetime.timedelta(seconds=1.5)


def test_unknown_result_id_does_not_exist(framework, tasks):
    for result_id in ("no-such-task", "bad id with spaces"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(result_id)


# -- 1. the framework's signals, at enqueue and in the worker ---------------------------------

def test_signals_are_sent_at_enqueue_and_in_the_worker(framework, tasks):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        added = tasks.add.enqueue(1, 2)
        failing = tasks.explode.enqueue("boom")
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [added.id, failing.id]
    output = burst(framework)
    path = "tests.django_app.tasks_framework"
    assert f"Task id={added.id} path={path}.add state=RUNNING" in output
    assert f"Task id={added.id} path={path}.add state=SUCCESSFUL" in output
    assert f"Task id={failing.id} path={path}.explode state=RUNNING" in output
    assert f"Task id={failing.id} path={path}.explode state=FAILED" in output


# -- 2. the Task is rebuilt as it was enqueued: backend alias, queue, run_after ----------------

def test_a_task_sent_to_another_alias_keeps_it(framework, settings, tasks):
    dummy = f"{DummyBackend.__module__}.{DummyBackend.__qualname__}"
    settings.TASKS = {"default": {"BACKEND": dummy, "QUEUES": ["default", "other"]},
                      "blueque": TASKS["default"]}
    run_after = timezone.now() - datetime.timedelta(seconds=5)
    result = tasks.where_am_i.using(backend="blueque", queue_name="other",
                                    run_after=run_after).enqueue()
    assert result.task.backend == "blueque" and result.task.queue_name == "other"
    assert result.task.run_after == run_after
    burst(framework, TASKS=settings.TASKS)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"backend": "blueque", "queue_name": "other",
                                   "run_after": run_after.isoformat()}


# -- 3. JSON only: refused at enqueue, a non-JSON return value fails the task ------------------

def test_arguments_that_are_not_json_fail_at_enqueue(framework, r, tasks):
    for bad in (object(), datetime.datetime.now(), {1, 2}):
        with pytest.raises(TypeError, match="Unsupported type"):
            tasks.add.enqueue(bad, 1)
    assert r.dbsize() == 0


def test_a_return_value_that_is_not_json_fails_the_task(framework, tasks):
    result = tasks.returns_a_set.enqueue()
    burst(framework)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError
    assert "Unsupported type" in result.errors[0].traceback


# -- 4. QUEUES: [] accepts any queue, and bq_listen runs it ----------------------------------

def test_empty_queues_accept_any_queue_and_bq_listen_runs_it(framework, settings, tasks):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": [], "OPTIONS": MODULES}}
    result = tasks.add.using(queue_name="anything-at-all").enqueue(20, 22)
    burst(framework, TASKS=settings.TASKS)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == 42 and result.task.queue_name == "anything-at-all"


# -- 5. times follow USE_TZ and TIME_ZONE -----------------------------------------------------

@pytest.mark.parametrize("use_tz", [True, False])
def test_times_follow_use_tz_and_time_zone(framework, settings, use_tz, tasks):
    settings.USE_TZ = use_tz
    settings.TIME_ZONE = "America/New_York"
    before = timezone.now()
    result = tasks.add.enqueue(1, 1)
    burst(framework, USE_TZ=use_tz, TIME_ZONE="America/New_York")
    result.refresh()
    after = timezone.now()
    for moment in (result.enqueued_at, result.started_at, result.finished_at):
        assert timezone.is_aware(moment) is use_tz
        assert before - datetime.timedelta(seconds=1) <= moment <= after


# -- 6. a bad queue name is a system check error ----------------------------------------------

def test_a_queue_name_with_a_space_is_a_check_error_not_a_traceback(framework):
    bad = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "two words"]}}
    framework.env["BLUEQUE_TEST_TASKS"] = json.dumps({"TASKS": bad})
    done = framework.run("check")
    assert done.returncode != 0
    assert "blueque.E020" in done.stderr and "'two words'" in done.stderr
    assert "Traceback" not in done.stderr


# -- 7. async task functions ------------------------------------------------------------------

def test_async_task_functions_run(framework, tasks):
    result = tasks.add_later.enqueue(2, 2)
    burst(framework)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == 4


# -- 8. data in Redis never chooses what code runs --------------------------------------------

def forge(r, queue, parameters, task_id="f0f0f0f0-0000-4000-8000-000000000001"):
    """A task written straight into Redis, as anyone with access to it could."""
    now = repr(time.time())
    r.hset(f"blueque_task_{task_id}", mapping={"status": "pending", "queue": queue,
                                               "parameters": json.dumps(parameters),
                                               "created": now, "updated": now})
    r.lpush(f"blueque_pending_tasks_{queue}", task_id)
    return task_id


def payload(path, **changes):
    return {"task": path, "args": [], "kwargs": {}, "backend": "default",
            "queue_name": "default", "priority": 0, "run_after": None, **changes}


def test_an_error_type_naming_a_foreign_module_is_not_imported(framework, r, tasks):
    failing = tasks.explode.enqueue("boom")
    burst(framework)
    key = f"blueque_task_{failing.id}"
    history = json.loads(r.hget(key, "errors"))
    r.hset(key, "errors", json.dumps([dict(history[0], type="evil_module.Error")]))
    failing.refresh()
    assert failing.errors[0].exception_class is Exception
    assert "evil_module" not in sys.modules


def test_a_module_outside_installed_apps_is_never_imported(framework, r, tmp_path, tasks):
    marker = tmp_path / "imported"
    (tmp_path / "evil_module.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from django_blueque.tasks_compat import task\n"
        "@task\ndef evil():\n    return 'ran'\n")
    framework.env["PYTHONPATH"] += f":{tmp_path}"
    task_id = forge(r, "django.tasks.default", payload("evil_module.evil"))
    burst(framework)
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    assert "evil_module" in r.hget(f"blueque_task_{task_id}", "error")
    assert "TASK_MODULES" in r.hget(f"blueque_task_{task_id}", "error")
    sys.path.append(str(tmp_path))
    try:
        with pytest.raises(TaskResultDoesNotExist, match="evil_module"):
            tasks.add.get_backend().get_result(task_id)
    finally:
        sys.path.remove(str(tmp_path))
    assert not marker.exists() and "evil_module" not in sys.modules


@pytest.mark.parametrize("path,changes,needle", [
    ("tests.django_app.tasks_framework.not_a_task", {}, "not a Task"),
    ("django_blueque.conf.get_client", {}, "not a Task"),
    ("tests.django_app.tasks_framework.add", {"queue_name": "other"}, "queue"),
    ("tests.django_app.tasks_framework.add", {"backend": "nope"}, "nope"),
])
def test_only_a_task_of_this_backend_and_queue_runs(framework, r, path, changes, needle, tasks):
    task_id = forge(r, "django.tasks.default", payload(path, args=[1, 2], **changes))
    good = tasks.add.enqueue(1, 1)
    burst(framework)
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    assert needle in r.hget(f"blueque_task_{task_id}", "error")
    good.refresh()
    assert good.return_value == 2


def test_a_blueque_task_runs_the_function_of_the_queue_it_was_taken_from(blueque, manage, r):
    """The hash says demo.fail, but the id was on demo.report's list: report() runs."""
    task_id = forge(r, "demo.report", {"title": "from the list"})
    r.hset(f"blueque_task_{task_id}", "queue", "demo.fail")
    done = manage.run("bq_listen", "--burst", "--noreload", "demo.report", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert r.hget(f"blueque_task_{task_id}", "status") == "complete"
    assert json.loads(r.hget(f"blueque_task_{task_id}", "result"))["title"] == "from the list"


def test_the_highest_priority_runs_first_and_is_kept_with_the_task(framework, tasks, r):
    low = tasks.add.using(priority=-10).enqueue(1, 1)
    plain = tasks.add.enqueue(2, 2)
    high = tasks.add.using(priority=50).enqueue(3, 3)
    assert r.hget(f"blueque_task_{high.id}", "priority") == "50"
    assert r.hget(f"blueque_task_{plain.id}", "priority") is None  # blueque 1.0's pending list
    burst(framework)
    for result in (low, plain, high):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert high.started_at < plain.started_at < low.started_at
    assert (high.task.priority, low.task.priority) == (50, -10)


def test_a_queue_name_with_a_space_is_refused_at_enqueue(framework, settings, tasks, r):
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "two words"]}}
    with pytest.raises(InvalidTask, match="'two words'"):
        tasks.add.using(queue_name="two words").enqueue(1, 2)
    assert r.dbsize() == 0


@pytest.mark.parametrize("options", [{"TASK_MODUELS": []}, {"TASK_MODULES": "myapp.jobs"},
                                     {"TASK_MODULES": [""]}])
def test_bad_options_are_a_check_error(framework, settings, options):
    from django_blueque.tasks_compat import task_backends

    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": options}}
    assert [error.id for error in task_backends["default"].check()] == ["blueque.E021"]


def test_every_failed_run_is_an_error_of_the_result_oldest_first(framework, tasks, settings, r):
    # the enqueuing process writes its queue's retry policy into the task
    settings.BLUEQUE = {**settings.BLUEQUE,
                        "QUEUES": {"django.tasks.other": {"RETRIES": 2, "BACKOFF": 0}}}
    result = tasks.fails_twice.enqueue()
    burst(framework)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert result.attempts == 3 and len(result.worker_ids) == 3  # each run's listener
    assert set(result.worker_ids) == {r.hget(f"blueque_task_{result.id}", "node")}  # one here
    assert [error.exception_class for error in result.errors] == [ValueError, ValueError]
    assert ["run 1 failed" in result.errors[0].traceback,
            "run 2 failed" in result.errors[1].traceback] == [True, True]


def test_a_task_no_worker_may_import_is_refused_before_anything_is_written(framework, settings,
                                                                           r, tmp_path):
    """Before: enqueue() wrote it, then raised TaskResultDoesNotExist from its own get_result,
    leaving a task that fails in the worker (issue 38)."""
    dummy = f"{DummyBackend.__module__}.{DummyBackend.__qualname__}"
    settings.TASKS = {**TASKS, "dummy": {"BACKEND": dummy}}
    (tmp_path / "outside_apps.py").write_text(
        "from django_blueque.tasks_compat import task\n\n"
        "@task(backend='dummy')\ndef outside():\n    return 1\n")
    sys.path.append(str(tmp_path))
    try:
        from outside_apps import outside
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(InvalidTask, match=r"'outside_apps' .*TASK_MODULES"):
        outside.using(backend="default")
    with pytest.raises(InvalidTask, match="TASK_MODULES"):
        task_backends["default"].enqueue(outside, [], {})
    assert r.dbsize() == 0


def test_installed_is_judged_by_installed_apps_not_the_registrys_current_view(framework):
    """A TransactionTestCase's available_apps hides apps from the registry, not from the
    workers: Django's own tests enqueue tasks of an app so hidden."""
    backend = task_backends["default"]
    apps.set_available_apps(["django_blueque"])
    try:
        assert backend.may_import("demo.tasks")
    finally:
        apps.unset_available_apps()
    assert not backend.may_import("demonic.tasks")
    assert _app_name("django.contrib.admin.apps.SimpleAdminConfig") == "django.contrib.admin"


def test_the_worker_ids_name_the_listener_of_each_run():
    """Runs on several machines: each failed run's listener from the error history, then the
    one that completed (it used to be the last listener, repeated once per attempt)."""
    from django_blueque.backends import BluequeBackend
    from django_blueque.core import Task as EngineTask

    history = json.dumps([{"type": "builtins.ValueError", "message": "no", "node": node,
                           "attempt": n, "time": 1.0, "code": "", "traceback": ""}
                          for n, node in enumerate(["a_1", "b_2"], start=1)])
    done = EngineTask("t", {"status": "complete", "node": "c_3", "attempts": "3",
                            "errors": history})
    assert BluequeBackend.worker_ids(done) == ["a_1", "b_2", "c_3"]
    failed = EngineTask("t", {"status": "failed", "node": "b_2", "attempts": "2",
                              "errors": history})
    assert BluequeBackend.worker_ids(failed) == ["a_1", "b_2"]
