"""The reaper and the scheduler: recovery of everything a dead listener held, repair of half-done
steps, retention, input written by someone else, and several of them racing as real processes."""

import json
import logging
import os
import socket
import subprocess
import time

import pytest

from django_blueque.core import enqueue_due_tasks
from django_blueque.core import reap as reap_when_confirmed
from tests.core.helpers import wait_for

HOST = socket.getfqdn()


def reap(client, *args, **kwargs):
    """The reaper, acting on a lapsed lease at the first sight: these tests are about what it
    does; how long it watches a lease first is tested in test_reaper_confirmation.py."""
    return reap_when_confirmed(client, *args, confirm=0, **kwargs)


def exited_pid():
    """A pid that was just used by a process that has exited and been reaped."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def register_dead(proto, listener_id, queue="q"):
    """Register one of our listeners whose heartbeat has already expired."""
    proto.heartbeat(listener_id, [queue], ttl=-1)


def reserved(r, queue, listener_id):
    return r.lrange(f"blueque_reserved_tasks_{queue}_{listener_id}", 0, -1)


def kinds(actions):
    return sorted((action.what, action.task_id or action.listener_id) for action in actions)


# -- dead listeners --------------------------------------------------------------------------

def test_reap_requeues_all_tasks_of_a_dead_listener(client, r):
    """blueque 1.0 reclaimed only the newest (LINDEX 0); every one comes back here, oldest
    first in line."""
    proto = client.protocol
    queue = client.get_queue("q")
    a, b, c, d = queue.enqueue_many(["a", "b", "c", "d"])
    register_dead(proto, "host-x_4242")
    for n in range(3):
        proto.reserve("q", "host-x_4242", f"tok{n}")
    assert reserved(r, "q", "host-x_4242") == [c, b, a]
    assert r.zscore("blueque_queues", "q") == 1.0

    actions = reap(client)

    assert kinds(actions) == sorted([("released listener", "host-x_4242"), ("requeued", a),
                                     ("requeued", b), ("requeued", c)])
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [d, c, b, a]  # a is taken next
    for task_id in (a, b, c):
        fields = r.hgetall(f"blueque_task_{task_id}")
        assert fields["status"] == "pending" and "node" not in fields and "lease" not in fields
    assert reserved(r, "q", "host-x_4242") == []
    assert r.smembers("blueque_listeners_q") == set()
    assert r.zscore("blueque_queues", "q") == 0.0
    assert not r.exists("blueque_listener_leases_q", "blueque_listener_host-x_4242")
    assert reap(client) == []  # nothing left to do


def test_a_listener_with_a_live_heartbeat_is_left_alone(client, r):
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("p")
    proto.heartbeat("host-y_7", ["q"])
    proto.reserve("q", "host-y_7", "tok")
    assert reap(client) == []
    assert r.hget(f"blueque_task_{task_id}", "status") == "reserved"
    assert r.smembers("blueque_listeners_q") == {"host-y_7"}


def test_blueque1_listeners_are_never_reaped_for_silence(client, r):
    """No heartbeat: only blueque 1.0's own rule applies (same host, pid not running)."""
    proto = client.protocol
    alive_here = f"{HOST}_{os.getpid()}"
    elsewhere = f"some-other-host_{exited_pid()}"
    for listener_id in (alive_here, elsewhere):
        proto.add_listener_v1(listener_id, "q")
    assert reap(client) == []
    assert r.smembers("blueque_listeners_q") == {alive_here, elsewhere}
    assert r.zscore("blueque_queues", "q") == 2.0


