"""Interoperability with the real blueque 1.0.1 from PyPI, sharing one Redis with our engine.

blueque 1.0's side runs in a throwaway virtualenv (see conftest.py) through bq1_script.py; our
runner runs in a subprocess through ours_script.py; our client runs in this process. Both task
callbacks log each run to the "interop_runs" list and return "<worker>:<parameters>".
"""

import json
import time
from collections import Counter

import pytest
import redis

from django_blueque.core import Client, reap
from tests.interop.helpers import RUNS_KEY, snapshot, wait_for

pytestmark = pytest.mark.interop

Q = "q"
PENDING, SCHEDULED = f"blueque_pending_tasks_{Q}", f"blueque_scheduled_tasks_{Q}"
COMPLETE, FAILED = f"blueque_complete_tasks_{Q}", f"blueque_failed_tasks_{Q}"
STARTED, LISTENERS = f"blueque_started_tasks_{Q}", f"blueque_listeners_{Q}"
# What blueque 1.0's Task reads, and what its runner has written by the end of a success.
BQ1_FINISHED_FIELDS = {"status", "queue", "parameters", "created", "updated", "node", "pid"}


def task_key(task_id):
    return f"blueque_task_{task_id}"


def reserved_key(listener_id):
    return f"blueque_reserved_tasks_{Q}_{listener_id}"


def params(**values):
    """JSON parameters with non-ASCII text, as producers send them."""
    return json.dumps({"text": "héllo ✓", **values}, ensure_ascii=False)


def runs(r):
    """[(worker, task id, pid)] of every callback run so far."""
    return [tuple(line.split()) for line in r.lrange(RUNS_KEY, 0, -1)]


def wait_listener(r, process, timeout=15):
    """The id with which process registered in the listeners set (it must end in _<its pid>)."""
    def registered():
        assert process.alive(), process.describe()
        return next((m for m in r.smembers(LISTENERS) if m.endswith(f"_{process.pid}")), None)

    return wait_for(registered, timeout, lambda: f"no listener for pid {process.pid} in "
                    f"{r.smembers(LISTENERS)}\n{process.describe()}")


def wait_finished(r, task_ids, *processes, timeout=20):
    """Wait until every task is complete or failed; returns {id: hash}."""
    def finished():
        hashes = {tid: r.hgetall(task_key(tid)) for tid in task_ids}
        if all(h.get("status") in ("complete", "failed") for h in hashes.values()):
            return hashes
        return None

    def why():
        statuses = Counter(r.hget(task_key(tid), "status") for tid in task_ids)
        return f"task statuses {dict(statuses)}\n" + "\n".join(p.describe() for p in processes)

    return wait_for(finished, timeout, why)


def assert_bq1_reads(bq1, task_id, expected):
    """blueque 1.0's Client.get_task parses the hash (pid int, created/updated float) and
    its attributes have the expected values."""
    task = bq1("get-task", task_id)
    assert task["types"]["created"] == task["types"]["updated"] == "float", task
    if task["pid"] is not None:
        assert task["types"]["pid"] == "int", task
    assert {name: task[name] for name in expected} == expected
    return task


# 1 -----------------------------------------------------------------------------------------------

def test_task_enqueued_by_blueque1_runs_in_our_listener(bq1, r, start_our_runner):
    parameters = params(n=1)
    task_id = bq1("enqueue", Q, parameters)["id"]
    assert r.hget(task_key(task_id), "status") == "pending"

    runner = start_our_runner(Q)
    listener = wait_listener(r, runner)
    task = wait_finished(r, [task_id], runner)[task_id]

    assert BQ1_FINISHED_FIELDS | {"result"} <= task.keys(), task
    assert task["status"] == "complete", task
    assert (task["queue"], task["parameters"]) == (Q, parameters)
    assert task["result"] == f"ours:{parameters}"
    assert task["node"] == listener
    [(worker, ran_id, pid)] = runs(r)
    assert (worker, ran_id, task["pid"]) == ("ours", task_id, pid)
    assert float(task["created"]) <= float(task["updated"])
    assert r.lrange(COMPLETE, 0, -1) == [task_id]
    assert r.llen(PENDING) == 0 and r.llen(reserved_key(listener)) == 0
    assert r.smembers(STARTED) == set()
    assert_bq1_reads(bq1, task_id, {"status": "complete", "node": listener,
                                    "result": f"ours:{parameters}", "pid": int(pid)})


# 2 -----------------------------------------------------------------------------------------------

