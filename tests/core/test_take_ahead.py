"""The take an idle listener sends ahead of its task, behind its blocking peek (take_ahead.py):
Redis runs it as the task comes, and it is withdrawn, put back or settled whenever the listener
must take otherwise, stops, loses its spare process or its connection, or Redis lost the
script."""

import json
import os
import select
import signal
import time
from contextlib import contextmanager

import pytest

from django_blueque.core import waiter
from django_blueque.core.take_ahead import ANSWERED, TakeAhead
from tests.core.helpers import (
    Runner,
    calls_delta,
    command_calls,
    pid_alive,
    task_processes_of,
    wait_for,
)
from tests.core.reply_loss import ReplyLosingProxy


def runs_of(r, task_id):
    return [run for run in map(json.loads, r.lrange("core_test_runs", 0, -1))
            if run["id"] == task_id]


def ahead_connection(r, runner):
    """The CLIENT LIST entry of the connection that waits with a take behind its peek: blocked
    in BLMOVE, the take unread in its query buffer."""
    return wait_for(lambda: next((c for c in r.client_list()
                                  if c["cmd"] == "blmove" and int(c["qbuf"]) > 0), None),
                    20, runner.describe)


def gone(pid):
    """Dead, every thread of it: a zombie whose other threads still exit keeps its sockets
    open, and its parent cannot collect it yet."""
    try:
        return not pid_alive(pid) and os.listdir(f"/proc/{pid}/task") == [str(pid)]
    except FileNotFoundError:
        return True


@contextmanager
def spare_killed_while_stopped(runner):
    """The listener stopped (SIGSTOP) and its spare killed, dead before the listener can look;
    the listener goes on as the block ends. Yields the spare's pid."""
    [spare] = wait_for(lambda: task_processes_of(runner.pid), 10, runner.describe)
    runner.signal(signal.SIGSTOP)
    try:
        os.kill(spare, signal.SIGKILL)
        wait_for(lambda: gone(spare), 10)
        yield spare
    finally:
        runner.signal(signal.SIGCONT)


def status(r, task_id):
    return r.hget(f"blueque_task_{task_id}", "status")


def complete_once(client, r, task_id, runner):
    task = wait_for(lambda: (lambda t: t if t.status in ("complete", "failed") else None)(
        client.get_task(task_id)), 30, runner.describe)
    assert (task.status, task.attempts) == ("complete", 1), (task.fields, runner.output())
    assert len(runs_of(r, task_id)) == 1, runner.output()
    return task


def test_the_take_waits_behind_the_peek_and_runs_on_its_connection_as_the_task_comes(
        client, r, start_runner):
    runner = start_runner()
    complete_once(client, r, client.get_queue("q").enqueue("warm up"), runner)
    peek = ahead_connection(r, runner)
    take_sha = client.protocol.script("take").sha
    with r.monitor() as monitor:
        task_id = client.get_queue("q").enqueue("comes")
        takes = []
        for event in monitor.listen():
            if event["command"].startswith(f"EVALSHA {take_sha}"):
                takes.append(f"{event['client_address']}:{event['client_port']}")
                break
    complete_once(client, r, task_id, runner)
    assert takes == [peek["addr"]]  # from the peek's connection, sent before the task came
    started = float(r.hget(f"blueque_task_{task_id}", "started"))
    assert abs(started - r.time()[0]) < 5  # Redis's clock, when it ran
    ahead_connection(r, runner)  # and the next one waits


def test_a_take_sent_ahead_records_the_time_it_runs_not_the_time_it_was_sent(client, r):
    command = client.protocol.take_ahead("q", "host~1234abcd_1", "token", 4242)
    sent = time.time()
    time.sleep(1.2)
    task_id = client.get_queue("q").enqueue("later")
    r.execute_command(*command)
    task = client.get_task(task_id)
    assert task.status == "started" and task.fields["pid"] == "4242"
    assert float(task.fields["started"]) >= sent + 1.0
    assert task.fields["updated"] == task.fields["started"]


def test_a_peek_that_times_out_with_a_take_behind_waits_again_without_it(client, r,
                                                                          monkeypatch):
    """The take ran as the peek timed out and found nothing: the peek is renewed alone, so
    an idle listener sends no take a minute; a task that comes then is left to the listener."""
    monkeypatch.setattr(waiter, "BLOCK_SECONDS", 1)
    peeks = waiter.PendingWaiter(client, "q")
    ahead = TakeAhead("q", "token", 4242, client.protocol.take_ahead(
        "q", "host~1234abcd_1", "token", 4242))
    pending = peeks.peeks[0]
    try:
        pending.arm(ahead)
        before = command_calls(r)
        assert select.select([pending], [], [], 3)[0] == [pending]
        pending.settle()
        assert (ahead.state, ahead.reply, pending.armed, pending.behind) == (
            ANSWERED, None, True, None)
        assert calls_delta(before, command_calls(r)).get("evalsha") == 1
        task_id = client.get_queue("q").enqueue("wakes it")
        assert select.select([pending], [], [], 3)[0] == [pending]
        pending.settle()
        assert not pending.armed
        assert status(r, task_id) == "pending"  # no second take ran
    finally:
        peeks.close()


