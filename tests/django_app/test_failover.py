"""Sentinel failover on a real set-up (a primary, a replica, three sentinels): every connection
comes through Sentinel, and every process (listeners, their task processes, the scheduler, the
reaper) follows a new primary, with no task lost, stuck or run twice."""

import collections
import os
import time
from pathlib import Path

import pytest
import redis

from django_blueque.conf import get_client
from django_blueque.core.waiter import PendingWaiter
from tests.django_app.failover_app.tasks import work
from tests.redis_server import RedisServer
from tests.sentinel_setup import SERVICE, SentinelSetup
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def steady_setup():
    """A Sentinel set-up that no test fails over."""
    setup = SentinelSetup().start()
    yield setup
    setup.close()


@pytest.fixture
def setup():
    """A Sentinel set-up of the test's own (it will fail it over)."""
    setup = SentinelSetup().start()
    yield setup
    setup.close()


@pytest.fixture
def decoy():
    """A private server where a connection that bypassed Sentinel would land."""
    server = RedisServer().start()
    yield server
    server.close()


def sentinel_settings(settings, setup, **extra):
    settings.BLUEQUE = {"SENTINELS": setup.sentinels, "SERVICE_NAME": SERVICE,
                        "OPTIONS": {"socket_timeout": 5, **extra.pop("options", {})}, **extra}
    get_client.cache_clear()
    return get_client()


def connections_received(server):
    """How many connections a server accepted (this function's own included)."""
    client = redis.Redis(port=server.port)
    try:
        return client.info("stats")["total_connections_received"]
    finally:
        client.close()


def remote_ports(pid):
    """The remote ports of a process's established TCP connections (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and fields[3] == "01":  # ESTABLISHED
                ports.add(int(fields[2].split(":")[1], 16))
    return ports


# -- defect 11: the listener's blocking peek ------------------------------------------------------

def test_the_blocking_peek_connects_through_sentinel(settings, steady_setup, decoy):
    client = sentinel_settings(settings, steady_setup, options={"port": decoy.port})
    before = connections_received(decoy)
    waiter = PendingWaiter(client, "failover.work")
    try:
        waiter.arm()  # its peeks on the pending list and on the priority wake list
        assert [peek.conn._sock.getpeername()[1] for peek in waiter.peeks] == [
            steady_setup.master_port()] * 2
    finally:
        waiter.close()
    assert connections_received(decoy) == before + 1  # the count's own


def failover_env(manage, setup, tmp_path):
    manage.env.update(DJANGO_SETTINGS_MODULE="tests.django_app.failover_settings",
                      PYTHONPATH=str(REPO), FAILOVER_RUNS=str(tmp_path / "runs"),
                      BLUEQUE_SENTINELS=",".join(str(port) for _, port in setup.sentinels))
    return tmp_path / "runs"


def read_runs(path):
    """{task number: [events]} from the task's record file."""
    runs = collections.defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            number, event, *_ = line.split()
            runs[int(number)].append(event)
    return runs


def test_a_listener_picks_a_task_up_at_once_with_sentinel(settings, steady_setup, decoy,
                                                          manage, tmp_path):
    runs = failover_env(manage, steady_setup, tmp_path)
    manage.env["BLUEQUE_DEFAULT_PORT"] = str(decoy.port)
    sentinel_settings(settings, steady_setup)
    before = connections_received(decoy)
    listener = manage.start("bq_listen", "--noreload", "failover.work")
    client = get_client()
    wait_for(lambda: client.redis.smembers(client.keys.listeners("failover.work")),
             message="the listener to register")
    time.sleep(0.5)  # idle: waiting on its blocking peek
    began = time.monotonic()
    work.enqueue(1, seconds=0)
    wait_for(lambda: read_runs(runs)[1] == ["begin", "end"], timeout=10,
             message="the task to run")
    listener.terminate()
    assert time.monotonic() - began < 5
    assert connections_received(decoy) == before + 1  # the count's own


# -- defect 12: following a failover --------------------------------------------------------------

