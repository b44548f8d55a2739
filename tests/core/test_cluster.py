"""Cluster mode on a real 3-master Redis Cluster (devtools/redis_cluster.py): every key of a
queue in its queue's slot, queues spread over the masters, and the engine's whole cycle (enqueue,
listen, schedule, retry, cancel, reap) working across them, through a live resharding too."""

import json
import os
import signal
import threading
import time
import uuid

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, ClusterError, TryAgainError

from django_blueque.core import Client, bulk, enqueue_due_tasks, reap
from django_blueque.core import keys as k
from django_blueque.core.cluster import slot_moving
from django_blueque.core.maintenance import Reaper
from django_blueque.core.outages import is_transient
from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import Runner, command_calls, requests_received, wait_for

pytestmark = pytest.mark.django_agnostic

# Keys that are not of one queue, by design (see keys.py): the queues set, listener info,
# the reaper's clock. Everything else must carry a queue's hash tag.
UNTAGGED = ("blueque_queues", "blueque_listener_", "blueque_reaper_clock", RUNS_KEY)


@pytest.fixture
def client(redis_cluster):
    for port in redis_cluster.ports:  # the cluster is the session's: emptied for each test
        redis_cluster.client(port).flushall()
    engine = Client(redis_cluster.url, cluster=True)
    yield engine
    engine.redis.close()


@pytest.fixture
def queues(redis_cluster):
    """Three fresh queue names, one owned by each master."""
    found = {}
    while len(found) < len(redis_cluster.ports):
        name = f"cq-{uuid.uuid4().hex[:6]}"
        found.setdefault(redis_cluster.owner_port(redis_cluster.slot_of(f"{{{name}}}")), name)
    return [found[port] for port in redis_cluster.ports]


@pytest.fixture
def runner(redis_cluster, tmp_path, tag):
    """runner(queues, **options): a ForkingRunner process on the cluster (killed at the end,
    with its task processes, by the tag fixture)."""
    return lambda queues, **options: Runner(redis_cluster.url, queues, tmp_path, tag,
                                            cluster=True, **options)


def runs(client):
    """{task id: [attempt, ...]} of every run the test callback recorded."""
    found = {}
    for line in client.redis.lrange(RUNS_KEY, 0, -1):
        run = json.loads(line)
        found.setdefault(run["id"], []).append(run["attempt"])
    return found


def status(client, task_id):
    return client.get_task(task_id).status


def node_keys(redis_cluster, port):
    return {key.decode() for key in redis_cluster.client(port).scan_iter(count=1000)}


def test_every_key_of_a_queue_lives_on_its_queues_master(redis_cluster, client, queues,
                                                         runner):
    """Tasks of every kind (plain, priority, unique, scheduled, failed, retried) through a
    runner on three queues: each key carries its queue's tag, and is on that queue's master."""
    ids = []
    for queue in queues:
        named = client.get_queue(queue)
        ids += [named.enqueue("plain"), named.enqueue("high", priority=5),
                named.enqueue("one", unique_key="k"), named.schedule("soon", time.time() + 0.5),
                named.enqueue(json.dumps({"raise": "no"}), retries=1, backoff=0.1)]
    assert all(task_id.endswith("}") for task_id in ids)
    runner(queues, duties=0.2)
    wait_for(lambda: all(status(client, task_id) in ("complete", "failed") for task_id in ids),
             timeout=30, message="every task to end")
    for port, queue in zip(redis_cluster.ports, queues, strict=True):
        keys = node_keys(redis_cluster, port)
        tagged = {key for key in keys if not key.startswith(UNTAGGED)}
        assert tagged, f"no key of {queue} on its master"
        assert {key for key in tagged if "{" + queue + "}" not in key} == set()
    assert set(client.queue_names()) >= set(queues)


