"""Issue 41: log records that say which task they come from, and one JSON object per line from
a real bq_listen process (--log-format json) when the project has no LOGGING of its own."""

import json
import logging
import signal
import time

import pytest
from demo.tasks import failing_task, report

from devtools.servers import wait_for
from django_blueque.core import RunningTask, Task
from django_blueque.core.context import set_current_task
from django_blueque.logs import (
    JSONFormatter,
    TaskContextFilter,
    TextFormatter,
    install_task_context,
)


@pytest.fixture
def manage(manage):
    manage.env["DJANGO_SETTINGS_MODULE"] = "tests.observability.nolog_settings"
    return manage


def test_bq_listen_writes_one_json_object_per_line_naming_the_task(manage, blueque):
    task_id = failing_task.enqueue(message="no luck")
    done = manage.run("bq_listen", "demo.fail", "--burst", "--noreload", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
    assert {"time", "level", "logger", "message", "pid"} <= set(lines[0])
    assert "task_id" not in lines[0]  # the listener's own record: no task
    failure, = [line for line in lines if line["level"] == "ERROR"]
    assert failure["logger"] == "django_blueque.task"
    assert failure["message"] == f"task {task_id} failed: no luck"
    assert (failure["task_id"], failure["queue"], failure["attempt"]) == (task_id, "demo.fail", 1)
    assert failure["exception"].endswith("RuntimeError: no luck")
    assert failure["pid"] != lines[0]["pid"]  # from the task's own process


def test_the_reloader_s_lines_are_json_too(manage, blueque, r):
    supervisor = manage.start("bq_listen", "demo.fail", "--reload", "--log-format", "json")
    wait_for(lambda: r.smembers("blueque_listeners_demo.fail"), 30, "the listener to start")
    supervisor.send_signal(signal.SIGINT)
    assert supervisor.wait(30) == 0
    lines = [json.loads(line) for line in supervisor.stdout.read().splitlines()]
    assert lines[0]["message"].startswith("bq_listen uses Redis ")  # the first line, issue 42
    assert lines[1]["message"].startswith("Autoreload is on")
    assert any(line["message"].startswith("listener ") for line in lines[2:])


def test_bq_listen_text_lines_name_the_task(manage, blueque):
    task_id = failing_task.enqueue(message="no luck")
    done = manage.run("bq_listen", "demo.fail", "--burst", "--noreload")
    assert done.returncode == 0, done.stderr
    failure, = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert failure.endswith(f"failed: no luck [task {task_id}, queue demo.fail, attempt 1]")


def test_the_project_s_logging_wins_and_the_command_says_json_is_not_used(manage, blueque):
    manage.env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"  # LOGGING for django_blueque
    done = manage.run("bq_schedule", "--once", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    assert "--log-format json is not used" in done.stderr


def test_bq_schedule_writes_json_too_and_bq_reap_takes_the_option(manage, blueque):
    report.schedule(time.time() + 0.3)
    time.sleep(0.5)
    done = manage.run("bq_schedule", "--once", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    uses, moved = [json.loads(line) for line in done.stderr.splitlines()]
    assert uses["message"].startswith("bq_schedule uses Redis ")
    assert moved["logger"] == "django_blueque.scheduler"
    assert moved["message"] == "moved 1 due task(s) to demo.report"
    done = manage.run("bq_reap", "--once", "--log-format", "json")
    assert done.returncode == 0, done.stderr


@pytest.fixture
def records():
    """Records made in this process while the listener's record factory is installed."""
    before = logging.getLogRecordFactory()
    install_task_context()
    install_task_context()  # idempotent: one layer
    made = []
    handler = logging.Handler()
    handler.emit = made.append
    logger = logging.getLogger("tests.a_project_logger")
    logger.addHandler(handler)
    yield logger, made
    logger.removeHandler(handler)
    logging.setLogRecordFactory(before)
    set_current_task(None)


def test_a_task_s_own_records_carry_its_id_queue_and_attempt(records, r):
    logger, made = records
    logger.warning("outside")
    set_current_task(RunningTask(None, Task("t-1", {"queue": "q", "attempts": "3"}), "token"))
    logger.warning("inside", extra={"task_id": "the project's own"})  # no clash with ours
    outside, inside = made
    assert (outside.blueque_task_id, outside.blueque_queue, outside.blueque_attempt) == \
        ("", "", "")
    assert (inside.blueque_task_id, inside.blueque_queue, inside.blueque_attempt) == \
        ("t-1", "q", 3)
    assert inside.task_id == "the project's own"
    assert TextFormatter().format(inside).endswith("inside [task t-1, queue q, attempt 3]")
    assert json.loads(JSONFormatter().format(outside)).keys() == {
        "time", "level", "logger", "message", "pid"}
    formatter = logging.Formatter("%(blueque_task_id)s|%(blueque_attempt)s %(message)s")
    assert formatter.format(inside) == "t-1|3 inside"


def test_the_filter_gives_records_made_elsewhere_the_attributes_a_format_names():
    record = logging.LogRecord("web", logging.INFO, __file__, 1, "a request", None, None)
    assert TaskContextFilter().filter(record)
    formatter = logging.Formatter("[%(blueque_task_id)s] %(message)s")
    assert formatter.format(record) == "[] a request"
