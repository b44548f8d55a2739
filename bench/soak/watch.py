"""What the soak sees of the listeners' processes, from /proc, the side channel and Redis:
which run a task and which a listener tends, which listeners are idle, which tasks a listener
holds unstarted. The faults (faults.py) choose their targets from it."""

import time
from pathlib import Path

import redis

from .ledger import read_events
from .servers import descendants_of

QUEUES = ("soak.short", "soak.sleep", "soak.eta", "soak.flaky", "soak.doomed", "soak.gil",
          "soak.step", "soak.limited", "soak.keyed", "soak.checkpoint")


class Watch:
    """``soak``: the run (see bench/soak.py)."""

    def __init__(self, soak):
        self.soak = soak
        self.hangups = {}  # pid -> time the soak sent it SIGHUP

    def reserved_unstarted(self, pid):
        """Ids of tasks listener ``pid`` holds whose code has not begun: reserved, or taken and not
        yet handed over (take.lua reserves and starts in one step, naming the spare: a started
        task with no start in the side channel for its attempt). A listener's info hash names
        its pid; its reserved lists are found from its id."""
        keys = self.soak.keys
        try:
            client = self.soak.redis.admin()
            begun = {(event.task_id, event.attempt) for event in read_events(self.soak.events_path)
                     if event.kind == "start"}
            ids = set()
            for queue in QUEUES:
                for listener_id in client.smembers(keys.listeners(queue)):
                    if client.hget(keys.listener_info(listener_id), "pid") != str(pid):
                        continue
                    for task_id in client.lrange(keys.reserved(queue, listener_id), 0, -1):
                        status, attempts = client.hmget(keys.task(task_id), "status", "attempts")
                        taken = status == "started" and attempts and attempts.isdigit() and (
                            task_id, int(attempts)) not in begun
                        if status == "reserved" or taken:
                            ids.add(task_id)
            client.close()
            return ids
        except redis.RedisError:
            return set()

    def idle_listeners(self):
        """Listeners up for 5 s whose processes run no task. An idle listener keeps one spare
        process, which has no task: having children does not make a listener busy."""
        running = set(self.running_tasks())
        return [p for p in self.soak.listeners if not p.skew
                and time.time() - p.runs[-1][1] > 5
                and not running & set(descendants_of(p.pid))]

    def tended_tasks(self, listeners=None):
        """{pid: task id} of running task processes whose listener renews their leases: below
        a listener (of ``listeners``, or any), started since it last started and since the
        soak last asked it to stop. A SIGHUP restart keeps the listener's pid, and the tasks
        it left run on below it, untended."""
        starts = self.running_tasks(events=True)
        tended = {}
        for listener in listeners or self.soak.listeners:
            since = max(listener.runs[-1][1], self.soak.signalled.get(listener.pid, 0),
                        self.hangups.get(listener.pid, 0))
            tended.update({pid: starts[pid].task_id for pid in descendants_of(listener.pid)
                           if pid in starts and starts[pid].at > since})
        return tended

    def running_tasks(self, events=False):
        """{pid: task id} (or its start event) of task processes running now (a start and no
        end in the side channel, and the process alive as a forked bq_listen)."""
        running = {}
        for event in read_events(self.soak.events_path):
            if event.kind == "start":
                running[(event.task_id, event.pid)] = event
            else:
                running.pop((event.task_id, event.pid), None)
        alive = {}
        for (task_id, pid), event in running.items():
            try:
                if b"bq_listen" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    alive[pid] = event if events else task_id
            except OSError:
                continue
        return alive

    def tasks_of(self, pids):
        """{pid: task id} of those processes that started a task (the side channel's start)."""
        wanted = set(pids)
        return {event.pid: event.task_id for event in read_events(self.soak.events_path)
                if event.kind == "start" and event.pid in wanted}

    @staticmethod
    def confirm_dead(pids, timeout=2.0):
        """The soak counts a killed process's task as killed: be sure it is (dead or a
        zombie), or fail loudly as the harness's own error."""
        deadline = time.monotonic() + timeout
        for pid in pids:
            while True:
                try:
                    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    break
                if state in ("Z", "X"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pid {pid} still runs after SIGKILL (state {state})")
                time.sleep(0.02)
