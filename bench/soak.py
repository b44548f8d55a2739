"""The soak: the engine under the faults production sees (issue 9).

Starts a private redis-server with AOF (``appendfsync always``; with ``--sentinel`` a primary,
a replica and three Sentinels), three ``manage.py bq_listen --concurrency 2`` (one of them on a
clock shifted by 20 s), one ``bq_schedule`` and one ``bq_reap``, pushes tasks of every kind
(short, sleeping, failing-then-retried, failing for good, with an eta, on a queue with
MAX_RUNNING, with a concurrency key, checkpointing) and injects faults at
seeded random times. Then it waits for the queues to drain and judges the run from the side
channel the tasks write (bench/soak/ledger.py). Exit status 0 only if nothing was lost, stuck,
run to its end twice or cut short, no queue or concurrency key ran more tasks at once than its
limit, no process exited unbidden, and every task taken from a process was started again
within --max-recovery seconds (Redis's own outages not counted).

    python bench/soak.py --short                  # under 3 minutes, every fault kind once
    python bench/soak.py --duration 900 --tasks 8000 --seed 42
    python bench/soak.py --sentinel --short       # adds a SENTINEL FAILOVER
"""

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.append(str(BENCH.parent))  # devtools/ (last: the engine comes from --checkout)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true",
                        help="Under 3 minutes: fewer tasks, every fault kind once (but the "
                             "Sentinel failover unless --sentinel).")
    parser.add_argument("--duration", type=float, default=None,
                        help="Seconds of load and faults (default 600; 100 with --short).")
    parser.add_argument("--tasks", type=int, default=None,
                        help="Tasks pushed over the run (default 5000; 800 with --short).")
    parser.add_argument("--seed", type=int, default=None,
                        help="Seed of the load and the faults (default: random, printed).")
    parser.add_argument("--sentinel", action="store_true",
                        help="Run Redis as a primary, a replica and three Sentinels, and add "
                             "a SENTINEL FAILOVER while tasks run.")
    parser.add_argument("--faults", default="all",
                        help="Comma-separated fault kinds to inject (default all; 'none' for a "
                             "run without faults), e.g. redis_oom,listener_stop to reproduce "
                             "one finding.")
    parser.add_argument("--drain", type=float, default=None,
                        help="Seconds to wait for the queues to drain (default 180; 55 with "
                             "--short).")
    parser.add_argument("--max-recovery", type=float, default=30.0,
                        help="Longest accepted time from a fault to the next start of a task "
                             "it took from a process (default 30 s).")
    parser.add_argument("--checkout", type=Path, default=BENCH.parent,
                        help="The checkout whose django_blueque and testproject to run "
                             "(default: this one).")
    parser.add_argument("--json", type=Path, help="Also write the figures to this file.")
    parser.add_argument("--keep", action="store_true",
                        help="Keep the run's directory (logs, AOF, side channel) even when "
                             "the run passes (it is always kept when it fails).")
    parser.add_argument("--sabotage", action="store_true",
                        help="Check the judge: delete one finished task, run another again "
                             "and strand a third; the run must then fail with lost 1, run "
                             "twice 1, stuck 1.")
    args = parser.parse_args(argv)
    args.duration = args.duration or (100.0 if args.short else 600.0)
    args.tasks = args.tasks or (800 if args.short else 5000)
    args.drain = args.drain or (55.0 if args.short else 180.0)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10**6)
    return args


def setup_django(checkout, env):
    """The harness's own Django (to encode tasks as the project does), on the soak settings."""
    sys.path[:0] = [str(checkout), str(BENCH), str(checkout / "testproject")]
    os.environ.update(env)
    os.environ["DJANGO_SETTINGS_MODULE"] = "soak.settings"
    import django

    django.setup()


