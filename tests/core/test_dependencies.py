"""Dependencies between tasks (issue 40): a task that waits for others, in its own state, made
pending by the script that records the end of its last dependency."""

import json

import pytest
import redis

from django_blueque.core import reap
from django_blueque.core.depends import dependency_results
from django_blueque.core.protocol_workflows import WorkflowTask

LISTENER = "host-a_101"


def run(proto, queue, outcome="complete", value="done"):
    """Take the next task of ``queue`` and record its end; returns its id (None if empty)."""
    taken = proto.reserve(queue, LISTENER, "tok")
    if taken is None:
        return None
    task_id = taken[0]
    assert proto.start(queue, task_id, LISTENER, 42, "tok")["status"] == "started"
    proto.finish(queue, task_id, listener_id=LISTENER, pid=42, token="tok", outcome=outcome,
                 value=value)
    return task_id


def status(client, task_id):
    return client.get_task(task_id).status


def test_a_dependent_waits_in_its_own_index_until_its_last_dependency_completes(client, r):
    first = client.get_queue("download").enqueue("a")
    second = client.get_queue("encode").enqueue("b")
    after = client.get_queue("publish").enqueue("c", depends_on=[first, second])
    assert status(client, after) == "waiting"
    assert r.zrange("blueque_waiting_tasks_publish", 0, -1) == [after]
    assert r.hget(f"blueque_task_{after}", "waiting_for") == "2"
    assert not r.exists("blueque_pending_tasks_publish")
    assert run(client.protocol, "download", value="r1") == first
    assert status(client, after) == "waiting"
    assert r.hget(f"blueque_task_{after}", "waiting_for") == "1"
    assert run(client.protocol, "encode", value="r2") == second
    assert status(client, after) == "pending"
    assert r.lrange("blueque_pending_tasks_publish", 0, -1) == [after]
    assert r.zcard("blueque_waiting_tasks_publish") == 0
    assert not r.exists(f"blueque_dependents_{first}", f"blueque_dependents_{second}")
    results = dependency_results(client.protocol.read_tasks, client.get_task(after))
    assert list(results.items()) == [(first, "r1"), (second, "r2")]


def test_a_dependency_already_complete_counts_at_once(client, r):
    done = client.get_queue("q").enqueue("a")
    assert run(client.protocol, "q") == done
    other = client.get_queue("q").enqueue("b")
    after = client.get_queue("q2").enqueue("c", depends_on=[done, other])
    assert r.hget(f"blueque_task_{after}", "waiting_for") == "1"
    alone = client.get_queue("q2").enqueue("d", depends_on=[done])
    assert status(client, alone) == "pending"
    assert r.lrange("blueque_pending_tasks_q2", 0, -1) == [alone]


def test_an_unknown_dependency_is_refused_and_nothing_is_written(client, r):
    """A ValueError, as any bad argument (a ResponseError too, as it was)."""
    known = client.get_queue("q").enqueue("a")
    before = sorted(r.keys("*"))
    with pytest.raises(ValueError, match="unknown dependency nosuch-id") as refused:
        client.get_queue("q2").enqueue("b", depends_on=[known, "nosuch-id"])
    assert isinstance(refused.value, redis.ResponseError)
    assert sorted(r.keys("*")) == before


@pytest.mark.parametrize("bad", ["an-id", ["two words"], [3]])
def test_depends_on_must_be_a_list_of_ids(client, r, bad):
    with pytest.raises((TypeError, ValueError)):
        client.get_queue("q").enqueue("b", depends_on=bad)
    assert r.dbsize() == 0


def test_a_failed_dependency_cancels_its_dependents_transitively_and_a_retry_revives_them(
        client, r):
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    second = client.get_queue("q2").enqueue("b", depends_on=[first])
    third = client.get_queue("q3").enqueue("c", depends_on=[second])
    assert run(proto, "q", outcome="failed", value="boom") == first
    for task_id in (second, third):
        task = client.get_task(task_id)
        assert (task.status, task.error_type) == ("failed", "django_blueque.Cancelled")
    assert client.get_task(second).error == f"cancelled: its dependency {first} failed"
    assert client.get_task(third).error == (
        f"cancelled: its dependency {second} was cancelled ({first} failed)")
    assert r.lrange("blueque_failed_tasks_q3", 0, -1) == [third]
    assert run(proto, "q2") is None and run(proto, "q3") is None
    # the operator retries the failed one: the chain behind it waits again, then runs
    assert client.get_queue("q").retry_task(client.get_task(first))
    assert [status(client, t) for t in (second, third)] == ["waiting", "waiting"]
    assert not r.exists("blueque_failed_tasks_q2", "blueque_failed_tasks_q3")
    assert client.get_task(second).error is None
    assert run(proto, "q") == first
    assert run(proto, "q2") == second
    assert run(proto, "q3") == third


