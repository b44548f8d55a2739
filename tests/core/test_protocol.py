"""Every row of the protocol table, checked at the level a blueque 1.0 reader sees: the keys, their
types, the task hash's exact fields and values, and the commands sent (INFO commandstats)."""

import datetime
import os
import re
import socket
import time
import uuid

import pytest

from django_blueque.core import Client, Listener, protocol
from django_blueque.core.protocol import ENQUEUE_BATCH
from django_blueque.core.timings import DEFAULT as TIMINGS
from tests.core.helpers import assert_time_field, calls_delta, command_calls

BLUEQUE1_FIELDS = {"status", "queue", "parameters", "created", "updated"}


@pytest.fixture
def proto(client):
    return client.protocol


def reserve_and_start(proto, queue="q", listener="host-a_101", pid=4242, token="tok"):
    task_id = proto.reserve(queue, listener, token)[0]
    assert proto.start(queue, task_id, listener, pid, token)["status"] == "started"
    return task_id


def test_enqueue_writes_exactly_blueque1s_hash_list_and_queue_score(client, r):
    before = command_calls(r)
    t0 = time.time()
    task_id = client.get_queue("q").enqueue('{"n": 1}')
    t1 = time.time()
    sent = calls_delta(before, command_calls(r))

    assert str(uuid.UUID(task_id, version=4)) == task_id
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert set(fields) == BLUEQUE1_FIELDS
    assert (fields["status"], fields["queue"], fields["parameters"]) == ("pending", "q", '{"n": 1}')
    assert_time_field(fields["created"], t0, t1)
    assert fields["updated"] == fields["created"]
    assert r.type("blueque_pending_tasks_q") == "list"
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert r.zrange("blueque_queues", 0, -1, withscores=True) == [("q", 0.0)]
    assert sorted(r.keys("*")) == ["blueque_pending_tasks_q", "blueque_queues",
                                   f"blueque_task_{task_id}"]
    # one atomic step: blueque 1.0's HSET, ZINCRBY 0, LPUSH, run as one script (the first
    # call on a server may find it unloaded: NOSCRIPT, SCRIPT LOAD, EVALSHA again)
    sent.pop("script|load", None)
    assert 1 <= sent.pop("evalsha") <= 2
    assert sent.pop("type") >= 2  # the key-type checks before the first write
    assert sent == {"hset": 1, "zincrby": 1, "lpush": 1}


def test_take_says_whether_more_tasks_wait_in_the_queue(client, proto):
    """The runner takes again from a queue while more tasks wait, and otherwise waits on its
    peeks (no fork for a take that would find the queue empty)."""
    queue = client.get_queue("q")
    first, second = queue.enqueue("1"), queue.enqueue("2")
    assert proto.take("q", "host-a_101", "t1", 4242)[::3] == (first, True)
    assert proto.take("q", "host-a_101", "t2", 4243)[::3] == (second, False)
    urgent, plain = queue.enqueue("3", priority=5), queue.enqueue("4")
    assert proto.take("q", "host-a_101", "t3", 4244)[::3] == (urgent, True)
    assert proto.take("q", "host-a_101", "t4", 4245)[::3] == (plain, False)
    later, last = queue.enqueue("5", priority=-5), queue.enqueue("6", priority=-5)
    assert proto.take("q", "host-a_101", "t5", 4246)[::3] == (later, True)
    assert proto.take("q", "host-a_101", "t6", 4247)[::3] == (last, False)
    assert proto.take("q", "host-a_101", "t7", 4248) is None


def test_enqueue_pushes_at_the_head_and_reserve_takes_the_tail(client, proto, r):
    first, second = client.get_queue("q").enqueue("a"), client.get_queue("q").enqueue("b")
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [second, first]
    assert proto.reserve("q", "host-a_101", "t1")[0] == first
    assert proto.reserve("q", "host-a_101", "t2")[0] == second


def test_enqueue_many_is_one_atomic_step_in_order(client, r):
    client.get_queue("warm-up").enqueue("p")  # the script is loaded: one EVALSHA below
    before = command_calls(r)
    ids = client.get_queue("q").enqueue_many([f"p{n}" for n in range(50)])
    delta = calls_delta(before, command_calls(r))
    # the ids in one LPUSH (one per task before: a call from a script costs more than a push)
    assert delta == {"evalsha": 1, "type": 2, "hset": 50, "lpush": 1, "zincrby": 1}
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == ids[::-1]
    assert [r.hget(f"blueque_task_{i}", "parameters") for i in ids] == [f"p{n}" for n in range(50)]


