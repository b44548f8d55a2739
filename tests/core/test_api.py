"""blueque 1.0's public API, used as blueque 1.0's users use it, and bad input at that API."""

import os
import threading
import time

import pytest

import django_blueque.core as core
from django_blueque.core import Client
from tests.core.helpers import assert_time_field


def test_the_blueque1_names_are_exported():
    for name in ("Client", "ForkingRunner", "Queue", "Task", "Listener", "Processor"):
        assert hasattr(core, name)


def test_listen_start_complete_as_blueque1_users_do(client, r):
    queue = client.get_queue("q")
    task_id = queue.enqueue("params")
    listener = client.get_listener("q")
    try:
        task = listener.listen()
        assert (task.id, task.status, task.node) == (task_id, "reserved", listener.id)
        processor = client.get_processor(task)
        assert processor.start(os.getpid()) is True
        assert r.smembers("blueque_started_tasks_q") == {f"{listener.id} {os.getpid()} {task_id}"}
        assert r.hget(f"blueque_task_{task_id}", "pid") == str(os.getpid())
        t0 = time.time()
        processor.complete("result")
        fields = r.hgetall(f"blueque_task_{task_id}")
        assert (fields["status"], fields["result"]) == ("complete", "result")
        assert_time_field(fields["updated"], t0, time.time())
        assert r.lrange("blueque_complete_tasks_q", 0, -1) == [task_id]
        assert not r.exists(f"blueque_reserved_tasks_q_{listener.id}", "blueque_started_tasks_q")
    finally:
        listener.stop()


def test_processor_fail_writes_the_message(client, r):
    task_id = client.get_queue("q").enqueue("p")
    listener = client.get_listener("q")
    try:
        processor = client.get_processor(listener.listen())
        processor.start(os.getpid())
        processor.fail("it broke")
        fields = r.hgetall(f"blueque_task_{task_id}")
        assert (fields["status"], fields["error"]) == ("failed", "it broke")
        assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]
    finally:
        listener.stop()


def test_listen_blocks_until_a_task_arrives(client, redis_url):
    listener = client.get_listener("q")
    producer = Client(redis_url)
    enqueued = []
    timer = threading.Timer(0.5, lambda: enqueued.append(producer.get_queue("q").enqueue("late")))
    try:
        timer.start()
        task = listener.listen()
        timer.join(10)  # its enqueue() may not have returned yet when the listener has the task
        assert enqueued and task.id == enqueued[0]
    finally:
        timer.cancel()
        listener.stop()
        producer.redis.close()


def test_listener_stop_requeues_its_unstarted_tasks(client, r):
    first, second = client.get_queue("q").enqueue("a"), client.get_queue("q").enqueue("b")
    listener = client.get_listener("q")
    assert listener.listen().id == first
    assert listener.listen().id == second
    listener.stop()
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [second, first]  # first taken first
    for task_id in (first, second):
        fields = r.hgetall(f"blueque_task_{task_id}")
        assert fields["status"] == "pending" and "node" not in fields and "lease" not in fields
    assert not r.exists(f"blueque_reserved_tasks_q_{listener.id}")
    assert r.scard("blueque_listeners_q") == 0 and r.zscore("blueque_queues", "q") == 0.0


