"""Tasks of hours, whatever their code does to their own process: the lease is renewed by
the listener for each live child and by the child itself (lease.py), a frozen listener takes
nothing, and a task process cut off from Redis stops itself. Real runner processes, real
signals, a real reaper, partitions through a TCP proxy on 127.0.0.1 (partition.py); the
liveness timings shortened (a 3 s lease) except where a test says it runs at production
timings."""

import json
import os
import re
import signal
import threading
import time

import pytest

from devtools.proxy import HoldingProxy
from django_blueque.core import Client, Timings
from django_blueque.core.maintenance import Reaper
from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import SHORT_TIMINGS, Runner, children_of, pid_alive, wait_for

SHORT = SHORT_TIMINGS


def job(**todo):
    return json.dumps(todo)


def runs_of(r, task_id):
    return [run for run in map(json.loads, r.lrange(RUNS_KEY, 0, -1)) if run["id"] == task_id]


def finished(client, task_id, runner, timeout=60):
    return wait_for(lambda: (lambda t: t if t.status in ("complete", "failed") else None)(
        client.get_task(task_id)), timeout, runner.describe)


@pytest.fixture
def reaper(redis_url):
    """A reaper passing every 0.3 s in a thread of the test, on Redis directly, with the
    timings given (the short ones unless the test says otherwise)."""
    stop = threading.Event()

    def start(timings=SHORT):
        client = Client(redis_url, timings=Timings(**timings))
        reaper = Reaper(client.protocol)

        def loop():
            while not stop.wait(0.3):
                reaper.reap()
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        return thread

    yield start
    stop.set()


def short_runner(start_runner, **options):
    return start_runner(timings=json.dumps(SHORT), kill_grace=2, **options)


# -- a task that starves its own process ------------------------------------------------------

def test_a_task_holding_its_gil_past_its_lease_runs_once(client, r, start_runner, reaper):
    """One C call that holds the GIL for 8 s, with a lease of 3 s and a reaper watching: its
    own lease thread cannot run, its listener renews the lease. Before: recovered at ~5 s,
    run again, and the finished run's end rejected as stale."""
    reaper()
    runner = short_runner(start_runner, policy=json.dumps({"retries": 2}))
    task_id = client.get_queue("q").enqueue(job(hold_gil=8))
    task = finished(client, task_id, runner)
    assert (task.status, task.attempts) == ("complete", 1), runner.describe()
    assert len(runs_of(r, task_id)) == 1


@pytest.mark.slow
def test_a_task_holding_its_gil_for_40_s_runs_once_at_production_timings(client, r,
                                                                          start_runner, reaper):
    """The issue's scenario as it was found: 40 s of GIL held, the 15 s lease, the reaper's
    8 s confirmation."""
    reaper(timings={})
    runner = start_runner(policy=json.dumps({"retries": 2}))
    task_id = client.get_queue("q").enqueue(job(hold_gil=40))
    task = finished(client, task_id, runner, timeout=90)
    assert (task.status, task.attempts) == ("complete", 1), runner.describe()
    assert len(runs_of(r, task_id)) == 1


def test_a_stopped_task_process_is_kept_until_its_timeout_then_killed(client, r, start_runner,
                                                                      reaper):
    """SIGSTOP of the task's process under a live listener: its lease is kept (the listener
    renews it), until its timeout: then SIGTERM (which a stopped process does not act on),
    SIGKILL kill_grace later, and the run recorded as timed out, never as lost."""
    reaper()
    runner = short_runner(start_runner, policy=json.dumps({"timeout": 8}))
    task_id = client.get_queue("q").enqueue(job(sleep=60))
    (run,) = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    began = time.monotonic()
    os.kill(run["pid"], signal.SIGSTOP)
    task = finished(client, task_id, runner, timeout=40)
    assert time.monotonic() - began > 6  # not recovered at ~5 s
    assert (task.status, task.error_type) == ("failed", "Timeout"), task.error
    assert "timed out after 8 s" in task.error
    assert not pid_alive(run["pid"])


