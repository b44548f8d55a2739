"""The forking runner as a real process (runner_script.py), its tasks in real forked processes
(callbacks.py, told what to do by their parameters), stopped and killed with real signals."""

import json
import os
import re
import select
import signal
import socket
import time

import pytest
import redis

from devtools.servers import RedisServer
from django_blueque.core import Client, reap, waiter
from django_blueque.core import keys as k
from django_blueque.core.timings import DEFAULT as TIMINGS
from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import (
    Runner,
    calls_delta,
    command_calls,
    pid_alive,
    requests_received,
    wait_for,
)


def job(**todo):
    return json.dumps(todo)


def finished(client, task_id, runner, timeout=20):
    """Wait until the task is complete or failed; returns it."""
    return wait_for(lambda: (lambda t: t if t.status in ("complete", "failed") else None)(
        client.get_task(task_id)), timeout, runner.describe)


def started(client, task_id, runner, timeout=20):
    """Wait until the task's code runs (status started, and the callback recorded its run:
    the listener marks the task started just before its process begins the code); returns it."""
    def running():
        task = client.get_task(task_id)
        runs = client.redis.lrange(RUNS_KEY, 0, -1)
        return task if task.status == "started" and any(task_id in run for run in runs) else None
    return wait_for(running, timeout, runner.describe)


def registered(r, runner, timeout=20):
    wait_for(lambda: runner.listener_id in r.smembers("blueque_listeners_q"), timeout,
             runner.describe)


# -- listening ----------------------------------------------------------------------------------

@pytest.fixture
def alone(tmp_path, tag):
    """A Redis of its own with a runner on it, and that Redis's client: what it reads is this
    runner's alone (a process an earlier test left on the session's Redis is not counted)."""
    server = RedisServer().start()
    runner = Runner(server.url, "q", tmp_path, tag)
    engine = Client(server.url)
    try:
        yield engine, engine.redis, runner
    finally:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
        engine.redis.close()
        server.close()


def test_idle_listener_sends_nothing_between_its_beats_a_minute_apart(alone):
    """blueque 1.0 polls every second; ours blocks, and beats once a minute on a long lease
    while idle (TIMINGS.idle_heartbeat): a hundred idle listeners cost Redis two commands a
    second, not a hundred and sixty."""
    client, r, runner = alone
    registered(r, runner)
    time.sleep(1.0)  # settled into its blocking wait
    lease = r.zscore("blueque_listener_leases_q", runner.listener_id)
    assert lease > time.time() + TIMINGS.idle_heartbeat - 10
    before, began = requests_received(r), time.monotonic()
    time.sleep(6.5)
    sent, elapsed = requests_received(r) - before - 1, time.monotonic() - began  # - our INFO

    assert sent == 0, f"{sent} requests in {elapsed:.1f} s"
    # it wakes up for a task at once, and beats at the busy pace from then on (the first beat
    # once the task is handed over: test_a_listener_that_takes_a_task_after_idleness_...)
    task_id = client.get_queue("q").enqueue(json.dumps({"sleep": TIMINGS.beat_every * 2}))
    wait_for(lambda: client.get_task(task_id).status == "started", 10, runner.describe)
    wait_for(lambda: r.hget(f"blueque_listener_{runner.listener_id}", "lease")
             == str(TIMINGS.heartbeat), TIMINGS.beat_every + 4, runner.describe)
    lease = r.zscore("blueque_listener_leases_q", runner.listener_id)
    assert lease < time.time() + TIMINGS.heartbeat
    assert finished(client, task_id, runner, timeout=15).status == "complete"


