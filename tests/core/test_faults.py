"""The engine under the faults production sees (issue 9): Redis refusing writes (OOM, READONLY),
stopped or restarted for longer than a lease, scripts flushed, clocks that disagree, listeners
unregistered by someone else, spare processes dying, slow signal receivers, foreign tasks
without a policy. Each test runs real runner processes against a real redis-server."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import redis

from devtools.servers import RedisServer, free_port
from django_blueque.core import Client, reap
from django_blueque.core.maintenance import Reaper
from django_blueque.core.timings import DEFAULT as TIMINGS
from tests.core.helpers import (
    SHORT_TIMINGS,
    Runner,
    wait_for,
)
from tests.core.reply_loss import ReplyLosingProxy

SHORT = json.dumps(SHORT_TIMINGS)
OUTAGE = SHORT_TIMINGS["lease"] + 5  # longer than a lease: no process can renew in time


def job(**todo):
    return json.dumps(todo)


def runs_of(r, task_id):
    return [run for run in map(json.loads, r.lrange("core_test_runs", 0, -1))
            if run["id"] == task_id]


def ended_once(client, r, task_ids, runner, timeout=90):
    """Every task completes, each run exactly once, and the listener is still there."""
    for task_id in task_ids:
        task = wait_for(lambda t=task_id: (lambda x: x if x.status in ("complete", "failed")
                                           else None)(client.get_task(t)), timeout,
                        runner.describe)
        assert (task.status, task.attempts) == ("complete", 1), (task.fields, runner.output())
        assert len(runs_of(r, task_id)) == 1, runner.output()
    assert runner.alive(), runner.output()


# -- Redis refusing writes for longer than a lease ----------------------------------------------

def refuse_writes(r, kind):
    """Make the server refuse writes as production does: OOM under noeviction, or READONLY
    (it became a replica, here of a master that does not exist). Returns the undo."""
    if kind == "oom":
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", 1)
        return lambda: r.config_set("maxmemory", 0)
    r.execute_command("REPLICAOF", "127.0.0.1", free_port())
    return lambda: r.execute_command("REPLICAOF", "NO", "ONE")


@pytest.mark.slow
@pytest.mark.parametrize("kind, production", [("oom", True), ("readonly", False)])
def test_writes_refused_longer_than_a_lease_lose_nothing(client, r, start_runner, kind,
                                                          production):
    """Before: the lease thread died on OOM/READONLY while the task ran on, its lease lapsed,
    the reaper failed it ("listener lost") and the listener itself exited. One case at the
    production timings (a 15 s lease), one at the short ones."""
    outage = TIMINGS.lease + 5 if production else OUTAGE
    task_id = client.get_queue("q").enqueue(job(sleep=outage + 4))
    # the reaper runs in the listener
    runner = start_runner(duties=0.5, **({} if production else {"timings": SHORT}))
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    undo = refuse_writes(r, kind)
    try:
        time.sleep(outage)
        assert client.get_task(task_id).status == "started"
    finally:
        undo()
    ended_once(client, r, [task_id], runner)
    assert "Redis answers again" in runner.output()


def test_an_end_refused_is_recorded_once_redis_takes_writes_again(client, r, start_runner):
    """The task process records its end; when Redis refuses the write (READONLY: under OOM,
    finish.lua's first write frees memory and the script goes through), it tries again until
    Redis takes writes again."""
    task_id = client.get_queue("q").enqueue(job(sleep=1.5))
    runner = start_runner()
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    undo = refuse_writes(r, "readonly")
    try:
        time.sleep(4)  # the task ended meanwhile: the listener was refused, then the process
        assert client.get_task(task_id).status == "started"
    finally:
        undo()
    ended_once(client, r, [task_id], runner, timeout=30)
    assert "recording its end: Redis" in runner.output()


def test_a_listener_stopped_at_a_tasks_end_leaves_the_end_to_the_task_process(client, r,
                                                                              start_runner):
    """A listener SIGSTOPped when its task ends: the process records its end itself, and the
    listener, resumed, goes on with the next task."""
    first, second = client.get_queue("q").enqueue_many([job(wait_for="gate"), "next"])
    runner = start_runner()
    wait_for(lambda: runs_of(r, first), 20, runner.describe)
    runner.signal(signal.SIGSTOP)
    try:
        r.set("gate", 1)
        wait_for(lambda: client.get_task(first).status == "complete", 15, runner.describe)
    finally:
        runner.signal(signal.SIGCONT)
    ended_once(client, r, [first, second], runner)


def test_scripts_flushed_are_loaded_again(client, r, start_runner):
    """NOSCRIPT after SCRIPT FLUSH (or a failover to a server that never saw them)."""
    runner = start_runner()
    first = client.get_queue("q").enqueue(job(sleep=1))
    wait_for(lambda: runs_of(r, first), 20, runner.describe)
    r.script_flush()
    second = client.get_queue("q").enqueue("after the flush")
    ended_once(client, r, [first, second], runner)


# -- Redis away for longer than a lease -------------------------------------------------------

@pytest.mark.slow
def test_redis_stopped_longer_than_a_lease_loses_and_repeats_nothing(redis_server, client, r,
                                                                    start_runner):
    """SIGSTOP of redis-server past every lease: on SIGCONT the reaper must not fail the
    tasks whose processes could not renew (before: every started task was failed or retried,
    and the processes that lost the race killed themselves)."""
    tasks = client.get_queue("q").enqueue_many([job(sleep=OUTAGE + 6) for _ in range(2)])
    runner = start_runner(concurrency=2, duties=0.5, timings=SHORT)
    for task_id in tasks:
        wait_for(lambda t=task_id: runs_of(r, t), 20, runner.describe)
    redis_server.process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(OUTAGE)
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
    ended_once(client, r, tasks, runner)


@pytest.fixture
def persistent(tmp_path, tag):
    """(server, client, r, start): a Redis of its own with an AOF, which a test may stop and
    start again, and start(**options) for a runner on it (killed at the end)."""
    server = RedisServer(persistent=True).start()
    client = Client(server.url)
    r = redis.Redis.from_url(server.url, decode_responses=True)
    runners = []

    def start(**options):
        runners.append(Runner(server.url, "q", tmp_path, tag, **options))
        return runners[-1]

    yield server, client, r, start
    for runner in runners:
        if runner.alive():
            runner.popen.kill()
    r.close()
    client.redis.close()
    server.close()


@pytest.mark.slow
def test_redis_restarted_after_a_lease_loses_and_repeats_nothing(persistent):
    """A restart with persistence restores lease keys with their absolute expiry: all lapsed.
    The reaper waits while Redis's uptime is short; the processes take their leases back."""
    server, client, r, start = persistent
    task_id = client.get_queue("q").enqueue(job(sleep=OUTAGE + 6))
    runner = start(duties=0.5, timings=SHORT)
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    server.stop()
    time.sleep(OUTAGE)
    server.start()
    ended_once(client, r, [task_id], runner)


def test_a_task_reporting_progress_rides_out_a_redis_restart(persistent):
    """Progress is best-effort (issue 38): a task reporting every 0.2 s while Redis restarts
    for a second completes, its last report delivered, the outage logged once (before: the
    report raised ConnectionError into the task, which failed)."""
    server, client, r, start = persistent
    task_id = client.get_queue("q").enqueue(job(progress_every=[40, 0.2]))
    runner = start()
    wait_for(lambda: client.get_task(task_id).progress, 20, runner.describe)
    server.stop()
    time.sleep(1)
    server.start()
    ended_once(client, r, [task_id], runner)
    task = client.get_task(task_id)
    assert (task.progress, task.progress_message) == (100.0, "40 of 40"), task.fields
    assert runner.output().count("progress report: Redis unavailable") == 1, runner.output()


def test_an_id_pushed_two_seconds_before_its_hash_runs_once_with_it(client, r, start_runner):
    """A foreign producer that pushes the id, then writes the hash 2 s later without a
    transaction (issue 38): the task runs once, with its parameters. Before, the listener
    took the id without its hash and the hash written after it stayed pending in no list."""
    runner = start_runner(duties=0.5)
    r.lpush("blueque_pending_tasks_q", "foreign")
    time.sleep(2)
    stamp = repr(time.time())
    r.hset("blueque_task_foreign", mapping={
        "status": "pending", "queue": "q", "parameters": job(**{"return": "late"}),
        "created": stamp, "updated": stamp})
    ended_once(client, r, ["foreign"], runner, timeout=30)
    assert client.get_task("foreign").result == "late"


def test_a_reaper_that_lost_redis_watches_afresh(client, r):
    """The rule itself: a lapsed lease is acted on only after being seen lapsed for the
    confirmation period in passes that all reached Redis. Here a dead listener's heartbeat:
    the pass before a gap does not count."""
    client.protocol.heartbeat("gone~00000000_1", ["q"], ttl=-1)
    reaper = Reaper(client.protocol, confirm=1.0)
    assert reaper.reap() == [] and reaper.undecided
    reaper._last_pass -= 60  # as if Redis had been away for a minute since
    time.sleep(1.1)
    assert reaper.reap() == []  # seen afresh: not yet
    time.sleep(1.1)
    assert [a.what for a in reaper.reap()] == ["released listener"]


def test_a_reaper_whose_write_failed_watches_afresh(client, r):
    client.protocol.heartbeat("gone~00000000_1", ["q"], ttl=-1)
    reaper = Reaper(client.protocol, confirm=1.0)
    reaper.reap()
    time.sleep(1.1)
    undo = refuse_writes(r, "oom")
    try:
        with pytest.raises(redis.RedisError):
            reaper.reap()
    finally:
        undo()
    assert not reaper.undecided
    assert reaper.reap() == []
    time.sleep(1.1)
    assert [a.what for a in reaper.reap()] == ["released listener"]


# -- clocks, ids, registrations ---------------------------------------------------------------

def test_a_listener_whose_clock_is_behind_is_not_released(client, r, redis_url, tmp_path,
                                                          tag):
    """Before: its heartbeat was dated by its own clock, 30 s behind the reaper's, so every
    reaper pass released it. Now every lease is on Redis's clock."""
    (tmp_path / "sitecustomize.py").write_text(
        "import time\n_real = time.time\ntime.time = lambda: _real() - 30\n")
    runner = Runner(redis_url, "q", tmp_path, tag, pythonpath=[tmp_path])
    wait_for(lambda: runner.listener_id in r.smembers("blueque_listeners_q"), 20,
             runner.describe)
    skew = subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                          text=True).stdout
    assert float(skew) < time.time() - 25  # the skew is real in that process
    assert reap(client, confirm=0) == []
    assert runner.listener_id in r.smembers("blueque_listeners_q")
    task_id = client.get_queue("q").enqueue("still taken")
    ended_once(client, r, [task_id], runner)


