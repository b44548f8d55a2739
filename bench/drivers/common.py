"""The measurements every driver shares; a system's own module only says how to enqueue and listen.

A driver runs under its system's interpreter (the peers' throwaway virtualenvs), so this module
uses nothing but the standard library and redis-py, which every system brings along. Each
measuring role prints one JSON object on its last stdout line for bench/run.py to read.
"""

import argparse
import itertools
import json
import os
import random
import socket
import statistics
import sys
import time
import urllib.parse

import redis
import redis.utils

QUEUE = "bench"
# Every task pushes "<params> <time.time() when its code started> <its parent's pid>" here (the
# parent tells which listener ran it); a plain list keeps the probe identical for all systems
# and lets the measuring process block on it with BLPOP.
MARKS = "bench:marks"
URL_ENV = "BENCH_REDIS_URL"
LONG = "long-"
"""Parameters starting with this name a task that, after its mark, sleeps LONG_SECONDS: the
task of the "overhead on a task of 1 s" row."""
LONG_SECONDS = 1.0

def task_body(params):
    """The benchmark task: record when the task code started running, nothing more.

    It runs in the forked child and sends one RPUSH on a plain socket of its own: opening a
    redis-py connection costs very different times across redis-py versions (7+ looks its own
    version up for each new connection, 5.x did it once at import), which would measure the
    client library rather than the system running the task.
    """
    started = time.time()
    url = urllib.parse.urlsplit(os.environ[URL_ENV])
    mark = f"{params} {started!r} {os.getppid()}".encode()
    command = b"*3\r\n$5\r\nRPUSH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
        len(MARKS), MARKS.encode(), len(mark), mark)
    with socket.create_connection((url.hostname, url.port or 6379)) as conn:
        conn.sendall(command)
        conn.recv(64)  # ":<length>\r\n"
    if params.startswith(LONG):
        time.sleep(LONG_SECONDS)
    return ""


def _chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def enqueue_rates(driver, n, rounds, batch):
    """Tasks/s for n enqueues, one call per task and then (if the system has it) in batches."""
    params = [f"enqueue-{i}" for i in range(n)]
    single, batched = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for p in params:
            driver.enqueue(p)
        single.append(n / (time.perf_counter() - start))
    if driver.has_batch:
        chunks = _chunks(params, batch)
        for _ in range(rounds):
            start = time.perf_counter()
            for chunk in chunks:
                driver.enqueue_many(chunk)
            batched.append(n / (time.perf_counter() - start))
    return {"single": single, "batched": batched if driver.has_batch else None}


def pickup_latency(driver, marks, samples, min_pause, jitter, timeout):
    """Seconds from the enqueue call to the task code starting, one task at a time.

    The pause before each sample lets the listener go idle again; its random part spreads the
    enqueue over the whole cycle of a polling listener (blueque 1.0 sleeps 1 s between polls)
    instead of always hitting the same point of it.
    """
    marks.delete(MARKS)
    latencies = []
    for i in range(samples):
        time.sleep(min_pause + random.uniform(0, jitter))
        params = f"latency-{i}"
        enqueued = time.time()
        driver.enqueue(params)
        popped = marks.blpop([MARKS], timeout=timeout)
        if popped is None:
            raise SystemExit(f"task {params} did not start within {timeout} s")
        got, started, _ = popped[1].decode().split()
        if got != params:
            raise SystemExit(f"expected the mark of {params}, got {got}")
        latencies.append(float(started) - enqueued)
    return {"latencies": latencies}


def long_overhead(driver, marks, samples, min_pause, jitter, timeout):
    """What a task of LONG_SECONDS costs beyond its own second, one task at a time with the
    listener idle before each: from just before the enqueue call to the moment the end is
    recorded in Redis, less the second.

    The moment the end is recorded is the system's own: Redis's keyspace notification of a
    write to the key the driver names (``end_key``: our task hash, RQ's job hash, huey's
    results hash, the floor's list of ends), timed as it arrives here, the first after which
    the driver's ``ended`` reads the end. The task's mark splits it into the pickup and the rest
    (the second's end to the end recorded, and the process's way out before it).
    """
    marks.delete(MARKS)
    db = marks.connection_pool.connection_kwargs.get("db", 0)
    marks.config_set("notify-keyspace-events", "KA")
    watch = marks.pubsub(ignore_subscribe_messages=True)
    totals, pickups = [], []
    try:
        for i in range(samples):
            time.sleep(min_pause + random.uniform(0, jitter))
            params = f"{LONG}{i}"
            enqueued = time.time()
            handle = driver.enqueue(params)
            watch.subscribe(f"__keyspace@{db}__:{driver.end_key(handle)}")
            deadline = time.monotonic() + LONG_SECONDS + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SystemExit(f"task {params} did not end within {timeout} s of its "
                                     f"second")
                if watch.get_message(timeout=left) is None:
                    continue
                seen = time.time()
                if driver.ended(marks, handle):
                    break
            watch.unsubscribe()
            got, started, _ = marks.blpop([MARKS], timeout=timeout)[1].decode().split()
            if got != params:
                raise SystemExit(f"expected the mark of {params}, got {got}")
            totals.append(seen - enqueued)
            pickups.append(float(started) - enqueued)
    finally:
        watch.close()
        marks.config_set("notify-keyspace-events", "")
    return {"totals": totals, "pickups": pickups, "seconds": LONG_SECONDS}


