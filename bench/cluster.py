"""Our engine on one Redis and on a 3-master Redis Cluster: total enqueue and drain throughput
and idle pickup latency over many queues, in one run on this machine.

    python bench/cluster.py [--quick] [--queues 12] [--producers 3] [--listeners 3]
                            [--concurrency 1] [--json out.json]

Both set-ups run side by side, their rounds interleaved (the order flips each round): a private
redis-server in plain mode (``Client(url)``) and a private 3-master LocalCluster
(devtools/redis_cluster.py) in cluster mode (``Client(url, cluster=True)``). The queue names are
chosen so that the cluster's masters own as many queues each. Redis CPU is INFO cpu
(used_cpu_sys + used_cpu_user) of every server, read before and after each round.

This file is both the harness (``main``: it runs the rounds of cluster_rounds.py and prints the
figures) and the child processes it starts (``--role producer|listener``).
"""

import argparse
import ctypes
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from infra import child

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cluster_rounds import (  # noqa: E402
    BATCH,
    Setup,
    drain_round,
    enqueue_round,
    kill_strays,
    pick_queues,
    pickup,
)

from devtools.redis_cluster import LocalCluster  # noqa: E402
from devtools.servers import RedisServer  # noqa: E402
from django_blueque.core import Client, ForkingRunner  # noqa: E402

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
