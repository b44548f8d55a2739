"""Where a task's time goes in our listener, stage by stage, from its enqueue to its end
recorded and its process reaped.

    python bench/breakdown.py [--tasks 40] [--seconds 1] [--idle 0.3 0.6] [--engine CHECKOUT]

One private Redis, one listener of ours (this checkout's engine, or ``--engine``'s: a checkout's
directory, run through this script) with a mark written as each stage begins or ends (the
engine's functions wrapped in this process, so the engine runs unchanged), and ``--tasks``
tasks enqueued one at a time, the listener idle for a random time in ``--idle`` (0.3-0.6 s)
before each (past 5 s, the listener has gone back to its idle heartbeat). Each task sleeps
``--seconds`` after its callback starts. A mark is the Unix time in nanoseconds (one clock for
every process) and the process's page faults so far (``ru_minflt``: a forked process's
copy-on-write faults among them), written with one ``write()`` to a file every process appends
to. Prints, per stage, the median and the p90 over the tasks in ms, and the median number of
page faults when both ends are in one process. A stage whose marks come in another order
(``--engine`` of a listener that forks on a task's way, not ahead) is left empty.
"""

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUEUE = "breakdown"

# (stage, first mark, second mark): each a label of the marks below; both taken once per task
STAGES = [
    ("enqueue call to the peek's reply read", "enqueue", "woken"),
    ("peek's reply to the take sent", "woken", "take"),
    ("take's round trip (take.lua)", "take", "taken"),
    ("taken to the hand-over written", "taken", "handed"),
    ("hand-over written to read by the child", "handed", "read"),
    ("read to the callback", "read", "callback"),
    ("  of which the lease thread's start", "keeper", "kept"),
    ("PICKUP: enqueue call to the callback", "enqueue", "callback"),
    ("listener: hand-over to the next spare's fork", "handed", "fork"),
    ("listener: the next spare's fork", "fork", "forked"),
    ("listener: hand-over to its beat", "handed", "beat"),
    ("listener: its beat (heartbeat + renewals)", "beat", "beaten"),
    ("callback's return to the end's call", "returned", "finish"),
    ("child's first Redis connection (socket + handshake)", "connect", "connected"),
    ("  of which the handshake (redis-py's on_connect)", "handshake", "connected"),
    ("end's call to its reply (connection included)", "finish", "finished"),
    ("END: callback's return to the end recorded", "returned", "finished"),
    ("end recorded to the child's exit", "finished", "exit"),
    ("child's exit to the listener's waitpid", "exit", "reaped"),
    ("OVERHEAD: enqueue to end recorded, less the task's sleep", "enqueue", "finished"),
]