def fork_throughput(driver, marks, n, batch, timeout, listeners=1):
    """n no-op tasks through ``listeners`` listener processes, timed from task start to task
    start once every listener has started one.

    Start to start leaves out enqueueing and the first pickup; what remains is the whole cycle
    of one task: dequeue, fork, run, bookkeeping, reap. With several listeners (blueque 1.0
    and RQ run one task per listener), the rate counts from the first start of the last one
    to join: a listener that polls (blueque 1.0 sleeps 1 s when it found its queue empty)
    joins a drain up to a second late, which measures its poll, not its rate. Besides the
    mean rate it keeps the median gap, which a burst of load from elsewhere on a small
    machine barely moves.
    """
    marks.delete(MARKS)
    params = [f"throughput-{i}" for i in range(n)]
    if driver.has_batch:
        for chunk in _chunks(params, batch):
            driver.enqueue_many(chunk)
    else:
        for p in params:
            driver.enqueue(p)
    deadline = time.monotonic() + timeout
    starts = []
    while len(starts) < n:
        popped = marks.blpop([MARKS], timeout=max(deadline - time.monotonic(), 0.01))
        if popped is None:
            raise SystemExit(f"only {len(starts)} of {n} tasks started within {timeout} s")
        _, started, parent = popped[1].split()
        starts.append((float(started), parent))
    starts.sort()
    joined = {}
    for started, parent in starts:
        joined.setdefault(parent, started)
    if len(joined) < listeners:
        raise SystemExit(f"{len(joined)} of {listeners} listeners ran a task of the drain: "
                         f"drain more tasks (-n) than the others run before it joins")
    timed = [started for started, _ in starts if started >= max(joined.values())]
    if len(timed) < 2:
        raise SystemExit("the last listener joined at the drain's end: drain more tasks (-n)")
    gaps = [later - earlier for earlier, later in itertools.pairwise(timed)]
    return {"tasks": n, "timed": len(timed), "elapsed": timed[-1] - timed[0],
            "tasks_per_s": (len(timed) - 1) / (timed[-1] - timed[0]),
            "median_gap": statistics.median(gaps)}


def main(driver_class):
    """Command line shared by all drivers: `python drivers/X.py ROLE REDIS_URL [options]`."""
    parser = argparse.ArgumentParser(description=driver_class.__doc__)
    parser.add_argument("role", choices=["info", "listen", "enqueue", "latency", "long",
                                         "throughput"])
    parser.add_argument("url", help="redis://host:port/db of a Redis the benchmark may flush")
    parser.add_argument("-n", type=int, default=5000, help="tasks (enqueue, throughput)")
    parser.add_argument("--rounds", type=int, default=3, help="enqueue rounds, drains")
    parser.add_argument("--batch", type=int, default=100, help="tasks per batched enqueue call")
    parser.add_argument("--samples", type=int, default=60, help="latency (and long) samples")
    parser.add_argument("--min-pause", type=float, default=0.1, help="idle seconds before a sample")
    parser.add_argument("--jitter", type=float, default=1.0, help="random extra idle seconds")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for tasks")
    parser.add_argument("--listeners", type=int, default=1,
                        help="listener processes running the drain (throughput)")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="tasks one listener runs at once (listen; only a driver whose "
                             "system can: the others run one at a time)")
    args = parser.parse_args()

    os.environ[URL_ENV] = args.url
    driver = driver_class(args.url)
    if args.role == "listen":
        if args.concurrency > 1:
            driver.listen(concurrency=args.concurrency)
        else:
            driver.listen()
        return
    marks = redis.Redis.from_url(args.url)
    if args.role == "info":
        result = {"version": driver.version, "redis_py": redis.__version__,
                  "hiredis": redis.utils.HIREDIS_AVAILABLE, "batch": driver.has_batch,
                  "source": getattr(driver, "source", None)}
    elif args.role == "enqueue":
        result = enqueue_rates(driver, args.n, args.rounds, args.batch)
    elif args.role == "latency":
        result = pickup_latency(driver, marks, args.samples, args.min_pause, args.jitter,
                                args.timeout)
    elif args.role == "long":
        result = long_overhead(driver, marks, args.samples, args.min_pause, args.jitter,
                               args.timeout)
    else:
        drains = [fork_throughput(driver, marks, args.n, args.batch, args.timeout,
                                  args.listeners) for _ in range(args.rounds)]
        result = {"drains": drains,
                  "tasks_per_s": statistics.median(d["tasks_per_s"] for d in drains),
                  "median_gap": statistics.median(d["median_gap"] for d in drains)}
    print(json.dumps(result))
    sys.stdout.flush()
