"""Issue 10, the engine's side: a scheduler pass and a reaper pass cost what is due or lapsed,
not what is stored. Our producers and listeners keep indexes; what blueque 1.0 wrote is found
by a sweep of a bounded window of queues, rotating pass after pass. The sweep's bounds are made
small here so that a few hundred queues stand for 100,000 (bench/engine_scale.py measures the
real sizes)."""

import time

import pytest

from django_blueque.core import enqueue_due_tasks, sweep
from django_blueque.core import reap as reap_when_confirmed
from tests.core.helpers import calls_delta, command_calls

WINDOW = 10
QUEUES = [f"q{n:03d}" for n in range(200)]  # 20 windows


@pytest.fixture(autouse=True)
def small_sweep(monkeypatch, r):
    monkeypatch.setattr(sweep, "SWEEP_QUEUES", WINDOW)
    monkeypatch.setattr(sweep, "SWEEP_MEMBERS", WINDOW)
    monkeypatch.setattr(sweep, "_sweep_starts", {})
    monkeypatch.setattr(sweep, "_scans", {})
    r.zadd("blueque_queues", {queue: 0 for queue in QUEUES})


def reap(client, **kwargs):
    return reap_when_confirmed(client, confirm=0, **kwargs)


def commands_of(r, step):
    """(result of step(), total commands Redis ran for it, scripts' inner calls included)."""
    before = command_calls(r)
    result = step()
    return result, sum(calls_delta(before, command_calls(r)).values())


def run_and_lapse(client, queue, listener_id="host-a~1_101", pid=101):
    """A task of ours started under a lease that has already lapsed (its process is dead)."""
    proto = client.protocol
    task_id = client.get_queue(queue).enqueue("p")
    proto.heartbeat(listener_id, [queue])
    proto.reserve(queue, listener_id, "tok")
    proto.start(queue, task_id, listener_id, pid, "tok", lease_ttl=0.001)
    time.sleep(0.01)
    return task_id


def test_our_scheduled_task_is_moved_by_the_first_pass_wherever_its_queue_is(client, r):
    eta = time.time() + 0.2
    task_id = client.protocol.schedule(QUEUES[-1], "p", eta)
    assert enqueue_due_tasks(client) == {}
    time.sleep(0.3)
    moved, commands = commands_of(r, lambda: enqueue_due_tasks(client))
    assert moved == {QUEUES[-1]: [task_id]}
    assert not r.exists("blueque_due_queues")  # nothing left scheduled: out of the index
    assert commands < 30 * WINDOW  # the window and the due queue, not the 200 queues


def test_blueque1_scheduled_task_is_moved_once_the_sweep_reaches_its_queue(client, r):
    r.hset("blueque_task_old", mapping={"status": "scheduled", "queue": QUEUES[-1],
                                        "parameters": "p", "eta": "1.0"})
    r.zadd(f"blueque_scheduled_tasks_{QUEUES[-1]}", {"old": 1.0})
    passes = 0
    while not r.exists(f"blueque_pending_tasks_{QUEUES[-1]}"):
        moved = enqueue_due_tasks(client)
        passes += 1
        assert passes <= len(QUEUES) // WINDOW
    assert moved == {QUEUES[-1]: ["old"]}
    assert passes == len(QUEUES) // WINDOW  # the last window holds the last queue


def test_lapsed_lease_is_recovered_by_the_first_pass_wherever_its_queue_is(client, r):
    task_id = run_and_lapse(client, QUEUES[-1])
    actions, commands = commands_of(r, lambda: reap(client))
    assert ("failed", task_id) in [(action.what, action.task_id) for action in actions]
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    assert not r.zscore("blueque_lease_expiries", task_id)
    assert commands < 60 * WINDOW


def test_a_live_lease_stays_in_the_index_and_is_left_alone(client, r):
    proto = client.protocol
    task_id = client.get_queue("q000").enqueue("p")
    proto.reserve("q000", "host-a~1_101", "tok")
    proto.start("q000", task_id, "host-a~1_101", 101, "tok")
    expiry = r.zscore("blueque_lease_expiries", task_id)
    assert expiry == pytest.approx(time.time() + 15, abs=2)
    assert proto.renew_lease(task_id, "tok") == (True, False)
    assert r.zscore("blueque_lease_expiries", task_id) >= expiry
    assert reap(client) == []
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"


def test_dead_listener_is_released_by_the_first_pass_wherever_its_queue_is(client, r):
    client.protocol.heartbeat("host-x~1_4242", [QUEUES[-1]], ttl=-1)
    assert r.zscore("blueque_listener_expiries", f"{QUEUES[-1]} host-x~1_4242") is not None
    actions = reap(client)
    assert [(a.what, a.listener_id) for a in actions] == [("released listener",
                                                           "host-x~1_4242")]
    assert not r.exists("blueque_listener_expiries")


def test_a_huge_started_set_is_swept_a_bounded_slice_per_pass(client, r):
    """Members of a started set nobody indexed (blueque 1.0's, or written before the index):
    one pass reads at most SWEEP_MEMBERS of them, and the next pass goes on from there."""
    members = [f"otherhost_7 7 t{n}" for n in range(40 * WINDOW)]
    r.sadd("blueque_started_tasks_q000", *members)
    lapsed = run_and_lapse(client, QUEUES[-1])
    actions, commands = commands_of(r, lambda: reap(client, queues=["q000", QUEUES[-1]]))
    assert [a.task_id for a in actions if a.what == "failed"] == [lapsed]
    assert commands < 60 * WINDOW  # not 400 members' hashes
    # every member's hash is gone: the sweep drops each entry once it reads it
    for _ in range(100):
        reap(client, queues=["q000"])
    assert not r.exists("blueque_started_tasks_q000")


def test_expiry_does_not_stop_at_the_first_task_it_keeps(client, r):
    queue = client.get_queue("q000")
    proto = client.protocol
    ids = []
    for retention in (3600, 0, 0):  # the oldest is kept; the two behind it have expired
        task_id = queue.enqueue("p", retention=retention)
        proto.reserve("q000", "host-a~1_101", f"tok-{task_id}")
        proto.start("q000", task_id, "host-a~1_101", 101, f"tok-{task_id}")
        proto.finish("q000", task_id, listener_id="host-a~1_101", pid=101,
                     token=f"tok-{task_id}", outcome="complete", value="r")
        ids.append(task_id)
    actions = reap(client)
    assert [a.what for a in actions] == ["deleted 2 complete tasks"]
    assert r.lrange("blueque_complete_tasks_q000", 0, -1) == [ids[0]]
    assert r.zscore("blueque_expiring_queues", "complete q000") == pytest.approx(
        float(r.hget(f"blueque_task_{ids[0]}", "expires")))


def test_finished_tasks_of_a_queue_beyond_the_window_expire_by_the_index(client, r):
    queue = client.get_queue(QUEUES[-1])
    proto = client.protocol
    task_id = queue.enqueue("p", retention=0)
    proto.reserve(QUEUES[-1], "host-a~1_101", "tok")
    proto.start(QUEUES[-1], task_id, "host-a~1_101", 101, "tok")
    proto.finish(QUEUES[-1], task_id, listener_id="host-a~1_101", pid=101, token="tok",
                 outcome="failed", value="boom", retryable=False)
    actions = reap(client)
    assert [a.what for a in actions] == ["deleted 1 failed tasks"]
    assert not r.exists(f"blueque_task_{task_id}")
    assert not r.exists("blueque_expiring_queues")