def test_a_task_holding_its_gil_outlives_its_killed_listener_for_less_than_a_lease(
        client, r, start_runner, reaper):
    """The listener SIGKILLed while its task holds the GIL for 2 s (a lease is 3 s): the
    task's own thread renews the lease once the C call returns; it runs once."""
    reaper()
    runner = short_runner(start_runner)
    task_id = client.get_queue("q").enqueue(job(sleep=0.5, hold_gil=2, mark="done"))
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    runner.signal(signal.SIGKILL)
    wait_for(lambda: r.lrange("done", 0, -1) == ["done"], 20, runner.describe)
    task = finished(client, task_id, runner)
    assert (task.status, task.attempts) == ("complete", 1)
    assert len(runs_of(r, task_id)) == 1


def test_a_task_holding_its_gil_past_its_lease_with_its_listener_killed_runs_again(
        client, r, redis_url, tmp_path, tag, start_runner, reaper):
    """Both renewers gone for longer than the lease (listener SIGKILLed, the task's C call
    holding the GIL for 9 s): the reaper recovers the task, another listener runs it again,
    and the first run's end is rejected as stale (the README's delivery guarantee)."""
    reaper()
    first = short_runner(start_runner)
    task_id = client.get_queue("q").enqueue(job(sleep=0.5, hold_gil=9), retries=1)
    wait_for(lambda: runs_of(r, task_id), 20, first.describe)
    first.signal(signal.SIGKILL)
    second = short_runner(start_runner)
    wait_for(lambda: len(runs_of(r, task_id)) == 2, 30, second.describe)
    task = finished(client, task_id, second)
    assert (task.status, task.attempts) == ("complete", 2)
    assert task.node == second.listener_id
    time.sleep(6)  # the first run's C call returns: its end is never recorded
    assert client.get_task(task_id).node == second.listener_id
    assert len(runs_of(r, task_id)) == 2


def test_a_queue_with_a_longer_lease_keeps_a_task_holding_its_gil_past_the_others_lease(
        client, r, start_runner, reaper):
    """The same 9 s C call and SIGKILLed listener, on a queue whose LEASE is 14 s (the global
    one 3 s): the lease the take made, and the listener renewed, outlasts the call; the task's
    own thread renews it after; it runs once (with the global lease it runs again, above)."""
    reaper()
    runner = short_runner(start_runner, policy=json.dumps({"lease": 14}))
    task_id = client.get_queue("q").enqueue(job(sleep=0.5, hold_gil=9, mark="done"), retries=1)
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    assert 10_000 < r.pttl(f"blueque_lease_{task_id}") <= 14_000
    runner.signal(signal.SIGKILL)
    wait_for(lambda: r.lrange("done", 0, -1) == ["done"], 30, runner.describe)
    task = finished(client, task_id, runner)
    assert (task.status, task.attempts) == ("complete", 1)
    assert len(runs_of(r, task_id)) == 1


# -- a frozen listener ------------------------------------------------------------------------

def test_a_frozen_idle_listener_takes_nothing(client, r, start_runner):
    """Listener A idle, then SIGSTOPped; listener B idle on the same queue; a task comes. It
    runs once, on B. Before: A's take, sent ahead behind its peek, took it for A's spare."""
    frozen = short_runner(start_runner)
    wait_for(lambda: frozen.listener_id in r.smembers("blueque_listeners_q"), 20,
             frozen.describe)
    time.sleep(1.0)  # idle, blocked on its peek
    frozen.signal(signal.SIGSTOP)
    try:
        awake = short_runner(start_runner)
        wait_for(lambda: awake.listener_id in r.smembers("blueque_listeners_q"), 20,
                 awake.describe)
        time.sleep(0.5)
        task_id = client.get_queue("q").enqueue(job(sleep=1))
        task = finished(client, task_id, awake, timeout=20)
        assert (task.status, task.node) == ("complete", awake.listener_id)
    finally:
        frozen.signal(signal.SIGCONT)
    time.sleep(2.0)  # A resumed: it finds nothing to run
    assert len(runs_of(r, task_id)) == 1
    assert client.get_task(task_id).node == awake.listener_id


# -- a task process cut off from Redis --------------------------------------------------------