def test_half_done_blueque1_reserve_is_repaired(client, r):
    """blueque 1.0's reserve is RPOPLPUSH then HSET; its listener died between the two: the id
    sits in its reserved list with the task still `pending`."""
    proto = client.protocol
    dead = f"{HOST}_{exited_pid()}"
    proto.add_listener_v1(dead, "q")
    task_id, other = client.get_queue("q").enqueue_many(["p", "other"])
    r.rpoplpush("blueque_pending_tasks_q", f"blueque_reserved_tasks_q_{dead}")  # first half only
    assert r.hget(f"blueque_task_{task_id}", "status") == "pending"

    actions = reap(client)

    assert ("requeued", task_id) in kinds(actions)
    assert ("released listener", dead) in kinds(actions)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [other, task_id]
    assert r.hget(f"blueque_task_{task_id}", "status") == "pending"
    assert reserved(r, "q", dead) == []
    assert r.scard("blueque_listeners_q") == 0 and r.zscore("blueque_queues", "q") == 0.0
    # and it runs normally afterwards
    assert proto.reserve("q", "host-z_1", "tok")[0] == task_id


def test_half_done_reserve_of_our_listener_is_repaired(client, r):
    proto = client.protocol
    register_dead(proto, "host-x_11")
    task_id = client.get_queue("q").enqueue("p")
    r.rpoplpush("blueque_pending_tasks_q", "blueque_reserved_tasks_q_host-x_11")
    reap(client)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert reserved(r, "q", "host-x_11") == []


def test_claim_orphan_leaves_dead_listeners_of_other_hosts_to_the_reaper(client, r):
    """blueque 1.0's claim_orphan judges the listeners of its own host, by pid (see
    tests/core/test_blueque1_api.py); one of another host is the reaper's, which watches its
    lapsed heartbeat before it acts."""
    proto = client.protocol
    register_dead(proto, "host-x_12")
    first, second = client.get_queue("q").enqueue_many(["a", "b"])
    proto.reserve("q", "host-x_12", "t1")
    proto.reserve("q", "host-x_12", "t2")
    listener = client.get_listener("q")
    try:
        assert listener.claim_orphan() is None
        assert r.smembers("blueque_listeners_q") == {listener.id, "host-x_12"}
        assert ("released listener", "host-x_12") in kinds(reap(client))
        assert listener.listen().id == first
        assert listener.listen().id == second
    finally:
        listener.stop()


# -- tasks whose process died ----------------------------------------------------------------

def start_task(proto, task_id, listener_id="host-x_20", pid=4242, lease_ttl=15.0, token="tok"):
    assert proto.reserve("q", listener_id, token)[0] == task_id
    fields = proto.start("q", task_id, listener_id, pid, token, lease_ttl=lease_ttl)
    assert fields["status"] == "started"


def test_started_task_whose_lease_expired_fails_with_listener_lost(client, r):
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("p")
    register_dead(proto, "host-x_20")
    start_task(proto, task_id, lease_ttl=0.01)
    wait_for(lambda: not r.exists(f"blueque_lease_{task_id}"), 5, "lease did not expire")

    actions = reap(client)

    assert ("failed", task_id) in kinds(actions)
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert fields["status"] == "failed" and fields["error_type"] == "ListenerLost"
    assert fields["error"].startswith("listener lost")
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]
    assert not r.exists("blueque_started_tasks_q", "blueque_reserved_tasks_q_host-x_20")


def test_started_task_whose_lease_expired_is_retried_when_allowed(client, r):
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("p", retries=1)
    start_task(proto, task_id, lease_ttl=0.01)
    wait_for(lambda: not r.exists(f"blueque_lease_{task_id}"), 5, "lease did not expire")
    assert ("retried", task_id) in kinds(reap(client))
    task = client.get_task(task_id)
    assert (task.status, task.attempts) == ("pending", 1)
    assert task.last_error.startswith("listener lost")
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]