def test_enqueue_many_gives_distinct_random_uuid4_ids_as_blueque1_makes(client):
    ids = client.get_queue("q").enqueue_many(["p"] * 2000)
    assert len(set(ids)) == 2000
    for task_id in ids:
        parsed = uuid.UUID(task_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, task_id)
    varying = {at for at in range(36) if len({task_id[at] for task_id in ids}) > 1}
    assert varying == set(range(36)) - {8, 13, 14, 18, 23}  # the dashes, and the version


def test_enqueue_many_beyond_one_batch_is_one_transaction(client, r):
    client.get_queue("warm-up").enqueue("p")
    count = ENQUEUE_BATCH * 2 + 5
    before = command_calls(r)
    ids = client.get_queue("q").enqueue_many([f"p{n}" for n in range(count)])
    delta = calls_delta(before, command_calls(r))
    assert (delta["multi"], delta["exec"], delta["evalsha"], delta["hset"]) == (1, 1, 3, count)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == ids[::-1]


def test_enqueue_policy_is_written_as_extension_fields(client, r):
    task_id = client.get_queue("q").enqueue("p", retries=2, backoff=0.5, timeout=30, retention=60)
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert set(fields) == BLUEQUE1_FIELDS | {"retries", "backoff", "timeout", "retention"}
    assert (fields["retries"], fields["backoff"], fields["timeout"], fields["retention"]) == (
        "2", "0.5", "30", "60")


@pytest.mark.parametrize("policy", [{"retries": -1}, {"retries": 1.5}, {"timeout": "10"},
                                    {"backoff": True}])
def test_invalid_policy_is_refused_before_anything_is_written(client, r, policy):
    with pytest.raises(ValueError):
        client.get_queue("q").enqueue("p", **policy)
    assert r.dbsize() == 0


def test_schedule_in_the_future(client, r):
    before = command_calls(r)
    t0 = time.time()
    eta = t0 + 3600.25
    task_id = client.get_queue("q").schedule("p", eta)
    t1 = time.time()
    sent = calls_delta(before, command_calls(r))

    fields = r.hgetall(f"blueque_task_{task_id}")
    assert set(fields) == BLUEQUE1_FIELDS | {"eta"}
    assert (fields["status"], fields["queue"], fields["parameters"]) == ("scheduled", "q", "p")
    assert_time_field(fields["created"], t0, t1)
    assert fields["updated"] == fields["created"]
    assert fields["eta"] == repr(eta)
    assert r.type("blueque_scheduled_tasks_q") == "zset"
    assert r.zrange("blueque_scheduled_tasks_q", 0, -1, withscores=True) == [(task_id, eta)]
    assert not r.exists("blueque_pending_tasks_q")
    assert r.zscore("blueque_queues", "q") == 0.0
    # blueque 1.0's row as one script (its writes, the TYPE checks of the keys it writes),
    # plus one ZADD keeping the due index (queue -> earliest eta)
    # a fresh server (this test alone) answers the first EVALSHA with NOSCRIPT: load, send again
    assert sent.pop("evalsha") == 1 + sent.pop("script|load", 0)
    assert sent == {"type": 4, "hset": 1, "zincrby": 1, "zadd": 2}
    assert r.zscore("blueque_due_queues", "q") == eta


def test_schedule_in_the_past_is_a_plain_enqueue(client, r):
    task_id = client.get_queue("q").schedule("p", time.time() - 10)
    assert set(r.hgetall(f"blueque_task_{task_id}")) == BLUEQUE1_FIELDS
    assert r.hget(f"blueque_task_{task_id}", "status") == "pending"
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert not r.exists("blueque_scheduled_tasks_q")


def test_schedule_accepts_aware_datetimes_and_timedeltas_only(client, r):
    queue = client.get_queue("q")
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
    by_datetime = queue.schedule("p", when)
    assert float(r.hget(f"blueque_task_{by_datetime}", "eta")) == when.timestamp()
    t0 = time.time()
    by_delta = queue.schedule("p", datetime.timedelta(minutes=5))
    assert t0 + 300 <= float(r.hget(f"blueque_task_{by_delta}", "eta")) <= time.time() + 300
    with pytest.raises(ValueError, match="aware"):
        queue.schedule("p", datetime.datetime.now())
    with pytest.raises(TypeError, match="str"):
        queue.schedule("p", "tomorrow")
    assert r.zcard("blueque_scheduled_tasks_q") == 2


@pytest.mark.parametrize("eta", [float("inf"), float("-inf"), float("nan"), 1e300,
                                 253402300800.0])  # the last: 10000-01-01, past year 9999
