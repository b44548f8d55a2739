"""Priorities (issue 14): a listener takes the highest-priority pending task first, first in
first out within one priority; tasks without one stay where blueque 1.0 puts them."""

import json

import pytest

from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import wait_for


def job(**todo):
    return json.dumps(todo)


def taken_order(proto, queue="q"):
    """Reserve until the queue is empty; the ids in the order they were taken."""
    order = []
    while (taken := proto.reserve(queue, "host-a_101", "tok")) is not None:
        order.append(taken[0])
    return order


def test_without_a_priority_a_task_stays_in_blueque1s_pending_list(client, r):
    queue = client.get_queue("q")
    plain, zero = queue.enqueue("a"), queue.enqueue("b", priority=0)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [zero, plain]
    assert "priority" not in r.hgetall(f"blueque_task_{zero}")
    assert not r.exists("blueque_prioritized_q", "blueque_priority_wake_q")


def test_the_highest_priority_is_taken_first_in_order_of_arrival_within_one(client, r):
    queue = client.get_queue("q")
    ids = {name: queue.enqueue(name, priority=priority) for name, priority in
           [("low", -5), ("plain1", None), ("high1", 10), ("top", 100), ("high2", 10),
            ("plain2", 0), ("lowest", -100)]}
    assert r.hget(f"blueque_task_{ids['high1']}", "priority") == "10"
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [ids["plain2"], ids["plain1"]]
    assert r.llen("blueque_priority_wake_q") == 1
    order = taken_order(client.protocol)
    assert order == [ids[name] for name in
                     ("top", "high1", "high2", "plain1", "plain2", "low", "lowest")]
    assert not r.exists("blueque_prioritized_q", "blueque_priority_wake_q")


def test_enqueue_many_and_schedule_carry_the_priority(client, r):
    queue = client.get_queue("q")
    later = queue.schedule("later", 1, priority=7)  # eta in the past: a plain enqueue
    batch = queue.enqueue_many(["a", "b"], priority=3)
    first = queue.enqueue("first")
    scheduled = queue.schedule("due", 2**31, priority=50)
    r.zadd("blueque_scheduled_tasks_q", {scheduled: 1})
    assert client.protocol.upkeep.move_due("q") == [scheduled]
    assert taken_order(client.protocol) == [scheduled, later, *batch, first]


@pytest.mark.parametrize("priority", [101, -101, 1.5, "5", True])
def test_a_priority_out_of_range_is_refused_before_anything_is_written(client, r, priority):
    with pytest.raises(ValueError, match="priority must be a whole number from -100 to 100"):
        client.get_queue("q").enqueue("x", priority=priority)
    assert r.dbsize() == 0


def test_a_retried_or_requeued_task_goes_first_of_its_priority(client, r):
    proto, queue = client.protocol, client.get_queue("q")
    failing = queue.enqueue("fails", priority=5, retries=1)
    assert taken_order(proto) == [failing]
    assert proto.start("q", failing, "host-a_101", 42, "tok")["status"] == "started"
    others = [queue.enqueue("other", priority=5), queue.enqueue("higher", priority=6),
              queue.enqueue("plain")]
    assert proto.finish("q", failing, listener_id="host-a_101", pid=42, token="tok",
                        outcome="failed", value="boom") == "retry"
    assert taken_order(proto) == [others[1], failing, others[0], others[2]]


def test_cancel_takes_a_prioritized_task_out_of_its_set(client, r):
    queue = client.get_queue("q")
    task_id = queue.enqueue("x", priority=20)
    assert client.cancel(task_id) == "cancelled"
    assert r.zcard("blueque_prioritized_q") == 0
    assert client.get_task(task_id).status == "failed"
    assert taken_order(client.protocol) == []
    assert not r.exists("blueque_priority_wake_q")


def test_garbage_in_the_prioritized_set_stops_nothing(client, r):
    r.set("blueque_prioritized_q", "garbage")
    queue = client.get_queue("q")
    first, second = queue.enqueue("a", priority=9), queue.enqueue("b")
    assert taken_order(client.protocol) == [first, second]  # both went to the list


def test_a_busy_listener_runs_the_highest_priority_next(client, r, start_runner):
    queue = client.get_queue("q")
    blocker = queue.enqueue(job(wait_for="gate"))
    runner = start_runner(concurrency=1)
    wait_for(lambda: any(blocker in run for run in r.lrange(RUNS_KEY, 0, -1)), 20,
             runner.describe)
    ids = [queue.enqueue(job(n=n), priority=priority)
           for n, priority in enumerate([None, -3, 40, 0, 40, 99])]
    r.set("gate", 1)
    wait_for(lambda: r.llen(RUNS_KEY) == 7, 30, runner.describe)
    ran = [json.loads(run)["id"] for run in r.lrange(RUNS_KEY, 0, -1)]
    assert ran == [blocker, ids[5], ids[2], ids[4], ids[0], ids[3], ids[1]]


def test_an_idle_listener_is_woken_by_a_prioritized_task(client, r, start_runner):
    """Its blocking peek on the pending list would not return for a task in the prioritized
    set: the wake list's peek does (well before the 60 s the peeks last)."""
    runner = start_runner(concurrency=1)
    wait_for(lambda: r.client_list(_type="normal") and any(
        "blmove" in c.get("cmd", "") for c in r.client_list()), 20, runner.describe)
    task_id = client.get_queue("q").enqueue(job(), priority=1)
    wait_for(lambda: client.get_task(task_id).status == "complete", 15, runner.describe)