def test_task_enqueued_by_us_runs_in_blueque1_runner(bq1, r, redis_url, start_bq1_runner):
    client = Client(redis_url)
    parameters = params(n=2)
    task_id = client.get_queue(Q).enqueue(parameters)

    runner = start_bq1_runner(Q)
    listener = wait_listener(r, runner)
    assert listener == runner.first_json_line()["listener"]
    task = wait_finished(r, [task_id], runner)[task_id]

    assert task["status"] == "complete", task
    assert task["result"] == f"bq1:{parameters}" and task["node"] == listener
    [(worker, ran_id, pid)] = runs(r)
    assert (worker, ran_id, task["pid"]) == ("bq1", task_id, pid)
    assert r.lrange(COMPLETE, 0, -1) == [task_id] and r.smembers(STARTED) == set()
    assert r.llen(reserved_key(listener)) == 0

    read = assert_bq1_reads(bq1, task_id, {
        "id": task_id, "status": "complete", "queue": Q, "parameters": parameters,
        "result": f"bq1:{parameters}", "node": listener, "pid": int(pid), "error": None})
    ours = client.get_task(task_id)
    for name in ("status", "queue", "parameters", "result", "node", "pid", "created", "updated"):
        assert getattr(ours, name) == read[name], name


def test_blueque1_reads_our_extra_fields(bq1, r, redis_url):
    """Extension fields (retry policy, progress...) are ignored by blueque 1.0's reader."""
    client = Client(redis_url)
    task_id = client.get_queue(Q).enqueue("x", retries=3, backoff=1.5, timeout=60, retention=10)
    r.hset(task_key(task_id), mapping={"progress": "50.0", "progress_message": "half"})
    extra = set(r.hgetall(task_key(task_id))) - {"status", "queue", "parameters", "created",
                                                 "updated"}
    assert {"retries", "backoff", "timeout", "retention", "progress"} <= extra
    assert_bq1_reads(bq1, task_id, {"status": "pending", "queue": Q, "parameters": "x"})