def test_a_listener_that_takes_a_task_after_idleness_reads_as_just_beaten(alone):
    """The take cuts an idle listener's heartbeat expiry from the idle lease to the busy one
    (reserve.lib). The admin pages and the metrics read the last beat as that expiry less the
    lease the info hash names, so the listener beats at once to say it is busy: it must not read
    as having beaten ``idle_heartbeat - heartbeat`` (165 s) ago, which would set off an alert on
    ``blueque_listener_heartbeat_age_seconds``."""
    from django_blueque.rows import ListenerRow

    client, r, runner = alone
    registered(r, runner)
    time.sleep(1.0)  # idle, on its long lease
    assert r.hget(f"blueque_listener_{runner.listener_id}", "lease") == str(TIMINGS.idle_heartbeat)

    def age():
        expires = r.zscore("blueque_listener_leases_q", runner.listener_id)
        info = r.hgetall(f"blueque_listener_{runner.listener_id}")
        return ListenerRow(runner.listener_id, "q", expires, time.time(), info).heartbeat_age

    task_id = client.get_queue("q").enqueue(job(sleep=3))
    started(client, task_id, runner)
    wait_for(lambda: age() < 2, 2, lambda: f"heartbeat age {age():.1f} s\n{runner.describe()}")
    ages = []
    while client.get_task(task_id).status == "started":
        ages.append(age())
        time.sleep(0.1)
    assert ages and max(ages) < TIMINGS.beat_every + 1, ages
    assert finished(client, task_id, runner).status == "complete"


def test_a_peek_that_times_out_waits_again_without_looking_at_the_queue(client, r,
                                                                        monkeypatch):
    """Nothing came for the block's length: the peek is renewed at once (one BLMOVE), with
    no take of an empty queue; an element that comes leaves it unarmed for the listener."""
    peeks = waiter.PendingWaiter(client, "q", block=1)
    try:
        peeks.arm()
        before = command_calls(r)
        for peek in peeks.peeks:
            assert select.select([peek], [], [], 3)[0] == [peek]  # timed out: a nil reply
            peek.settle()
            assert peek.armed
        # the two that timed out (Redis counts a command once it returns: not the renewed two)
        assert calls_delta(before, command_calls(r)) == {"blmove": 2}
        client.get_queue("q").enqueue("wakes it")
        pending = peeks.peeks[0]
        assert select.select([pending], [], [], 3)[0] == [pending]
        pending.settle()
        assert not peeks.armed
    finally:
        peeks.close()


def test_runner_registers_under_a_unique_id_of_blueque1s_shape(r, start_runner):
    """``<host>~<random>_<pid>``: blueque 1.0 parses it (rsplit on the last '_', int pid),
    and two starts with one hostname and one pid (containers) never share an id."""
    runner = start_runner(concurrency=3)
    registered(r, runner)
    host, pid = runner.listener_id.rsplit("_", 1)
    assert int(pid) == runner.pid
    assert re.fullmatch(re.escape(socket.getfqdn()) + r"~[0-9a-f]{8}", host)
    ids = {k.unique_listener_id("localhost", 7) for _ in range(1000)}
    assert len(ids) == 1000
    assert r.zscore("blueque_queues", "q") == 1.0
    info = r.hgetall(f"blueque_listener_{runner.listener_id}")
    assert (info["pid"], info["concurrency"], info["queues"]) == (str(runner.pid), "3", "q")


def test_tasks_run_in_order_in_forked_processes_with_their_results(client, r, start_runner,
                                                                     runs):
    queue = client.get_queue("q")
    plain, none, mapping = queue.enqueue_many(["plain", job(**{"return": None}),
                                               job(**{"return": {"k": [1, 2]}})])
    runner = start_runner()
    for task_id in (plain, none, mapping):
        finished(client, task_id, runner)

    assert [run["id"] for run in runs()] == [plain, none, mapping]
    assert runner.pid not in {run["pid"] for run in runs()}
    tasks = {t.id: t for t in client.get_tasks([plain, none, mapping])}
    assert {t.status for t in tasks.values()} == {"complete"}
    assert tasks[plain].result == "done:plain"
    assert tasks[none].result == "null"  # blueque 1.0 failed these with a Redis type error
    assert json.loads(tasks[mapping].result) == {"k": [1, 2]}
    assert r.lrange("blueque_complete_tasks_q", 0, -1) == [mapping, none, plain]
    assert not r.exists("blueque_started_tasks_q", "blueque_pending_tasks_q",
                        f"blueque_reserved_tasks_q_{runner.listener_id}")