def test_schedule_refuses_an_eta_that_never_comes(client, r, eta):
    """Before: inf and 1e300 stayed scheduled for ever, NaN failed with a Lua error naming a
    script SHA (issue 38)."""
    with pytest.raises(ValueError, match=f"eta .*{re.escape(repr(eta))}"):
        client.get_queue("q").schedule("p", eta)
    with pytest.raises(ValueError, match=f"eta .*{re.escape(repr(eta))}"):
        client.protocol.schedule("q", "p", eta)
    assert r.dbsize() == 0


def test_schedule_accepts_the_last_second_of_year_9999(client, r):
    last = datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC)
    task_id = client.get_queue("q").schedule("p", last)
    assert r.zscore("blueque_scheduled_tasks_q", task_id) == last.timestamp()
    with pytest.raises(ValueError, match="year 10000"):
        client.get_queue("q").schedule("p", datetime.timedelta.max)


def test_move_due_moves_only_due_tasks_and_keeps_eta(client, r):
    queue = client.get_queue("q")
    due = queue.schedule("due", time.time() + 0.2)
    later = queue.schedule("later", time.time() + 3600)
    eta = r.hget(f"blueque_task_{due}", "eta")
    time.sleep(0.3)

    t0 = time.time()
    assert queue.enqueue_due_tasks() == [due]
    fields = r.hgetall(f"blueque_task_{due}")
    assert fields["status"] == "pending"
    assert fields["eta"] == eta  # left in place, as blueque 1.0 does
    assert_time_field(fields["updated"], t0, time.time())
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [due]
    assert r.zrange("blueque_scheduled_tasks_q", 0, -1) == [later]
    assert r.hget(f"blueque_task_{later}", "status") == "scheduled"
    assert queue.enqueue_due_tasks() == []


def test_heartbeat_registers_a_listener_as_blueque1_does(client, r):
    t0 = time.time()
    listener = client.get_listener("q")
    try:
        assert listener.id == f"{socket.getfqdn()}_{os.getpid()}"
        host, _, pid = listener.id.rpartition("_")
        assert host and pid.isdigit()
        assert r.type("blueque_listeners_q") == "set"
        assert r.smembers("blueque_listeners_q") == {listener.id}
        assert r.zscore("blueque_queues", "q") == 1.0
        # the lease: an extension zset the reaper reads, about now + 15 s
        expiry = r.zscore("blueque_listener_leases_q", listener.id)
        assert t0 + 15 <= expiry <= time.time() + 15
        info = r.hgetall(f"blueque_listener_{listener.id}")
        assert info["queues"] == "q" and info["pid"] == pid
        # renewing is not registering again: the queue's score counts listeners, not beats
        listener.beat()
        listener.beat()
        assert r.zscore("blueque_queues", "q") == 1.0
        assert r.zscore("blueque_listener_leases_q", listener.id) >= expiry
    finally:
        listener.stop()


def test_reserving_brings_an_idle_listeners_long_lease_back_to_the_busy_one(client, proto, r):
    """An idle listener beats rarely, on TIMINGS.idle_heartbeat; the reserve that gives it a task
    shortens that lease in the same step (and never lengthens a busy one, nor registers)."""
    proto.heartbeat("host-a_101", ["q", "other"], ttl=TIMINGS.idle_heartbeat)
    idle = r.zscore("blueque_listener_leases_q", "host-a_101")
    assert idle >= time.time() + TIMINGS.idle_heartbeat - 5
    client.get_queue("q").enqueue("a")
    t0 = time.time()
    assert proto.reserve("q", "host-a_101", "tok")[1]
    busy = r.zscore("blueque_listener_leases_q", "host-a_101")
    assert t0 + TIMINGS.heartbeat - 1 <= busy <= time.time() + TIMINGS.heartbeat
    assert r.zscore("blueque_listener_expiries", "q host-a_101") == busy
    # its other queue, where it reserved nothing, keeps the long lease
    assert r.zscore("blueque_listener_leases_other", "host-a_101") == idle
    client.get_queue("q").enqueue("b")
    proto.heartbeat("host-a_101", ["q"], ttl=TIMINGS.heartbeat)
    renewed = r.zscore("blueque_listener_leases_q", "host-a_101")
    assert proto.reserve("q", "host-a_101", "tok2")[1]
    assert r.zscore("blueque_listener_leases_q", "host-a_101") == renewed
    # a listener that is not registered is not registered by its reserve
    client.get_queue("q").enqueue("c")
    assert proto.reserve("q", "host-z_9", "tok3")[1]
    assert r.zscore("blueque_listener_leases_q", "host-z_9") is None
    assert r.zscore("blueque_listener_expiries", "q host-z_9") is None