def test_started_task_with_a_live_lease_is_never_touched(client, r):
    """Its listener is dead, but its process still renews the lease: it keeps running."""
    proto = client.protocol
    task_id = client.get_queue("q").enqueue("p")
    register_dead(proto, "host-x_20")
    start_task(proto, task_id)
    actions = reap(client)
    assert kinds(actions) == [("released listener", "host-x_20")]
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"
    assert r.smembers("blueque_started_tasks_q") == {f"host-x_20 4242 {task_id}"}
    # and the process still records its own end
    assert proto.finish(
        "q", task_id, listener_id="host-x_20", pid=4242, token="tok", outcome="complete",
        value="ok") == "complete"
    assert reserved(r, "q", "host-x_20") == []


def blueque1_started(r, task_id, listener_id, pid):
    """What blueque 1.0 leaves behind for a started task: no lease token."""
    r.rpoplpush("blueque_pending_tasks_q", f"blueque_reserved_tasks_q_{listener_id}")
    r.hset(f"blueque_task_{task_id}", mapping={"status": "started", "node": listener_id,
                                               "pid": pid})
    r.sadd("blueque_started_tasks_q", f"{listener_id} {pid} {task_id}")


def test_blueque1_started_task_of_a_gone_process_on_this_host_fails(client, r):
    queue = client.get_queue("q")
    lost, running, remote = queue.enqueue_many(["lost", "running", "remote"])
    blueque1_started(r, lost, f"{HOST}_{exited_pid()}", exited_pid())
    blueque1_started(r, running, f"{HOST}_{exited_pid()}", os.getpid())
    blueque1_started(r, remote, f"far-away_{exited_pid()}", exited_pid())

    actions = reap(client)

    assert [a.task_id for a in actions if a.what == "failed"] == [lost]
    task = client.get_task(lost)
    assert (task.status, task.attempts) == ("failed", 1)  # it ran once; no retries were allowed
    assert "blueque 1.0 process" in r.hget(f"blueque_task_{lost}", "error")
    assert r.hget(f"blueque_task_{running}", "status") == "started"
    assert r.hget(f"blueque_task_{remote}", "status") == "started"


def test_started_entry_of_a_deleted_task_is_dropped(client, r):
    r.sadd("blueque_started_tasks_q", "host-x_1 55 gone-task")
    r.zincrby("blueque_queues", 0, "q")
    assert kinds(reap(client)) == [("dropped started entry", "gone-task")]
    assert not r.exists("blueque_started_tasks_q")


def test_dry_run_changes_nothing(client, r):
    proto = client.protocol
    register_dead(proto, "host-x_4242")
    client.get_queue("q").enqueue("p")
    proto.reserve("q", "host-x_4242", "tok")
    before = {key: r.dump(key) for key in r.keys("*")}
    actions = reap(client, dry_run=True)
    assert "would release listener" in [a.what for a in actions]
    assert {key: r.dump(key) for key in r.keys("*")} == before


# -- input written by someone else -------------------------------------------------------------

MALFORMED_LISTENERS = ["garbage", "host_notapid", "_12", "host_", f"{HOST}_99999999999999999999",
                       f"{HOST}_0"]
MALFORMED_STARTED = ["junk", "only two", "host_1 notapid task", "a b c d", "",
                     f"{HOST}_1 99999999999999999999 huge-pid-task"]


def test_reaper_skips_malformed_listener_ids_and_carries_on(client, r, caplog):
    proto = client.protocol
    r.sadd("blueque_listeners_q", *MALFORMED_LISTENERS)
    register_dead(proto, "host-x_30")
    task_id = client.get_queue("q").enqueue("p")
    proto.reserve("q", "host-x_30", "tok")

    with caplog.at_level(logging.WARNING, logger="django_blueque.reaper"):
        actions = reap(client)

    assert kinds(actions) == [("released listener", "host-x_30"), ("requeued", task_id)]
    assert r.smembers("blueque_listeners_q") == set(MALFORMED_LISTENERS)
    logged = caplog.text
    for listener_id in MALFORMED_LISTENERS:
        assert repr(listener_id) in logged


