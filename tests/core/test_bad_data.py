"""Data the engine did not write (issue 10, the engine's side): a foreign producer's garbage,
a half-finished migration, anyone with write access. It fails one task or is skipped with a
warning; it never stops a listener, a scheduler or a reaper, and never hides another queue."""

import json
import logging
import time

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_blueque.core import ForkingRunner, enqueue_due_tasks, protocol, reap
from django_blueque.core.protocol import UNWRITTEN_PAUSE
from tests.core.helpers import wait_for
from tests.garbage import contents, write

QUEUES = ("q", "other")


def echo(task):
    return f"done:{task.parameters}"


def drain(client, queues=QUEUES, **options):
    """A real listener in burst mode, in this process (its tasks are forked)."""
    runner = ForkingRunner(client, list(queues), echo, concurrency=2, burst=True, **options)
    assert runner.run()
    return runner


def complete(client, task_id):
    task = client.get_task(task_id)
    return task.status == "complete" and task.result == f"done:{task.parameters}"


def test_a_task_key_of_the_wrong_type_is_dropped_not_fatal(client, r, caplog):
    """Before: WRONGTYPE in reserve.lua made bq_listen exit 1 and left the id in a reserved
    list nobody owned."""
    r.set("blueque_task_junk", "x")
    r.lpush("blueque_pending_tasks_q", "junk")
    good = client.get_queue("q").enqueue("after the junk")
    with caplog.at_level(logging.WARNING, "django_blueque"):
        runner = drain(client)
    assert complete(client, good)
    assert "dropped id junk: its task key holds a string" in caplog.text
    assert not r.exists(f"blueque_reserved_tasks_q_{runner.listener_id}")
    assert r.get("blueque_task_junk") == "x"  # not ours to delete


def test_a_non_numeric_timeout_or_attempts_does_not_stop_the_queue(client, r):
    """Before: float('soon') raised outside any handler; the task went back to the tail and
    the next listener died the same way. start.lua's HINCRBY on 'many' failed half way."""
    queue = client.get_queue("q")
    first, second = queue.enqueue_many(["one", "two"])
    r.hset(f"blueque_task_{first}", mapping={"timeout": "soon", "attempts": "many",
                                              "retries": "nan", "backoff": "inf"})
    drain(client, policy=lambda q: {"timeout": 60})
    assert complete(client, first) and complete(client, second)
    assert client.get_task(first).attempts == 1


def test_a_task_whose_fields_are_not_utf8_runs_with_them_replaced(client, redis_url):
    """take.lua hands the task's fields over as one JSON text, which Lua's cjson writes with
    the bytes as they are: what is not UTF-8 reads as U+FFFD, as every other read has it."""
    task_id = client.get_queue("q").enqueue("placeholder")
    raw = redis.Redis.from_url(redis_url)  # bytes
    raw.hset(f"blueque_task_{task_id}", mapping={"parameters": b"caf\xc3\xa9 \xff\xfe\"/\\",
                                                 b"\xc3": b"\x00"})
    raw.close()
    drain(client)
    task = client.get_task(task_id)
    assert (task.status, task.result) == ("complete", 'done:café \ufffd\ufffd"/\\')


def test_a_queue_whose_keys_are_garbage_is_set_aside_and_the_others_go_on(client, r, caplog):
    r.set("blueque_pending_tasks_q", "not a list")
    good = client.get_queue("other").enqueue("fine")
    with caplog.at_level(logging.ERROR, "django_blueque"):
        drain(client)
    assert complete(client, good)
    assert "queue q set aside" in caplog.text
    assert r.get("blueque_pending_tasks_q") == "not a list"