def test_each_task_process_draws_random_numbers_of_its_own(client, start_runner):
    """Forked from one fork server, task processes would all draw its sequence of random
    numbers, but for the reseed after each fork (the random module's own at-fork hook)."""
    ids = client.get_queue("q").enqueue_many([job(random=True) for _ in range(3)])
    runner = start_runner()
    for task_id in ids:
        finished(client, task_id, runner)
    results = [task.result for task in client.get_tasks(ids)]
    assert len(set(results)) == 3, results


def test_task_exception_is_recorded_with_type_and_traceback(client, start_runner):
    task_id = client.get_queue("q").enqueue(job(**{"raise": "bad input"}))
    task = finished(client, task_id, start_runner())
    assert (task.status, task.error, task.error_type) == ("failed", "bad input",
                                                          "builtins.ValueError")
    assert task.traceback.startswith("Traceback (most recent call last)")
    assert "callbacks.py" in task.traceback and "ValueError: bad input" in task.traceback


def test_result_that_is_not_json_fails_the_task_readably(client, start_runner):
    task_id = client.get_queue("q").enqueue(job(return_object=True))
    task = finished(client, task_id, start_runner())
    assert (task.status, task.error_type) == ("failed", "builtins.TypeError")
    assert "object" in task.error and "JSON" in task.error


def test_running_task_is_visible_with_pid_node_and_progress(client, r, start_runner, runs):
    task_id = client.get_queue("q").enqueue(job(progress=[40, "reading"], wait_for="gate"))
    runner = start_runner()
    wait_for(lambda: client.get_task(task_id).progress == 40.0, 20, runner.describe)

    task = client.get_task(task_id)
    pid = runs()[0]["pid"]
    assert (task.status, task.progress_message, task.node) == ("started", "reading",
                                                              runner.listener_id)
    assert r.hget(f"blueque_task_{task_id}", "pid") == str(pid) and pid != runner.pid
    assert r.smembers("blueque_started_tasks_q") == {f"{runner.listener_id} {pid} {task_id}"}
    assert r.lrange(f"blueque_reserved_tasks_q_{runner.listener_id}", 0, -1) == [task_id]
    r.set("gate", 1)
    assert finished(client, task_id, runner).status == "complete"


def test_concurrency_is_respected(client, r, start_runner):
    ids = client.get_queue("q").enqueue_many(
        [job(concurrency="running", sleep=0.6, n=n) for n in range(6)])
    runner = start_runner(concurrency=2)
    for task_id in ids:
        assert finished(client, task_id, runner, timeout=30).status == "complete"
    seen = [int(n) for n in r.lrange("running:seen", 0, -1)]
    assert len(seen) == 6 and max(seen) == 2  # two at once, never three


def test_a_large_result_and_traceback_are_recorded_whole(client, start_runner):
    value = "x" * 100_000
    runner = start_runner()
    big = client.get_queue("q").enqueue(job(**{"return": value}))
    failing = client.get_queue("q").enqueue(job(**{"raise": value}))
    assert finished(client, big, runner).result == value
    task = finished(client, failing, runner)
    assert (task.status, task.error) == ("failed", value)
    assert value in task.traceback


def test_a_task_that_collects_garbage_copies_little_of_its_listeners_memory(client, r,
                                                                           start_runner):
    """A full garbage collection in a task process touches every object it can see, and so
    copies each page of the listener's heap that holds one (copy-on-write): ~10 MiB per task
    process for a bare listener, more under Django, where it also cost ~20 ms. The listener
    freezes what it holds before it forks (gc.freeze), out of its children's collections.
    Before: 9,700 KiB copied by one gc.collect(); after: ~200."""
    runner = start_runner()
    task_id = client.get_queue("q").enqueue(job(collect_garbage="copied"))
    assert finished(client, task_id, runner).status == "complete"
    copied_kib = int(r.lpop("copied"))
    assert copied_kib < 2048, f"a full collection copied {copied_kib} KiB"