def test_reaper_skips_malformed_started_members_and_carries_on(client, r, caplog):
    proto = client.protocol
    r.hset("blueque_task_huge-pid-task", mapping={"status": "started", "queue": "q"})
    r.sadd("blueque_started_tasks_q", *MALFORMED_STARTED)
    task_id = client.get_queue("q").enqueue("p")
    start_task(proto, task_id, lease_ttl=0.01)
    wait_for(lambda: not r.exists(f"blueque_lease_{task_id}"), 5, "lease did not expire")

    with caplog.at_level(logging.WARNING, logger="django_blueque.reaper"):
        actions = reap(client)

    assert kinds(actions) == [("failed", task_id)]
    assert r.smembers("blueque_started_tasks_q") == set(MALFORMED_STARTED)
    for member in MALFORMED_STARTED:
        assert repr(member) in caplog.text


def test_scheduler_skips_garbage_in_the_scheduled_set(client, r):
    queue = client.get_queue("q")
    task_id = queue.schedule("p", time.time() + 0.1)
    r.zadd("blueque_scheduled_tasks_q", {"not-a-task": 1.0})
    time.sleep(0.2)
    assert enqueue_due_tasks(client) == {"q": [task_id]}
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert not r.exists("blueque_scheduled_tasks_q")


# -- scheduler and retention -----------------------------------------------------------------

def test_enqueue_due_tasks_covers_every_queue(client, r):
    due = {name: client.get_queue(name).schedule("p", time.time() + 0.1) for name in ("a", "b")}
    client.get_queue("c").enqueue("no schedule here")
    time.sleep(0.2)
    assert enqueue_due_tasks(client) == {"a": [due["a"]], "b": [due["b"]]}
    assert enqueue_due_tasks(client) == {}


def test_reap_expires_finished_tasks_past_retention_only(client, r):
    proto = client.protocol
    queue = client.get_queue("q")
    old_failed, kept = queue.enqueue_many(["old", "kept"])
    for task_id in (old_failed, kept):
        start_task(proto, task_id, token=task_id)
    proto.finish(
        "q", old_failed, listener_id="host-x_20", pid=4242, token=old_failed, outcome="failed",
        value="boom", retryable=False, policy={"retention": 0})
    proto.finish(
        "q", kept, listener_id="host-x_20", pid=4242, token=kept, outcome="complete", value="ok",
        policy={"retention": 3600})

    assert ("deleted 1 failed tasks", "") in kinds(reap(client))
    assert client.get_task(old_failed).status is None
    assert not r.exists("blueque_failed_tasks_q")
    assert client.get_task(kept).status == "complete"
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == [kept]


def test_cancelled_task_honours_its_own_retention(client, r):
    """A task cancelled while waiting never ran: its own retention still applies."""
    queue = client.get_queue("q")
    task_id = queue.enqueue("p", retention=0)
    assert client.cancel(task_id) == "cancelled"
    reap(client)
    assert client.get_task(task_id).status is None
    assert not r.exists("blueque_failed_tasks_q")


def test_finished_task_with_an_unreadable_update_time_is_kept(client, r):
    r.hset("blueque_task_odd", mapping={"status": "complete", "queue": "q", "updated": "soon"})
    r.lpush("blueque_complete_tasks_q", "odd")
    r.zincrby("blueque_queues", 0, "q")
    assert reap(client, retention=10) == []
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == ["odd"]


def test_reap_default_retention_per_queue(client, r):
    now = time.time()
    for queue in ("short", "long"):
        r.hset(f"blueque_task_{queue}-task", mapping={
            "status": "complete", "queue": queue, "parameters": "p", "created": repr(now - 100),
            "updated": repr(now - 100), "result": "r"})
        r.lpush(f"blueque_complete_tasks_{queue}", f"{queue}-task")
        r.zincrby("blueque_queues", 0, queue)
    reap(client, retention=lambda queue: 10 if queue == "short" else 1000)
    assert client.get_task("short-task").status is None
    assert client.get_task("long-task").status == "complete"