class Soak:
    """One run: its processes, its threads and the records the ledger judges."""

    def __init__(self, args, workdir):
        from soak.servers import RedisSetup

        from devtools.proxy import HoldingProxy

        self.args = args
        self.workdir = workdir
        self.load_rng = random.Random(f"{args.seed}-load")
        self.fault_rng = random.Random(f"{args.seed}-faults")
        self.events_path = workdir / "events.log"
        self.events_path.touch()
        self.lock = threading.Lock()
        self.killed, self.displaced, self.outages, self.fault_log = {}, [], [], []
        self.abandoned = {}  # task id -> pids of "gil" runs left by a listener stopped at once
        self.signalled, self.stops = {}, []  # what the faults did to listener processes
        self.harness_errors = []
        self.listeners, self.supervised = [], []
        self.pusher = None
        self.sabotaged = {}
        self.stopping = threading.Event()
        self.t0 = time.time()
        self.redis = RedisSetup(workdir, sentinel=args.sentinel)
        # listener-0 and its task processes reach a single Redis through a proxy that can hold
        # their traffic (the task_partition fault)
        self.proxy = None if args.sentinel else HoldingProxy(self.redis.servers[0].port)
        self.env = {**os.environ, **self.redis.env(), "SOAK_EVENTS": str(self.events_path),
                    "SOAK_DB": str(workdir / "db.sqlite3"),
                    "DJANGO_SETTINGS_MODULE": "soak.settings", "PYTHONUNBUFFERED": "1",
                    "PYTHONPATH": os.pathsep.join([str(args.checkout), str(BENCH)])}
        setup_django(args.checkout, self.redis.env())
        from django_blueque.conf import get_client

        self.protocol = get_client().protocol
        self.keys = self.protocol.keys

    def note(self, line):
        stamp = f"t+{time.time() - self.t0:6.1f}s"
        print(f"{stamp}  {line}", flush=True)
        self.fault_log.append(f"{stamp} {line}")

    def kind_of(self, task_id):
        return self.pusher.tasks.get(task_id) if self.pusher else None

    # -- processes ------------------------------------------------------------------------------

    def start_processes(self):
        from soak.servers import Supervised, manage_argv
        from soak.watch import QUEUES

        skew = self.fault_rng.choice((-20.0, 20.0))
        logs = self.workdir / "logs"
        logs.mkdir()
        checkout = self.args.checkout
        for i in range(3):
            env = dict(self.env)
            if i == 2:
                env["PYTHONPATH"] = os.pathsep.join([str(BENCH / "soak" / "skew"),
                                                     env["PYTHONPATH"]])
                env["SOAK_CLOCK_SKEW"] = str(skew)
            if i == 0 and self.proxy:
                env["SOAK_REDIS_URL"] = self.proxy.url
            self.listeners.append(Supervised(
                f"listener-{i}", manage_argv(checkout, "bq_listen", *QUEUES, "--concurrency",
                                             "2", "--noreload"), env, logs,
                skew=skew if i == 2 else 0.0))
        self.supervised = self.listeners + [
            Supervised("scheduler", manage_argv(checkout, "bq_schedule"), self.env, logs),
            Supervised("reaper", manage_argv(checkout, "bq_reap"), self.env, logs, stamp=True)]
        for process in self.supervised:
            process.start()
        self.note(f"3 listeners (--concurrency 2; listener-2's clock {skew:+.0f} s), "
                  f"bq_schedule, bq_reap; Redis {'with Sentinel' if self.redis.sentinel else ''}"
                  f" AOF appendfsync always, side channel {self.events_path}")
        threading.Thread(target=self._supervise, name="soak-supervisor", daemon=True).start()

    def _supervise(self):
        while not self.stopping.is_set():
            for process in self.supervised:
                try:
                    if process.check():
                        self.note(f"{process.name} exited; restarted as pid {process.pid}")
                except OSError as exc:
                    self.harness_errors.append(f"restarting {process.name}: {exc}")
            time.sleep(0.2)

    # -- the run --------------------------------------------------------------------------------

    def fault_schedule(self):
        """[(offset, kind)]: every kind once in a seeded order, and with a full run more at
        random, spread over the run with seeded random gaps."""
        from soak.faults import LEASE, Faults

        faults = Faults(self)
        chosen = self.args.faults.split(",")
        if chosen == ["none"]:
            return faults, []
        kinds = [kind for kind in faults.kinds() if chosen == ["all"] or kind in chosen]
        unknown = set(chosen) - set(faults.kinds()) - {"all"}
        if unknown:
            raise SystemExit(f"unknown fault kind(s) {', '.join(sorted(unknown))}; known: "
                             f"{', '.join(faults.kinds())}")
        self.fault_rng.shuffle(kinds)
        takes = {"listener_stop": LEASE + 6, "redis_stop": LEASE + 6, "redis_oom": 7,
                 "redis_kill": 4, "failover": 20, "task_kill": 2, "task_stop": 20,
                 "idle_listener_stop": 20, "node_kill": 2, "skewed_node_kill": 2,
                 "task_partition": LEASE + 6}
        span = self.args.duration * 0.9
        if not self.args.short:
            pool = list(kinds)
            while sum(takes.get(kind, 1) + 15 for kind in kinds) < span:
                kinds.append(self.fault_rng.choice(pool))
        slack = max(0.0, span - sum(takes.get(kind, 1) for kind in kinds))
        weights = [self.fault_rng.random() + 0.2 for _ in range(len(kinds) + 1)]
        gaps = [slack * w / sum(weights) for w in weights]
        schedule, at = [], 0.0
        for kind, gap in zip(kinds, gaps, strict=False):
            at += gap
            schedule.append((at, kind))
            at += takes.get(kind, 1)
        return faults, schedule

    def inject(self, faults, schedule):
        for offset, kind in schedule:
            while time.time() - self.t0 < offset and not self.stopping.is_set():
                time.sleep(0.1)
            if self.stopping.is_set():
                return
            began = time.time()
            try:
                done = faults.run(kind)
            except Exception as exc:  # the harness's own failure: reported, never hidden
                self.harness_errors.append(f"fault {kind}: {exc!r}")
                done = f"could not be injected: {exc!r}"
            self.note(f"fault {kind} (from t+{began - self.t0:.1f}s): {done}")

    def run(self):
        from soak.load import Pusher, plan, size

        from django_blueque import registry

        self.t0 = time.time()  # the schedule counts from here, after the servers are up
        self.start_processes()
        items = plan(self.load_rng, self.args.tasks, self.args.duration * 0.85, self.args.short)
        pusher = Pusher(self.load_rng, items, self.t0, self.protocol, registry,
                        (1.0, 10.0) if self.args.short else (1.0, 30.0))
        pusher.start()
        self.pusher = pusher
        faults, schedule = self.fault_schedule()
        self.inject(faults, schedule)
        while time.time() - self.t0 < self.args.duration:
            time.sleep(0.2)
        pusher.planned_done.wait(60)
        pusher.stopping.set()
        pusher.done.wait(60)
        self.note(f"faults done; {len(pusher.tasks)} tasks pushed ({pusher.errors} write(s) "
                  "retried); draining")
        if self.args.sabotage:
            self.sabotage(pusher.tasks)
        drained = self.drain(pusher.tasks)
        self.note("drained" if drained else f"not drained after {self.args.drain:.0f} s")
        return pusher.tasks, sum(map(size, items)) + pusher.extra

    def sabotage(self, tasks):
        """Break three finished tasks behind the engine's back; the judge must see each."""
        client = self.redis.admin()
        done = [task_id for task_id, kind in tasks.items() if kind == "short"
                and client.hget(self.keys.task(task_id), "status") == "complete"][:3]
        lost, again, stranded = done
        client.delete(self.keys.task(lost))
        client.hset(self.keys.task(again), "status", "pending")
        client.lpush(self.keys.pending("soak.short"), again)
        client.hset(self.keys.task(stranded), "status", "started")
        client.close()
        self.sabotaged = {"lost": lost, "run_twice": again, "stuck": stranded}
        self.note(f"sabotage: deleted {lost}, queued {again} again, stranded {stranded}")

    def final_states(self, tasks):
        import redis

        while True:
            try:
                client = self.redis.admin(timeout=10)
                with client.pipeline(transaction=False) as pipe:
                    for task_id in tasks:
                        pipe.hgetall(self.keys.task(task_id))
                    final = dict(zip(tasks, pipe.execute(), strict=True))
                from soak.watch import QUEUES

                stray = set()
                for queue in QUEUES:
                    stray.update(client.lrange(self.keys.pending(queue), 0, -1))
                    stray.update(client.zrange(self.keys.scheduled(queue), 0, -1))
                client.close()
                return final, sorted(stray)
            except redis.RedisError:
                time.sleep(0.5)

    def drain(self, tasks):
        from soak.ledger import FINAL

        deadline = time.monotonic() + self.args.drain
        while time.monotonic() < deadline:
            final, stray = self.final_states(tasks)
            if not stray and all(fields.get("status") in FINAL for fields in final.values()):
                return True
            time.sleep(1.0)
        return False

    def listener_record(self):
        from soak.ledger import ListenerRecord, read_listener_ids

        ids, exits = {}, {}
        for listener in self.listeners:
            ids.update(read_listener_ids(listener.log_path))
            exits.update({pid: ended for pid, _, ended in listener.runs if ended})
        return ListenerRecord(ids=ids, exits=exits, signalled=dict(self.signalled),
                              stops=list(self.stops))

    def limits(self):
        """{kind: its queue's MAX_RUNNING and MAX_RUNNING_PER_KEY} of the kinds that have one,
        as the listeners read them from the soak's settings."""
        from soak.load import KINDS

        from django_blueque.conf import get_settings

        admission = {kind: get_settings().admission(queue) for kind, (queue, _) in KINDS.items()}
        return {kind: limits for kind, limits in admission.items()
                if limits["max_running"] or limits["max_running_per_key"]}

    def skews(self):
        """{listener id: seconds its clock is shifted} (the ledger makes their times real)."""
        from soak.ledger import read_listener_ids

        return {listener_id: listener.skew for listener in self.listeners
                for listener_id in read_listener_ids(listener.log_path)}

    def stop(self):
        """Stop every process this run started, SIGCONT first (a fault may have stopped it),
        and any task process still running (found through the side channel)."""
        self.stopping.set()
        for process in self.supervised:
            process.stop()
        from soak.ledger import read_events

        for pid in {event.pid for event in read_events(self.events_path)}:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if f"SOAK_EVENTS={self.events_path}".encode() in environ:
                os.kill(pid, signal.SIGKILL)
        if self.proxy:
            self.proxy.close()
        self.redis.close()