def test_garbage_in_the_pending_list_is_dropped(client, r, start_runner):
    r.lpush("blueque_pending_tasks_q", "no-such-task")
    task_id = client.get_queue("q").enqueue("real")
    runner = start_runner()
    assert finished(client, task_id, runner).status == "complete"
    assert runner.alive()
    assert not r.exists("blueque_pending_tasks_q")


# -- task processes that die ---------------------------------------------------------------------

def test_sigkilled_task_process_fails_its_task(client, r, start_runner, runs):
    queue = client.get_queue("q")
    task_id = queue.enqueue(job(wait_for="never"))
    runner = start_runner()
    pid = started(client, task_id, runner).pid
    os.kill(pid, signal.SIGKILL)

    task = finished(client, task_id, runner)
    assert task.status == "failed"
    assert task.error.startswith("process killed by signal 9")
    assert task.error_type == "ProcessDied"
    assert not r.exists("blueque_started_tasks_q", f"blueque_reserved_tasks_q_{runner.listener_id}")
    # the listener survived and carries on
    assert finished(client, queue.enqueue("next"), runner).status == "complete"


def test_sigkilled_task_process_is_retried_when_allowed(client, start_runner, runs):
    task_id = client.get_queue("q").enqueue(job(kill_on_attempt=1), retries=1)
    task = finished(client, task_id, start_runner())
    assert (task.status, task.attempts) == ("complete", 2)
    assert task.last_error.startswith("process killed by signal 9")
    first, second = runs()
    assert (first["attempt"], second["attempt"]) == (1, 2) and first["pid"] != second["pid"]


def test_retries_with_backoff_show_attempts_and_eta(client, start_runner, runs):
    task_id = client.get_queue("q").enqueue(job(**{"raise": "flaky"}), retries=2, backoff=0.4)
    runner = start_runner(duties=0.1)  # the listener also runs the scheduler
    waiting = wait_for(lambda: (lambda t: t if t.status == "scheduled" else None)(
        client.get_task(task_id)), 20, runner.describe)
    assert waiting.attempts == 1 and waiting.last_error == "flaky"
    # eta on Redis's clock, updated on the caller's: the same machine here
    assert waiting.eta == pytest.approx(waiting.updated + 0.4, abs=0.05)

    task = finished(client, task_id, runner)
    assert (task.status, task.attempts, task.error) == ("failed", 3, "flaky")
    assert [run["attempt"] for run in runs()] == [1, 2, 3]


def test_timeout_kills_the_process_and_fails_the_task(client, r, start_runner, runs):
    task_id = client.get_queue("q").enqueue(job(sleep=120, mark="finished"), timeout=1)
    runner = start_runner()
    task = finished(client, task_id, runner)
    assert (task.status, task.error_type) == ("failed", "Timeout")
    assert task.error.startswith("timed out")
    assert not pid_alive(task.pid)
    assert not r.exists("finished")


def test_timeout_escalates_to_sigkill_when_sigterm_is_ignored(client, r, start_runner, runs):
    task_id = client.get_queue("q").enqueue(job(ignore_sigterm=True, sleep=120, mark="finished"),
                                            timeout=0.5)
    runner = start_runner(kill_grace=1)
    task = finished(client, task_id, runner)
    assert task.error.startswith("timed out")
    assert not pid_alive(task.pid)
    assert not r.exists("finished")
    assert "killing" in runner.output()