def test_a_heartbeat_registers_again_a_listener_someone_removed(client, r, start_runner):
    """blueque 1.0's claim_orphan SREMs a listener it judges dead; ours must come back at its
    next beat (a minute apart while idle), which comes at once when it takes a task."""
    runner = start_runner()
    wait_for(lambda: runner.listener_id in r.smembers("blueque_listeners_q"), 20,
             runner.describe)
    r.srem("blueque_listeners_q", runner.listener_id)
    r.zincrby("blueque_queues", -1, "q")
    task_id = client.get_queue("q").enqueue("taken by a listener someone removed")
    wait_for(lambda: runner.listener_id in r.smembers("blueque_listeners_q"), 10,
             runner.describe)
    assert r.zscore("blueque_queues", "q") == 1.0
    ended_once(client, r, [task_id], runner)


# -- the listener's own processes -------------------------------------------------------------

def test_a_slow_receiver_of_the_end_is_not_killed(client, r, start_runner):
    """on_task_end (a signal receiver) runs after the end is recorded; before, the lease
    thread found the lease gone and SIGKILLed the process inside the receiver."""
    runner = start_runner(slow_end=True)
    task_id = client.get_queue("q").enqueue("quick")
    wait_for(lambda: r.lrange("ended", 0, -1), 30, runner.describe)
    assert r.lrange("ended", 0, -1) == [f"{task_id} complete"]
    assert client.get_task(task_id).status == "complete"


