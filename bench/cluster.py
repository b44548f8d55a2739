"""Our engine on one Redis and on a 3-master Redis Cluster: total enqueue and drain throughput
and idle pickup latency over many queues, in one run on this machine.

    python bench/cluster.py [--quick] [--queues 12] [--producers 3] [--listeners 3]
                            [--concurrency 1] [--json out.json]

Both set-ups run side by side, their rounds interleaved (the order flips each round): a private
redis-server in plain mode (``Client(url)``) and a private 3-master LocalCluster
(tests/redis_cluster.py) in cluster mode (``Client(url, cluster=True)``). The queue names are
chosen so that the cluster's masters own as many queues each. Redis CPU is INFO cpu
(used_cpu_sys + used_cpu_user) of every server, read before and after each round.
"""

import argparse
import ctypes
import json
import os
import platform
import random
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import redis
from infra import child

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from django_blueque.core import Client, ForkingRunner  # noqa: E402
from tests.redis_cluster import LocalCluster  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

BATCH = 1000  # tasks per enqueue_many call
PROFILES = {  # seconds per enqueue round, rounds, tasks per drain, pickup samples
    "full": {"seconds": 5.0, "rounds": 3, "drain": 3000, "samples": 50},
    "quick": {"seconds": 1.0, "rounds": 3, "drain": 300, "samples": 8},
}
# (key, label, unit, format)
ROWS = [
    ("single", "enqueue, one call per task", "tasks/s", "{:.0f}"),
    ("single_cpu", "  Redis CPU, all servers", "ms/1k tasks", "{:.1f}"),
    ("single_busiest", "  busiest server", "% of a core", "{:.0f}"),
    ("batched", f"enqueue, enqueue_many of {BATCH}", "tasks/s", "{:.0f}"),
    ("batched_cpu", "  Redis CPU, all servers", "ms/1k tasks", "{:.1f}"),
    ("batched_busiest", "  busiest server", "% of a core", "{:.0f}"),
    ("drain", "drain of queued no-op tasks", "tasks/s", "{:.0f}"),
    ("drain_cpu", "  Redis CPU, all servers", "ms/1k tasks", "{:.1f}"),
    ("drain_busiest", "  busiest server", "% of a core", "{:.0f}"),
    ("pickup_p50", "pickup latency, idle, p50", "ms", "{:.2f}"),
    ("pickup_p99", "pickup latency, idle, p99", "ms", "{:.2f}"),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


# ---- the child processes: `cluster.py --role producer|listener ...` ----

def producer(args):
    """Enqueue round-robin over the queues for the seconds each stdin line asks; one JSON reply
    a line. It starts at its own queue, so that the producers do not move in step."""
    client = Client(args.url, cluster=args.cluster)
    queues = [client.get_queue(name) for name in args.queue_list.split(",")]
    for queue in queues:  # scripts loaded and connections open on every server
        queue.enqueue("warm-up")
    print("ready", flush=True)
    for line in sys.stdin:
        mode, seconds = line.split()
        i, tasks, batch = args.index, 0, ["noop"] * BATCH
        start = time.perf_counter()
        end = start + float(seconds)
        while time.perf_counter() < end:
            if mode == "single":
                queues[i % len(queues)].enqueue("noop")
                tasks += 1
            else:
                queues[i % len(queues)].enqueue_many(batch)
                tasks += BATCH
            i += 1
        print(json.dumps({"tasks": tasks, "seconds": time.perf_counter() - start}), flush=True)


def listener(args):
    """A ForkingRunner on its queues; a task whose parameters start with 'mark' writes
    '<parameters> <time.time() as its code starts>' to the inherited pipe --marks-fd."""
    import logging
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(message)s")
    fd = args.marks_fd

    def callback(task):
        started = time.time()
        if fd is not None and task.parameters.startswith("mark"):
            os.write(fd, f"{task.parameters} {started!r}\n".encode())
        return ""

    client = Client(args.url, cluster=args.cluster)
    ForkingRunner(client, args.queue_list.split(","), callback,
                  concurrency=args.concurrency).run()


# ---- the harness ----

class Setup:
    """One Redis or one cluster, the engine's client on it, and plain clients on each server."""

    def __init__(self, name, label, url, cluster, ports):
        self.name, self.label, self.url, self.cluster = name, label, url, cluster
        self.servers = [redis.Redis(port=port) for port in ports]
        self.client = Client(url, cluster=cluster)

    def flush(self):
        for server in self.servers:
            server.flushall()

    def cpu(self):
        return [info["used_cpu_sys"] + info["used_cpu_user"]
                for info in (server.info("cpu") for server in self.servers)]

    def argv(self, role, queues, *extra):
        return [sys.executable, __file__, "--role", role, "--url", self.url,
                "--queue-list", ",".join(queues), *(["--cluster-mode"] if self.cluster else []),
                *map(str, extra)]


def pick_queues(cluster, count):
    """`count` names spread evenly over the masters, each next one on a master owning fewest."""
    owned = {port: [] for port in cluster.ports}
    names, i = [], 0
    while len(names) < count:
        name, i = f"q{i:03d}", i + 1
        port = cluster.owner_port(cluster.slot_of("{" + name + "}"))
        if len(owned[port]) == min(map(len, owned.values())):
            owned[port].append(name)
            names.append(name)
    return names, owned


def redis_use(before, after, seconds, tasks):
    """Redis CPU seconds of each server, ms per 1,000 tasks of all, busiest one's % of a core."""
    used = [b - a for a, b in zip(before, after, strict=True)]
    return {"redis_cpu_s": used, "cpu": 1e6 * sum(used) / tasks,
            "busiest": 100 * max(used) / seconds}


def enqueue_round(setup, producers, mode, seconds):
    setup.flush()
    before, start = setup.cpu(), time.monotonic()
    for proc in producers:
        proc.stdin.write(f"{mode} {seconds}\n")
        proc.stdin.flush()
    replies = [json.loads(proc.stdout.readline() or "null") for proc in producers]
    after, wall = setup.cpu(), time.monotonic() - start
    if None in replies:
        raise RuntimeError(f"[{setup.name}] a producer exited")
    tasks = sum(r["tasks"] for r in replies)
    rate = sum(r["tasks"] / r["seconds"] for r in replies)
    return {"rate": rate, "tasks": tasks, **redis_use(before, after, wall, tasks)}


def group(queues, listeners):
    """The queues in `listeners` contiguous groups (in pick order, so each spans the masters)."""
    return [queues[n * len(queues) // listeners:(n + 1) * len(queues) // listeners]
            for n in range(listeners)]


def descendants(pid):
    """Every process under pid, children first (from /proc/PID/task/*/children)."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child_pid) for child_pid in children.read_text().split()]
        except OSError:  # it has just exited
            pass
    return [pid for child_pid in found for pid in (child_pid, *descendants(child_pid))]


def kill_tree(pid):
    """SIGKILL a process and all under it: a task process has a session of its own, out of
    reach of a kill of the listener's group, and retries its end for as long as Redis is away."""
    for victim in [pid, *descendants(pid)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_all(procs, grace=5.0):
    """SIGTERM (a listener's graceful stop) to all at once, then SIGKILL what is left, trees."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()


def kill_strays():
    """Last, SIGKILL and reap whatever is still under this process: it is a subreaper, so the
    task processes of a listener that died come back to it."""
    for pid in descendants(os.getpid()):
        kill_tree(pid)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:  # not a child of ours: its parent, killed too, was
            pass


def start_listeners(stack, procs, setup, args, queues, workdir, marks_fd=None):
    """Start the set-up's listeners, one per queue group, appending them to procs."""
    for n, names in enumerate(group(queues, args.listeners)):
        extra = ["--concurrency", args.concurrency]
        if marks_fd is not None:
            extra += ["--marks-fd", marks_fd]
        path = workdir / f"{setup.name}-listener{n}.log"
        out = stack.enter_context(open(path, "a"))
        procs.append(stack.enter_context(child(
            setup.argv("listener", names, *extra), stdout=out, stderr=out,
            start_new_session=True, pass_fds=() if marks_fd is None else (marks_fd,))))


def counts(setup, queues):
    """(complete, failed) tasks of the queues, in one round trip per server."""
    with setup.client.redis.pipeline(transaction=False) as pipe:
        for name in queues:
            pipe.llen(setup.client.keys.complete(name))
            pipe.llen(setup.client.keys.failed(name))
        replies = pipe.execute()
    return sum(replies[0::2]), sum(replies[1::2])


def drain_round(setup, args, queues, n, workdir):
    """n no-op tasks queued evenly over the queues, then the listeners started; the rate is n
    over the time from the first task's start to the last one's end (their task hashes)."""
    setup.flush()
    ids = []
    for q, name in enumerate(queues):
        share = n // len(queues) + (q < n % len(queues))
        for first in range(0, share, BATCH):
            ids += setup.client.get_queue(name).enqueue_many(["noop"] * min(BATCH, share - first))
    before, start = setup.cpu(), time.monotonic()
    with ExitStack() as stack:
        procs = []
        stack.callback(stop_all, procs)
        start_listeners(stack, procs, setup, args, queues, workdir)
        deadline = start + 60 + n / 20
        while (done := counts(setup, queues)) != (n, 0):
            if done[1] or time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"[{setup.name}] drain of {n}: {done[0]} complete, {done[1]}"
                                   f" failed after {time.monotonic() - start:.0f} s")
            time.sleep(0.1)
        after, wall = setup.cpu(), time.monotonic() - start
    with setup.client.redis.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hmget(setup.client.keys.task(task_id), ["started", "finished"])
        times = pipe.execute()
    first, last = min(float(s) for s, _ in times), max(float(f) for _, f in times)
    return {"rate": n / (last - first), "seconds": last - first, "wall": wall,
            **redis_use(before, after, wall, n)}


class Marks:
    """The read end of the pipe the task processes write their marks to, read a line at a time."""

    def __init__(self):
        self.fd, self.write_fd = os.pipe()
        self.buffer = b""

    def line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if not select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise RuntimeError(f"no task started within {timeout} s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise RuntimeError("every listener closed the marks pipe")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        name, started = line.decode().split()
        return name, float(started)


def pickup(setups, args, queues, samples, workdir):
    """Both set-ups' listeners idle at once; one task at a time, alternating set-ups and going
    round the queues: the time from the enqueue call to the task's code starting."""
    latencies = {setup.name: [] for setup in setups}
    with ExitStack() as stack:
        marks, procs = {}, []
        stack.callback(stop_all, procs)
        for setup in setups:
            marks[setup.name] = Marks()
            start_listeners(stack, procs, setup, args, queues, workdir,
                            marks[setup.name].write_fd)
            os.close(marks[setup.name].write_fd)
        for setup in setups:  # each listener through its first task, on every queue
            for name in queues:
                setup.client.get_queue(name).enqueue(f"mark-warm-{name}")
            for _ in queues:
                marks[setup.name].line(timeout=60)
        time.sleep(1)
        for i in range(samples):
            for setup in setups:
                time.sleep(0.1 + random.uniform(0, 0.1))
                expected = f"mark-{i}"
                sent = time.time()
                setup.client.get_queue(queues[i % len(queues)]).enqueue(expected)
                name, started = marks[setup.name].line(timeout=30)
                if name != expected:
                    raise RuntimeError(f"[{setup.name}] expected {expected}, got {name}")
                latencies[setup.name].append(1000 * (started - sent))
        for mark in marks.values():
            os.close(mark.fd)
    return latencies


def p99(values):
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def measure(setups, args, queues, profile, workdir):
    raw = {s.name: {"single": [], "batched": [], "drain": []} for s in setups}
    with ExitStack() as stack:
        errors = stack.enter_context(open(workdir / "producers.log", "w"))
        producers = {s.name: [stack.enter_context(child(
            s.argv("producer", queues, "--index", p), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=errors, text=True, start_new_session=True)) for p in range(args.producers)]
        for s in setups}
        for s in setups:
            for proc in producers[s.name]:
                if proc.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"[{s.name}] a producer did not start")
        for mode in ("single", "batched"):
            for r in range(profile["rounds"]):
                for s in setups if r % 2 == 0 else setups[::-1]:
                    log(f"[{s.name}] enqueue {mode}, round {r + 1}")
                    raw[s.name][mode].append(
                        enqueue_round(s, producers[s.name], mode, profile["seconds"]))
    for r in range(profile["rounds"]):
        for s in setups if r % 2 == 0 else setups[::-1]:
            log(f"[{s.name}] drain of {profile['drain']} tasks, round {r + 1}")
            raw[s.name]["drain"].append(drain_round(s, args, queues, profile["drain"], workdir))
    log(f"pickup latency, {profile['samples']} samples per set-up")
    for name, values in pickup(setups, args, queues, profile["samples"], workdir).items():
        raw[name]["pickup_ms"] = values
    figures = {}
    for s in setups:
        f = figures[s.name] = {}
        for phase in ("single", "batched", "drain"):
            f[phase] = statistics.median(x["rate"] for x in raw[s.name][phase])
            for key in ("cpu", "busiest"):
                f[f"{phase}_{key}"] = statistics.median(x[key] for x in raw[s.name][phase])
        f["pickup_p50"] = statistics.median(raw[s.name]["pickup_ms"])
        f["pickup_p99"] = p99(raw[s.name]["pickup_ms"])
    return figures, raw


def table(figures, setups):
    a, b = (figures[s.name] for s in setups)
    rows = [["figure", "unit", *(s.label for s in setups), "ratio"]]
    for key, label, unit, fmt in ROWS:
        rows.append([label, unit, fmt.format(a[key]), fmt.format(b[key]),
                     f"{b[key] / a[key]:.2f}x" if a[key] else "n/a"])
    widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
    out = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    return "\n".join([out[0], "-" * len(out[0]), *out[1:]])


INTERRUPTED = []


def interrupt(signum, frame):
    """Ctrl-C stops the redis-servers too (they are in the terminal's process group): the
    Redis errors that may then come first mean the same interruption."""
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, under a minute")
    parser.add_argument("--queues", type=int, default=12, help="queues (default 12)")
    parser.add_argument("--producers", type=int, default=3, help="producer processes (3)")
    parser.add_argument("--listeners", type=int, default=3, help="listener processes (3)")
    parser.add_argument("--concurrency", type=int, default=1, help="tasks per listener (1)")
    parser.add_argument("--json", type=Path, help="also write every raw sample here")
    for name in ("--role", "--url", "--queue-list"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--cluster-mode", dest="cluster", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--marks-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.listeners <= args.queues or min(args.producers, args.concurrency) < 1:
        parser.error("it needs 1 <= listeners <= queues, and producers and concurrency >= 1")
    if args.role:
        return {"producer": producer, "listener": listener}[args.role](args)
    # SIGTERM unwinds like Ctrl-C, so every process and server is stopped on the way out.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
    profile = PROFILES["quick" if args.quick else "full"]
    started = time.monotonic()
    with ExitStack() as stack:
        stack.callback(kill_strays)
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bq-cluster-")))
        log("starting one redis-server and a 3-master cluster")
        server = RedisServer()
        stack.callback(server.close)
        server.start()
        cluster = LocalCluster(masters=3)
        stack.callback(cluster.close)
        cluster.start()
        queues, owned = pick_queues(cluster, args.queues)
        setups = [Setup("one", "one Redis", server.url, False, [server.port]),
                  Setup("cluster", "3-master cluster", cluster.url, True, cluster.ports)]
        for setup in setups:
            stack.callback(setup.client.redis.close)
        try:
            figures, raw = measure(setups, args, queues, profile, workdir)
        except Exception:
            for path in [] if INTERRUPTED else sorted(workdir.glob("*.log")):
                lines = path.read_text(errors="replace").splitlines()
                log(f"--- {path.name}, last lines:\n" + "\n".join(lines[-15:]))
            raise
        version = setups[0].servers[0].info("server")["redis_version"]
    elapsed = time.monotonic() - started
    print(f"redis {version}, python {platform.python_version()}, {os.cpu_count()} cores shared "
          f"by every server and client; {'quick' if args.quick else 'full'} run in "
          f"{elapsed:.0f} s")
    print(f"{len(queues)} queues; cluster masters own " + ", ".join(
        f"{len(names)} (port {port})" for port, names in owned.items()))
    print(f"enqueue: {args.producers} producers x {profile['seconds']:g} s; drain: "
          f"{profile['drain']} tasks, {args.listeners} listeners x concurrency "
          f"{args.concurrency}; medians of {profile['rounds']} rounds; pickup: "
          f"{profile['samples']} samples")
    print(table(figures, setups))
    if args.json:
        args.json.write_text(json.dumps({
            "profile": profile, "args": {k: getattr(args, k) for k in (
                "quick", "queues", "producers", "listeners", "concurrency")},
            "queues": owned, "redis_version": version, "cores": os.cpu_count(),
            "seconds": elapsed, "figures": figures, "raw": raw}, indent=2, default=str) + "\n")


if __name__ == "__main__":
    try:
        main()
    except Exception:
        if not INTERRUPTED:
            raise
        sys.exit("interrupted; every process it started has been stopped")
    except KeyboardInterrupt:
        sys.exit("interrupted; every process it started has been stopped")