def main(argv=None):
    args = parse_args(argv)
    print(f"soak seed {args.seed} ({'--short, ' if args.short else ''}{args.duration:g} s, "
          f"{args.tasks} tasks{', Sentinel' if args.sentinel else ''})", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="blueque-soak-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    soak = None
    passed = False
    try:
        soak = Soak(args, workdir)
        tasks, planned = soak.run()
        from soak.faults import LEASE
        from soak.ledger import Observed, judge, live_releases, read_events, read_releases
        from soak.report import report

        final, stray = soak.final_states(tasks)
        observed = Observed(tasks=tasks, final=final, killed=soak.killed,
                            abandoned=soak.abandoned, displaced=soak.displaced,
                            outages=soak.outages, stray=stray, edges=soak.pusher.edges,
                            limits=soak.limits(), skews=soak.skews(),
                            concurrency_keys=soak.pusher.concurrency_keys)
        verdict = judge(observed, read_events(soak.events_path))
        record = soak.listener_record()
        released = live_releases(read_releases(soak.supervised[-1].log_path), record,
                                 lease=LEASE, slack=10.0)
        if not record.ids:
            soak.harness_errors.append("no listener id found in the listeners' logs")
        passed = report(args, soak, tasks, planned, verdict, released)
    finally:
        if soak is not None:
            soak.stop()
        if passed and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"run directory kept: {workdir} (logs/, events.log, redis-*/)")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