def test_lapsed_lease_is_taken_again_unless_the_task_was_recovered(client, r, start_runner,
                                                                   runs):
    """Two task processes could not renew their leases for a while (simulated by deleting the
    lease keys, as a long Redis outage would). One task was recovered meanwhile (as the reaper
    does): its process stops itself at its next renewal, so it never runs beside its retry.
    The other was not: it takes its lease again and carries on."""
    queue = client.get_queue("q")
    kept, recovered = queue.enqueue_many([job(wait_for="gate", mark="finished", n=n)
                                          for n in range(2)])
    runner = start_runner(concurrency=2)
    for task_id in (kept, recovered):
        started(client, task_id, runner)
    r.delete(f"blueque_lease_{kept}", f"blueque_lease_{recovered}")
    lost = client.get_task(recovered)
    assert client.protocol.finish(
        "q", recovered, listener_id=lost.node, pid=lost.pid, token=lost.lease, outcome="failed",
        value="listener lost", error_type="ListenerLost", lapsed_only=True) == "failed"

    wait_for(lambda: r.exists(f"blueque_lease_{kept}") and not pid_alive(lost.pid), 20,
             runner.describe)
    r.set("gate", 1)
    task = finished(client, kept, runner)
    assert (task.status, task.attempts) == ("complete", 1)
    assert r.lrange("finished", 0, -1) == ["done"]  # only the kept task got to the end
    assert client.get_task(recovered).error == "listener lost"
    assert [run["id"] for run in runs()].count(kept) == 1
    # its process said what became of its task, as Redis tells it
    assert (f"task {recovered}: lease lost: the task was ended elsewhere: failed (ListenerLost)"
            "; stopping this process") in runner.output()


# -- cancellation -----------------------------------------------------------------------------

def test_cancel_a_running_task_stops_its_process(client, r, start_runner, runs):
    queue = client.get_queue("q")
    task_id = queue.enqueue(job(sleep=120, mark="finished"))
    runner = start_runner()
    started(client, task_id, runner)
    asked = time.monotonic()
    assert client.cancel(task_id) == "requested"

    task = finished(client, task_id, runner, timeout=20)
    assert time.monotonic() - asked < 20
    assert (task.status, task.error, task.error_type) == (
        "failed", "cancelled", "django_blueque.Cancelled")
    wait_for(lambda: not pid_alive(task.pid), 10, "the task's process still runs")
    assert not r.exists("finished")
    assert finished(client, queue.enqueue("next"), runner).status == "complete"


def test_a_running_task_can_ask_whether_to_stop(client, r, start_runner, runs):
    """A long task polls should_stop() and ends on its own terms (it ignores SIGTERM here)."""
    task_id = client.get_queue("q").enqueue(job(ignore_sigterm=True, until_stopped="stopped"))
    runner = start_runner(kill_grace=60)
    started(client, task_id, runner)
    assert client.cancel(task_id) == "requested"
    wait_for(lambda: r.lrange("stopped", 0, -1) == ["stopped"], 20, runner.describe)
    task = finished(client, task_id, runner)
    assert "signal" not in (task.error or "")
    wait_for(lambda: not pid_alive(task.pid), 10, "the task's process still runs")


@pytest.mark.parametrize("stop", ["cancel", "timeout"])
def test_a_task_that_watches_should_stop_is_told_not_interrupted(client, r, start_runner, stop):
    """Code that polls should_stop() (and does not ignore SIGTERM) ends at a point of its
    choosing when it is cancelled or times out: its listener's SIGTERM makes should_stop()
    true instead of raising StopRequested into it, and the end is recorded as the stop's.
    Before: the listener's SIGTERM came before the flag, and StopRequested cut it short."""
    task_id = client.get_queue("q").enqueue(job(until_stopped="stopped"),
                                            timeout=1 if stop == "timeout" else None)
    runner = start_runner(kill_grace=60)
    started(client, task_id, runner)
    if stop == "cancel":
        assert client.cancel(task_id) == "requested"
    wait_for(lambda: r.lrange("stopped", 0, -1) == ["stopped"], 20, runner.describe)
    task = finished(client, task_id, runner)
    assert (task.status, task.error) == (
        "failed", "cancelled" if stop == "cancel" else "timed out after 1 s"), runner.describe()


def test_a_task_that_does_not_watch_is_interrupted_and_then_told(client, r, start_runner):
    """Code that never looks at should_stop() gets StopRequested at once, and should_stop() is
    true where it handles it."""
    task_id = client.get_queue("q").enqueue(job(sleep_noting_stop="noted"))
    runner = start_runner()
    started(client, task_id, runner)
    assert client.cancel(task_id) == "requested"
    task = finished(client, task_id, runner)
    assert (task.status, task.error) == ("failed", "cancelled")
    assert r.lrange("noted", 0, -1) == ["should_stop=True"]


