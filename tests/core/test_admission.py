"""Concurrency and rate limits in take.lua and the scripts that end a run (admission.py), on a
real Redis, one script call at a time: what a take refuses, what an end frees, and that no task
is lost to a limit, to a cancel while it waits for its key, or to garbage in a limit's key."""

import time

import pytest

from django_blueque.core.admission import Admission, concurrency_fields, parse_rate

LISTENER = "host~ab_1"


def take(client, n, admission, queue="q"):
    return client.protocol.take(queue, LISTENER, f"tok{n}", 100 + n, admission)


def finish(client, taken_reply, n, outcome="complete", queue="q"):
    return client.protocol.finish(queue, taken_reply[0], listener_id=LISTENER, pid=100 + n,
                                  token=f"tok{n}", outcome=outcome, value="x",
                                  retryable=outcome == "failed")


def test_a_full_queue_refuses_a_start_and_the_next_end_wakes_its_listeners(client, r):
    queue = client.get_queue("q")
    ids = [queue.enqueue(str(i)) for i in range(3)]
    limit = Admission(max_running=2)
    first, second = take(client, 1, limit), take(client, 2, limit)
    assert (first[1], second[1]) == ("ok", "ok")
    assert take(client, 3, limit) == ("", "full", 0, False)
    assert r.get("blueque_full_q") == "1" and not r.exists("blueque_slot_wake_q")
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [ids[2]]  # nothing taken
    assert finish(client, first, 1) == "complete"
    assert not r.exists("blueque_full_q")
    assert r.lrange("blueque_slot_wake_q", 0, -1) == ["slot"]
    third = take(client, 3, limit)
    assert third[:2] == (ids[2], "ok")
    # an end while nobody waits for a slot wakes nobody
    assert finish(client, second, 2) == "complete"
    assert r.lrange("blueque_slot_wake_q", 0, -1) == ["slot"]


def test_a_failed_run_that_is_retried_frees_its_slot_too(client, r):
    queue = client.get_queue("q")
    queue.enqueue("a", retries=1, backoff=0)
    queue.enqueue("b")
    limit = Admission(max_running=1)
    first = take(client, 1, limit)
    assert take(client, 2, limit)[1] == "full"
    assert finish(client, first, 1, outcome="failed") == "retry"
    assert r.lrange("blueque_slot_wake_q", 0, -1) == ["slot"]
    assert take(client, 2, limit)[:2] == (first[0], "ok")  # the retry goes first


def test_tasks_of_a_full_key_are_held_and_other_keys_go_past_them(client, r):
    queue = client.get_queue("q")
    a1, a2, a3 = (queue.enqueue(f"a{i}", concurrency_key="customer-7") for i in range(3))
    b1 = queue.enqueue("b1", concurrency_key="customer-8")
    plain = queue.enqueue("no key")
    limit = Admission(max_running_per_key=1)
    got = [take(client, n, limit) for n in (1, 2, 3)]
    assert [reply[0] for reply in got] == [a1, b1, plain]
    assert take(client, 4, limit) is None  # a2 and a3 wait for customer-7's run
    held = r.zrange("blueque_held_q", 0, -1)
    assert [member.split()[2] for member in held] == [a2, a3]  # oldest first
    assert r.hget(f"blueque_task_{a2}", "status") == "pending"
    assert sorted(r.zrange("blueque_running_keys_q", 0, -1)) == [
        f"customer-7 {a1}", f"customer-8 {b1}"]
    # the end of customer-7's run puts its oldest held task back at the head of the queue
    assert finish(client, got[0], 1) == "complete"
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [a2]
    second = take(client, 5, limit)
    assert second[0] == a2 and not r.hexists(f"blueque_task_{a2}", "held_since")
    assert take(client, 6, limit) is None
    assert finish(client, second, 5) == "complete"
    assert take(client, 7, limit)[0] == a3
    assert r.zcard("blueque_held_q") == 0


def test_a_held_task_keeps_its_place_among_its_key_when_held_again(client, r):
    queue = client.get_queue("q")
    a0, a1, a2 = (queue.enqueue(f"a{i}", concurrency_key="k") for i in range(3))
    limit = Admission(max_running_per_key=1)
    running = take(client, 1, limit)
    assert take(client, 2, limit) is None
    since = r.hget(f"blueque_task_{a1}", "held_since")
    assert finish(client, running, 1) == "complete"  # a1 let go to the head of the queue
    urgent = queue.enqueue("urgent", concurrency_key="k", priority=10)  # goes before it
    assert take(client, 3, limit)[0] == urgent
    assert take(client, 4, limit) is None  # a1 held again, before a2 as it first was
    assert [m.split()[2] for m in r.zrange("blueque_held_q", 0, -1)] == [a1, a2]
    assert r.hget(f"blueque_task_{a1}", "held_since") == since
    assert a0 == running[0]


