"""Concurrency and rate limits (admission.py) with real listeners: several ForkingRunner
processes on one queue, tasks that write their own start and end marks (the callback's
"marks"), the engine's started set sampled every 50 ms, and faults (a listener and its task
processes SIGKILLed, Redis restarted). Each limit is checked from both sides: what Redis says
runs, and what the task processes saw themselves run."""

import json
import os
import signal
import threading
import time

import pytest
import redis

from devtools.servers import RedisServer
from django_blueque.core import Client
from tests.core.helpers import (
    SHORT_TIMINGS,
    Runner,
    children_of,
    command_calls,
    wait_for,
)

QUEUE = "q"
MARKS = "marks"
SHORT = json.dumps(SHORT_TIMINGS)


def job(**todo):
    return json.dumps({"marks": MARKS, **todo})


def policy(**limits):
    return json.dumps(limits)


def marks_of(r):
    """{(task id, attempt): {"start": time, "end": time}} from the tasks' own marks."""
    runs = {}
    for line in r.lrange(MARKS, 0, -1):
        mark = json.loads(line)
        runs.setdefault((mark["id"], mark["attempt"]), {})[mark["event"]] = mark["at"]
    return runs


def most_at_once(intervals):
    """The most intervals (start, end) open at one moment (one ending as another starts: not
    both)."""
    edges = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def intervals(runs, ends_of_killed=None):
    """The runs' (start, end). A run without an end mark (its process was killed) holds its
    slot until the engine recorded its end (``ends_of_killed``: (id, attempt) -> that time)."""
    ends_of_killed = ends_of_killed or {}
    spans = []
    for run, mark in runs.items():
        end = mark.get("end", ends_of_killed.get(run))
        assert "start" in mark and end is not None, (run, mark)
        spans.append((mark["start"], end))
    return spans


def recorded_ends(client, runs):
    """(id, attempt) -> when the engine recorded the end of each run without an end mark (the
    reaper's recovery: the error it wrote for that attempt)."""
    ends = {}
    for task_id, attempt in runs:
        if "end" not in runs[(task_id, attempt)]:
            for error in client.get_task(task_id).errors:
                if error["attempt"] == attempt:
                    ends[(task_id, attempt)] = error["time"]
    return ends


class StartedSampler(threading.Thread):
    """The size of the queue's started set (the count MAX_RUNNING limits), every 50 ms; an
    outage of Redis skips samples."""

    def __init__(self, r, key):
        super().__init__(daemon=True)
        self.r, self.key = r, key
        self.sizes = []
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.wait(0.05):
            try:
                self.sizes.append(self.r.scard(self.key))
            except redis.ConnectionError:
                continue

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *_):
        self.stopping.set()
        self.join()


def all_complete(client, task_ids, describe, timeout=60):
    for task_id in task_ids:
        wait_for(lambda t=task_id: client.get_task(t).status in ("complete", "failed"),
                 timeout, describe)
    tasks = [client.get_task(task_id) for task_id in task_ids]
    assert [task.status for task in tasks] == ["complete"] * len(task_ids), [
        (task.status, task.errors) for task in tasks]


def describe_all(runners):
    return lambda: "\n".join(runner.describe() for runner in runners)


def assert_at_most_two_ran(client, r, sampler, task_ids):
    """The started set never held more than MAX_RUNNING 2 and held 2 at some moment (the
    limit was reached, not just never tested); the marks say the same."""
    assert max(sampler.sizes) == 2, sampler.sizes
    runs = marks_of(r)
    assert {task_id for task_id, _ in runs} == set(task_ids)
    assert most_at_once(intervals(runs, recorded_ends(client, runs))) == 2, runs


# -- MAX_RUNNING across listeners --------------------------------------------------------------

def test_three_listeners_of_three_slots_run_at_most_max_running(client, r, start_runner):
    runners = [start_runner(QUEUE, concurrency=3, policy=policy(max_running=2))
               for _ in range(3)]
    with StartedSampler(r, client.keys.started(QUEUE)) as sampler:
        task_ids = [client.get_queue(QUEUE).enqueue(job(sleep=0.3)) for _ in range(12)]
        all_complete(client, task_ids, describe_all(runners))
    assert_at_most_two_ran(client, r, sampler, task_ids)
    # the tasks went to more than one listener: the limit is the cluster's, not a listener's
    assert len({client.get_task(task_id).node for task_id in task_ids}) >= 2