def test_scheduler_and_reaper_skip_a_broken_queue(client, r, caplog):
    r.set("blueque_scheduled_tasks_q", "x")
    r.set("blueque_started_tasks_q", "x")
    r.set("blueque_listeners_q", "x")
    r.set("blueque_waiting_tasks_q", "x")
    r.zadd("blueque_queues", {"q": 0})
    task_id = client.get_queue("other").schedule("later", time.time() + 0.01)
    wait_for(lambda: enqueue_due_tasks(client).get("other"), 5)
    assert client.get_task(task_id).status == "pending"
    with caplog.at_level(logging.WARNING, "django_blueque"):
        assert reap(client, confirm=0) == []
    assert "queue q: started tasks not read" in caplog.text
    assert "queue q: waiting tasks not read: blueque_waiting_tasks_q holds the wrong type" \
        in caplog.text


def test_enqueue_refuses_a_queue_of_garbage_and_writes_nothing(client, r):
    r.set("blueque_pending_tasks_q", "x")
    try:
        client.get_queue("q").enqueue("p")
    except redis.ResponseError as exc:
        assert "cannot enqueue to q" in str(exc)
    else:
        raise AssertionError("enqueued onto a string")
    assert r.keys("blueque_task_*") == []


def write_late(r, task_id, parameters):
    """What a producer without a transaction writes after pushing the id: blueque 1.0's hash."""
    stamp = repr(time.time())
    r.hset(f"blueque_task_{task_id}", mapping={
        "status": "pending", "queue": "q", "parameters": parameters, "created": stamp,
        "updated": stamp})


def test_an_id_pushed_before_its_hash_waits_for_it(client, r):
    """Kept, not run without its hash, until the scheduler puts it back (issue 38; before,
    it ran with no parameters and the hash written after it stayed pending in no list)."""
    r.lpush("blueque_pending_tasks_q", "early")
    drain(client)
    assert r.zscore("blueque_scheduled_tasks_q", "early") is not None
    assert r.hget("blueque_task_early", "status") is None
    write_late(r, "early", "late parameters")
    time.sleep(UNWRITTEN_PAUSE)
    assert enqueue_due_tasks(client) == {"q": ["early"]}  # back in its queue
    drain(client)
    task = client.get_task("early")
    assert (task.status, task.result, task.attempts) == ("complete", "done:late parameters", 1)
    assert "unwritten_since" not in task.fields