def test_blueque1_registration(proto, r):
    proto.add_listener_v1("oldhost_77", "q")
    proto.add_listener_v1("oldhost_78", "q")
    assert r.smembers("blueque_listeners_q") == {"oldhost_77", "oldhost_78"}
    assert r.zscore("blueque_queues", "q") == 2.0
    assert not r.exists("blueque_listener_leases_q")


def test_stop_unregisters_the_listener(client, r):
    other = client.get_listener("q")  # stays registered
    listener = Listener(client, "q", listener_id="host-b_9")
    assert r.zscore("blueque_queues", "q") == 2.0
    listener.stop()
    assert r.smembers("blueque_listeners_q") == {other.id}
    assert r.zscore("blueque_queues", "q") == 1.0
    assert r.zrange("blueque_listener_leases_q", 0, -1) == [other.id]
    assert not r.exists("blueque_listener_host-b_9")
    other.stop()
    assert r.scard("blueque_listeners_q") == 0
    assert r.zscore("blueque_queues", "q") == 0.0


def test_reserve_moves_and_marks_in_one_script(client, proto, r):
    task_id = client.get_queue("q").enqueue("p", timeout=12)
    created = r.hget(f"blueque_task_{task_id}", "created")
    before = command_calls(r)
    t0 = time.time()
    assert proto.reserve("q", "host-a_101", "token-1") == (task_id, True, "12")
    t1 = time.time()
    sent = calls_delta(before, command_calls(r))
    # one script call (commandstats also counts the commands the script ran: the RPOPLPUSH
    # and HSET of blueque 1.0's two steps happen inside it, atomically)
    assert sent["evalsha"] == 1 and sent["rpoplpush"] == 1 and sent["hset"] == 1
    assert not {"multi", "exec", "eval", "lpush", "rpush"} & set(sent)

    fields = r.hgetall(f"blueque_task_{task_id}")
    assert set(fields) == BLUEQUE1_FIELDS | {"timeout", "node", "lease"}
    assert (fields["status"], fields["node"], fields["lease"]) == ("reserved", "host-a_101",
                                                                   "token-1")
    assert fields["created"] == created
    assert_time_field(fields["updated"], t0, t1)
    assert r.lrange("blueque_reserved_tasks_q_host-a_101", 0, -1) == [task_id]
    assert not r.exists("blueque_pending_tasks_q")
    assert proto.reserve("q", "host-a_101", "token-2") is None


def test_reserve_drops_an_id_whose_task_is_not_pending(client, proto, r):
    done = client.get_queue("q").enqueue("p")
    r.hset(f"blueque_task_{done}", "status", "complete")  # e.g. finished by someone else
    r.lpush("blueque_pending_tasks_q", "garbage")
    r.set("blueque_task_garbage", "not a hash")
    assert proto.reserve("q", "host-a_101", "t") == (done, False,
                                                     "its status is complete, not pending")
    assert proto.reserve("q", "host-a_101", "t") == (
        "garbage", False, "its task key holds a string, not a hash")
    assert proto.reserve("q", "host-a_101", "t") is None
    assert not r.exists("blueque_reserved_tasks_q_host-a_101")
    assert r.hget(f"blueque_task_{done}", "status") == "complete"
    assert r.get("blueque_task_garbage") == "not a hash"


def test_an_id_pushed_before_its_hash_waits_for_it_not_dropped(client, proto, r):
    """A producer that pushes the id first and writes the hash after must not lose its task:
    the id waits in the scheduled set (issue 38), then the scheduler puts it back first."""
    r.lpush("blueque_pending_tasks_q", "early", "other")
    assert proto.reserve("q", "host-a_101", "tok") is None
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == ["other"]
    assert r.zscore("blueque_scheduled_tasks_q", "early") > r.zscore("blueque_due_queues", "q") - 1
    r.hset("blueque_task_early", mapping={"status": "pending", "queue": "q",
                                          "parameters": "late"})
    assert proto.upkeep.move_due("q", by_caller_clock=True) == []  # not due yet
    time.sleep(protocol.UNWRITTEN_PAUSE)
    assert proto.upkeep.move_due("q", by_caller_clock=True) == ["early"]
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == ["other", "early"]  # taken first
    assert proto.reserve("q", "host-a_101", "tok") == ("early", True, "")
    fields = proto.start("q", "early", "host-a_101", 4242, "tok")
    assert fields["status"] == "started" and fields["parameters"] == "late"
    assert "unwritten_since" not in fields and fields["attempts"] == "1"