@pytest.fixture
def behind_proxy(redis_server, tmp_path, tag):
    """(proxy, start): a HoldingProxy in front of the test's Redis, and start(**options) for
    a runner that reaches Redis through it; both stopped at the end."""
    proxy = HoldingProxy(int(redis_server.url.rsplit(":", 1)[1].split("/")[0]))
    runners = []

    def start(**options):
        runners.append(Runner(proxy.url, "q", tmp_path, tag, **options))
        return runners[-1]

    yield proxy, start
    for runner in runners:
        runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()
    proxy.close()


def test_a_task_process_cut_off_under_a_healthy_listener_keeps_its_task(client, r, behind_proxy,
                                                                       reaper):
    """The task process's connections held by a proxy for 10 s while its listener's are not:
    the listener renews the lease, the reaper recovers nothing, the task runs once and
    records its end when the partition heals. Before: recovered after its lease lapsed and
    run again beside the first run."""
    proxy, start = behind_proxy
    reaper()
    runner = start(timings=json.dumps(SHORT), kill_grace=2, policy=json.dumps({"retries": 2}))
    wait_for(lambda: runner.listener_id in r.smembers("blueque_listeners_q"), 20,
             runner.describe)
    task_id = client.get_queue("q").enqueue(job(sleep=8))
    wait_for(lambda: runs_of(r, task_id), 20, runner.describe)  # (the test's own write)
    # every connection but the listener's held: the task process's (opened at its
    # start, to record its end without waiting for a new one) and any it opens
    proxy.hold_all(spared=runner.pid)
    time.sleep(10)
    assert client.get_task(task_id).status == "started", runner.describe()
    proxy.heal()
    task = finished(client, task_id, runner)
    assert (task.status, task.attempts) == ("complete", 1), runner.describe()
    assert len(runs_of(r, task_id)) == 1


def test_a_task_process_cut_off_with_its_listener_stops_its_task(client, r, behind_proxy, reaper):
    """Every connection of the listener and its task process held (the node cut off), the
    reaper on Redis directly: nobody renews the lease, so the task process makes
    should_stop() true after a lease (3 s) and ends itself kill_grace (2 s) later; the two
    runs overlap by a bounded time. Before: the first run went on until Redis answered."""
    proxy, start = behind_proxy
    reaper()
    runner = start(timings=json.dumps(SHORT), kill_grace=2)
    task_id = client.get_queue("q").enqueue(job(sleep=0.5, until_stopped="stopped"))
    (run,) = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    time.sleep(1.0)  # its lease keeper has connected
    proxy.hold_all()
    began = time.monotonic()
    wait_for(lambda: not pid_alive(run["pid"]), 20, runner.describe)
    assert time.monotonic() - began < 3 + 2 + 3  # cut_off + kill_grace + a renewal
    wait_for(lambda: client.get_task(task_id).status == "failed", 20, runner.describe)
    assert "stopped renewing its lease" in client.get_task(task_id).error
    proxy.heal()
    wait_for(lambda: "nobody could renew its lease" in runner.output(), 20,
             runner.describe)


def test_a_task_process_cut_off_after_its_code_ended_keeps_its_result(client, r, behind_proxy,
                                                                     tmp_path):
    """The node cut off (every connection held) just as the task's code returns, for longer
    than a lease and kill_grace, no reaper running: the process goes on trying to record its
    end, and records it when the partition heals; its code ran once. Before: it ended itself
    after cut_off + kill_grace like a process still running its code, its result lost, and
    the task ran again."""
    proxy, start = behind_proxy
    runner = start(timings=json.dumps(SHORT), kill_grace=2, policy=json.dumps({"retries": 2}))
    gate = tmp_path / "return"
    task_id = client.get_queue("q").enqueue(job(wait_file=str(gate)))
    (run,) = wait_for(lambda: runs_of(r, task_id), 20, runner.describe)
    time.sleep(1.0)  # its lease keeper has connected
    proxy.hold_all()
    gate.touch()  # its code returns now, cut off, a lease (3 s) before the cut-off could come
    time.sleep(SHORT["lease"] + 2 + 3)  # cut_off + kill_grace + a renewal
    assert pid_alive(run["pid"]), runner.describe()
    proxy.heal()
    task = finished(client, task_id, runner)
    assert (task.status, task.attempts) == ("complete", 1), runner.describe()
    assert len(runs_of(r, task_id)) == 1
    assert "nobody could renew its lease" not in runner.output()