def test_a_runner_listens_to_queues_on_every_master(client, queues, runner):
    """One listener, three queues on three masters: its blocking peeks wait on three nodes,
    and a task enqueued on any of them is picked up at once."""
    runner(queues)
    wait_for(lambda: all(client.redis.scard(client.keys.listeners(q)) for q in queues),
             message="the listener to register on every queue")
    time.sleep(0.3)  # idle: its peeks are armed
    ids = [client.get_queue(queue).enqueue(f"task of {queue}") for queue in queues * 3]
    wait_for(lambda: all(status(client, task_id) == "complete" for task_id in ids),
             timeout=20, message="every task to complete")
    assert sorted(runs(client)) == sorted(ids)
    for queue in queues:
        assert client.redis.llen(client.keys.complete(queue)) == 3


def test_schedule_retry_and_cancel(client, queues, runner):
    queue = client.get_queue(queues[1])
    runner([queues[1]], duties=0.2, concurrency=2, kill_grace=60)
    later = queue.schedule("later", time.time() + 1)
    retried = queue.enqueue(json.dumps({"fail_before": 2}), retries=2, backoff=0.2)
    busy = f"busy-{queues[1]}"  # set once the task ignores SIGTERM (see callbacks.py)
    long = queue.enqueue(json.dumps({"ignore_sigterm": True, "concurrency": busy,
                                     "until_stopped": f"stopped-{queues[1]}"}))
    wait_for(lambda: client.redis.get(busy) == "1", message="the long task to start")
    assert client.cancel(long) == "requested"
    wait_for(lambda: client.redis.lrange(f"stopped-{queues[1]}", 0, -1) == ["stopped"],
             timeout=20, message="the task to be told to stop (through its queue's cancels)")
    wait_for(lambda: status(client, long) == "failed", timeout=20,
             message="the cancelled task to fail")
    assert client.get_task(long).error_type == "django_blueque.Cancelled"
    wait_for(lambda: status(client, later) == "complete" and status(client, retried) ==
             "complete", timeout=20, message="the scheduled and retried tasks to complete")
    assert runs(client)[retried] == [1, 2]
    assert client.get_task(later).status == "complete"


@pytest.mark.slow
def test_the_reaper_recovers_a_killed_listeners_tasks(client, queues, runner):
    """SIGKILL of a runner and its task process: once its heartbeat and the task's lease lapse,
    the reaper (a pass over every queue's indexes, each on its master) releases it and retries
    the task, which a new runner completes."""
    queue = client.get_queue(queues[2])
    first = runner([queues[2]])
    task_id = queue.enqueue(json.dumps({"sleep": 60}), retries=1, backoff=0)
    wait_for(lambda: task_id in runs(client), message="the task to start")
    first.signal(signal.SIGKILL)
    os.kill(client.get_task(task_id).pid, signal.SIGKILL)
    wait_for(lambda: client.protocol.upkeep.lapsed_leases(), timeout=30,
             message="the lease to lapse")
    wait_for(lambda: (queues[2], first.listener_id) in [
        (queue, listener) for queue, listener, _ in client.protocol.upkeep.lapsed_listeners()],
        timeout=10, message="the listener's heartbeat to lapse")
    actions = reap(client, confirm=0)
    assert task_id in {action.task_id for action in actions}
    assert first.listener_id in {action.listener_id for action in actions}
    assert not client.redis.sismember(client.keys.listeners(queues[2]), first.listener_id)
    assert client.get_task(task_id).status in ("pending", "scheduled")
    runner([queues[2]], duties=0.2)
    wait_for(lambda: runs(client)[task_id] == [1, 2], timeout=20,
             message="the task to run again")


