"""Where a no-op task's time goes in our engine, from its enqueue to the listener's next wait
(issue 17), beside the floors a process per task cannot go under.

    python bench/breakdown.py [--tasks 300]

Its own redis-server. A ForkingRunner (concurrency 1, a no-op callback) runs in a child
process whose engine methods are wrapped to append ``name pid start end`` to a file
(``time.perf_counter_ns`` is CLOCK_MONOTONIC, one clock for the listener and its forks);
tasks are enqueued one at a time, 0.1 s apart (each has ended long before the next), so the
stages of one task never overlap another's. The floors are measured in this process with the
same interpreter and the engine imported: a Redis round trip (PING), one engine script call
(the scripts' own cost), a fork whose child exits at once (fork, exit, waitpid), and a forked
child's first command on a new connection. Medians, in milliseconds. Last, the CPU each
process spends per task while a listener drains a queue (a plain one, nothing wrapped): on a
machine of few cores, what bounds the drain rate.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import redis  # noqa: E402
from infra import child, private_redis  # noqa: E402

from django_blueque.core import Client, children, runner, spares, take_ahead, waiter  # noqa: E402
from django_blueque.core.fork_server import NAME  # noqa: E402
from django_blueque.core.protocol import Protocol  # noqa: E402

QUEUE = "breakdown"
LOG = None  # the file descriptor the wrapped methods append to (in the listener and its forks)


def now():
    return time.perf_counter_ns()


def record(name, began, ended):
    os.write(LOG, f"{name} {os.getpid()} {began} {ended}\n".encode())


def timed(name, function):
    def wrapper(*args, **kwargs):
        began = now()
        try:
            return function(*args, **kwargs)
        finally:
            record(name, began, now())
    return wrapper


def noop(task):
    record("callback", now(), now())
    return ""


def listen(url, path):
    """The listener, its engine methods wrapped (run in a child process of the harness)."""
    global LOG
    LOG = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    waiter.Peek.settle = timed("woken", waiter.Peek.settle)
    for name in ("take", "finish"):
        setattr(Protocol, name, timed(name, getattr(Protocol, name)))
    taken_ahead = take_ahead.TakesAhead._taken_ahead

    def collected(self, *args, **kwargs):  # a take sent ahead: it ran before the wake-up
        began = now()
        answer = taken_ahead(self, *args, **kwargs)
        if answer is not None:
            record("take", began, now())
        return answer
    take_ahead.TakesAhead._taken_ahead = collected
    spares.Spares._spawn = timed("fork_spare", spares.Spares._spawn)
    children.TaskProcesses._child_ended = timed(  # once per reaped task process
        "collected", children.TaskProcesses._child_ended)
    runner.ForkingRunner(Client(url), QUEUE, noop, concurrency=1).run()


def stages(path, enqueued):
    """Per task, the gaps between what the listener and its task process recorded."""
    events = [line.split() for line in Path(path).read_text().splitlines()]
    rows = []
    for at, next_at in zip(enqueued, enqueued[1:] + [float("inf")], strict=True):
        mine = [(name, int(pid), int(b), int(e)) for name, pid, b, e in events
                if at <= int(b) < next_at]
        first = {}
        for event in mine:
            first.setdefault(event[0], event)
        if not {"woken", "take", "callback", "finish"} <= set(first):
            continue
        ended = first["finish"][3]
        collected = [e for e in mine if e[0] == "collected" and e[3] >= ended]
        spare = [e for e in mine if e[0] == "fork_spare" and e[2] >= first["take"][3]]
        if not collected:
            continue
        first["collected"] = collected[0]
        ms = 1e-6
        rows.append({
            "enqueue call to the listener woken (the take sent ahead run, if one was)":
                (first["woken"][3] - at) * ms,
            "take (reserve + start, one script round trip; ~0 when sent ahead)":
                (first["take"][3] - first["take"][2]) * ms,
            "take returned to the task's code (socket hand-over, set-up in the child)":
                (first["callback"][2] - first["take"][3]) * ms,
            "the task's code to its end recorded (sent to the listener, finish.lua there)":
                (first["finish"][3] - first["callback"][2]) * ms,
            "finish recorded to the exit collected (exit, SIGCHLD, waitpid)":
                (first["collected"][3] - first["finish"][3]) * ms,
            "the next spare forked, or from the fork server (the listener's wait)":
                (spare[0][3] - spare[0][2]) * ms if spare else 0.0,
            "task's code started to the next spare's fork begun":
                (spare[0][2] - first["callback"][2]) * ms if spare else 0.0,
            "enqueue call to the task's code (pickup)": (first["callback"][2] - at) * ms,
        })
    return rows


def floors(url, rounds=300):
    r = redis.Redis.from_url(url)
    ping = []
    for _ in range(rounds):
        began = now()
        r.ping()
        ping.append((now() - began) / 1e6)
    protocol = Client(url).protocol
    script = []
    for _ in range(rounds):
        began = now()
        protocol.take(QUEUE + "-empty", "floor_1", "token", 1)  # an empty queue: script cost
        script.append((now() - began) / 1e6)
    forks, first_command = [], []
    for _ in range(rounds // 3):
        began = now()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        forks.append((now() - began) / 1e6)
    for _ in range(rounds // 10):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            began = now()
            r.ping()  # the pool was inherited: redis-py opens a new connection in the child
            os.write(write_end, str(now() - began).encode())
            os._exit(0)
        os.close(write_end)
        first_command.append(int(os.read(read_end, 64)) / 1e6)
        os.close(read_end)
        os.waitpid(pid, 0)
    r.close()
    return {"Redis round trip (PING)": ping, "engine script call (take, empty queue)": script,
            "fork + exit + waitpid (this interpreter, engine imported)": forks,
            "a forked child's first command (new connection)": first_command}


def listen_plainly(url):
    """A listener with nothing wrapped, for the drain's CPU account."""
    runner.ForkingRunner(Client(url), QUEUE, lambda task: "", concurrency=1).run()