def test_cancelling_a_held_task_drops_it_from_the_held_set(client, r):
    queue = client.get_queue("q")
    first = queue.enqueue("a", concurrency_key="k")
    waiting = queue.enqueue("b", concurrency_key="k")
    limit = Admission(max_running_per_key=1)
    running = take(client, 1, limit)
    assert take(client, 2, limit) is None
    assert client.cancel(waiting) == "cancelled"
    assert r.zcard("blueque_held_q") == 0
    assert r.hget(f"blueque_task_{waiting}", "status") == "failed"
    assert finish(client, running, 1) == "complete"
    assert r.llen("blueque_pending_tasks_q") == 0 and take(client, 3, limit) is None
    assert first == running[0]


def test_a_run_ended_by_a_script_that_knows_no_limits_does_not_block_its_key(client, r):
    """blueque 1.0 completes a task without touching the running keys: the next take sees that
    the run is over, and lets the held tasks of that key go first."""
    queue = client.get_queue("q")
    a1, a2, a3 = (queue.enqueue(f"a{i}", concurrency_key="k") for i in range(3))
    limit = Admission(max_running_per_key=1)
    take(client, 1, limit)
    assert take(client, 2, limit) is None  # a2, a3 held
    r.hset(f"blueque_task_{a1}", "status", "complete")  # as blueque 1.0's complete writes it
    a4 = queue.enqueue("a4", concurrency_key="k")
    assert take(client, 3, limit)[0] == a2  # the oldest held first, not a4
    assert take(client, 4, limit) is None
    assert [m.split()[2] for m in r.zrange("blueque_held_q", 0, -1)] == [a3, a4]


def test_a_rate_limit_refuses_starts_beyond_its_window_and_says_how_long_to_wait(client, r):
    queue = client.get_queue("q")
    for i in range(5):
        queue.enqueue(str(i))
    limit = Admission(rate=(2, 1.0))
    assert take(client, 1, limit)[1] == "ok" and take(client, 2, limit)[1] == "ok"
    refused = take(client, 3, limit)
    assert refused[:2] == ("", "rate") and 0 < refused[2] <= 1.0
    assert r.zcard("blueque_starts_q") == 2 and 0 < r.pttl("blueque_starts_q") <= 1000
    time.sleep(refused[2] + 0.02)
    assert take(client, 3, limit)[1] == "ok" and take(client, 4, limit)[1] == "ok"
    assert take(client, 5, limit)[1] == "rate"


@pytest.mark.parametrize("key", ["full", "slot_wake", "running_keys", "held", "starts"])
def test_garbage_in_a_limit_key_loses_no_task(client, r, key):
    queue = client.get_queue("q")
    ids = [queue.enqueue(str(i), concurrency_key="k") for i in range(2)]
    r.sadd(f"blueque_{key}_q", "garbage")
    limit = Admission(max_running=5, max_running_per_key=1, rate=(10, 60.0))
    first = take(client, 1, limit)
    assert first[:2] == (ids[0], "ok")
    assert finish(client, first, 1) == "complete"
    second = take(client, 2, limit)
    assert second[:2] == (ids[1], "ok"), second
    assert finish(client, second, 2) == "complete"


def test_limits_and_keys_are_checked_before_anything_is_written(client, r):
    assert parse_rate("30/m") == (30, 60.0)
    assert parse_rate("5/s") == (5, 1.0) and parse_rate("100/10m") == (100, 600.0)
    assert parse_rate("1 / h") == (1, 3600.0)
    for bad in ("30", "0/m", "30/d", "x/m", 30, "30/0m"):
        with pytest.raises(ValueError, match="rate limit"):
            parse_rate(bad)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_running"):
            Admission.of({"max_running": bad})
    assert not Admission.of({}) and Admission.of({"rate_limit": "1/s"})
    with pytest.raises(ValueError, match="concurrency_key"):
        concurrency_fields("two words")
    with pytest.raises(ValueError, match="concurrency_key"):
        client.get_queue("q").enqueue("x", concurrency_key="")
    assert r.keys("*") == []


def test_a_take_that_holds_a_batch_of_tasks_starts_none_unchecked(client, r):
    """More tasks of a full key than one take sets aside: it says to take again, and never
    starts the next in line without looking at its key."""
    queue = client.get_queue("q")
    limit = Admission(max_running_per_key=1)
    queue.enqueue("first", concurrency_key="k")
    assert take(client, 1, limit)[1] == "ok"
    crowd = client.protocol.enqueue("q", ["more"] * 60, {"concurrency_key": "k"})
    other = queue.enqueue("other", concurrency_key="j")
    replies = [take(client, 2, limit), take(client, 3, limit)]
    assert replies[0] == ("", "held", 0, True)
    assert replies[1][:2] == (other, "ok")
    assert r.zcard("blueque_held_q") == len(crowd)
    assert r.hget(f"blueque_task_{crowd[-1]}", "status") == "pending"


def test_a_start_that_uses_the_last_slot_or_start_says_no_more_may_start_now(client):
    """"more" tells the listener to take again at once (and to fork a spare for it): not
    when the start just made used the queue's last slot or its window's last start."""
    queue = client.get_queue("q")
    for i in range(4):
        queue.enqueue(str(i))
    assert take(client, 1, Admission(max_running=2))[3] is True
    assert take(client, 2, Admission(max_running=2))[3] is False
    assert take(client, 3, Admission(rate=(1, 60.0)))[3] is False  # the window's one start
    assert take(client, 4, Admission())[3] is False  # the queue is empty now