def test_a_resharding_loses_and_repeats_nothing(redis_cluster, client, queues, runner):
    """A queue's slot moves to another master, key by key, while tasks are enqueued and a
    listener takes them: every task runs exactly once (MOVED and ASK are followed)."""
    name = queues[0]
    queue = client.get_queue(name)
    runner([name], concurrency=2)
    ids, errors, stop = [], [], threading.Event()

    def produce():
        producer = Client(redis_cluster.url, cluster=True)
        while not stop.is_set():
            try:
                ids.append(producer.get_queue(name).enqueue("x"))
            except Exception as exc:  # asserted below: a refusal must never reach a producer
                errors.append(exc)
            time.sleep(0.005)
        producer.redis.close()

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        time.sleep(0.5)
        slot = redis_cluster.slot_of("{" + name + "}")
        redis_cluster.move_slot(slot, redis_cluster.ports[1], keys_per_step=3,
                          between=lambda: time.sleep(0.02))
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert redis_cluster.owner_port(slot) == redis_cluster.ports[1]
    ids.append(queue.enqueue("after"))
    wait_for(lambda: all(status(client, task_id) == "complete" for task_id in ids),
             timeout=60, message=lambda: "every task to complete: " + str(
                 {status(client, task_id) for task_id in ids}))
    done = runs(client)
    assert {task_id: done.get(task_id) for task_id in ids} == {
        task_id: [1] for task_id in ids}
    assert isinstance(client.redis, RedisCluster)


def test_cluster_key_names():
    """The names the README documents; ids carry their queue's tag; braces are refused."""
    keys = k.Keys(cluster=True)
    assert keys.pending("emails") == "blueque_pending_tasks_{emails}"
    assert keys.lease_expiries("emails") == "blueque_lease_expiries_{emails}"
    assert keys.cancels("host~1_2", "emails") == "blueque_cancels_{emails}_host~1_2"
    assert keys.queues == "blueque_queues"
    task_id = keys.new_task_id("emails")
    assert task_id.endswith("{emails}") and keys.queue_of(task_id) == "emails"
    assert keys.around(keys.listeners) == ("blueque_listeners_{", "}")
    with pytest.raises(ValueError, match="hash tag"):
        keys.check_task_id("emails", "plain-id")
    with pytest.raises(ValueError, match="braces"):
        keys.check_queue("a{b}")
    plain = k.Keys()  # blueque 1.0's names are untouched
    assert plain.pending("emails") == "blueque_pending_tasks_emails"
    assert plain.lease_expiries("emails") == "blueque_lease_expiries"
    assert plain.queue_of(plain.new_task_id("emails")) == ""


def test_a_client_made_from_a_cluster_client(redis_cluster):
    """Client(redis_client=RedisCluster(...)) gets its own cluster client, in cluster mode."""
    given = RedisCluster.from_url(redis_cluster.url)  # bytes, as a cache's client would be
    client = Client(redis_client=given)
    try:
        assert client.keys.cluster and client.redis is not given
        task_id = client.get_queue("given").enqueue("x")
        assert client.get_task(task_id).parameters == "x"  # decoded: the engine's own options
        assert given.hget(client.keys.task(task_id), "parameters") == b"x"
        with pytest.raises(ValueError, match="braces"):
            client.get_queue("a{b}").enqueue("x")
    finally:
        client.redis.close()
        given.close()


def test_bulk_jobs_on_queues_of_every_master(client, queues):
    """A bulk retry of each queue's failed list, advanced by the reaper's loop: its job, its
    queue's running-jobs set and its tasks are in the queue's slot."""
    failed = {}
    for queue in queues:
        ids = client.get_queue(queue).enqueue_many(["x"] * 30)
        for task_id in ids:  # fail them the way the listener does, through the protocol
            client.protocol.take(queue, "host~1_1", "token", 1)
            client.protocol.finish(queue, task_id, listener_id="host~1_1", pid=1,
                                   token="token", outcome="failed", value="boom",
                                   error_type="builtins.ValueError")
        failed[queue] = ids
        assert bulk.start_job(client, "retry", "failed", queue, "tester")
    assert sorted(client.protocol.admin.running_bulk_jobs()) == sorted(
        bulk.bulk_job_id("retry", "failed", queue) for queue in queues)
    while bulk.advance_jobs(client):
        pass
    for queue, ids in failed.items():
        assert client.redis.llen(client.keys.failed(queue)) == 0
        assert {client.get_task(task_id).status for task_id in ids} == {"pending"}
    assert client.protocol.admin.running_bulk_jobs() == set()


