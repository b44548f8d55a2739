"""Sentinel failover on a real set-up (a primary, a replica, three sentinels): every connection
comes through Sentinel, and every process (listeners, their task processes, the scheduler, the
reaper) follows a new primary, with no task lost, stuck or run twice."""

import collections
import os
import time
from pathlib import Path

import pytest
import redis

from devtools.redis_sentinel import SERVICE, SentinelSetup
from devtools.servers import RedisServer, wait_for
from django_blueque.conf import get_client
from django_blueque.core.waiter import PendingWaiter
from tests.django_app.failover_app.tasks import work

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
    """A private server where a connection that bypassed Sentinel would land (its counts
    reset once started: see commands_received)."""
    server = RedisServer().start()
    probe = redis.Redis(port=server.port, protocol=2)
    probe.config_resetstat()
    probe.close()
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


def commands_received(server):
    """Every connection and command a server took since the decoy fixture reset its counts:
    {"connections": n, command: calls}, empty when it took none. Asked once, at the end of a
    test, in RESP2 (no HELLO): this function's own connection and INFO are not counted."""
    probe = redis.Redis(port=server.port, protocol=2)
    try:
        info = probe.info("stats", "commandstats")
    finally:
        probe.close()
    received = {name.removeprefix("cmdstat_"): stats["calls"] for name, stats in info.items()
                if name.startswith("cmdstat_") and name != "cmdstat_config|resetstat"}
    connections = info["total_connections_received"] - 1
    return {"connections": connections, **received} if connections else received


def alive(process):
    """The pid of a process that runs; if it exited, fail with its status and output."""
    if process.poll() is not None:
        raise AssertionError(f"{' '.join(process.args[2:])} (pid {process.pid}) exited with "
                             f"status {process.returncode}:\n{process.stdout.read()}")
    return process.pid


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
    waiter = PendingWaiter(client, "failover.work", block=60)
    try:
        waiter.arm()  # its peeks on the pending list and on the priority wake list
        assert [peek.conn._sock.getpeername()[1] for peek in waiter.peeks] == [
            steady_setup.master_port()] * 2
    finally:
        waiter.close()
    assert connections_received(decoy) == before + 1  # the count's own


def test_a_cut_connection_reconnects_where_sentinel_names_the_primary(settings, setup, decoy):
    """redis-py asks Sentinel only when a connection is taken from the pool: a command sent on
    a connection that was cut (here the UNWATCH redis-py sends after a transaction's WATCH
    lost its server, as the scheduler's periodic claim does in a failover) reconnected to the
    last address without asking, a demoted primary; a connection never asked would go to the
    OPTIONS address, the decoy here."""
    client = sentinel_settings(settings, setup, options={"port": decoy.port})
    old = setup.current_primary()
    pipe = client.redis.pipeline(transaction=True)
    pipe.watch("periodic")
    watching = pipe.execute_command("CLIENT", "ID")
    new = setup.failover()
    admin = redis.Redis(port=old.port, decode_responses=True)
    wait_for(lambda: admin.role()[0] == "slave", message="the old primary to be demoted")
    admin.client_kill_filter(_id=watching)  # as Sentinel does when it demotes a server
    admin.close()
    with pytest.raises(redis.WatchError):
        pipe.get("periodic")  # the WATCH's connection is gone; redis-py sends UNWATCH
    pool = client.redis.connection_pool
    assert pipe.connection is None and pool._in_use_connections == set()
    assert [conn._sock.getpeername()[1] for conn in pool._available_connections
            if conn._sock] == [new]  # the UNWATCH's, made where Sentinel names the primary
    fresh = pool.make_connection()  # as the pool makes one, not connected yet
    fresh.send_command("PING")  # redis-py connects it by itself, to its host and port
    assert fresh.read_response() == "PONG" and fresh._sock.getpeername()[1] == new
    fresh.disconnect()
    assert commands_received(decoy) == {}


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


@pytest.mark.slow
def test_a_listener_with_the_scheduler_reaches_nothing_but_sentinel_s_primary(
        settings, setup, decoy, manage, tmp_path):
    """Issue 38's set-up: OPTIONS names a decoy's host and port, and a listener with the
    scheduler and the reaper runs 20 tasks of 1 s through a SENTINEL FAILOVER: the decoy takes
    no connection and no command, and every task runs to its end (some twice: with
    WAIT_REPLICAS 0, what the old primary recorded in its last second may be lost, the
    documented asynchronous-replication case)."""
    runs = failover_env(manage, setup, tmp_path)
    manage.env["BLUEQUE_DEFAULT_PORT"] = str(decoy.port)
    sentinel_settings(settings, setup, options={"port": decoy.port})
    listener = manage.start("bq_listen", "--noreload", "--with-scheduler", "failover.work")
    for number in range(20):
        work.enqueue(number, seconds=1)
    wait_for(lambda: any("end" in events for events in read_runs(runs).values()),
             message="a task to end before the failover")
    setup.failover()
    wait_for(lambda: len(read_runs(runs)) == 20 and all(
        "end" in events for events in read_runs(runs).values()), timeout=60,
        message="every task to end")
    assert listener.poll() is None
    listener.terminate()
    listener.wait(30)
    assert commands_received(decoy) == {}


# -- defect 12: following a failover --------------------------------------------------------------

def test_a_readonly_reply_drops_every_connection_of_a_plain_pool():
    """Behind a URL (a DNS name that moves), a READONLY reply makes every connection of the
    pool reconnect, the busy ones included, instead of failing one command at a time."""
    from django_blueque.core import Client
    from django_blueque.core.connections import PrimaryMoved

    primary, other = RedisServer().start(), RedisServer().start()
    try:
        client = Client(primary.url)
        waiter = PendingWaiter(client, "q", block=60).peeks[0]
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
    for process in listeners + others:  # up (a command that starts while Redis does not
        # answer exits, as a supervisor expects): on a loaded machine it may not be yet
        wait_for(lambda process=process: old in remote_ports(alive(process)), timeout=30,
                 message=f"pid {process.pid} to start")
    new = fail()
    named = time.monotonic()
    for _ in range(20):  # written through Sentinel to the new primary
        work.enqueue(next(numbers), seconds=0.2)
    total = next(numbers)
    # every process's connections are on the new primary, none left on the old one
    for process in listeners + others:
        wait_for(lambda process=process: (lambda ports: new in ports and old not in ports)(
            remote_ports(alive(process))), timeout=8, message=f"pid {process.pid} to follow")
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