def _cpu_and_faults(pid):
    """A process's user and system CPU seconds and minor page faults (copy-on-write faults
    among them), then the same for its children it reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    minflt, cminflt = int(fields[7]), int(fields[8])
    utime, stime, cutime, cstime = (int(value) / tick for value in fields[11:15])
    return (utime, stime, minflt), (cutime, cstime, cminflt)


def _fork_server(pid):
    """The listener's fork server (fork_server.py), if it has one."""
    for child_pid in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        if Path(f"/proc/{child_pid}/comm").read_bytes().strip() == NAME:
            return int(child_pid)
    return None


def account(pid):
    """The listener's CPU and faults, its fork server's if it has one, and their reaped task
    processes'."""
    own, reaped = _cpu_and_faults(pid)
    rows = {"listener": own, "task processes": reaped}
    server = _fork_server(pid)
    if server is not None:
        rows["fork server"], its_reaped = _cpu_and_faults(server)
        rows["task processes"] = tuple(map(sum, zip(reaped, its_reaped, strict=True)))
    return rows


def drain_cpu(url, tasks):
    """Per no-op task while one listener (concurrency 1) drains ``tasks`` queued at once: the
    user and system CPU milliseconds and the minor page faults of the listener, of its fork
    server and of its task processes (reaped), Redis's CPU; and the rate. On Linux, a process
    per task spends most of it in the kernel: a fork copies the page-table entry of each of the
    forking process's anonymous pages (its heap: mostly the code of the modules it imported),
    the first write to a page two processes share copies it, an exit tears the page table
    down."""
    client = Client(url)

    def redis_cpu():
        info = client.redis.info("cpu")
        return info["used_cpu_user"], info["used_cpu_sys"], None

    with child([sys.executable, __file__, "--", url], cwd=str(HERE.parent)) as listener:
        time.sleep(2)
        complete = client.keys.complete(QUEUE)
        done = client.redis.llen(complete) + tasks
        before, began = {**account(listener.pid), "redis-server": redis_cpu()}, time.monotonic()
        client.get_queue(QUEUE).enqueue_many([str(n) for n in range(tasks)])
        while client.redis.llen(complete) < done:
            time.sleep(0.01)
        elapsed = time.monotonic() - began
        time.sleep(0.5)  # the last task process reaped
        after = {**account(listener.pid), "redis-server": redis_cpu()}
    spent = {}
    for who, (user, system, faults) in after.items():
        user_before, system_before, faults_before = before[who]
        spent[who] = ((user - user_before) * 1000 / tasks, (system - system_before) * 1000 / tasks,
                      None if faults is None else (faults - faults_before) / tasks)
    return {**spent, "rate": tasks / elapsed}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("listen", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if len(args.listen) == 2:
        listen(*args.listen)
        return 0
    if len(args.listen) == 1:
        listen_plainly(*args.listen)
        return 0
    with tempfile.TemporaryDirectory() as workdir, private_redis(workdir) as url:
        path = os.path.join(workdir, "events")
        client = Client(url)
        queue = client.get_queue(QUEUE)
        argv = [sys.executable, __file__, "--", url, path]
        with child(argv, cwd=str(HERE.parent)):
            time.sleep(2)  # the listener is up, idle, its spare forked
            enqueued, ids = [], []
            for n in range(args.tasks):
                enqueued.append(now())
                ids.append(queue.enqueue(str(n)))
                time.sleep(0.1)  # ended, the listener back in its wait, the next spare forked
            done = sum(client.get_task(task_id).status == "complete" for task_id in ids)
            assert done == len(ids), f"only {done} of {len(ids)} tasks completed"
            rows = stages(path, enqueued)
        print(f"{len(rows)} no-op tasks, one at a time (median ms):")
        for name in rows[0]:
            print(f"  {statistics.median(row[name] for row in rows):7.3f}  {name}")
        print("floors (median ms):")
        for name, samples in floors(url).items():
            print(f"  {statistics.median(samples):7.3f}  {name}")
        drain = drain_cpu(url, args.tasks)
        print(f"CPU per task while one listener drains {args.tasks} queued no-op tasks "
              f"({drain.pop('rate'):.0f} tasks/s; ms, user + system; minor page faults):")
        for name, (user, system, faults) in drain.items():
            faulted = "" if faults is None else f"; {faults:.0f} faults"
            print(f"  {user + system:7.3f}  {name} ({user:.3f} + {system:.3f}{faulted})")
        total = sum(user + system for user, system, _ in drain.values())
        print(f"  {total:7.3f}  in all: on this machine's {os.cpu_count()} cores, at most "
              f"{os.cpu_count() * 1000 / total:.0f} tasks/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
