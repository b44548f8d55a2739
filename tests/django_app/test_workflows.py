"""Workflows (issue 40) through the Django API and a real bq_listen: chain, group, a group
followed by a step, results along the way, a failing step."""

import json

import pytest
from demo.tasks import download, encode, publish, report

from django_blueque import chain, get_result, group, workflow_task_ids
from tests.django_app.test_tasks_backend import framework, tasks  # noqa: F401  (fixtures)

FORMATS = ["webm", "mp4", "ogv"]


@pytest.fixture
def listener(manage, blueque):
    return manage.start("bq_listen", "--noreload", "-c", "3")


def test_a_group_after_a_step_then_a_step_runs_in_order_with_the_results(listener, r):
    workflow = chain(download.s("https://example.com/cat.mov"),
                     group(encode.s(fmt=f) for f in FORMATS), publish.s()).enqueue()
    assert len(workflow.task_ids) == 5
    assert workflow_task_ids(workflow) == workflow.task_ids
    fetch, *encodes, last = workflow.task_ids
    assert {r.hget(f"blueque_task_{i}", "workflow") for i in workflow.task_ids} == {workflow}
    assert json.loads(r.hget(f"blueque_task_{last}", "depends_on")) == encodes
    assert get_result(last).wait(timeout=60).result == sorted(
        f"/tmp/cat.mov.{fmt}" for fmt in FORMATS)
    # the results above prove the order (each encode read the download's result, the publish
    # all three encodes'); the times say it too, each written from one process's wall clock
    # (a listener's take, a task process's end), so up to a clock step apart (CI once saw an
    # encode start a hair before the download's end, its results all there)
    started = {i: get_result(i).started for i in workflow.task_ids}
    finished = {i: get_result(i).finished for i in workflow.task_ids}
    step = 0.5
    assert all(started[e] >= finished[fetch] - step for e in encodes), (started, finished)
    assert started[last] >= max(finished[e] for e in encodes) - step, (started, finished)


def test_a_failing_step_cancels_what_follows(listener):
    workflow = chain(download.s("u/a.mov"), encode.s(fmt="x", fail=True), publish.s()).enqueue()
    _, failing, last = workflow.task_ids
    result = get_result(last).wait(timeout=60)
    assert result.status == "failed"
    assert result.error == (f"cancelled: its dependency {failing} failed")


def test_using_depends_on_and_arguments_checked_at_build_time(blueque, r):
    first = report.enqueue(title="a")
    waiting = report.using(depends_on=[first], priority=3).enqueue(title="b")
    assert get_result(waiting).status == "waiting"
    assert r.zrange("blueque_waiting_tasks_demo.report", 0, -1) == [waiting]
    before = sorted(r.keys("*"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        encode.s(colour="red")
    with pytest.raises(TypeError, match="a workflow step is"):
        chain(download.s("u"), "publish")
    with pytest.raises(ValueError, match="cannot be a workflow step"):
        chain(download.s("u"), report.using(unique_key="k").s()).enqueue()
    assert sorted(r.keys("*")) == before  # nothing written


def test_a_task_waits_for_a_result_of_the_tasks_backend(framework, tasks, r):  # noqa: F811
    from tests.django_app.test_tasks_backend import burst, finished

    added = tasks.add.enqueue(2, 3)
    waiting = report.using(depends_on=[added.id]).enqueue(title="after the sum")
    assert get_result(waiting).status == "waiting"
    burst(framework)
    assert finished(added).return_value == 5
    assert get_result(waiting).status in ("pending", "complete")