# -- racing processes --------------------------------------------------------------------------

def outputs(scripts, timeout=60):
    results = []
    for script in scripts:
        assert script.wait(timeout) == 0, script.describe()
        results.append(json.loads(script.popen.stdout.read()))
    return results


def test_schedulers_racing_move_each_task_exactly_once(client, r, redis_url, start_script):
    """Tasks fall due one after another while four processes move due tasks at once. (The
    tasks are scheduled before the racers start: four Python processes starting at once
    slowed the scheduling past the start in a loaded CI run.)"""
    start = time.time() + 3.0
    ids = []
    for n in range(600):
        ids.append(client.get_queue(f"q{n % 2}").schedule(str(n), start + n / 600))
    racers = [start_script("enqueue-due", redis_url, "--at", start, "--until", start + 2.0)
              for _ in range(4)]
    assert time.time() < start, "scheduling took too long for this test to mean anything"
    assert r.zcard("blueque_scheduled_tasks_q0") + r.zcard("blueque_scheduled_tasks_q1") == 600

    moved = outputs(racers)

    everything = [task_id for ids_moved in moved for task_id in ids_moved]
    assert sorted(everything) == sorted(ids)  # none lost, none moved twice
    assert sum(1 for ids_moved in moved if ids_moved) >= 2, "no race happened"
    pending = r.lrange("blueque_pending_tasks_q0", 0, -1) + r.lrange(
        "blueque_pending_tasks_q1", 0, -1)
    assert sorted(pending) == sorted(ids)
    assert {t.status for t in client.get_tasks(ids)} == {"pending"}
    assert not r.exists("blueque_scheduled_tasks_q0", "blueque_scheduled_tasks_q1")


def test_reapers_racing_release_each_listener_and_recover_each_task_once(
        client, r, redis_url, start_script):
    proto = client.protocol
    queue = client.get_queue("q")
    dead = [f"host-d{n}_{100 + n}" for n in range(5)]
    requeued = []
    for listener_id in dead:
        register_dead(proto, listener_id)
        for ids in [queue.enqueue_many(["a", "b", "c"])]:
            for task_id in ids:
                assert proto.reserve("q", listener_id, f"t-{task_id}")[0] == task_id
            requeued += ids
    lost = queue.enqueue_many(["x", "y", "z"])
    for task_id in lost:
        start_task(proto, task_id, listener_id=dead[0], token=f"l-{task_id}", lease_ttl=0.01)
    wait_for(lambda: not any(r.exists(f"blueque_lease_{t}") for t in lost), 5, "lease alive")
    old_dead = f"{HOST}_{exited_pid()}"
    proto.add_listener_v1(old_dead, "q")
    assert r.zscore("blueque_queues", "q") == 6.0

    start = time.time() + 1.5
    reports = outputs([start_script("reap", redis_url, "--at", start) for _ in range(4)])

    done = sorted((what, task_id or listener_id)
                  for report in reports for _queue, what, task_id, listener_id in report)
    expected = ([("released listener", listener_id) for listener_id in [*dead, old_dead]]
                + [("requeued", task_id) for task_id in requeued]
                + [("failed", task_id) for task_id in lost])
    assert done == sorted(expected)
    assert sorted(r.lrange("blueque_pending_tasks_q", 0, -1)) == sorted(requeued)
    assert sorted(r.lrange("blueque_failed_tasks_q", 0, -1)) == sorted(lost)
    assert r.zscore("blueque_queues", "q") == 0.0
    assert r.scard("blueque_listeners_q") == 0
    assert r.keys("blueque_reserved_tasks_*") == []
    assert not r.exists("blueque_started_tasks_q")


@pytest.mark.parametrize("retention", [None, 3600])
def test_expire_does_not_touch_unfinished_tasks(client, r, retention):
    task_id = client.get_queue("q").enqueue("p", retention=0)
    reap(client, retention=retention)
    assert client.get_task(task_id).status == "pending"