def test_cancel_pending_and_scheduled_tasks_they_never_run(client, r, start_runner, runs):
    queue = client.get_queue("q")
    busy = queue.enqueue(job(wait_for="gate"))
    runner = start_runner(duties=0.1)
    started(client, busy, runner)
    pending = queue.enqueue("pending")
    scheduled = queue.schedule("scheduled", time.time() + 0.5)
    assert client.cancel(pending) == "cancelled"
    assert client.cancel(scheduled) == "cancelled"
    marker = queue.schedule("marker", time.time() + 0.6)
    r.set("gate", 1)
    finished(client, marker, runner)

    assert [run["id"] for run in runs()] == [busy, marker]
    for task_id in (pending, scheduled):
        task = client.get_task(task_id)
        assert (task.status, task.error) == ("failed", "cancelled")


# -- stopping -------------------------------------------------------------------------------------

def test_sigterm_waits_for_the_running_task_then_unregisters(client, r, start_runner, runs):
    queue = client.get_queue("q")
    running = queue.enqueue(job(wait_for="gate", mark="finished"))
    runner = start_runner()
    started(client, running, runner)
    runner.signal(signal.SIGTERM)
    later = queue.enqueue("later")
    time.sleep(1.0)
    assert runner.alive()  # waiting for its task
    assert client.get_task(later).status == "pending"  # but taking no new one

    r.set("gate", 1)
    assert runner.wait(20) == 0, runner.describe()
    assert client.get_task(running).status == "complete"
    assert r.lrange("finished", 0, -1) == ["done"]
    assert client.get_task(later).status == "pending"
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [later]
    assert r.smembers("blueque_listeners_q") == set()
    assert r.zscore("blueque_queues", "q") == 0.0
    assert not r.exists("blueque_listener_leases_q", f"blueque_listener_{runner.listener_id}",
                        f"blueque_reserved_tasks_q_{runner.listener_id}")
    assert [run["id"] for run in runs()] == [running]


def test_second_sigterm_stops_at_once_leaving_the_task_to_its_process(client, r, start_runner,
                                                                      runs):
    queue = client.get_queue("q")
    running = queue.enqueue(job(wait_for="gate", mark="finished"))
    runner = start_runner()
    started(client, running, runner)
    # a task it reserved but had not started yet (the runner forks right after reserving, so
    # the test takes it under the runner's id while the runner is at full concurrency)
    unstarted = queue.enqueue("unstarted")
    assert client.protocol.reserve("q", runner.listener_id, "its-token")[0] == unstarted

    runner.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert runner.alive()
    runner.signal(signal.SIGTERM)
    assert runner.wait(10) == 3, runner.describe()  # 3: not a clean stop, a task still runs

    assert pid_alive(client.get_task(running).pid)
    assert client.get_task(running).status == "started"
    task = client.get_task(unstarted)
    assert (task.status, task.node) == ("pending", None)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [unstarted]
    assert r.smembers("blueque_listeners_q") == set() and r.zscore("blueque_queues", "q") == 0

    r.set("gate", 1)  # the orphaned task process finishes and records its own result
    wait_for(lambda: client.get_task(running).status == "complete", 20, runner.describe)
    assert r.lrange("finished", 0, -1) == ["done"]
    assert not r.exists(f"blueque_reserved_tasks_q_{runner.listener_id}",
                        "blueque_started_tasks_q")


# -- faults ---------------------------------------------------------------------------------------