def test_a_task_process_does_not_catch_sighup(client, r, start_runner):
    """It inherited the listener's SIGHUP handler (which wrote to the listener's wake-up pipe,
    a descriptor number the task may reuse): it must have the default action."""
    runner = start_runner()
    task_id = client.get_queue("q").enqueue(job(sleep=30))
    pid = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)[0]["pid"]
    with open(f"/proc/{pid}/status") as status:
        caught = int(next(line for line in status if line.startswith("SigCgt:")).split()[1], 16)
    assert not caught & (1 << (signal.SIGHUP - 1))


def test_a_foreign_task_gets_its_queues_policy(client, r, start_runner):
    """A task written by another producer carries no timeout or retries: the queue's policy
    applies (before: a hung foreign task held its slot for ever)."""
    task_id = "foreign-1"
    r.hset(f"blueque_task_{task_id}", mapping={"status": "pending", "queue": "q",
                                                "parameters": job(sleep=60)})
    r.lpush("blueque_pending_tasks_q", task_id)
    runner = start_runner(policy=json.dumps({"timeout": 1, "retries": 1, "backoff": 0}),
                          kill_grace=1)
    task = wait_for(lambda: (lambda t: t if t.status == "failed" else None)(
        client.get_task(task_id)), 30, runner.describe)
    assert (task.error_type, task.attempts) == ("Timeout", 2)
    assert len(runs_of(r, task_id)) == 2