def test_a_pass_reads_every_queues_indexes_in_a_round_trip_per_node(redis_cluster, client):
    """The scheduler and the reaper read each queue's indexes (one per queue in cluster
    mode) in pipelines: a pass over 300 queues costs a few requests per node, not one per
    queue and index, and never asks a server for a command's keys."""
    for number in range(300):
        client.get_queue(f"many-{number:03d}").enqueue("x")
    nodes = [redis_cluster.client(port) for port in redis_cluster.ports]

    def reads_during(work):
        before = [requests_received(node) for node in nodes]
        work()
        return sum(requests_received(node) - was for node, was in zip(nodes, before, strict=True))

    started = time.monotonic()
    sent = reads_during(lambda: (enqueue_due_tasks(client), Reaper(client.protocol).reap()))
    # what the servers read meanwhile from other clients; a loaded machine splits a pipeline
    # into more reads (63 here alone, 105 in a loaded CI run, with the reaper's waiting and
    # settling indexes read too)
    background = reads_during(lambda: time.sleep(time.monotonic() - started))
    assert sent - background < 200  # 300 queues x 6 indexes read one by one would be 1,800
    assert not any("command|getkeys" in command_calls(node) for node in nodes)


def test_a_periodic_run_is_claimed_and_enqueued_in_one_transaction(client, queues):
    """enqueue_periodic's WATCH/MULTI holds the guard key and the enqueue script, both in the
    queue's slot."""
    made = lambda: ("tick", {})  # noqa: E731
    assert client.protocol.upkeep.enqueue_periodic(queues[0], 100.0, make_task=made) == []
    [task_id] = client.protocol.upkeep.enqueue_periodic(queues[0], 160.0, make_task=made)
    assert client.protocol.upkeep.enqueue_periodic(queues[0], 160.0, make_task=made) is None
    assert task_id.endswith(f"{{{queues[0]}}}") and status(client, task_id) == "pending"
    assert client.redis.get(client.keys.periodic(queues[0])) == "160.0"


def test_a_batch_of_several_script_calls_is_one_transaction(client, queues):
    ids = client.get_queue(queues[1]).enqueue_many(["x"] * 2500)  # 3 calls in one MULTI
    assert len(set(ids)) == 2500
    assert client.redis.llen(client.keys.pending(queues[1])) == 2500


@pytest.mark.parametrize("error, transient", [
    (TryAgainError("Multiple keys request during rehashing of slot"), True),
    (ClusterDownError("The cluster is down"), True),
    (ClusterError("TTL exhausted."), True),
    (redis.ResponseError("Script attempted to access a non local key in a cluster node "
                         "script: 9e63..., on @user_script:209."), True),
    (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
     False),
])
def test_a_cluster_refusal_is_an_outage_not_an_error(error, transient):
    """Every loop waits through a slot that moves or a node that fails over (outages.py);
    only a refusal that wrote nothing is retried at once by ClusterProtocol."""
    assert is_transient(error) is transient
    assert slot_moving(error) is (transient and not isinstance(error, ClusterDownError))


def test_a_sigkilled_task_resumes_at_its_checkpoint_on_a_cluster(client, queues, runner):
    """checkpoint.lua, and finish.lua recording usage, touch the task hash alone: its queue's
    slot (issue 39)."""
    queue = queues[1]
    task_id = client.get_queue(queue).enqueue(json.dumps({"steps": [4, 2]}), retries=1)
    listener = runner(queue)
    wait_for(lambda: status(client, task_id) == "complete", 30, listener.describe)
    task = client.get_task(task_id)
    assert client.redis.lrange(f"{task_id}:began", 0, -1) == ["1", "3"]
    assert json.loads(task.checkpoint) == {"step": 4}
    assert [run["attempt"] for run in json.loads(task.fields["usage"])] == [1, 2]
    assert client.protocol.admin.clear_checkpoint(task_id)
    assert client.get_task(task_id).checkpoint is None