def test_a_runner_stopped_at_once_hands_its_running_tasks_ends_back_to_their_processes(
        client, r, start_runner):
    """A program that embeds a runner lives on after run() returns: the tasks still running
    record their own ends."""
    queue = client.get_queue("q")
    running = queue.enqueue(job(wait_for="gate"))
    runner = start_runner(linger=120)
    started(client, running, runner)
    runner.signal(signal.SIGTERM)
    time.sleep(0.5)  # two signals at once are one to Python
    runner.signal(signal.SIGTERM)
    wait_for(lambda: r.smembers("blueque_listeners_q") == set(), 10, runner.describe)
    assert runner.alive()  # run() returned; the program goes on

    r.set("gate", 1)
    assert finished(client, running, runner, timeout=30).result == f"done:{job(wait_for='gate')}"


def test_listener_reconnects_after_redis_restarts(client, r, redis_server, start_runner):
    if not hasattr(redis_server, "stop"):
        pytest.skip("needs the private redis-server (BLUEQUE_TEST_REDIS_URL is set)")
    runner = start_runner()
    assert finished(client, client.get_queue("q").enqueue("before"), runner).status == "complete"

    redis_server.stop()
    time.sleep(2.0)
    redis_server.start()  # an empty database: the listener must register again
    assert runner.alive(), runner.describe()

    registered(r, runner, timeout=30)
    task = finished(client, client.get_queue("q").enqueue("after"), runner, timeout=30)
    assert task.result == "done:after"
    assert runner.alive()


@pytest.fixture
def persistent_redis():
    server = RedisServer(persistent=True).start()
    yield server
    server.close()


def test_running_task_carries_on_across_a_restart_of_a_persistent_redis(persistent_redis,
                                                                        tmp_path, tag):
    """With the data kept (append-only file), the task running during the outage keeps its
    lease, records its own result afterwards, and runs once."""
    url = persistent_redis.url
    client = Client(url)
    r = redis.Redis.from_url(url, decode_responses=True)
    runner = Runner(url, "q", tmp_path, tag)
    try:
        task_id = client.get_queue("q").enqueue(job(wait_for="gate", mark="finished"))
        started(client, task_id, runner)

        persistent_redis.stop()
        time.sleep(2.0)
        persistent_redis.start()
        assert runner.alive(), runner.describe()

        r.set("gate", 1)
        task = finished(client, task_id, runner, timeout=30)
        assert (task.status, task.attempts) == ("complete", 1), task.fields
        assert task.result.startswith("done:")
        assert r.lrange("finished", 0, -1) == ["done"]
        assert len(r.lrange(RUNS_KEY, 0, -1)) == 1
        assert runner.listener_id in r.smembers("blueque_listeners_q")
        assert r.zscore("blueque_queues", "q") == 1.0
        after = client.get_queue("q").enqueue("after")
        assert finished(client, after, runner, timeout=30).result == "done:after"
    finally:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
        client.redis.close()
        r.close()


def test_runner_duties_survive_malformed_entries_written_by_others(client, r, start_runner):
    r.sadd("blueque_listeners_q", "garbage", "host_notapid", f"{socket.getfqdn()}_99999999999")
    r.sadd("blueque_started_tasks_q", "junk", "a b c d")
    runner = start_runner(duties=0.1)
    registered(r, runner)
    wait_for(lambda: "malformed" in runner.output(), 20, runner.describe)
    task_id = client.get_queue("q").enqueue("fine")
    assert finished(client, task_id, runner).status == "complete"
    assert runner.alive()
    assert {"garbage", "host_notapid"} <= r.smembers("blueque_listeners_q")


def test_half_done_reserve_of_a_dead_blueque1_listener_is_run_by_ours(client, r, start_runner):
    """blueque 1.0 died between RPOPLPUSH and HSET; our listener's reaper duty repairs it."""
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = f"{socket.getfqdn()}_{gone.pid}"
    client.protocol.add_listener_v1(dead, "q")
    task_id = client.get_queue("q").enqueue("stranded")
    r.rpoplpush("blueque_pending_tasks_q", f"blueque_reserved_tasks_q_{dead}")

    runner = start_runner(duties=0.1)
    assert finished(client, task_id, runner).result == "done:stranded"
    assert dead not in r.smembers("blueque_listeners_q")


