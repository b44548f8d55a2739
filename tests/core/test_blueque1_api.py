"""blueque 1.0 programs on the engine, where it does more than 1.0 (the black-box tests of what
1.0 itself pins are in tests/interop/blueque1/behaviour.py, run against both): listeners held
through long tasks, tasks started for another pid, orphans of the engine's own processes."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from django_blueque.core import Client, Timings, reap
from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import REPO, SHORT_TIMINGS, wait_for

SHORT = Timings(**SHORT_TIMINGS)


@pytest.fixture
def short_client(redis_url):
    """A client whose listeners and leases run at a 3 s lease."""
    engine = Client(redis_url, timings=SHORT)
    yield engine
    engine.redis.close()

HOST = socket.getfqdn()


def task_key(task_id):
    return f"blueque_task_{task_id}"


def in_a_process_that_dies(redis_url, code):
    """Run ``code`` (``c`` is an engine Client, ``os`` imported) in a new process that then
    exits without cleaning up: what a crash leaves. Returns its pid, gone once this returns."""
    program = (f"import os\nfrom django_blueque.core import Client\nc = Client({redis_url!r})\n"
               f"{code}\nprint(os.getpid(), flush=True)\nos._exit(0)\n")
    process = subprocess.run([sys.executable, "-c", program], cwd=REPO, timeout=60,
                             env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                             text=True)
    assert process.returncode == 0, process.stderr
    return int(process.stdout.strip().splitlines()[-1])


RESERVE_AND_DIE = "l = c.get_listener('q'); l.listen()"
START_AND_DIE = "l = c.get_listener('q'); p = c.get_processor(l.listen()); p.start(os.getpid())"


@pytest.mark.slow
def test_a_listener_held_through_a_long_task_stays_alive(short_client, r):
    """The 1.0 pattern: take a task, run it for longer than a heartbeat lasts, without calling
    listen() meanwhile. The listener must stay registered, for the reaper and for its own
    claim_orphan()."""
    client = short_client
    task_id = client.get_queue("q").enqueue("long")
    listener = client.get_listener("q")
    try:
        processor = client.get_processor(listener.listen())
        assert processor.start(os.getpid())
        time.sleep(SHORT.heartbeat + 5)

        assert listener.claim_orphan() is None
        assert reap(client) == []
        assert r.smembers("blueque_listeners_q") == {listener.id}
        assert r.zscore("blueque_queues", "q") == 1.0
        assert processor.complete("done") == "complete"
        assert r.hget(task_key(task_id), "status") == "complete"
    finally:
        listener.stop()


@pytest.mark.slow
def test_a_task_started_for_another_pid_keeps_its_lease_while_that_process_runs(short_client,
                                                                                 r):
    """1.0's processor.start(pid): the caller holds the lease for the task's process. It lets
    it go once that process (on this host) exits; a pid it cannot see is not watched."""
    client = short_client
    worker = subprocess.Popen(["sleep", "120"])
    queue = client.get_queue("q")
    watched, unseen = queue.enqueue("watched"), queue.enqueue("unseen")
    listener = client.get_listener("q")
    try:
        processors = {task_id: client.get_processor(listener.listen()) for task_id in
                      (watched, unseen)}
        assert processors[watched].start(worker.pid)
        assert processors[unseen].start(123456)  # as blueque 1.0's integration test does
        time.sleep(SHORT.lease + 5)

        assert reap(client) == []
        assert r.exists(f"blueque_lease_{watched}", f"blueque_lease_{unseen}") == 2

        worker.kill()
        worker.wait()
        wait_for(lambda: not r.exists(f"blueque_lease_{watched}"), SHORT.lease + 15,
                 "the lease of a task whose process exited unreported to lapse")
        assert r.exists(f"blueque_lease_{unseen}")
        assert processors[unseen].complete("done") == "complete"
        assert r.hget(task_key(watched), "status") == "started"  # the reaper's, from now on
    finally:
        worker.kill()
        worker.wait()
        listener.stop()


def test_claim_orphan_returns_the_newest_task_and_requeues_the_others(client, r, redis_url):
    """1.0 returned the newest task of a dead listener and lost the others; they go back to
    the queue."""
    queue = client.get_queue("q")
    older, newer = queue.enqueue("older"), queue.enqueue("newer")
    dead = f"{HOST}_{in_a_process_that_dies(redis_url, RESERVE_AND_DIE + '; l.listen()')}"
    listener = client.get_listener("q")
    try:
        orphan = listener.claim_orphan()

        assert (orphan.id, orphan.status, orphan.node) == (newer, "reserved", dead)
        assert r.hget(task_key(newer), "reclaimed_node") == listener.id
        assert r.lrange("blueque_pending_tasks_q", 0, -1) == [older]
        assert r.hget(task_key(older), "status") == "pending"
        assert r.smembers("blueque_listeners_q") == {listener.id}
        assert r.zrange("blueque_listener_leases_q", 0, -1) == [listener.id]
        assert not r.exists(f"blueque_listener_{dead}")
        assert listener.listen().id == older
    finally:
        listener.stop()


def test_the_runner_recovers_what_its_dead_predecessors_left_on_this_host(
        client, r, redis_url, start_runner):
    """Orphans made by the engine itself through the 1.0 API (listener ids ``<host>_<pid>``): a
    listener that died holding a reserved task, one that died with its task process. A new
    runner recovers them when it starts, long before any heartbeat expires. A runner killed
    while its task process runs on is not judged by its pid (containers may share a host name:
    its heartbeat says when it is dead, to the reaper), and its task process ends its task."""
    queue = client.get_queue("q")
    survivor = queue.enqueue(json.dumps({"wait_for": "gate", "return": "survived"}))
    killed = start_runner("q", concurrency=1)
    # its code has begun (the callback's first act): "started" is written by the listener
    # before it hands the task to its process, and a kill in between leaves a task that never
    # ran, for the reaper (none here), not a running survivor
    wait_for(lambda: any(json.loads(run)["id"] == survivor for run in r.lrange(RUNS_KEY, 0, -1)),
             20, killed.describe)
    killed.popen.kill()
    killed.wait(10)
    reserved = queue.enqueue(json.dumps({"return": "recovered"}))
    reserved_by = in_a_process_that_dies(redis_url, RESERVE_AND_DIE)
    lost = queue.enqueue("lost")
    lost_by = in_a_process_that_dies(redis_url, START_AND_DIE)
    dead = {f"{HOST}_{reserved_by}", f"{HOST}_{lost_by}"}
    assert dead | {killed.listener_id} <= r.smembers("blueque_listeners_q")
    began = time.monotonic()

    runner = start_runner("q")

    wait_for(lambda: r.hget(task_key(reserved), "status") == "complete", 20, runner.describe)
    wait_for(lambda: r.hget(task_key(lost), "status") == "failed", 20, runner.describe)
    assert time.monotonic() - began < Timings().heartbeat
    assert r.hget(task_key(reserved), "result") == "recovered"
    assert r.hget(task_key(lost), "error_type") == "ListenerLost"
    assert not dead & r.smembers("blueque_listeners_q")
    assert killed.listener_id in r.smembers("blueque_listeners_q")
    assert r.hget(task_key(survivor), "status") == "started"  # its process runs on
    r.set("gate", "open")
    wait_for(lambda: r.hget(task_key(survivor), "status") == "complete", 20,
             lambda: f"{r.hgetall(task_key(survivor))}\n{killed.describe()}\n{runner.describe()}")
    assert r.hget(task_key(survivor), "result") == "survived"