def test_a_hash_written_between_blueque1s_reserve_and_our_start_is_started(client, proto, r):
    """blueque 1.0's reserve (RPOPLPUSH, then HSET) makes the hash of an id it finds without
    one; the producer's hash may then arrive before the start (Processor.start, ours)."""
    r.lpush("blueque_pending_tasks_q", "early")
    r.rpoplpush("blueque_pending_tasks_q", "blueque_reserved_tasks_q_host-a_101")
    r.hset("blueque_task_early", mapping={"status": "reserved", "node": "host-a_101"})
    r.hset("blueque_task_early", mapping={"status": "pending", "queue": "q",
                                          "parameters": "late"})
    proto.set_lease_token("early", "tok")
    fields = proto.start("q", "early", "host-a_101", 4242, "tok")
    assert fields["status"] == "started" and fields["parameters"] == "late"
    assert fields["node"] == "host-a_101" and fields["attempts"] == "1"


def test_start_writes_status_pid_and_started_member(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    proto.reserve("q", "host-a_101", "tok")
    t0 = time.time()
    started = proto.start("q", task_id, "host-a_101", 4242, "tok")
    t1 = time.time()

    fields = r.hgetall(f"blueque_task_{task_id}")
    assert started == fields  # the task's process gets its task without another round trip
    assert (fields["status"], fields["pid"], fields["node"]) == ("started", "4242", "host-a_101")
    assert_time_field(fields["updated"], t0, t1)
    assert fields["started"] == fields["updated"]
    assert fields["attempts"] == "1"
    assert r.type("blueque_started_tasks_q") == "set"
    assert r.smembers("blueque_started_tasks_q") == {f"host-a_101 4242 {task_id}"}
    assert r.lrange("blueque_reserved_tasks_q_host-a_101", 0, -1) == [task_id]
    # the running task's lease: a key holding the token, expiring in 15 s unless renewed
    assert r.get(f"blueque_lease_{task_id}") == "tok"
    assert 10_000 < r.pttl(f"blueque_lease_{task_id}") <= 15_000


def test_start_is_refused_to_a_stale_reservation(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    proto.reserve("q", "host-a_101", "tok")
    snapshot = r.hgetall(f"blueque_task_{task_id}")
    assert proto.start("q", task_id, "host-a_101", 4242, "someone-elses") == 0
    assert r.hgetall(f"blueque_task_{task_id}") == snapshot
    assert not r.exists("blueque_started_tasks_q", f"blueque_lease_{task_id}")


@pytest.mark.parametrize("outcome, retries, answer", [("complete", 0, "complete"),
                                                     ("failed", 0, "failed"),
                                                     ("failed", 1, "retry")])
def test_an_end_tried_again_after_a_lost_reply_gets_the_same_answer(client, proto, r, outcome,
                                                                     retries, answer):
    """A task process's finish whose reply was lost is tried again with the same end id and
    answered with what the first try recorded, once, writing nothing more; another caller
    of the same run (its listener, which passes no end id) or another end id gets 'stale'."""
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    end = dict(listener_id="host-a_101", pid=4242, token="tok", outcome=outcome, value="v",
               policy={"retries": retries})
    assert proto.finish("q", task_id, end_id="end-1", **end) == answer
    recorded = r.hgetall(f"blueque_task_{task_id}")
    assert recorded["ended_by"] == f"end-1 {answer}"
    assert proto.finish("q", task_id, end_id="end-1", **end) == answer
    assert proto.finish("q", task_id, **end) == "stale"
    assert proto.finish("q", task_id, end_id="end-2", **end) == "stale"
    assert r.hgetall(f"blueque_task_{task_id}") == recorded


def test_complete(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    t0 = time.time()
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="complete",
        value="the result") == (
        "complete")
    t1 = time.time()

    fields = r.hgetall(f"blueque_task_{task_id}")
    assert (fields["status"], fields["result"]) == ("complete", "the result")
    assert "error" not in fields and "lease" not in fields
    assert_time_field(fields["updated"], t0, t1)
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == [task_id]
    assert not r.exists("blueque_reserved_tasks_q_host-a_101", "blueque_started_tasks_q",
                        f"blueque_lease_{task_id}", "blueque_failed_tasks_q")
    # a second report (a stale process) changes nothing
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="failed",
        value="late") == "stale"
    assert r.hget(f"blueque_task_{task_id}", "status") == "complete"


def test_fail(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="failed",
        value="boom", error_type="builtins.ValueError", traceback="Traceback ...") == "failed"

    fields = r.hgetall(f"blueque_task_{task_id}")
    assert (fields["status"], fields["error"]) == ("failed", "boom")
    assert (fields["error_type"], fields["traceback"]) == ("builtins.ValueError", "Traceback ...")
    assert "result" not in fields
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]
    assert not r.exists("blueque_reserved_tasks_q_host-a_101", "blueque_started_tasks_q",
                        "blueque_complete_tasks_q")


def test_finish_needs_the_current_reservation(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="old-token", outcome="complete",
        value="x") == "stale"
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"