def test_a_killed_listeners_slots_are_freed_by_the_reaper_alone(client, r, start_runner):
    """A listener and its task processes SIGKILLed mid-run (a machine lost): its two runs
    hold both slots until the reaper recovers them (nothing else starts meanwhile), then they
    run again; never more than 2 at once, all complete."""
    limits = policy(max_running=2)
    victim = start_runner(QUEUE, concurrency=3, policy=limits, timings=SHORT)
    queue = client.get_queue(QUEUE)
    with StartedSampler(r, client.keys.started(QUEUE)) as sampler:
        task_ids = [queue.enqueue(job(sleep=4), retries=2, backoff=0) for _ in range(2)]
        wait_for(lambda: len(marks_of(r)) == 2, 20, victim.describe)
        others = [start_runner(QUEUE, concurrency=3, policy=limits, timings=SHORT,
                               duties=0.5) for _ in range(2)]
        task_ids += [queue.enqueue(job(sleep=0.5), retries=2, backoff=0) for _ in range(6)]
        victim.signal(signal.SIGSTOP)  # its task processes are listed before it dies
        processes = children_of(victim.pid)
        assert len(processes) >= 2, victim.describe()
        for pid in [victim.pid, *processes]:
            os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        all_complete(client, task_ids, describe_all([victim, *others]))
    recovered = [client.get_task(task_id) for task_id in task_ids[:2]]
    assert [task.attempts for task in recovered] == [2, 2]
    assert all(task.errors[0]["time"] >= killed_at for task in recovered)
    assert_at_most_two_ran(client, r, sampler, task_ids)


def test_max_running_holds_while_redis_restarts(tmp_path, tag):
    """Redis stopped for 2 s mid-run and started again on its append-only file: the listeners
    waiting for a slot lose their peeks and look again, the runs record their ends late, and
    still never more than 2 at once; all complete."""
    server = RedisServer(persistent=True).start()
    r = redis.Redis.from_url(server.url, decode_responses=True)
    runners = []
    try:
        client = Client(server.url)
        runners = [Runner(server.url, QUEUE, tmp_path, tag, concurrency=3, timings=SHORT,
                          policy=policy(max_running=2), duties=0.5) for _ in range(3)]
        with StartedSampler(r, client.keys.started(QUEUE)) as sampler:
            task_ids = [client.get_queue(QUEUE).enqueue(job(sleep=1.0)) for _ in range(10)]
            wait_for(lambda: len(marks_of(r)) >= 3, 20, describe_all(runners))
            server.stop()
            time.sleep(2)  # shorter than a lease: the runs go on through it
            server.start()
            all_complete(client, task_ids, describe_all(runners))
        assert_at_most_two_ran(client, r, sampler, task_ids)
        assert all(runner.alive() for runner in runners)
        client.redis.close()
    finally:
        for runner in runners:
            if runner.alive():
                runner.popen.kill()
        r.close()
        server.close()


# -- MAX_RUNNING_PER_KEY -----------------------------------------------------------------------

def test_tasks_of_one_key_never_overlap_while_other_keys_run(client, r, start_runner):
    runners = [start_runner(QUEUE, concurrency=3, policy=policy(max_running_per_key=1))
               for _ in range(2)]
    queue = client.get_queue(QUEUE)
    key_of = {}
    for n in range(12):
        key = f"customer-{n % 3}"
        key_of[queue.enqueue(job(sleep=0.3), concurrency_key=key)] = key
    all_complete(client, list(key_of), describe_all(runners))
    runs = marks_of(r)
    assert {task_id for task_id, _ in runs} == set(key_of)
    for key in set(key_of.values()):
        mine = {run: mark for run, mark in runs.items() if key_of[run[0]] == key}
        assert most_at_once(intervals(mine)) == 1, (key, mine)
    # no head-of-line blocking: the tasks of other keys ran beside a key's run
    assert most_at_once(intervals(runs)) >= 2
    assert not r.exists(client.keys.held(QUEUE), client.keys.running_keys(QUEUE))


# -- RATE_LIMIT --------------------------------------------------------------------------------

