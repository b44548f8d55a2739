"""The faults the soak injects, one at a time at seeded random moments. Each returns a line
saying what it did; those that take a task from a live process record it (for the recovery
time and the run-twice exemption), those that take Redis away record the outage."""

import os
import signal
import time

import redis

from devtools.servers import answers, wait_for

from .load import LONG_KINDS
from .servers import descendants_of
from .watch import Watch

LEASE = 15.0  # the engine's listener and task lease, which the long stops must outlast
IDLE_WAIT = 60.0
"""How long idle_listener_stop waits for a listener that runs no task. The backlog the
earlier faults leave (Redis or a listener stopped while sleeping tasks keep coming) keeps every
listener busy until it drains: with the limits' tasks added, a short soak (seed 873549) found
none within 30 s of t+75, one after 33 s."""


class Faults:
    """The injector. ``soak`` is the run (see bench/soak.py): its rng, Redis set-up, supervised
    listeners, side channel and the records the ledger reads."""

    KINDS = ("listener_kill", "task_kill", "listener_term", "listener_hup", "listener_stop",
             "redis_kill", "redis_stop", "client_kill", "redis_oom", "task_stop",
             "idle_listener_stop", "node_kill", "skewed_node_kill")
    SENTINEL_KINDS = ("failover",)
    SINGLE_REDIS_KINDS = ("task_partition",)  # through the proxy in front of the one Redis

    def __init__(self, soak):
        self.soak = soak
        self.rng = soak.fault_rng
        self.watch = Watch(soak)

    def kinds(self):
        return self.KINDS + (self.SENTINEL_KINDS if self.soak.redis.sentinel
                             else self.SINGLE_REDIS_KINDS)

    def run(self, kind):
        return getattr(self, kind)()

    # -- listeners and their processes ---------------------------------------------------------

    def _listeners(self, skewed=False):
        return [p for p in self.soak.listeners if bool(p.skew) == skewed]

    def _listener(self, skewed=False):
        """(listener, pid): a listener up for 5 s at least (one just restarted may not handle
        SIGHUP yet), waiting a while for one, and the pid of the run found so, which the fault
        signals. Not ``listener.pid`` later: a run that had just died may be restarted
        meanwhile, and the signal would hit the new process before it handles it (seed 4444:
        a SIGHUP killed a listener 0.1 s old)."""
        deadline = time.monotonic() + 15
        while True:
            settled = [p for p in self._listeners(skewed) if time.time() - p.runs[-1][1] > 5]
            if settled or time.monotonic() > deadline:
                listener = self.rng.choice(settled or self._listeners(skewed))
                return listener, listener.runs[-1][0]
            time.sleep(0.3)

    def _displace(self, task_ids, at):
        with self.soak.lock:
            self.soak.displaced.extend((at, task_id) for task_id in task_ids)

    def _stop_listener(self, listener, pid, signum):
        """Signal a listener whose exit the fault expects; the time, or None if it had exited
        on its own just before (one that restarts while Redis is away refuses to start)."""
        listener.expect_exit()
        at = self.soak.signalled[pid] = time.time()
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            listener.unexpect_exit()
            del self.soak.signalled[pid]
            return None
        return at

    def _abandon_gil_runs(self, pid):
        """Before listener ``pid`` leaves at once (SIGKILL, or a second stop) or is stopped past a
        lease: its task processes go on, each renewing its own lease, but a "gil" task's
        process holds its GIL past a lease, so nobody renews it and it is rightly run again
        (a run the ledger does not hold against the engine)."""
        running = self.watch.running_tasks()
        for child in descendants_of(pid):
            if child in running and self.soak.kind_of(running[child]) == "gil":
                with self.soak.lock:
                    self.soak.abandoned.setdefault(running[child], set()).add(child)

    def listener_kill(self, skewed=False):
        listener, pid = self._listener(skewed)
        held = self.watch.reserved_unstarted(pid)
        self._abandon_gil_runs(pid)
        at = self._stop_listener(listener, pid, signal.SIGKILL)
        if at is None:
            return f"SIGKILL {listener.name}: it had exited on its own (see 'refused to start')"
        self._displace(held, at)
        return f"SIGKILL {listener.name} (pid {pid}), {len(held)} reserved task(s)"

    def node_kill(self, skewed=False):
        """A machine dies: SIGKILL the listener and every process it forked at once; its
        running tasks are recovered from their leases alone."""
        listener = self._await_long_runs(self._listeners(skewed))
        held = self.watch.reserved_unstarted(listener.pid)
        os.kill(listener.pid, signal.SIGSTOP)  # its processes are listed before it dies
        children = descendants_of(listener.pid)
        running = self.watch.running_tasks()
        listener.expect_exit()
        at = time.time()
        self.soak.signalled[listener.pid] = at
        for pid in [listener.pid, *children]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        victims = [pid for pid in children if pid in running]
        self.watch.confirm_dead(children)
        # every task process it killed, its code ended or not: one whose code had just ended
        # may die before its end reaches Redis, and its task runs again (a killed run)
        for pid, task_id in self.watch.tasks_of(children).items():
            with self.soak.lock:
                self.soak.killed.setdefault(task_id, set()).add(pid)
        self._displace(held | {running[pid] for pid in victims}, at)
        return (f"SIGKILL {listener.name} (pid {listener.pid}) and its processes: "
                f"{len(victims)} running task(s), {len(held)} reserved")

    def skewed_node_kill(self):
        return self.node_kill(skewed=True)

    def listener_term(self):
        listener, pid = self._listener()
        if self._stop_listener(listener, pid, signal.SIGTERM) is None:
            return f"SIGTERM {listener.name}: it had exited on its own (see 'refused to start')"
        return f"SIGTERM {listener.name} (pid {pid})"

    def listener_hup(self):
        listener, pid = self._listener()
        self.watch.hangups[pid] = time.time()
        if pid in self.soak.signalled:  # after a SIGTERM: the second stop, at once
            self._abandon_gil_runs(pid)
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            return f"SIGHUP {listener.name}: it had exited on its own (see 'refused to start')"
        return f"SIGHUP {listener.name} (pid {pid})"

    def _await_long_runs(self, listeners=None, timeout=15.0):
        """Wait (a while) for a task of seconds (LONG_KINDS) to be running, so that a fault on
        leases meets one; with ``listeners``, in a process of one of them, which is returned
        (a random one if none runs one in time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sleeping = {pid for pid, task_id in self.watch.running_tasks().items()
                        if self.soak.kind_of(task_id) in LONG_KINDS}
            if listeners is None and sleeping:
                return None
            busy = [p for p in listeners or () if sleeping & set(descendants_of(p.pid))]
            if busy:
                return self.rng.choice(busy)
            time.sleep(0.3)
        return self._listener(bool(listeners[0].skew))[0] if listeners else None

    def listener_stop(self):
        listener = self._await_long_runs(self._listeners())
        seconds = self.rng.uniform(LEASE + 2, LEASE + 7)
        pid = listener.pid
        held = self.watch.reserved_unstarted(pid)
        self._abandon_gil_runs(pid)  # stopped past a lease, it renews nothing either
        at = time.time()
        os.kill(pid, signal.SIGSTOP)
        self._displace(held, at)
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)
        self.soak.stops.append((pid, at, time.time()))
        return f"SIGSTOP {listener.name} (pid {pid}) for {seconds:.1f} s, then SIGCONT"

    def idle_listener_stop(self):
        """SIGSTOP a listener that runs no task (one that has waited idle on its peeks) past a
        lease, then SIGCONT: the tasks that come meanwhile go to the other listeners, and the
        stopped one takes none it cannot run."""
        began = time.monotonic()
        deadline = began + IDLE_WAIT
        idle = self.watch.idle_listeners()
        while time.monotonic() < deadline and not idle:
            time.sleep(0.1)
            idle = self.watch.idle_listeners()
        if not idle:
            return "SIGSTOP of an idle listener: none was idle"
        listener = self.rng.choice(idle)
        waited = time.monotonic() - began
        seconds = self.rng.uniform(LEASE + 2, LEASE + 5)
        pid, at = listener.pid, time.time()
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(seconds)
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # it was exiting on its own: refusing to start, Redis away
            return (f"SIGSTOP idle {listener.name} (pid {pid}): it was exiting on its own "
                    f"(see 'refused to start')")
        self.soak.stops.append((pid, at, time.time()))
        return (f"SIGSTOP idle {listener.name} (pid {pid}) for {seconds:.1f} s, then SIGCONT "
                f"(idle found after {waited:.1f} s)")

    def _kill_task_process(self, pid, task_id):
        at = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.watch.confirm_dead([pid])
        with self.soak.lock:
            self.soak.killed.setdefault(task_id, set()).add(pid)
        self._displace([task_id], at)
        return True

    def task_kill(self):
        deadline = time.monotonic() + 15
        while not (running := self.watch.running_tasks()) and time.monotonic() < deadline:
            time.sleep(0.3)
        if not running:
            return "SIGKILL of a task process: none was running"
        victims = self.rng.sample(sorted(running), min(len(running), self.rng.choice((1, 2))))
        done = [f"{running[pid]} (pid {pid})" for pid in victims
                if self._kill_task_process(pid, running[pid])]
        return f"SIGKILL task process(es): {', '.join(done) or 'they had ended'}"

    def task_stop(self):
        """SIGSTOP a running task process for longer than a lease, then SIGCONT: a task whose
        own process cannot run (a C call holding its GIL, swapped out) keeps its lease while
        its listener lives, and runs once. Only a task its listener tends: one left running by
        a listener the soak stopped holds its lease alone, and stopped past it, it is rightly
        run again (the delivery guarantee's one case of two runs to the end)."""
        deadline = time.monotonic() + 15
        while not (running := self.watch.tended_tasks()) and time.monotonic() < deadline:
            time.sleep(0.3)
        if not running:
            return "SIGSTOP of a task process: none was running under a live listener"
        pid = self.rng.choice(sorted(running))
        seconds = self.rng.uniform(LEASE + 2, LEASE + 7)
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return f"SIGSTOP of task process {pid}: it had ended"
        time.sleep(seconds)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        return f"SIGSTOP task process {running[pid]} (pid {pid}) for {seconds:.1f} s, then SIGCONT"

    def task_partition(self):
        """Hold every connection of listener-0's task processes (its own spared) for longer
        than a lease, at the proxy on their way to Redis: a partition only they are behind.
        Their listener renews their leases, so nothing is recovered; each task runs once and
        records its end when the partition heals."""
        listener = self.soak.listeners[0]
        self._await_long_runs([listener])
        seconds = self.rng.uniform(LEASE + 2, LEASE + 7)
        # task processes an earlier listener-0 left are behind the same proxy with nobody to
        # renew for them: held, their lease would rightly lapse (the cut-off, tested in
        # test_long_tasks.py), which is not what this fault is about
        tended = self.watch.tended_tasks([listener])
        orphans = [pid for pid in self.watch.running_tasks() if pid not in tended]
        self.soak.proxy.hold_all(spared=[listener.pid, *orphans])
        time.sleep(seconds)
        self.soak.proxy.heal()
        return (f"held the task processes of {listener.name} (pid {listener.pid} spared) from "
                f"Redis for {seconds:.1f} s")

    # -- Redis --------------------------------------------------------------------------------

    def _outage(self, start):
        with self.soak.lock:
            self.soak.outages.append((start, time.time()))

    def redis_kill(self):
        self._await_long_runs()
        server = self.soak.redis.primary()
        role_args = self._role_args(server)
        start = time.time()
        server.kill()
        down = self.rng.uniform(0.5, 3.0)
        time.sleep(down)
        server.extra_args = role_args
        server.start()
        self._outage(start)
        return (f"SIGKILL redis-server {server.name} (pid {server.pid}), restarted after "
                f"{down:.1f} s, its AOF reloaded in {time.time() - start - down:.1f} s")

    def _role_args(self, server):
        """The arguments that restart a server in the role it has now (a Sentinel may have
        changed it since it was started)."""
        if not self.soak.redis.sentinel:
            return []
        try:
            info = redis.Redis(port=server.port, socket_timeout=2,
                               decode_responses=True).info("replication")
        except redis.RedisError:
            return server.extra_args
        if info.get("role") == "master":
            return []
        return ["--replicaof", str(info["master_host"]), str(info["master_port"])]

    def _await_replica_in_sync(self, primary, timeout=30.0):
        """Fail over only to a replica that is online and caught up: a write a replica never
        got is lost by Redis's asynchronous replication, whatever the engine does."""
        client = redis.Redis(port=primary.port, socket_timeout=5, decode_responses=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = client.info("replication")
            replica = info.get("slave0") or {}
            if replica.get("state") == "online" and int(replica.get("lag", 99)) <= 1:
                break
            time.sleep(0.2)
        client.close()

    def redis_stop(self):
        self._await_long_runs()
        server = self.soak.redis.primary()
        seconds = self.rng.uniform(LEASE + 2, LEASE + 7)
        start = time.time()
        server.signal(signal.SIGSTOP)
        time.sleep(seconds)
        server.signal(signal.SIGCONT)
        self._outage(start)
        return f"SIGSTOP redis-server {server.name} for {seconds:.1f} s, then SIGCONT"

    def client_kill(self):
        client = self.soak.redis.admin()
        killed = client.execute_command("CLIENT", "KILL", "TYPE", "normal")
        client.close()
        return f"CLIENT KILL TYPE normal: {killed} connection(s) closed"

    def redis_oom(self):
        self._await_long_runs()
        seconds = self.rng.uniform(4.0, 8.0)
        client = self.soak.redis.admin()
        before = client.config_get("maxmemory*")
        start = time.time()
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1")
        time.sleep(seconds)
        client.config_set("maxmemory", before["maxmemory"])
        client.config_set("maxmemory-policy", before["maxmemory-policy"])
        client.close()
        self._outage(start)
        return f"writes refused (maxmemory 1, noeviction) for {seconds:.1f} s"

    def failover(self):
        self._await_long_runs()
        old = self.soak.redis.primary()
        self._await_replica_in_sync(old)
        start = time.time()
        sentinel = redis.Redis(port=self.soak.redis.sentinels[0].port, socket_timeout=5)
        sentinel.execute_command("SENTINEL", "FAILOVER", self.soak.redis.SERVICE)
        sentinel.close()
        deadline = time.monotonic() + 60
        while self.soak.redis.primary() is old and time.monotonic() < deadline:
            time.sleep(0.2)
        new = self.soak.redis.primary()
        wait_for(lambda: answers(new.port), message=f"{new.name} to answer")
        self._outage(start)
        return (f"SENTINEL FAILOVER: {old.name} -> {new.name} in {time.time() - start:.1f} s"
                if new is not old else "SENTINEL FAILOVER: no new primary within 60 s")