def test_an_id_whose_hash_never_comes_fails_naming_why(client, r, monkeypatch, caplog):
    monkeypatch.setattr(protocol, "UNWRITTEN_WAIT", UNWRITTEN_PAUSE)
    r.lpush("blueque_pending_tasks_q", "ghost")
    drain(client)
    time.sleep(UNWRITTEN_PAUSE)
    enqueue_due_tasks(client)
    drain(client)
    task = client.get_task("ghost")
    assert (task.status, task.queue, task.error_type) == (
        "failed", "q", "django_blueque.NoTaskHash"), task.fields
    assert "no task hash was written" in task.error
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == ["ghost"]
    assert any("ghost" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("kind", ["string", "hash"])
def test_garbage_in_a_shared_index_stops_no_queue_and_is_mended(client, r, caplog, kind):
    """The indexes (due queues, lease expiries, listener expiries, expiring lists) are shared
    by every queue. Found by the property test below: a string there made every task's start
    fail ("a key of its queue holds the wrong type"), every queue set aside, and a scheduler
    pass raise WRONGTYPE; schedule() raised after writing the task. Now a task starts without
    the index, schedule() returns its id, and the next scheduler and reaper passes delete the
    garbage, with an error logged, so the sweep rebuilds the indexes."""
    keys = client.keys
    indexes = [keys.due_queues("q"), keys.lease_expiries("q"), keys.listener_expiries("q"),
               keys.expiring_queues("q")]
    for index in indexes:
        write(r, index, (kind, {"x": "y"} if kind == "hash" else "junk"))
    queue = client.get_queue("q")
    task_id = queue.enqueue("now")
    later = queue.schedule("later", time.time() + 0.5)
    assert client.get_task(later).status == "scheduled"
    with caplog.at_level(logging.ERROR, "django_blueque"):
        drain(client)
        time.sleep(0.6)
        enqueue_due_tasks(client)
        reap(client, confirm=0)
    assert complete(client, task_id)
    assert [r.type(index) for index in indexes].count(kind) == 0
    assert f"holds a {kind}, not a sorted set" in caplog.text
    enqueue_due_tasks(client)  # the sweep's window indexes the queue again, then moves it
    drain(client)
    assert complete(client, later)


# -- anything, anywhere -----------------------------------------------------------------------

def protocol_keys(keys, queue, task_ids, listener):
    return [keys.queues, keys.pending(queue), keys.scheduled(queue), keys.started(queue),
            keys.complete(queue), keys.failed(queue), keys.listeners(queue),
            keys.listener_leases(queue), keys.reserved(queue, listener),
            *(keys.task(task_id) for task_id in task_ids), *(keys.lease(t) for t in task_ids),
            keys.due_queues(queue), keys.lease_expiries(queue), keys.listener_expiries(queue),
            keys.expiring_queues(queue), keys.reaper_clock, keys.listener_info(listener),
            keys.cancels(listener, queue),
            keys.prioritized(queue), keys.priority_sequence(queue), keys.priority_wake(queue),
            keys.waiting_tasks(queue), keys.settling(queue), keys.dependents(task_ids[1])]


VALUE = contents(["t1", "q", "other", "h~0_1"])


@settings(max_examples=28, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(garbage=st.lists(st.tuples(st.integers(0, 29), VALUE), min_size=1, max_size=8))
def test_garbage_in_any_protocol_key_never_escapes_a_pass(client, r, garbage):
    """Random values of random types in the protocol keys, the indexes and task fields of a
    queue holding real tasks; then a listener pass, a scheduler pass and reaper passes (a dry
    run, then a real one): no exception escapes any of them, and the other queue's task still
    completes."""
    r.flushdb()
    real = [*client.get_queue("q").enqueue_many(["t1", "t2"]),
            client.get_queue("q").enqueue("t3", priority=5)]
    client.get_queue("q").enqueue("t4", depends_on=[real[0]])
    listener = "h~0_1"
    client.protocol.heartbeat(listener, ["q"])
    client.protocol.reserve("q", listener, "tok")
    witness = client.get_queue("other").enqueue("witness")
    keys = protocol_keys(client.keys, "q", ["t1", *real], listener)
    for index, content in garbage:
        write(r, keys[index], content)
    drain(client, queues=("q", "other"))
    enqueue_due_tasks(client)
    enqueue_due_tasks(client, ["q", "other"])
    reap(client, ["q", "other"], dry_run=True)  # reads what a pass would do, writes nothing
    reap(client, ["q", "other"], confirm=0)
    assert complete(client, witness), json.dumps(client.get_task(witness).fields)


def test_the_property_test_can_fail(client, r):
    """The listener pass above really runs a listener: garbage that breaks the other queue
    would be seen (here: its pending list replaced by a string)."""
    witness = client.get_queue("other").enqueue("witness")
    r.delete("blueque_pending_tasks_other")
    r.set("blueque_pending_tasks_other", "x")
    drain(client, queues=("other",))
    assert not complete(client, witness)


def test_an_id_with_a_newline_cannot_forge_a_log_line(client, r, caplog):
    forged = "x\n2026-01-01 00:00:00 CRITICAL forged line"
    r.hset(f"blueque_task_{forged}", mapping={"status": "pending", "queue": "q",
                                               "parameters": "p"})
    r.lpush("blueque_pending_tasks_q", forged)
    with caplog.at_level(logging.INFO, "django_blueque"):
        drain(client)
    assert client.get_task(forged).status == "complete"
    started = [rec.getMessage() for rec in caplog.records if "started in pid" in rec.getMessage()]
    assert started and all("\n" not in message for message in started)
    assert any("x\\n2026" in message for message in started)