def test_a_task_carrying_trace_context_runs_in_blueque1_runner(bq1, r, redis_url,
                                                               start_bq1_runner):
    """Issue 41: traceparent and tracestate, written when a span is current at enqueue (the
    API alone propagates a current context), are fields blueque 1.0 ignores."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    current = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7,
                          is_remote=True, trace_flags=TraceFlags(1),
                          trace_state=TraceState([("vendor", "opaque")]))
    parameters = params(n=41)
    with trace.use_span(NonRecordingSpan(current)):
        task_id = Client(redis_url).get_queue(Q).enqueue(parameters)
    assert r.hget(task_key(task_id), "traceparent").startswith(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-")  # the enqueue's span: the parent's id (API
    # alone) or its own (an SDK set up by another test of the session)
    assert r.hget(task_key(task_id), "tracestate") == "vendor=opaque"
    assert_bq1_reads(bq1, task_id, {"status": "pending", "queue": Q, "parameters": parameters})
    runner = start_bq1_runner(Q)
    task = wait_finished(r, [task_id], runner)[task_id]
    assert (task["status"], task["result"]) == ("complete", f"bq1:{parameters}"), task


# 3 -----------------------------------------------------------------------------------------------

def test_blueque1_runner_beside_our_listener(bq1, r, redis_url, start_our_runner,
                                             start_bq1_runner):
    client = Client(redis_url)
    ours = start_our_runner(Q)
    our_listener = wait_listener(r, ours)
    # At start-up blueque 1.0's claim_orphan parses every listener id, ours included.
    bq1_runner = start_bq1_runner(Q)
    bq1_listener = wait_listener(r, bq1_runner)

    # Slow tasks, more than our runner's concurrency: blueque 1.0 gets at least one.
    slow = [client.get_queue(Q).enqueue(params(sleep=3, n=n)) for n in range(4)]

    def bq1_running():
        return [tid for tid in slow if r.hmget(task_key(tid), "status", "node")
                == ["started", bq1_listener]]

    [held, *_] = wait_for(bq1_running, 10, lambda: "blueque 1.0 started no task: "
                          f"{[r.hgetall(task_key(t)) for t in slow]}\n{bq1_runner.describe()}")
    before = r.hgetall(task_key(held))
    reserved_before = r.lrange(reserved_key(bq1_listener), 0, -1)
    started_member = f"{bq1_listener} {before['pid']} {held}"
    assert started_member in r.smembers(STARTED)

    actions = reap(client)
    assert not [a for a in actions if bq1_listener in (a.listener_id, a.task_id)
                or a.task_id == held], actions
    assert bq1_listener in r.smembers(LISTENERS)
    assert r.hgetall(task_key(held)) == before
    assert r.lrange(reserved_key(bq1_listener), 0, -1) == reserved_before
    assert started_member in r.smembers(STARTED)

    # Many tasks from both producers: every one runs exactly once, on one of the two workers.
    quick = [client.get_queue(Q).enqueue(params(sleep=0.2, n=n)) for n in range(10)]
    quick += [bq1("enqueue", Q, params(sleep=0.2, n=n))["id"] for n in range(10, 20)]
    everything = slow + quick
    tasks = wait_finished(r, everything, ours, bq1_runner, timeout=60)

    assert {tid: t["status"] for tid, t in tasks.items()} == dict.fromkeys(everything, "complete")
    ran = runs(r)
    assert Counter(tid for _, tid, _ in ran) == Counter(everything), "ran not exactly once"
    workers = {"ours": our_listener, "bq1": bq1_listener}
    for worker, tid, pid in ran:
        assert tasks[tid]["node"] == workers[worker], (worker, tasks[tid])
        assert tasks[tid]["result"] == f"{worker}:{tasks[tid]['parameters']}"
        assert tasks[tid]["pid"] == pid
    assert {worker for worker, _, _ in ran} == {"ours", "bq1"}
    assert Counter(r.lrange(COMPLETE, 0, -1)) == Counter(everything)
    assert r.smembers(STARTED) == set() and r.llen(PENDING) == 0

    reap(client)
    assert bq1_runner.alive(), bq1_runner.describe()
    assert ours.alive(), ours.describe()
    assert {our_listener, bq1_listener} <= r.smembers(LISTENERS)
    assert r.llen(reserved_key(bq1_listener)) == 0 and r.llen(reserved_key(our_listener)) == 0


def test_we_leave_alone_a_task_blueque1_reclaimed_from_our_dead_listener(
        bq1, ours, r, redis_url, start_bq1_runner):
    """Our listener dies between reserve and start; a blueque 1.0 runner starting on the same
    host reclaims the task (claim_orphan: our pid is gone) and runs it. While it runs, our
    reaper must not fail or requeue it: its runner is alive and its task process is running."""
    client = Client(redis_url)
    parameters = params(sleep=3)
    task_id = client.get_queue(Q).enqueue(parameters)
    dead = ours("reserve-and-die", Q)
    assert dead["task"] == task_id
    assert r.hget(task_key(task_id), "status") == "reserved"

    bq1_runner = start_bq1_runner(Q)
    bq1_listener = bq1_runner.first_json_line()["listener"]
    wait_for(lambda: r.hget(task_key(task_id), "status") == "started", 10,
             lambda: f"{r.hgetall(task_key(task_id))}\n{bq1_runner.describe()}")
    assert dead["listener"] not in r.smembers(LISTENERS)  # released by blueque 1.0
    running = r.hgetall(task_key(task_id))
    assert running["reclaimed_node"] == bq1_listener
    # 1.0's task process records its start, then calls the callback, which logs its run
    [(worker, _, pid)] = wait_for(lambda: runs(r), 10, bq1_runner.describe)
    assert (worker, running["pid"]) == ("bq1", pid)

    actions = reap(client)
    assert not [a for a in actions if a.task_id == task_id], actions
    assert r.hget(task_key(task_id), "status") == "started", r.hgetall(task_key(task_id))

    task = wait_finished(r, [task_id], bq1_runner)[task_id]
    assert (task["status"], task["result"]) == ("complete", f"bq1:{parameters}"), task
    assert r.lrange(COMPLETE, 0, -1) == [task_id] and r.llen(FAILED) == 0
    assert len(runs(r)) == 1


# 4 -----------------------------------------------------------------------------------------------

def finish_two(r, enqueue, start_runner, worker):
    """One task that succeeds and one that fails, run by the given runner, which is then
    stopped; returns their ids."""
    ok, bad = enqueue(params(n=1)), enqueue(params(fail=True))
    runner = start_runner(Q)
    tasks = wait_finished(r, [ok, bad], runner)
    runner.stop()
    assert tasks[ok]["status"] == "complete" and tasks[bad]["status"] == "failed", tasks
    assert tasks[bad]["error"] == f"{worker} failed on purpose"
    assert r.lrange(COMPLETE, 0, -1) == [ok] and r.lrange(FAILED, 0, -1) == [bad]
    return ok, bad


def test_blueque1_deletes_tasks_we_finished(bq1, r, redis_url, start_our_runner):
    client = Client(redis_url)
    ok, bad = finish_two(r, client.get_queue(Q).enqueue, start_our_runner, "ours")
    for task_id in (ok, bad):
        assert bq1("delete", Q, task_id) == {}
    assert not r.exists(task_key(ok), task_key(bad))
    assert r.llen(COMPLETE) == 0 and r.llen(FAILED) == 0
    assert client.get_task(ok).status is None and client.get_task(bad).status is None


def test_we_delete_tasks_blueque1_finished(bq1, r, redis_url, start_bq1_runner):
    client = Client(redis_url)
    queue = client.get_queue(Q)
    ok, bad = finish_two(r, lambda p: bq1("enqueue", Q, p)["id"], start_bq1_runner, "bq1")
    for task_id in (ok, bad):
        queue.delete_task(client.get_task(task_id))
    assert not r.exists(task_key(ok), task_key(bad))
    assert r.llen(COMPLETE) == 0 and r.llen(FAILED) == 0
    assert bq1("get-task", ok)["status"] is None and bq1("get-task", bad)["status"] is None


ETA_DELAY = 8.0  # seconds: long enough for two blueque 1.0 subprocesses to run before it,
#                  on a busy machine too (each starts an interpreter)


def still_before(eta):
    assert time.time() < eta, "too slow: the eta passed before the not-yet-due check"


def wait_until(eta):
    wait_for(lambda: time.time() > eta + 0.05, ETA_DELAY + 5, "eta")


def check_scheduled(r, task_id, eta):
    task = r.hgetall(task_key(task_id))
    assert (task["status"], float(task["eta"])) == ("scheduled", eta), task
    assert r.zscore(SCHEDULED, task_id) == eta


def check_moved(r, task_id, eta):
    """Moved to the queue: pending, in the pending list, its eta left in the hash."""
    task = r.hgetall(task_key(task_id))
    assert task["status"] == "pending", task
    assert float(task["eta"]) == eta and float(task["updated"]) >= eta
    assert r.zscore(SCHEDULED, task_id) is None
    assert r.lrange(PENDING, 0, -1) == [task_id]


def test_we_enqueue_due_tasks_blueque1_scheduled(bq1, r, redis_url):
    queue = Client(redis_url).get_queue(Q)
    eta, later = time.time() + ETA_DELAY, time.time() + 3600
    due = bq1("schedule", Q, "due", repr(eta))["id"]
    not_due = bq1("schedule", Q, "not due", repr(later))["id"]

    queue.enqueue_due_tasks()  # not due yet
    still_before(eta)
    check_scheduled(r, due, eta)
    wait_until(eta)
    queue.enqueue_due_tasks()

    check_moved(r, due, eta)
    check_scheduled(r, not_due, later)
    assert_bq1_reads(bq1, due, {"status": "pending", "parameters": "due"})
    assert_bq1_reads(bq1, not_due, {"status": "scheduled"})


def test_blueque1_enqueues_due_tasks_we_scheduled(bq1, r, redis_url):
    client = Client(redis_url)
    queue = client.get_queue(Q)
    eta, later = time.time() + ETA_DELAY, time.time() + 3600
    due, not_due = queue.schedule("due", eta), queue.schedule("not due", later)
    assert_bq1_reads(bq1, due, {"status": "scheduled", "queue": Q, "parameters": "due"})

    bq1("enqueue-due", Q)  # not due yet
    still_before(eta)
    check_scheduled(r, due, eta)
    wait_until(eta)
    bq1("enqueue-due", Q)

    check_moved(r, due, eta)
    check_scheduled(r, not_due, later)
    assert client.get_task(due).status == "pending" and client.get_task(due).eta == eta
    assert client.get_task(not_due).status == "scheduled"


# 5 -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("operation", ["enqueue", "schedule", "schedule in the past"])
def test_same_keys_and_fields_as_blueque1(operation, bq1, r, redis_url):
    """What each writes for the same call, compared byte for byte: key names, key types,
    hash fields and values, list and sorted-set contents (ids and timestamps aside)."""
    raw = redis.Redis.from_url(redis_url)
    parameters = params(n=5)
    eta = time.time() + (3600 if operation == "schedule" else -3600)

    if operation == "enqueue":
        theirs = bq1("enqueue", Q, parameters)["id"]
    else:
        theirs = bq1("schedule", Q, parameters, repr(eta))["id"]
    expected = snapshot(raw, [theirs])
    raw.flushdb()

    queue = Client(redis_url).get_queue(Q)
    mine = queue.enqueue(parameters) if operation == "enqueue" else queue.schedule(parameters, eta)
    ours = snapshot(raw, [mine])
    # our extension: the due index (queue -> earliest eta), which blueque 1.0 never reads
    due_index = ours.pop(b"blueque_due_queues", None)
    assert due_index == (("zset", [(Q.encode(), eta)]) if operation == "schedule" else None)
    assert ours == expected

    task = raw.hgetall(task_key(mine))
    assert task[b"created"] == task[b"updated"]
    assert abs(float(task[b"created"]) - time.time()) < 60
    raw.close()