# -- a take whose reply is lost -------------------------------------------------------------------

def test_an_end_whose_reply_was_lost_is_answered_again_not_refused_as_stale(client, r,
                                                                          redis_url, tmp_path,
                                                                          tag):
    """A task process's finish runs in Redis but its reply never comes back (Redis stalled,
    a partition on the way back): the process tries again on a new connection, and Redis
    answers that try with the end it recorded, not 'stale'. Before: the process logged that
    its task "was recovered elsewhere" and its on_task_end (the Django app's signals) was
    told 'stale', so task_succeeded was never sent for a task recorded complete."""
    finish_sha = client.protocol.access.script("finish").sha.encode()
    proxy = ReplyLosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]), finish_sha)
    runner = Runner(proxy.url, "q", tmp_path, tag, timings=SHORT, note_ends=True)
    try:
        first = client.get_queue("q").enqueue(job())  # loads the script: no NOSCRIPT below
        wait_for(lambda: r.lpop("ended") == f"{first} complete", 20, runner.describe)
        task_id = client.get_queue("q").enqueue(job(sleep=1))
        wait_for(lambda: r.hget(f"blueque_task_{task_id}", "status") == "started", 20,
                 runner.describe)
        proxy.arm()
        wait_for(proxy.lost.is_set, 10, runner.describe)
        wait_for(lambda: r.lrange("ended", 0, -1), 20, runner.describe)
        assert r.lrange("ended", 0, -1) == [f"{task_id} complete"], runner.describe()
        task = client.get_task(task_id)
        assert (task.status, task.attempts) == ("complete", 1)
        assert "was recovered elsewhere" not in runner.output()
    finally:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
        proxy.close()


def test_a_task_reserved_by_a_call_whose_reply_was_lost_is_not_stranded(client, r, redis_url,
                                                                        tmp_path, tag):
    """Redis runs a listener's take (reserve and start) but its reply never comes back (Redis
    stopped after reading the call, as the CI soak's SIGSTOP did on 2026-11-25, leaving one
    task 'reserved' to the end): the listener gives up on the call after redis-py's socket
    timeout (5 s). The task is in the reserved list of a listener that never handed it to its
    process and that, alive, no reaper releases before the task's lease lapses (and then as a
    failed run). The listener looks for the lost call's token and puts the task back, its
    attempt uncounted; it runs once. (A listener of two queues, which sends no take ahead of
    its task.)"""
    take_sha = client.protocol.access.script("take").sha.encode()
    proxy = ReplyLosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]), take_sha)
    runner = Runner(proxy.url, "q,other", tmp_path, tag, concurrency=1)
    try:
        # it took from both queues (the script is loaded) and waits on their four peeks: no
        # take of an empty queue is in flight when the proxy starts losing replies
        wait_for(lambda: sum("blmove" in c.get("cmd", "") for c in r.client_list()) == 4, 20,
                 runner.describe)
        proxy.arm()
        task_id = client.get_queue("q").enqueue(job())
        wait_for(proxy.lost.is_set, 10, runner.describe)
        wait_for(lambda: r.hget(f"blueque_task_{task_id}", "status") == "started", 10,
                 runner.describe)  # Redis ran the call
        ended_once(client, r, [task_id], runner, timeout=40)
        assert "reply was lost, went back to its queue" in runner.output()
        assert client.get_task(task_id).attempts == 1
    finally:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
        proxy.close()