def test_delete_a_finished_task(client, proto, r):
    queue = client.get_queue("q")
    task_id = queue.enqueue("p")
    reserve_and_start(proto)
    proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="complete",
        value="r")
    task = client.get_task(task_id)
    before = command_calls(r)
    queue.delete_task(task)
    # blueque 1.0's MULTI; DEL; LREM; EXEC, then what only this engine writes: the task's
    # workflow read first (HGET), its dependents set deleted after (DEL)
    assert calls_delta(before, command_calls(r)) == {"hget": 1, "multi": 1, "del": 2, "lrem": 1,
                                                     "exec": 1}
    assert not r.exists(f"blueque_task_{task_id}", "blueque_complete_tasks_q")
    assert client.get_task(task_id).status is None


def test_delete_refuses_unfinished_tasks_and_other_queues(client, r):
    task_id = client.get_queue("q").enqueue("p")
    with pytest.raises(ValueError, match="pending"):
        client.get_queue("q").delete_task(client.get_task(task_id))
    with pytest.raises(ValueError, match="not in queue"):
        client.get_queue("other").delete_task(client.get_task(task_id))
    assert r.hget(f"blueque_task_{task_id}", "status") == "pending"


def test_task_view_types_and_unknown_task(client, proto):
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    task = client.get_task(task_id)
    assert (task.id, task.status, task.queue, task.parameters) == (task_id, "started", "q", "p")
    assert task.pid == 4242 and isinstance(task.created, float) and task.node == "host-a_101"
    assert task.result is None and task.error is None

    missing = client.get_task("does-not-exist")
    assert missing.status is None and missing.queue is None and not missing.exists
    with pytest.raises(AttributeError):
        missing.no_such_field  # noqa: B018


def test_task_fields_written_by_someone_else_read_as_none(client, r):
    r.hset("blueque_task_odd", mapping={"status": "started", "pid": "not-a-pid",
                                        "created": "yesterday", "whatever": "x"})
    task = client.get_task("odd")
    assert task.status == "started" and task.pid is None and task.created is None
    assert task.fields["whatever"] == "x"


def test_retry_with_exponential_backoff(client, proto, r):
    """Attempt n waits backoff * 2**(n-1); the attempt count and the eta are on the task."""
    queue = client.get_queue("q")
    task_id = queue.enqueue("p", retries=2, backoff=0.2)
    for attempt, wait in ((1, 0.2), (2, 0.4)):
        token = f"tok{attempt}"
        assert proto.reserve("q", "host-a_101", token)[0] == task_id
        assert proto.start("q", task_id, "host-a_101", 4242, token)["status"] == "started"
        assert proto.finish(
            "q", task_id, listener_id="host-a_101", pid=4242, token=token, outcome="failed",
            value=f"boom {attempt}", error_type="builtins.ValueError", traceback="tb") == "retry"
        fields = r.hgetall(f"blueque_task_{task_id}")
        assert (fields["status"], fields["attempts"]) == ("scheduled", str(attempt))
        # eta on Redis's clock, updated on the caller's: the same machine here
        assert float(fields["eta"]) - float(fields["updated"]) == pytest.approx(wait, abs=0.01)
        assert r.zscore("blueque_scheduled_tasks_q", task_id) == pytest.approx(
            float(fields["eta"]), abs=1e-5)
        assert fields["last_error"] == f"boom {attempt}" and "error" not in fields
        assert not r.exists("blueque_failed_tasks_q", "blueque_started_tasks_q")
        assert queue.enqueue_due_tasks() == []  # not due yet
        time.sleep(wait + 0.05)
        assert queue.enqueue_due_tasks() == [task_id]

    assert proto.reserve("q", "host-a_101", "tok3")[0] == task_id
    assert proto.start("q", task_id, "host-a_101", 4242, "tok3")["status"] == "started"
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok3", outcome="failed",
        value="boom 3") == "failed"
    task = client.get_task(task_id)
    assert (task.status, task.attempts, task.error) == ("failed", 3, "boom 3")
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]


def test_retry_without_backoff_goes_next_in_line(client, proto, r):
    queue = client.get_queue("q")
    task_id = queue.enqueue("p", retries=1)
    waiting = queue.enqueue("waiting")
    reserve_and_start(proto)
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="failed",
        value="boom") == "retry"
    assert r.hget(f"blueque_task_{task_id}", "status") == "pending"
    assert proto.reserve("q", "host-a_101", "tok2")[0] == task_id  # before `waiting`
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [waiting]



