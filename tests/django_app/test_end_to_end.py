"""The demo app's tasks run through a real bq_listen process against a real Redis."""

import json
import time

import pytest
from demo.tasks import bounded, failing_task, flaky_task, long_task, report, resumable_import

from django_blueque import get_result

from .conftest import wait_for


@pytest.fixture
def listener(manage, blueque):
    """A real `manage.py bq_listen` with the scheduler and reaper duties, on every queue."""
    process = manage.start("bq_listen", "--noreload", "--with-scheduler", "-c", "3")
    yield process


@pytest.mark.django_db(transaction=True)  # the view enqueues on commit
def test_demo_page_starts_a_long_task_that_reports_progress_and_completes(client, listener):
    response = client.post("/start/", {"kind": "long", "steps": 8, "delay": 0})
    assert response.status_code == 302
    task_id, kind = client.session["started"][0]
    result = get_result(task_id)
    progress = wait_for(lambda: result.refresh().progress, message="progress")
    assert 0 < progress <= 100
    assert result.wait(timeout=30).status == "complete"
    assert result.result == {"steps": 8, "seconds": 4.0}
    assert result.progress == 100 and result.progress_message == "step 8 of 8"
    status = client.get(f"/status/{task_id}/").json()
    assert status["status"] == "complete" and status["result"]["steps"] == 8


def test_failing_task_records_type_message_and_traceback(listener):
    result = get_result(failing_task.enqueue(message="no luck"))
    assert result.wait(timeout=30).status == "failed"
    assert result.error == "no luck"
    assert result.error_type == "builtins.RuntimeError"
    assert "raise RuntimeError(message)" in result.traceback


def test_flaky_task_is_retried_with_backoff_until_it_succeeds(listener):
    result = get_result(flaky_task.enqueue(succeed_on=3))
    assert result.wait(timeout=40).status == "complete"
    assert result.result == {"attempt": 3}
    assert result.attempts == 3
    assert result.last_error == "attempt 2 failed"
    # both failed runs are kept, oldest first (issue 14's error history)
    assert [(error["attempt"], error["type"], error["message"]) for error in result.errors] == [
        (1, "builtins.RuntimeError", "attempt 1 failed"),
        (2, "builtins.RuntimeError", "attempt 2 failed")]
    assert result.errors[0]["time"] < result.errors[1]["time"] < result.finished


def test_scheduled_task_runs_after_its_eta(listener):
    import datetime

    enqueued_at = time.time()
    result = get_result(report.schedule(datetime.timedelta(seconds=2), title="later"))
    assert result.status == "scheduled"
    assert result.wait(timeout=30).status == "complete"
    assert result.started >= enqueued_at + 2


def test_task_enqueued_by_hand_with_redis_cli_commands_runs(listener, r):
    """What any producer in any language can do: one MULTI with HSET, ZINCRBY and LPUSH."""
    task_id = "c0ffee00-0000-4000-8000-000000000042"
    now = repr(time.time())
    pipe = r.pipeline(transaction=True)
    pipe.hset(f"blueque_task_{task_id}", mapping={
        "status": "pending", "queue": "demo.report", "parameters": '{"title": "by hand"}',
        "created": now, "updated": now})
    pipe.zincrby("blueque_queues", 0, "demo.report")
    pipe.lpush("blueque_pending_tasks_demo.report", task_id)
    pipe.execute()
    result = get_result(task_id)
    assert result.wait(timeout=30).status == "complete"
    assert result.result["title"] == "by hand"
    assert r.lrange("blueque_complete_tasks_demo.report", 0, -1) == [task_id]


@pytest.mark.parametrize("parameters,needle", [
    ("not json", "parameters are not JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"steps": 1, "colour": "red"}', "do not match"),
])
def test_foreign_garbage_parameters_fail_that_task_only(listener, r, parameters, needle):
    bad = "bad00000-0000-4000-8000-000000000001"
    now = repr(time.time())
    r.hset(f"blueque_task_{bad}", mapping={"status": "pending", "queue": "demo.long",
                                           "parameters": parameters, "created": now,
                                           "updated": now})
    r.lpush("blueque_pending_tasks_demo.long", bad)
    good = get_result(long_task.enqueue(steps=1, delay=0))
    assert get_result(bad).wait(timeout=30).status == "failed"
    assert needle in get_result(bad).error
    assert good.wait(timeout=30).status == "complete"
    assert listener.poll() is None  # the listener carries on


def test_result_of_none_and_dict_are_stored_as_json(listener):
    result = get_result(long_task.enqueue(steps=0, delay=0))
    assert result.wait(timeout=30).raw_result == json.dumps({"steps": 0, "seconds": 0},
                                                            separators=(",", ":"))


def test_a_unique_task_is_enqueued_once_while_it_waits(blueque, r):
    """``.using(unique_key=...)``: the second enqueue returns the waiting task's id, writes
    nothing and sends no task_enqueued signal; the task page shows the key."""
    from django_blueque import signals

    seen = []

    def receiver(sender, task_id, **kwargs):
        seen.append(task_id)

    signals.task_enqueued.connect(receiver)
    try:
        first = report.using(unique_key="daily").enqueue(title="a")
        again = report.using(unique_key="daily", priority=5).enqueue(title="b")
    finally:
        signals.task_enqueued.disconnect(receiver)
    assert again == first and seen == [first]
    fields = r.hgetall(f"blueque_task_{first}")
    assert (fields["unique_key"], fields["unique_until"], fields["priority"]) == (
        "daily", "start", "5")
    assert json.loads(fields["parameters"]) == {"title": "a"}
    with pytest.raises(ValueError, match="cannot be enqueued on commit"):
        report.using(unique_key="daily").enqueue_on_commit(title="c")


def test_a_killed_run_resumes_from_its_checkpoint(listener):
    result = get_result(resumable_import.enqueue(rows=6, crash_after=3))
    assert result.wait(timeout=60).status == "complete"
    assert result.result == {"resumed_at": 3, "rows": 6}
    assert result.attempts == 2 and result.last_error.startswith("process killed by signal 9")


def test_a_task_past_its_decorators_memory_limit_fails_naming_it(listener):
    greedy = get_result(bounded.enqueue(mib=1024))
    modest = get_result(bounded.enqueue(mib=10))
    assert greedy.wait(timeout=60).status == "failed"
    assert greedy.error == "exceeded its memory limit of 256 MiB"
    assert modest.wait(timeout=60).status == "complete" and modest.result == 10