def test_a_readonly_reply_drops_every_connection_of_a_plain_pool():
    """Behind a URL (a DNS name that moves), a READONLY reply makes every connection of the
    pool reconnect, the busy ones included, instead of failing one command at a time."""
    from django_blueque.core import Client
    from django_blueque.core.connections import PrimaryMoved

    primary, other = RedisServer().start(), RedisServer().start()
    try:
        client = Client(primary.url)
        waiter = PendingWaiter(client, "q").peeks[0]
        waiter.arm()  # a listener's blocking peek, holding a connection
        client.redis.set("x", "1")
        admin = redis.Redis(port=primary.port)
        admin.execute_command("REPLICAOF", "127.0.0.1", other.port)  # demoted
        with pytest.raises(PrimaryMoved):
            client.redis.set("x", "2")
        with pytest.raises(redis.ConnectionError):
            waiter.settle()  # cut: its next arm reconnects
        admin.execute_command("REPLICAOF", "NO", "ONE")  # the name points at a primary again
        assert client.redis.set("x", "3")
        waiter.arm()
        assert waiter.conn._sock.getpeername()[1] == primary.port
        waiter.close()
    finally:
        primary.close()
        other.close()


def wait_replicated(setup):
    """Until the replica has every write the primary acknowledged."""
    primary = redis.Redis(port=setup.master_port())
    replica = redis.Redis(port=setup.replica.port if setup.master_port() == setup.primary.port
                          else setup.primary.port)
    wait_for(lambda: replica.info("replication").get("slave_repl_offset", -1) >=
             primary.info("replication")["master_repl_offset"], message="replication")


def follow_a_failover(settings, setup, manage, tmp_path, fail, wait_replicas=0):
    """Two listeners (concurrency 2), the scheduler and the reaper work through tasks while
    ``fail`` moves the primary: every process follows, every task runs once to its end."""
    runs = failover_env(manage, setup, tmp_path)
    manage.env["BLUEQUE_WAIT_REPLICAS"] = str(wait_replicas)
    client = sentinel_settings(settings, setup, WAIT_REPLICAS=wait_replicas)
    listeners = [manage.start("bq_listen", "--noreload", "--concurrency", "2", "failover.work")
                 for _ in range(2)]
    others = [manage.start("bq_schedule", "--interval", "0.2"),
              manage.start("bq_reap", "--interval", "1")]
    numbers = iter(range(1000))
    for _ in range(40):
        work.enqueue(next(numbers), seconds=0.2)
    for delay in (2, 4, 6, 8):
        work.schedule(time.time() + delay, next(numbers), seconds=0.2)
    wait_replicated(setup)
    wait_for(lambda: sum("end" in events for events in read_runs(runs).values()) >= 8,
             message="tasks to run before the failover")
    old = setup.master_port()
    new = fail()
    named = time.monotonic()
    for _ in range(20):  # written through Sentinel to the new primary
        work.enqueue(next(numbers), seconds=0.2)
    total = next(numbers)
    # every process's connections are on the new primary, none left on the old one
    for process in listeners + others:
        wait_for(lambda process=process: (lambda ports: new in ports and old not in ports)(
            remote_ports(process.pid)), timeout=8, message=f"pid {process.pid} to follow")
    assert time.monotonic() - named < 8
    wait_for(lambda: len(read_runs(runs)) == total and all(
        "end" in events for events in read_runs(runs).values()), timeout=60,
        message=lambda: "every task to run; not run: " + str({
            task_id: client.redis.hgetall(client.keys.task(task_id))
            for task_id in client.redis.lrange(client.keys.failed("failover.work"), 0, -1)}))
    time.sleep(1)  # a second run would show now
    twice = {number: events for number, events in read_runs(runs).items()
             if events != ["begin", "end"]}
    assert twice == {}
    complete = client.redis.llen(client.keys.complete("failover.work"))
    assert complete == total
    for process in listeners + others:
        assert process.poll() is None, f"pid {process.pid} exited"


@pytest.mark.slow
@pytest.mark.soak
def test_every_process_follows_a_sentinel_failover(settings, setup, manage, tmp_path):
    """The old primary accepts writes until Sentinel reconfigures it (about 10 s): without
    WAIT_REPLICAS, what was reserved and run there in the second or two before every process
    followed is not on the new primary, and runs again (26 of 64 tasks here)."""
    follow_a_failover(settings, setup, manage, tmp_path, setup.failover, wait_replicas=1)


@pytest.mark.slow
@pytest.mark.soak
def test_every_process_follows_when_the_primary_is_killed(settings, setup, manage, tmp_path):
    follow_a_failover(settings, setup, manage, tmp_path, setup.kill_primary)