def test_allow_failure_runs_the_dependent_anyway(client, r):
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    after = client.get_queue("q2").enqueue("b", depends_on=[first], allow_failure=True)
    assert run(proto, "q", outcome="failed", value="boom") == first
    assert status(client, after) == "pending"
    assert dependency_results(proto.read_tasks, client.get_task(after)) == {first: None}
    failed_already = client.get_queue("q2").enqueue("c", depends_on=[first], allow_failure=True)
    assert status(client, failed_already) == "pending"
    cancelled_at_once = client.get_queue("q2").enqueue("d", depends_on=[first])
    task = client.get_task(cancelled_at_once)
    assert (task.status, task.error) == ("failed", f"cancelled: its dependency {first} failed")


def test_a_cancelled_dependency_cancels_its_dependents(client, r):
    first = client.get_queue("q").enqueue("a")
    after = client.get_queue("q2").enqueue("b", depends_on=[first])
    behind = client.get_queue("q2").enqueue("c", depends_on=[after])
    assert client.cancel(first) == "cancelled"
    assert status(client, after) == "failed"
    assert status(client, behind) == "failed"
    assert r.zcard("blueque_waiting_tasks_q2") == 0


def test_cancelling_a_waiting_task_cancels_those_behind_it(client, r):
    first = client.get_queue("q").enqueue("a")
    after = client.get_queue("q2").enqueue("b", depends_on=[first])
    behind = client.get_queue("q3").enqueue("c", depends_on=[after])
    assert client.cancel(after) == "cancelled"
    assert client.get_task(after).error == "cancelled"
    assert client.get_task(behind).error == f"cancelled: its dependency {after} failed"
    assert run(client.protocol, "q") == first  # its end finds nobody waiting any more
    assert status(client, after) == "failed"
    assert r.zcard("blueque_waiting_tasks_q2") == 0 == r.zcard("blueque_waiting_tasks_q3")


def test_eta_and_dependencies_start_at_the_later(client, r):
    first = client.get_queue("q").enqueue("a")
    later = client.get_queue("q2").schedule("b", 2**31, depends_on=[first])
    sooner = client.get_queue("q2").schedule("c", 1, depends_on=[first])  # eta passed
    assert status(client, later) == "waiting" == status(client, sooner)
    run(client.protocol, "q")
    assert status(client, later) == "scheduled"
    assert r.zscore("blueque_scheduled_tasks_q2", later) == 2**31
    assert r.zscore("blueque_due_queues", "q2") == 2**31  # the scheduler's index knows it
    assert status(client, sooner) == "pending"


def test_priority_orders_the_released_dependents(client, r):
    first = client.get_queue("q").enqueue("a")
    low = client.get_queue("q2").enqueue("low", depends_on=[first], priority=1)
    high = client.get_queue("q2").enqueue("high", depends_on=[first], priority=9)
    plain = client.get_queue("q2").enqueue("plain", depends_on=[first])
    run(client.protocol, "q")
    assert [run(client.protocol, "q2") for _ in range(3)] == [high, low, plain]


def test_a_waiting_unique_task_holds_its_key(client, r):
    first = client.get_queue("q").enqueue("a")
    held = client.get_queue("q2").enqueue("b", depends_on=[first], unique_key="k")
    assert client.get_queue("q2").enqueue("c", unique_key="k") == held
    run(client.protocol, "q")
    assert run(client.protocol, "q2") == held
    assert client.get_queue("q2").enqueue("d", unique_key="k") != held


def test_a_blueque1_consumer_never_takes_a_waiting_task(client, r):
    """blueque 1.0 takes with RPOPLPUSH from the pending list: a waiting task is not there."""
    first = client.get_queue("q").enqueue("a")
    after = client.get_queue("q").enqueue("b", depends_on=[first])
    assert r.rpoplpush("blueque_pending_tasks_q", "blueque_reserved_tasks_q_old_1") == first
    assert r.rpoplpush("blueque_pending_tasks_q", "blueque_reserved_tasks_q_old_1") is None
    assert status(client, after) == "waiting"