# -- task processes that die at start -----------------------------------------------------------

def test_task_processes_dying_at_start_are_forked_again_after_a_doubling_pause(
        client, r, start_runner):
    """The first three task processes exit before they read their task: the task goes back
    to its queue uncounted each time, forks pause 0.1, 0.2 then 0.4 s (one log line each,
    never a loop), and the fourth process runs it."""
    runner = start_runner(doomed_forks=3)
    task_id = client.get_queue("q").enqueue(job(mark="ran"))
    task = finished(client, task_id, runner, timeout=30)
    assert (task.status, task.attempts) == ("complete", 1), runner.describe()
    log = runner.output()
    pauses = re.findall(r"before its task; forking again in ([\d.]+) s", log)
    assert pauses == ["0.1", "0.2", "0.4"], log
    assert "task processes start again" in log
    assert r.lrange("ran", 0, -1) == ["done"]


def settled_spare(runner):
    """The listener's one child, if it stays 0.3 s: its spare, not the process its first take
    named and let go (that one exits at once)."""
    first = children_of(runner.pid)
    time.sleep(0.3)
    return first if len(first) == 1 and children_of(runner.pid) == first else None


def test_a_listener_keeps_one_spare_and_one_that_dies_is_forked_again_after_a_pause(
        client, r, start_runner):
    """A listener that takes tasks keeps one process forked ahead (its spare), idle or busy,
    and the next task runs in it (no fork on its way to its code). SIGKILLed while it waits,
    the spare is reaped like any process that died before its task (a pause, one log line, a
    new spare after it), and every task still runs once."""
    runner = start_runner()
    (doomed,) = wait_for(lambda: settled_spare(runner), 10, runner.describe)
    os.kill(doomed, signal.SIGKILL)
    (spare,) = wait_for(lambda: [pid for pid in children_of(runner.pid) if pid != doomed],
                        10, runner.describe)
    queue = client.get_queue("q")
    first = queue.enqueue(job(sleep=1, mark="0"))
    (run,) = wait_for(lambda: runs_of(r, first), 20, runner.describe)
    assert run["pid"] == spare, runner.describe()
    second, third = (queue.enqueue(job(sleep=0.5, mark=str(n))) for n in (1, 2))
    for task_id in (first, second, third):
        task = finished(client, task_id, runner)
        assert (task.status, task.attempts) == ("complete", 1), runner.describe()
        assert len(runs_of(r, task_id)) == 1
    log = runner.output()
    assert re.findall(r"before its task; forking again in ([\d.]+) s", log) == ["0.1"], log
    ran = {run["pid"] for task_id in (first, second, third) for run in runs_of(r, task_id)}
    (idle_spare,) = wait_for(lambda: (lambda pids: pids if len(pids) == 1 else None)(
        children_of(runner.pid)), 10, runner.describe)
    assert idle_spare not in ran | {doomed}, runner.describe()


def test_a_killed_listener_leaves_no_spare_behind(start_runner):
    """A listener SIGKILLed while idle: its spare, waiting on its channel, sees the channel
    close and exits on its own (no process of an idle node outlives its listener)."""
    runner = start_runner()
    (spare,) = wait_for(lambda: settled_spare(runner), 10, runner.describe)
    runner.signal(signal.SIGKILL)
    wait_for(lambda: not pid_alive(spare), 10, runner.describe)


def test_a_slot_is_free_once_its_task_process_says_its_end_is_recorded_not_at_its_exit(
        client, r, start_runner):
    """A task process whose exit is slow (the kernel first frees the 1 GiB it holds) frees its
    slot as soon as it says its end is recorded: the next task starts before that process is
    reaped. Before, the slot was free only at ``waitpid``."""
    runner = start_runner()
    queue = client.get_queue("q")
    first = queue.enqueue(job(keep_mib=1024))
    second = queue.enqueue(job(mark="second"))
    for task_id in (first, second):
        assert finished(client, task_id, runner).status == "complete", runner.describe()
    wait_for(lambda: f"task {first} ended in" in runner.output(), 10, runner.describe)
    log = runner.output()
    assert log.index(f"task {second} (q) started") < log.index(f"task {first} ended in"), log
    assert r.lrange("second", 0, -1) == ["done"]