@pytest.mark.parametrize("outcome", ["failed", "requeue"])
def test_a_run_that_ends_with_the_task_waiting_again_takes_its_start_and_progress_along(
        client, proto, r, outcome):
    """A run's progress goes with it once its task waits for another run (a retry, or sent
    back unstarted), and so does its start when it never began (requeue) or when the task is
    cancelled while it waits: else the task page showed "5% step 3/60" of a task that waits,
    and the cancel counted the whole wait as a run in the run-time histograms. A retry keeps
    the start as the last attempt's (Django's ``last_attempted_at``)."""
    from django_blueque.queries.run_times import recent_run_times

    task_id = client.get_queue("q").enqueue("p", retries=1)
    reserve_and_start(proto)
    assert proto.report_progress(task_id, "tok", 5, "step 3/60")
    assert proto.finish("q", task_id, listener_id="host-a_101", pid=4242, token="tok",
                        outcome=outcome, value="boom") in ("retry", "requeued")
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert fields["status"] == "pending"
    assert not {"progress", "progress_message"} & set(fields), fields
    assert ("started" in fields) == (outcome == "failed")
    client.cancel(task_id)
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"

    class Reader:  # what recent_run_times reads through: the engine's keys, one pipeline
        keys = proto.keys

        @staticmethod
        def read(calls):
            with r.pipeline() as pipe:
                for command, key, *args in calls:
                    getattr(pipe, command)(key, *args)
                return pipe.execute()

    assert recent_run_times(Reader, ["q"])["q"]["failed"] == []


def test_retry_after_its_backoff_goes_next_in_line(client, proto, r):
    """Its backoff delays it; it does not also cost it its place: a task recovered from a dead
    listener in a queue with a backlog ran only once the whole backlog had (the soak's 34 s
    recovery, 28 s of it behind other tasks). A task scheduled by its producer (never run)
    still goes to the back of the line."""
    queue = client.get_queue("q")
    task_id = queue.enqueue("p", retries=1, backoff=0.1)
    reserve_and_start(proto)
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="failed",
        value="boom") == "retry"
    scheduled = queue.schedule("scheduled", time.time() + 0.05)
    waiting = [queue.enqueue(f"waiting {n}") for n in range(3)]
    time.sleep(0.2)
    assert sorted(queue.enqueue_due_tasks()) == sorted([task_id, scheduled])
    assert proto.reserve("q", "host-a_101", "tok2")[0] == task_id  # before `waiting`
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [scheduled, *reversed(waiting)]


def test_a_failure_marked_not_retryable_is_final(client, proto, r):
    task_id = client.get_queue("q").enqueue("p", retries=5)
    reserve_and_start(proto)
    assert proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="failed",
        value="cancelled", error_type="Cancelled", retryable=False) == "failed"
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"


def test_operator_retry_puts_a_failed_task_back(client, proto, r):
    queue = client.get_queue("q")
    task_id = queue.enqueue("p")
    reserve_and_start(proto)
    proto.finish(
        "q", task_id, listener_id="host-a_101", pid=4242, token="tok", outcome="failed",
        value="boom", error_type="X", traceback="tb")
    assert queue.retry_task(client.get_task(task_id)) is True
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert (fields["status"], fields["last_error"]) == ("pending", "boom")
    assert not {"error", "error_type", "traceback", "node", "pid"} & set(fields)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert not r.exists("blueque_failed_tasks_q")
    assert queue.retry_task(client.get_task(task_id)) is False  # pending now: nothing to do