def test_processor_of_a_task_reserved_by_blueque1(client, r):
    """blueque 1.0 reserves without a lease token: our Processor can still start and finish it."""
    task_id = client.get_queue("q").enqueue("p")
    r.rpoplpush("blueque_pending_tasks_q", "blueque_reserved_tasks_q_oldhost_5")
    r.hset(f"blueque_task_{task_id}", mapping={"status": "reserved", "node": "oldhost_5",
                                               "updated": repr(time.time())})
    processor = client.get_processor(client.get_task(task_id))
    assert processor.start(1234) is True
    assert r.smembers("blueque_started_tasks_q") == {f"oldhost_5 1234 {task_id}"}
    processor.complete("ok")
    assert r.hget(f"blueque_task_{task_id}", "status") == "complete"
    assert not r.exists("blueque_reserved_tasks_q_oldhost_5", "blueque_started_tasks_q")


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("value, type_name", [
    (None, "NoneType"), ({"a": 1}, "dict"), (["a"], "list"), (True, "bool"), (object(), "object"),
])
def test_non_string_parameters_are_refused_before_anything_is_written(client, r, value,
                                                                      type_name):
    queue = client.get_queue("q")
    with pytest.raises(TypeError, match=type_name):
        queue.enqueue(value)
    with pytest.raises(TypeError, match=type_name):
        queue.schedule(value, time.time() + 60)
    with pytest.raises(TypeError, match=type_name):
        queue.schedule(value, time.time() - 60)
    with pytest.raises(TypeError, match=type_name):
        queue.enqueue_many(["fine", "also fine", value])
    assert r.dbsize() == 0


def test_strings_bytes_and_numbers_are_accepted_as_blueque1_did(client, r):
    queue = client.get_queue("q")
    ids = [queue.enqueue(value) for value in ("s", b"bytes", 3, 2.5)]
    assert [r.hget(f"blueque_task_{i}", "parameters") for i in ids] == ["s", "bytes", "3", "2.5"]


@pytest.mark.parametrize("value, type_name", [(None, "NoneType"), ({"a": 1}, "dict")])
def test_non_string_results_are_refused_and_the_task_is_unchanged(client, r, value, type_name):
    task_id = client.get_queue("q").enqueue("p")
    listener = client.get_listener("q")
    try:
        processor = client.get_processor(listener.listen())
        processor.start(os.getpid())
        before = r.hgetall(f"blueque_task_{task_id}")
        with pytest.raises(TypeError, match=type_name):
            processor.complete(value)
        with pytest.raises(TypeError, match=type_name):
            processor.fail(value)
        assert r.hgetall(f"blueque_task_{task_id}") == before
        assert not r.exists("blueque_complete_tasks_q", "blueque_failed_tasks_q")
    finally:
        listener.stop()


@pytest.mark.parametrize("name", ["", "has space", "tab\there", None])
def test_invalid_queue_names_are_refused(client, name):
    with pytest.raises(ValueError):
        client.get_queue(name)


def test_unknown_task_reads_as_status_none(client):
    task = client.get_task("7b0d3a52-0000-4000-8000-000000000000")
    assert task.status is None and task.parameters is None and task.pid is None
    assert [t.status for t in client.get_tasks(["nope", "nada"])] == [None, None]


def test_queue_names_lists_the_queues_set(client):
    """blueque 1.0's Client.queue_names(): every queue named in the queues set."""
    assert client.queue_names() == []
    client.get_queue("b").enqueue("x")
    client.get_queue("a").enqueue("y")
    assert sorted(client.queue_names()) == ["a", "b"]


def test_the_engine_imports_without_django():
    """A blueque 1.0 user switching imports needs no Django: nothing under core pulls it in."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, django_blueque.core; "
            "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_listener_stop_unregisters_and_requeues_what_it_had_not_started(client, r):
    queue = client.get_queue("q")
    task_id = queue.enqueue("p")
    listener = client.get_listener("q")
    assert r.zscore("blueque_queues", "q") == 1
    assert listener.listen().id == task_id
    listener.stop()
    assert r.smembers("blueque_listeners_q") == set()
    assert r.zscore("blueque_queues", "q") == 0
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert client.get_task(task_id).status == "pending"


def test_a_dropped_listener_stops_its_heartbeat_thread(client):
    """The 1.0-API listener beats from a thread; a listener nobody holds any more must not go
    on beating (and re-registering itself) for the life of the process."""
    import gc
    import threading

    before = set(threading.enumerate())
    listener = client.get_listener("q")
    (thread,) = [t for t in set(threading.enumerate()) - before
                 if t.name.startswith("blueque-heartbeat")]
    del listener
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()