def test_garbage_in_the_new_keys_fails_one_task_readably(client, r):
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    after = client.get_queue("q2").enqueue("b", depends_on=[first])
    r.hset(f"blueque_task_{after}", "waiting_for", "garbage")
    other = client.get_queue("q").enqueue("x")
    r.set(f"blueque_dependents_{other}", "garbage")
    with pytest.raises(redis.ResponseError, match=f"blueque_dependents_{other} holds the wrong"):
        client.get_queue("q2").enqueue("y", depends_on=[other])
    assert run(proto, "q") == first
    task = client.get_task(after)
    assert task.status == "failed"
    assert "waiting_for field holds garbage" in task.error
    assert run(proto, "q") == other  # its end completes; its garbage dependents key is named
    assert status(client, other) == "complete"
    assert "not a set" in r.hget(f"blueque_task_{other}", "workflow_error")
    r.hset(f"blueque_task_{first}", "depends_on", "{not json")
    assert dependency_results(proto.read_tasks, client.get_task(first)) == {}
    assert json.loads(r.hget(f"blueque_task_{after}", "depends_on")) == [first]


@pytest.mark.parametrize("way", ["start", "take"])
def test_a_dependency_cancelled_deep_in_its_list_cancels_its_dependents_when_taken(
        client, r, way):
    """cancel.lua flags a pending task deep in a long list (cancel_requested); it fails when a
    listener takes it, and the tasks waiting for it are cancelled then."""
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    after = client.get_queue("q2").enqueue("b", depends_on=[first])
    r.hset(f"blueque_task_{first}", "cancel_requested", "1")
    if way == "start":
        assert proto.reserve("q", LISTENER, "tok")[0] == first
        assert proto.start("q", first, LISTENER, 42, "tok") == -1
    else:
        assert proto.take("q", LISTENER, "tok", 42)[2] == -1
    assert client.get_task(after).error == f"cancelled: its dependency {first} failed"
    assert r.zcard("blueque_waiting_tasks_q2") == 0


def run_bulk(proto, queue, state, job="job"):
    while proto.admin.bulk_step(job, queue, state, 2, 60)[0] == "running":
        pass


def test_bulk_cancel_cancels_the_dependents_and_bulk_retry_sends_them_back_to_waiting(
        client, r):
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    high = client.get_queue("q").enqueue("h", priority=5)
    after = client.get_queue("q2").enqueue("b", depends_on=[first])
    behind = client.get_queue("q2").enqueue("c", depends_on=[high])
    assert proto.admin.bulk_start("job", "cancel", "q", "pending", "ops", 60)
    run_bulk(proto, "q", "pending")
    assert client.get_task(after).error == f"cancelled: its dependency {first} failed"
    assert client.get_task(behind).error == f"cancelled: its dependency {high} failed"
    assert proto.admin.bulk_start("job", "retry", "q2", "failed", "ops", 60, with_cancelled=True)
    run_bulk(proto, "q2", "failed")
    assert [status(client, t) for t in (after, behind)] == ["waiting", "waiting"]
    assert run(proto, "q2") is None  # neither runs before its dependency
    assert sorted(r.zrange("blueque_waiting_tasks_q2", 0, -1)) == sorted([after, behind])


def many_dependents(r, proto, queue, dependency, count=250):
    """``count`` tasks of ``queue`` waiting for ``dependency``, written in one round trip."""
    with r.pipeline(transaction=False) as pipe:
        for _ in range(count):
            proto.enqueue(queue, ["b"], {"depends_on": json.dumps([dependency])}, pipe=pipe)
        pipe.execute()


def test_many_dependents_are_released_in_bounded_batches_even_if_the_end_was_cut_short(
        client, r, monkeypatch):
    """One script settles about 100 edges; the rest is named in the settling hash, which
    the ender works through at once, or the reaper's next pass if it died first."""
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    many_dependents(r, proto, "q2", first)
    monkeypatch.setattr(proto.workflows, "settle", lambda queue="": 0)  # the ender dies
    assert run(proto, "q") == first
    assert 100 <= r.llen("blueque_pending_tasks_q2") < 150  # SSCAN's COUNT is a hint
    assert list(r.hgetall("blueque_settling")) == [first]
    monkeypatch.undo()
    assert reap(client) == []  # no action to report: the end was recorded by one of ours
    assert r.llen("blueque_pending_tasks_q2") == 250 and r.zcard("blueque_waiting_tasks_q2") == 0
    assert not r.exists("blueque_settling", f"blueque_dependents_{first}")
    second = client.get_queue("q").enqueue("c")
    many_dependents(r, proto, "q3", second)
    assert run(proto, "q", outcome="failed", value="boom") == second  # the ender goes on
    assert r.llen("blueque_failed_tasks_q3") == 250 and r.zcard("blueque_waiting_tasks_q3") == 0