def test_progress_and_lease_need_the_token(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    assert proto.report_progress(task_id, "tok", 42.5, "half way") is True
    assert r.hmget(f"blueque_task_{task_id}", "progress", "progress_message") == [
        "42.5", "half way"]
    assert proto.report_progress(task_id, "other", 99, "no") is False
    assert client.get_task(task_id).progress == 42.5
    assert proto.renew_lease(task_id, "tok") == (True, False)
    assert proto.renew_lease(task_id, "other") == (False, False)


def test_a_lapsed_lease_is_taken_again_unless_the_task_was_recovered(client, proto, r):
    """The process could not renew for a while (Redis restarted, a partition): its lease key
    expired. Nobody recovered the task, so it takes the lease again; the reaper recovers a task
    only while its lease is absent, in the same atomic step."""
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    lease = f"blueque_lease_{task_id}"
    r.delete(lease)
    assert proto.renew_lease(task_id, "tok") == (True, False)
    assert r.get(lease) == "tok" and r.pttl(lease) > 10_000

    args = {"listener_id": "host-a_101", "pid": 4242, "token": "tok", "outcome": "failed",
            "value": "listener lost"}
    assert proto.finish("q", task_id, **args, lapsed_only=True) == "stale"
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"
    r.delete(lease)
    assert proto.finish("q", task_id, **args, lapsed_only=True) == "failed"
    assert proto.renew_lease(task_id, "tok") == (False, False)
    assert not r.exists(lease)


def test_expire_finished_deletes_only_past_retention(client, proto, r):
    queue = client.get_queue("q")
    gone, kept = queue.enqueue("gone", retention=0), queue.enqueue("kept", retention=3600)
    for task_id in (gone, kept):
        token = f"tok-{task_id}"
        proto.reserve("q", "host-a_101", token)
        proto.start("q", task_id, "host-a_101", 1, token)
        t0 = time.time()
        proto.finish(
            "q", task_id, listener_id="host-a_101", pid=1, token=token, outcome="complete",
            value="r")
    expires = float(r.hget(f"blueque_task_{kept}", "expires"))
    # expires on Redis's clock, finished on the caller's: the same machine here
    assert expires == pytest.approx(float(r.hget(f"blueque_task_{kept}", "finished")) + 3600,
                                    abs=0.01)
    assert expires >= t0 + 3600

    assert proto.upkeep.expire_finished("q", "complete") == 1
    assert not r.exists(f"blueque_task_{gone}")
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == [kept]
    assert r.hget(f"blueque_task_{kept}", "status") == "complete"
    assert proto.upkeep.expire_finished("q", "complete") == 0


def test_expire_finished_default_retention_for_tasks_without_expires(client, proto, r):
    """A task finished by blueque 1.0 has no `expires`: it is kept for the default retention
    after its last update, and forever without a default."""
    now = time.time()
    for name, age in (("old", 100), ("recent", 10)):
        r.hset(f"blueque_task_{name}", mapping={"status": "complete", "queue": "q",
                                               "parameters": "p", "created": repr(now - age),
                                               "updated": repr(now - age), "result": "r"})
        r.lpush("blueque_complete_tasks_q", name)
    assert proto.upkeep.expire_finished("q", "complete") == 0
    assert proto.upkeep.expire_finished("q", "complete", default_retention=50) == 1
    assert not r.exists("blueque_task_old")
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == ["recent"]
    # an id whose hash is already gone is just dropped from the list
    r.rpush("blueque_complete_tasks_q", "vanished")
    assert proto.upkeep.expire_finished("q", "complete") == 1
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == ["recent"]


def test_cancel_a_pending_task(client, r):
    queue = client.get_queue("q")
    task_id, other = queue.enqueue("p"), queue.enqueue("other")
    assert client.cancel(task_id) == "cancelled"
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert (fields["status"], fields["error"], fields["error_type"]) == (
        "failed", "cancelled", "django_blueque.Cancelled")
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [other]
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]
    assert client.cancel(task_id) == "failed"  # already finished: nothing changes
    assert client.cancel("no-such-task") is None


def test_cancel_a_scheduled_task(client, r):
    queue = client.get_queue("q")
    task_id = queue.schedule("p", time.time() + 0.2)
    assert client.cancel(task_id) == "cancelled"
    assert not r.exists("blueque_scheduled_tasks_q")
    time.sleep(0.3)
    assert queue.enqueue_due_tasks() == []
    assert r.hget(f"blueque_task_{task_id}", "status") == "failed"
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]


def test_cancel_a_started_task_tells_its_listener(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    reserve_and_start(proto)
    assert client.cancel(task_id) == "requested"
    assert r.hget(f"blueque_task_{task_id}", "status") == "started"  # the listener stops it
    assert proto.renew_lease(task_id, "tok") == (True, True)  # the task's process learns it too
    assert proto.heartbeat("host-a_101", ["q"])[1] == [task_id]
    assert proto.heartbeat("host-a_101", ["q"])[1] == []  # handed over once


def test_cancel_a_reserved_task_fails_it_at_start(client, proto, r):
    task_id = client.get_queue("q").enqueue("p")
    proto.reserve("q", "host-a_101", "tok")
    assert client.cancel(task_id) == "requested"
    assert proto.start("q", task_id, "host-a_101", 4242, "tok") == -1
    fields = r.hgetall(f"blueque_task_{task_id}")
    assert (fields["status"], fields["error"]) == ("failed", "cancelled")
    assert not r.exists("blueque_reserved_tasks_q_host-a_101", "blueque_started_tasks_q")
    assert r.lrange("blueque_failed_tasks_q", 0, -1) == [task_id]


def test_prefix_is_configurable(redis_url, r):
    client = Client(redis_url, prefix="other")
    task_id = client.get_queue("q").enqueue("p")
    assert sorted(r.keys("*")) == ["other_pending_tasks_q", "other_queues",
                                   f"other_task_{task_id}"]
    client.redis.close()