def test_a_task_with_a_priority_withdraws_the_take_and_is_taken_first(client, r,
                                                                     start_runner):
    """Its peek is the other one: the take ahead is ended (CLIENT UNBLOCK) and runs then,
    taking the task with a priority; the next plain task is taken after it, each once."""
    runner = start_runner()
    complete_once(client, r, client.get_queue("q").enqueue("warm up"), runner)
    ahead_connection(r, runner)
    first = client.get_queue("q").enqueue(json.dumps({"sleep": 0.3}), priority=5)
    second = client.get_queue("q").enqueue("plain")
    complete_once(client, r, first, runner)
    complete_once(client, r, second, runner)
    order = [run["id"] for run in map(json.loads, r.lrange("core_test_runs", 0, -1))]
    assert order.index(first) < order.index(second)
    ahead_connection(r, runner)


def test_a_listener_stopping_puts_back_the_task_its_take_took_uncounted(client, r,
                                                                        start_runner, runs):
    runner = start_runner()
    complete_once(client, r, client.get_queue("q").enqueue("warm up"), runner)
    ahead_connection(r, runner)
    runner.signal(signal.SIGSTOP)
    try:
        task_id = client.get_queue("q").enqueue("never here")
        wait_for(lambda: status(r, task_id) == "started", 10)  # Redis ran the take
        runner.signal(signal.SIGTERM)
    finally:
        runner.signal(signal.SIGCONT)
    assert runner.stop() == 0, runner.output()
    task = client.get_task(task_id)
    assert (task.status, task.attempts) == ("pending", 0), task.fields
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]
    assert runs_of(r, task_id) == []
    time.sleep(0.3)
    assert status(r, task_id) == "pending"  # no take left behind in Redis


def test_a_spare_that_died_with_the_take_ahead_gives_its_task_back(client, r, start_runner):
    """The take started the task with the pid of a spare that was killed meanwhile: the task
    goes back, uncounted, and runs once in another process."""
    runner = start_runner()
    complete_once(client, r, client.get_queue("q").enqueue("warm up"), runner)
    ahead_connection(r, runner)
    with spare_killed_while_stopped(runner) as spare:
        task_id = client.get_queue("q").enqueue("after the spare")
        wait_for(lambda: r.hget(f"blueque_task_{task_id}", "pid") == str(spare), 10)
    complete_once(client, r, task_id, runner)
    assert runs_of(r, task_id)[0]["pid"] != spare
    assert "back to the queue" in runner.output()


def test_a_withdrawn_take_that_dropped_garbage_says_so(client, r, start_runner):
    """A take that dropped an id of the pending list (its key holds no task) logs it, as any
    take does, when the listener learns of it by withdrawing the take (its spare died)."""
    runner = start_runner()
    complete_once(client, r, client.get_queue("q").enqueue("warm up"), runner)
    ahead_connection(r, runner)
    with spare_killed_while_stopped(runner):
        r.set("blueque_task_junk", "x")
        r.lpush("blueque_pending_tasks_q", "junk")
        wait_for(lambda: not r.exists("blueque_pending_tasks_q"), 10)  # the take dropped it
    wait_for(lambda: "dropped id junk: its task key holds a string" in runner.output(), 10,
             runner.describe)
    complete_once(client, r, client.get_queue("q").enqueue("after the junk"), runner)


def test_a_script_redis_lost_falls_back_to_the_usual_take(client, r, start_runner):
    runner = start_runner()
    complete_once(client, r, client.get_queue("q").enqueue("warm up"), runner)
    ahead_connection(r, runner)
    r.script_flush()  # the take behind the peek will get NOSCRIPT
    complete_once(client, r, client.get_queue("q").enqueue("after the flush"), runner)


@pytest.mark.slow
def test_a_take_ahead_whose_reply_is_lost_is_found_and_its_task_put_back(
        client, r, redis_url, tmp_path, tag):
    """The replies to the connection holding the take are lost from the moment it is sent
    (a connection dropped by a proxy without a word): the peek goes unanswered past its
    timeout (here 1 s, and 2 s of grace), the listener counts it deaf, reconnects, and puts
    back the task the take started, uncounted; it runs once."""
    # the first peek: it carries the take
    proxy = ReplyLosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]), b"BLMOVE")
    runner = None
    try:
        proxy.arm()
        runner = Runner(proxy.url, "q", tmp_path, tag, block_seconds=1, answer_grace=2)
        wait_for(proxy.lost.is_set, 20, runner.describe)
        task_id = client.get_queue("q").enqueue("behind a deaf peek")
        complete_once(client, r, task_id, runner)
        assert "went unanswered" in runner.output()
    finally:
        if runner is not None:
            runner.popen.kill()
            runner.wait(10)
            runner.popen.stdout.close()
        proxy.close()


def test_a_user_refused_client_id_and_unblock_waits_without_a_take_behind(
        client, r, redis_url, tmp_path, tag):
    """An ACL that denies CLIENT ID and CLIENT UNBLOCK (a take behind a peek could not be
    withdrawn): the listener peeks alone, as before, and runs its tasks."""
    r.acl_setuser("no-unblock", enabled=True, passwords=["+secret"], keys=["~*"],
                  channels=["&*"], commands=["+@all", "-client|id", "-client|unblock"])
    url = redis_url.replace("redis://", "redis://no-unblock:secret@")
    runner = Runner(url, "q", tmp_path, tag)
    try:
        for name in ("first", "second"):
            complete_once(client, r, client.get_queue("q").enqueue(name), runner)
        time.sleep(0.3)
        peeks = [c for c in r.client_list() if c["cmd"] == "blmove"]
        assert len(peeks) == 2 and all(int(c["qbuf"]) == 0 for c in peeks)
        assert runner.alive(), runner.output()
    finally:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
        r.acl_deluser("no-unblock")
