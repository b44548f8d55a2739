"""Unique tasks (issue 14, seed 002): while a task holding a unique key waits in its queue (or
runs, with unique_until='end'), enqueueing another with that key writes nothing and returns the
waiting task's id; a higher priority raises the waiting task's. One script: racing producers
from several processes make one task."""

import json
import subprocess
import sys

import pytest

from tests.core.helpers import wait_for


def job(**todo):
    return json.dumps(todo)


def test_a_second_enqueue_returns_the_waiting_task_and_writes_nothing(client, r):
    queue = client.get_queue("q")
    first = queue.enqueue("a", unique_key="video-42")
    keys_before = sorted(r.keys())
    assert queue.enqueue("b", unique_key="video-42") == first
    assert sorted(r.keys()) == keys_before
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [first]
    assert r.hget(f"blueque_task_{first}", "parameters") == "a"
    assert r.hgetall("blueque_unique_q") == {"video-42": first}
    other = queue.enqueue("c", unique_key="video-43")
    assert other != first
    assert client.get_queue("q2").enqueue("d", unique_key="video-42") != first  # per queue


def test_the_key_is_free_once_the_task_starts_unless_it_holds_it_until_its_end(client, r):
    proto, queue = client.protocol, client.get_queue("q")
    until_start = queue.enqueue("a", unique_key="k1")
    until_end = queue.enqueue("b", unique_key="k2", unique_until="end")
    for task_id in (until_start, until_end):
        assert proto.reserve("q", "host-a_101", "tok-" + task_id)[0] in (until_start, until_end)
    for task_id in (until_start, until_end):
        proto.start("q", task_id, "host-a_101", 42, "tok-" + task_id)
    assert r.hgetall("blueque_unique_q") == {"k2": until_end}
    assert queue.enqueue("a again", unique_key="k1") != until_start
    assert queue.enqueue("b again", unique_key="k2") == until_end
    assert proto.finish("q", until_end, listener_id="host-a_101", pid=42,
                        token="tok-" + until_end, outcome="complete", value="ok") == "complete"
    assert "k2" not in r.hgetall("blueque_unique_q")
    assert queue.enqueue("b after", unique_key="k2") != until_end


def test_a_scheduled_task_holds_its_key_and_a_cancelled_one_frees_it(client, r):
    queue = client.get_queue("q")
    later = queue.schedule("a", 2**31, unique_key="report")
    assert r.zscore("blueque_scheduled_tasks_q", later) == 2**31
    assert queue.enqueue("now", unique_key="report") == later
    assert client.cancel(later) == "cancelled"
    assert r.hgetall("blueque_unique_q") == {}
    assert queue.enqueue("now", unique_key="report") != later


def test_an_entry_whose_task_is_gone_or_finished_elsewhere_does_not_block(client, r):
    """blueque 1.0 runs a unique task without knowing of the key; an operator deletes one:
    the entry left behind names a task that no longer waits, and the key is free."""
    queue = client.get_queue("q")
    deleted, finished = queue.enqueue("a", unique_key="k1"), queue.enqueue("b", unique_key="k2")
    r.delete(f"blueque_task_{deleted}")
    r.hset(f"blueque_task_{finished}", "status", "complete")
    assert queue.enqueue("a2", unique_key="k1") not in (deleted, None)
    assert queue.enqueue("b2", unique_key="k2") != finished


def test_a_higher_priority_raises_the_waiting_tasks_and_a_lower_one_does_not(client, r):
    proto, queue = client.protocol, client.get_queue("q")
    plain = queue.enqueue("plain")
    unique = queue.enqueue("u", unique_key="k")
    high = queue.enqueue("high", priority=10)
    assert queue.enqueue("u", unique_key="k", priority=-5) == unique
    assert r.hget(f"blueque_task_{unique}", "priority") is None
    assert queue.enqueue("u", unique_key="k", priority=50) == unique
    assert r.hget(f"blueque_task_{unique}", "priority") == "50"
    assert queue.enqueue("u", unique_key="k", priority=20) == unique  # no lowering
    order = []
    while (taken := proto.reserve("q", "host-a_101", "tok")) is not None:
        order.append(taken[0])
    assert order == [unique, high, plain]


def test_a_scheduled_task_gets_the_raised_priority_when_it_is_due(client, r):
    queue = client.get_queue("q")
    later = queue.schedule("u", 2**31, unique_key="k")
    plain = queue.enqueue("plain", priority=5)
    assert queue.enqueue("u", unique_key="k", priority=9) == later
    r.zadd("blueque_scheduled_tasks_q", {later: 1})
    client.protocol.upkeep.move_due("q")
    assert client.protocol.reserve("q", "host-a_101", "tok")[0] == later
    assert client.protocol.reserve("q", "host-a_101", "tok")[0] == plain


@pytest.mark.parametrize("options, message", [
    ({"unique_key": ""}, "unique_key must be a non-empty string"),
    ({"unique_key": 42}, "unique_key must be a non-empty string"),
    ({"unique_key": "k", "unique_until": "never"}, "unique_until must be one of"),
    ({"unique_until": "end"}, "unique_until needs a unique_key"),
])
def test_bad_unique_options_are_refused_before_anything_is_written(client, r, options,
                                                                     message):
    with pytest.raises(ValueError, match=message):
        client.get_queue("q").enqueue("x", **options)
    assert r.dbsize() == 0


def test_a_unique_key_names_one_task_not_a_batch(client, r):
    with pytest.raises(ValueError, match="names one task"):
        client.protocol.enqueue("q", ["a", "b"], {"unique_key": "k"})
    assert r.dbsize() == 0


RACER = """
import sys
from django_blueque.core import Client
queue = Client(sys.argv[1]).get_queue("q")
sys.stdin.readline()  # all start together
print("\\n".join(queue.enqueue(f"p{n}", unique_key="same") for n in range(50)))
"""


def test_racing_producers_in_several_processes_make_one_task(client, r, redis_url):
    racers = [subprocess.Popen([sys.executable, "-c", RACER, redis_url], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(4)]
    wait_for(lambda: r.client_list() and len(r.client_list()) >= 1, 10)
    for racer in racers:
        racer.stdin.write("go\n")
        racer.stdin.flush()
    returned = set()
    for racer in racers:
        out, _err = racer.communicate(timeout=60)
        assert racer.returncode == 0
        returned |= set(out.split())
    assert len(returned) == 1
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == list(returned)
    assert len([key for key in r.keys("blueque_task_*")]) == 1


def test_a_unique_task_runs_once_and_its_key_is_free_after(client, r, start_runner):
    queue = client.get_queue("q")
    first = queue.enqueue(job(wait_for="gate"), unique_key="k", unique_until="end")
    runner = start_runner(concurrency=1)
    wait_for(lambda: client.get_task(first).status == "started", 20, runner.describe)
    assert queue.enqueue(job(), unique_key="k") == first
    r.set("gate", 1)
    wait_for(lambda: client.get_task(first).status == "complete", 20, runner.describe)
    second = queue.enqueue(job(), unique_key="k")
    assert second != first
    wait_for(lambda: client.get_task(second).status == "complete", 20, runner.describe)
    assert r.hgetall("blueque_unique_q") == {}