def test_a_workflow_record_of_garbage_is_a_readable_error(client, r):
    proto = client.protocol
    assert proto.workflows.workflow_task_ids("nosuch") is None
    r.set("blueque_workflow_w1", "{not json")
    r.rpush("blueque_workflow_w2", "x")
    for workflow_id in ("w1", "w2"):
        with pytest.raises(ValueError, match=f"blueque_workflow_{workflow_id} is not a workflow"):
            proto.workflows.workflow_task_ids(workflow_id)


@pytest.mark.parametrize("way", ["delete", "expire", "bulk delete", "1.0 delete"])
def test_a_deleted_task_takes_its_dependents_set_with_it(client, r, way):
    """The set outlives a failed dependency's end (a retry would revive its dependents); it
    goes when the task is deleted, by hand, by its retention, by a bulk delete or by blueque
    1.0's API (before: left behind)."""
    proto = client.protocol
    first = client.get_queue("q").enqueue("a", retention=0)
    client.get_queue("q2").enqueue("b", depends_on=[first])
    run(proto, "q", outcome="failed", value="boom")
    assert r.exists(f"blueque_dependents_{first}")
    if way == "delete":
        assert proto.admin.delete_finished("q", first) == 1
    elif way == "expire":
        assert proto.upkeep.expire_finished("q", "failed") == 1
    elif way == "bulk delete":
        assert proto.admin.bulk_start("job", "delete", "q", "failed", "ops", 60)
        run_bulk(proto, "q", "failed")
    else:
        client.get_queue("q").delete_task(client.get_task(first))
    assert not r.exists(f"blueque_task_{first}", f"blueque_dependents_{first}")


@pytest.mark.parametrize("way", ["delete", "expire", "bulk delete", "1.0 delete"])
def test_a_workflow_record_goes_with_the_last_of_its_tasks(client, r, way):
    """A workflow's record lives as long as any of its tasks: deleting one task leaves it,
    deleting the last one takes it (before: kept for ever, whatever the retention)."""
    proto = client.protocol
    tasks = [WorkflowTask("q", json.dumps(name), {"retention": "0"}, f"t-{name}")
             for name in ("a", "b")]
    proto.workflows.enqueue_workflow("w1", tasks)
    r.set("blueque_workflow_other", json.dumps({"tasks": ["t-other"], "created": 0}))
    for task in tasks:
        assert run(proto, "q") == task.id
        if way == "delete":
            assert proto.admin.delete_finished("q", task.id) == 1
        elif way == "expire":
            assert proto.upkeep.expire_finished("q", "complete") == 1
        elif way == "bulk delete":
            assert proto.admin.bulk_start(f"job-{task.id}", "delete", "q", "complete", "ops", 60)
            run_bulk(proto, "q", "complete", f"job-{task.id}")
        else:
            client.get_queue("q").delete_task(client.get_task(task.id))
        assert not r.exists(f"blueque_task_{task.id}")
        assert r.exists("blueque_workflow_w1") == (task.id == "t-a")
    assert r.exists("blueque_workflow_other")  # another workflow's: untouched
    assert proto.workflows.forget_ended(["other", "nosuch"]) == 1
    r.set("blueque_workflow_bad", "{not json")
    assert proto.workflows.forget_ended(["bad"]) == 0 and r.exists("blueque_workflow_bad")


def test_cancelling_a_task_with_many_dependents_cancels_them_all(client, r):
    proto = client.protocol
    first = client.get_queue("q").enqueue("a")
    many_dependents(r, proto, "q2", first)
    assert client.cancel(first) == "cancelled"
    assert r.llen("blueque_failed_tasks_q2") == 250 and r.zcard("blueque_waiting_tasks_q2") == 0
    assert not r.exists("blueque_settling")