@pytest.mark.slow
def test_sigkilled_listener_running_tasks_finish_and_reserved_ones_are_requeued(
        client, r, start_runner, runs):
    """The listener dies with two tasks running and one reserved. The running ones keep their
    leases and finish in their own processes; the reserved one goes back to the queue when
    reap() finds the heartbeat expired (15 s), within 30 s of the death."""
    queue = client.get_queue("q")
    running = queue.enqueue_many([job(wait_for="gate", mark="finished", n=n) for n in range(2)])
    runner = start_runner(concurrency=2)
    for task_id in running:
        started(client, task_id, runner)
    unstarted = queue.enqueue("unstarted")
    assert client.protocol.reserve("q", runner.listener_id, "its-token")[0] == unstarted

    runner.signal(signal.SIGKILL)
    killed = time.monotonic()
    runner.wait(10)
    children = [t.pid for t in client.get_tasks(running)]
    assert all(pid_alive(pid) for pid in children)

    def released():
        return any(a.what == "released listener" for a in reap(client))

    wait_for(released, 30, "the dead listener was never released", interval=0.5)
    assert time.monotonic() - killed < 30
    task = client.get_task(unstarted)
    assert (task.status, task.node) == ("pending", None)
    assert r.lrange("blueque_pending_tasks_q", 0, -1) == [unstarted]
    assert r.smembers("blueque_listeners_q") == set() and r.zscore("blueque_queues", "q") == 0
    # the running tasks were not touched: their processes still hold their leases
    for task_id in running:
        assert client.get_task(task_id).status == "started"
        assert r.exists(f"blueque_lease_{task_id}")
    assert all(pid_alive(pid) for pid in children)
    assert reap(client) == []

    r.set("gate", 1)
    for task_id in running:
        wait_for(lambda task_id=task_id: client.get_task(task_id).status == "complete", 20,
                 "an orphaned task process did not record its result")
    assert r.lrange("finished", 0, -1) == ["done", "done"]
    assert not r.exists(f"blueque_reserved_tasks_q_{runner.listener_id}",
                        "blueque_started_tasks_q")

    # the requeued task runs on the next listener, once
    successor = start_runner()
    assert finished(client, unstarted, successor).result == "done:unstarted"
    assert [run["id"] for run in runs()].count(unstarted) == 1


@pytest.mark.slow
@pytest.mark.parametrize("watching", [False, True])
def test_an_orphaned_task_cancelled_stops_itself(client, r, start_runner, watching):
    """Its listener killed, a cancelled task's process stops itself: code that never looked at
    should_stop() gets StopRequested and records the cancel; code that looked once (told, not
    interrupted) and then never again is killed kill_grace later, as its listener would."""
    task_id = client.get_queue("q").enqueue(job(look_once=watching, sleep=120, mark="finished"))
    runner = start_runner(kill_grace=2)
    pid = started(client, task_id, runner).pid
    runner.signal(signal.SIGKILL)
    runner.wait(10)
    assert client.cancel(task_id) == "requested"
    wait_for(lambda: not pid_alive(pid), 30, "the orphaned process to stop")
    assert not r.exists("finished")
    if not watching:
        task = finished(client, task_id, runner)
        assert (task.status, task.error) == ("failed", "cancelled")


def test_an_orphaned_task_past_its_timeout_stops_itself(client, r, start_runner, runs):
    """Its listener killed, a task's process still enforces the task's timeout on itself: the
    lease it renews would otherwise keep a hung task running for ever."""
    task_id = client.get_queue("q").enqueue(job(sleep=120, mark="finished"), timeout=2)
    runner = start_runner()
    pid = started(client, task_id, runner).pid
    runner.signal(signal.SIGKILL)
    runner.wait(10)
    assert pid_alive(pid)
    task = finished(client, task_id, runner, timeout=20)
    assert (task.status, task.error_type, task.error) == ("failed", "Timeout",
                                                          "timed out after 2 s")
    wait_for(lambda: not pid_alive(pid), 10, "the orphaned process to exit")
    assert not r.exists("finished")