def listen(url, marks_path, seconds):
    """The listener, its stages marked (runs in a subprocess of the harness)."""
    sys.path.insert(0, os.environ.get("BENCH_ENGINE") or str(HERE.parent))
    import redis.connection

    from django_blueque.core import (
        Client,
        ForkingRunner,
        children,
        lease,
        protocol,
        runner,
        task_process,
        waiter,
    )

    fd = os.open(marks_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def mark(label):
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        os.write(fd, f"{label} {os.getpid()} {time.time_ns()} {faults}\n".encode())

    def around(owner, name, before, after=None):
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            mark(before)
            try:
                return original(*args, **kwargs)
            finally:
                if after:
                    mark(after)
        setattr(owner, name, wrapped)

    def then(owner, name, label):
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            result = original(*args, **kwargs)
            mark(label)
            return result
        setattr(owner, name, wrapped)

    around(waiter.Peek, "settle", "woken")
    around(children.TaskProcesses, "fork", "fork", "forked")  # "forked": in the listener only
    then(task_process, "read_line", "read")
    around(protocol.Protocol, "take", "take", "taken")
    around(lease.LeaseKeeper, "start", "keeper", "kept")
    around(children, "write_line", "handed")
    around(protocol.Protocol, "finish", "finish", "finished")
    around(redis.connection.Connection, "_connect", "connect")  # a new socket, not a reuse
    around(redis.connection.Connection, "on_connect_check_health", "handshake", "connected")
    around(runner.ForkingRunner, "_beat", "beat", "beaten")
    then(children.TaskProcesses, "_ended", "reaped")
    real_exit = os._exit

    def exit_marked(code):
        mark("exit")
        real_exit(code)
    os._exit = exit_marked

    def callback(task):
        mark("callback")
        if seconds:
            time.sleep(seconds)
        mark("returned")
        return ""

    ForkingRunner(Client(url), QUEUE, callback).run()


def harness(args):
    import redis
    from infra import child, private_redis
    with tempfile.TemporaryDirectory(prefix="blueque-breakdown-") as tmp, \
            private_redis(Path(tmp)) as url, redis.Redis.from_url(url) as client:
        marks_path = Path(tmp) / "marks"
        env = {**os.environ, **({"BENCH_ENGINE": str(Path(args.engine).resolve())}
                                if args.engine else {})}
        argv = [sys.executable, __file__, "--listen", url, str(marks_path), str(args.seconds)]
        with child(argv, env=env, stdout=subprocess.DEVNULL):
            sys.path.insert(0, env.get("BENCH_ENGINE") or str(HERE.parent))
            from django_blueque.core import Client
            queue = Client(url).get_queue(QUEUE)
            time.sleep(1.5)
            for _ in range(args.tasks + 1):  # the first one warms up, and is left out
                time.sleep(random.uniform(*args.idle))
                with open(marks_path, "a") as marks:
                    marks.write(f"enqueue 0 {time.time_ns()} 0\n")
                task_id = queue.enqueue("x")
                deadline = time.monotonic() + args.seconds + 30
                while client.hget(f"blueque_task_{task_id}", "status") != b"complete":
                    if time.monotonic() > deadline:
                        raise SystemExit(f"task {task_id} did not end")
                    time.sleep(0.01)
            time.sleep(0.5)  # the last process reaped
        return marks_path.read_text().splitlines(), args.seconds


def stages(lines, seconds):
    """Per task (the marks from one enqueue to the next), each stage's time in ms and page
    faults (None across processes)."""
    tasks, current = [], None
    for line in lines:
        label, pid, ns, faults = line.split()
        if label == "enqueue":
            current = {}
            tasks.append(current)
        if current is not None:
            current.setdefault(label, (int(ns), pid, int(faults)))  # the first: the task's own
    per_stage = {name: ([], []) for name, _, _ in STAGES}
    for task in tasks[1:]:
        for name, first, second in STAGES:
            if first in task and second in task and task[first][0] <= task[second][0]:
                (start, pid, faults), (end, end_pid, end_faults) = task[first], task[second]
                ms = (end - start) / 1e6 - (1000 * seconds if name.startswith("OVERHEAD") else 0)
                per_stage[name][0].append(ms)
                if pid == end_pid:
                    per_stage[name][1].append(end_faults - faults)
    return per_stage, len(tasks) - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=1.0, help="each task's own sleep")
    parser.add_argument("--idle", type=float, nargs=2, default=[0.3, 0.6], metavar=("MIN", "MAX"),
                        help="seconds the listener is idle before each task")
    parser.add_argument("--engine", help="another checkout's engine (its directory)")
    parser.add_argument("--listen", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.listen:
        url, marks_path, seconds = args.listen
        return listen(url, marks_path, float(seconds))
    lines, seconds = harness(args)
    per_stage, count = stages(lines, seconds)
    print(f"{count} tasks of {seconds:g} s, one at a time, the listener idle "
          f"{args.idle[0]:g}-{args.idle[1]:g} s before each; "
          f"load average {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'stage':58} {'p50 ms':>8} {'p90 ms':>8} {'faults':>7} {'tasks':>6}")
    for name, (values, faults) in per_stage.items():
        if values:
            cut = sorted(values)[min(len(values) - 1, int(0.9 * len(values)))]
            fault = f"{statistics.median(faults):7.0f}" if faults else f"{'':7}"
            print(f"{name:58} {statistics.median(values):8.2f} {cut:8.2f} {fault} "
                  f"{len(values):6d}")
        else:
            print(f"{name:58} {'-':>8} {'-':>8} {'':7} {0:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
