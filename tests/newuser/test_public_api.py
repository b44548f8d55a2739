"""What a new user reaches from ``django_blueque`` itself (issue 13, items 3 and 14): a task
function that runs as a plain function, cancelling, the exceptions, and a clear error for a
misspelt keyword argument."""

import pytest
from demo.tasks import long_task

import django_blueque
from django_blueque import blueque_task, current_task


@blueque_task(queue="tests.newuser.encode")
def encode(video_id):
    """The README's example task, verbatim in its body."""
    for percent in range(0, 101, 10):
        ...  # work
        current_task().report_progress(percent, f"{percent}% encoded")
    return {"video_id": video_id, "ok": True}


def test_the_readme_task_runs_as_a_plain_function():
    assert encode(42) == {"video_id": 42, "ok": True}


def test_outside_a_listener_current_task_is_a_harmless_stand_in():
    task = current_task()
    assert task is not None
    assert task.should_stop() is False
    assert task.report_progress(50, "half") is None
    assert task.id is None and task.attempt == 1
    assert not task, "code that tests `if current_task():` must still see no running task"


def test_the_stand_in_checks_progress_as_a_real_task_does():
    with pytest.raises(ValueError, match="between 0 and 100"):
        current_task().report_progress(101)
    with pytest.raises(TypeError, match="message must be a string"):
        current_task().report_progress(10, 42)


def test_the_stand_in_runs_in_eager_mode_too(settings):
    settings.BLUEQUE = {"EAGER": True}
    task_id = encode.enqueue(video_id=7)
    assert django_blueque.get_result(task_id).result == {"video_id": 7, "ok": True}


def test_cancel_and_the_exceptions_are_importable_from_the_package(blueque, r):
    from django_blueque import StopRequested, TaskTimeout, cancel
    from django_blueque.core import StopRequested as EngineStopRequested
    from django_blueque.results import TaskTimeout as ResultsTaskTimeout

    assert StopRequested is EngineStopRequested and TaskTimeout is ResultsTaskTimeout
    assert {"cancel", "StopRequested", "TaskTimeout"} <= set(django_blueque.__all__)
    task_id = long_task.enqueue(steps=1)
    assert cancel(task_id) == "cancelled"
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    assert cancel("no-such-task") is None


def test_cancel_in_eager_mode_reports_the_finished_task(settings):
    settings.BLUEQUE = {"EAGER": True}
    task_id = encode.enqueue(video_id=1)
    assert django_blueque.cancel(task_id) == "complete"
    assert django_blueque.cancel("no-such-task") is None


def test_a_misspelt_keyword_names_the_unexpected_keyword(blueque, r):
    with pytest.raises(TypeError) as caught:
        encode.enqueue(vidoe_id=42)
    message = str(caught.value)
    assert "unexpected keyword argument 'vidoe_id'" in message
    assert "did you mean 'video_id'" in message
    assert r.keys("*") == []


def test_an_unknown_keyword_without_a_near_name_is_named_too(blueque):
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'") as caught:
        long_task.enqueue(colour="red")
    assert "did you mean" not in str(caught.value)