TAKE_SLACK = 0.05
"""Seconds between the listener's clock read for a take's ``started`` field and the take
itself, on Redis's clock, which the window counts on: two of those fields may be this much
closer than their takes were. (A task's own start mark comes after its hand-over, which on a
loaded machine took 0.3 s more for one task than for another.)"""


def take_times(client, r, task_ids):
    """When each task was taken (its hash's ``started``, written by the take), in order."""
    return sorted(float(r.hget(client.keys.task(task_id), "started")) for task_id in task_ids)


def starts_within(starts, count, seconds):
    """Whether every window of ``seconds`` holds at most ``count`` of the ``starts``."""
    return all(sum(1 for other in starts[i:] if other < start + seconds - TAKE_SLACK)
               <= count for i, start in enumerate(starts))


def listener_calls(r):
    """The listeners' own requests: its takes and heartbeats (scripts) and its blocking peeks
    (the marks and the test's polls are other commands)."""
    calls = command_calls(r)
    return calls.get("evalsha", 0) + calls.get("blmove", 0)


def test_a_rate_limit_spreads_the_starts_over_its_window(client, r, start_runner):
    """4 starts per 2 s across two listeners: 10 quick tasks start 4, 4 and 2, a window apart;
    while the window is spent the listeners do not ask again and again."""
    runners = [start_runner(QUEUE, concurrency=2, policy=policy(rate_limit="4/2s"))
               for _ in range(2)]
    task_ids = [client.get_queue(QUEUE).enqueue(job()) for _ in range(10)]
    wait_for(lambda: sum(client.get_task(t).status == "complete" for t in task_ids) == 4, 20,
             describe_all(runners))
    spent = listener_calls(r)
    oldest = r.zrange(client.keys.starts(QUEUE), 0, 0, withscores=True)[0][1]
    seconds, micros = r.time()
    time.sleep(max(0.0, oldest + 2.0 - (seconds + micros / 1e6) - 0.2))  # until it reopens
    assert len(marks_of(r)) == 4
    # a refused take per listener, a heartbeat: a listener polling every 50 ms asks ~30 times
    assert listener_calls(r) - spent <= 4
    all_complete(client, task_ids, describe_all(runners))
    assert len(marks_of(r)) == 10
    starts = take_times(client, r, task_ids)
    assert starts_within(starts, 4, 2.0), starts
    assert not starts_within(starts, 4, 4.0)  # not all in one window: they did wait


@pytest.mark.slow
def test_thirty_a_minute(client, r, start_runner):
    """The issue's own rate: 32 quick tasks, 30 start at once, the last two a minute later."""
    runner = start_runner(QUEUE, concurrency=4, policy=policy(rate_limit="30/m"))
    task_ids = [client.get_queue(QUEUE).enqueue(job()) for _ in range(32)]
    all_complete(client, task_ids, runner.describe, timeout=90)
    assert len(marks_of(r)) == 32
    starts = take_times(client, r, task_ids)
    assert starts_within(starts, 30, 60.0), starts
    assert starts[30] - starts[0] >= 60.0 - TAKE_SLACK


# -- a listener whose queue is full -------------------------------------------------------------

def test_a_listener_waiting_for_a_slot_is_silent_and_woken_at_once(client, r, start_runner):
    """MAX_RUNNING 1 on a listener of 2 slots: the second task waits on the slot wake list (no
    requests while the first runs), and starts as soon as the first ends, long before the
    listener's 60 s block would have let it look again."""
    runner = start_runner(QUEUE, concurrency=2, policy=policy(max_running=1))
    queue = client.get_queue(QUEUE)
    first = queue.enqueue(job(wait_for="gate"))
    second = queue.enqueue(job())
    wait_for(lambda: (first, 1) in marks_of(r), 20, runner.describe)
    wait_for(lambda: r.get(client.keys.full(QUEUE)) == "1", 20, runner.describe)
    waiting = listener_calls(r)
    time.sleep(2)  # how long it is watched while it waits (its task polls the gate with EXISTS)
    # its peek on the slot wake list, a heartbeat or the task's lease renewal at most: a
    # listener looking at its full queue every 100 ms would have asked 20 times
    assert listener_calls(r) - waiting <= 2
    assert (second, 1) not in marks_of(r)
    r.set("gate", 1)
    all_complete(client, [first, second], runner.describe)
    runs = marks_of(r)
    assert 0 < runs[(second, 1)]["start"] - runs[(first, 1)]["end"] < 5.0
