"""What a task process's garbage collections cost, with and without the listener's
``gc.freeze()`` before it forks (runner._freeze_heap).

    python bench/fork_gc.py [--tasks 100] [--objects 20000]

1. Copied by one full collection: a listener-like process (the engine imported, a client
   connected; then the same under testproject's Django settings, its URLs loaded) forks; the
   child reads its Private_Dirty (smaps_rollup), runs ``gc.collect()``, reads it again: the
   KiB of the listener's pages it copied and the ms it took, without and with ``gc.freeze()``
   in the parent first. Each in a fresh interpreter.
2. A drain of tasks that allocate: a ForkingRunner (concurrency 1, its own redis-server) runs
   ``--tasks`` tasks, each building ``--objects`` small dicts (so the young generations are
   collected, as in a real task); CPU per task (the listener and the task processes it reaped),
   tasks/s, and the median Private_Dirty of a task process at its end. Without the freeze and
   with it, alternately, twice.
"""

import argparse
import gc
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import redis  # noqa: E402
from infra import private_redis  # noqa: E402

from django_blueque.core import Client, ForkingRunner, runner  # noqa: E402

QUEUE = "fork-gc"
MARKS = "fork-gc:dirty"


def private_dirty_kib():
    with open("/proc/self/smaps_rollup") as rollup:
        return next(int(line.split()[1]) for line in rollup if line.startswith("Private_Dirty:"))


def copied_by_a_collection(url, django, freeze):
    """In this (fresh) interpreter: KiB and ms one gc.collect() costs a forked child."""
    if django:
        sys.path.insert(0, str(HERE.parent / "testproject"))
        os.environ["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
        import django as django_module
        from django.urls import resolve
        django_module.setup()
        resolve("/")  # the URLconf, the admin's included, imported as a server has it
    Client(url).protocol.redis.ping()
    if freeze:
        gc.collect()
        gc.freeze()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        before, began = private_dirty_kib(), time.perf_counter()
        gc.collect()
        spent = (time.perf_counter() - began) * 1000
        os.write(write_end, json.dumps([private_dirty_kib() - before, spent]).encode())
        os._exit(0)
    os.close(write_end)
    copied, spent = json.loads(os.read(read_end, 200))
    os.waitpid(pid, 0)
    return {"tracked objects": len(gc.get_objects()) + gc.get_freeze_count(),
            "copied KiB": copied, "ms": round(spent, 1)}


def allocating_task(task):
    junk = [{"n": n} for n in range(int(task.parameters))]
    redis.Redis.from_url(os.environ["FORK_GC_URL"]).rpush(MARKS, private_dirty_kib())
    return str(len(junk))


def drain(url, tasks, objects, freeze):
    """tasks/s, CPU ms per task, median Private_Dirty KiB of a task process at its end."""
    r = redis.Redis.from_url(url)
    r.flushdb()
    os.environ["FORK_GC_URL"] = url
    pid = os.fork()
    if pid == 0:
        if not freeze:
            runner._freeze_heap = lambda: False
        ForkingRunner(Client(url), QUEUE, allocating_task).run()
        os._exit(0)
    time.sleep(1)  # up, its spare forked
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    Client(url).get_queue(QUEUE).enqueue_many([str(objects)] * tasks)
    while r.llen(MARKS) < tasks:
        time.sleep(0.01)
    elapsed = time.perf_counter() - began
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000 / tasks
    dirty = statistics.median(int(kib) for kib in r.lrange(MARKS, 0, -1))
    return {"tasks/s": round(tasks / elapsed), "CPU ms per task": round(cpu, 2),
            "task process Private_Dirty KiB": dirty}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--copied", nargs=3, help=argparse.SUPPRESS)  # url django freeze
    args = parser.parse_args(argv)
    if args.copied:
        url, django, freeze = args.copied
        print(json.dumps(copied_by_a_collection(url, django == "1", freeze == "1")))
        return 0
    with tempfile.TemporaryDirectory() as workdir, private_redis(workdir) as url:
        print("one full collection in a task process (copy-on-write from its listener):")
        for django in ("0", "1"):
            for freeze in ("0", "1"):
                figures = json.loads(subprocess.check_output(
                    [sys.executable, __file__, "--copied", url, django, freeze]))
                print(f"  {'Django' if django == '1' else 'engine only':11s} "
                      f"{'frozen' if freeze == '1' else 'not frozen':10s} {figures}")
        print(f"a drain of {args.tasks} tasks, each building {args.objects} dicts:")
        for freeze in (False, True, False, True):
            print(f"  {'frozen' if freeze else 'not frozen':10s} "
                  f"{drain(url, args.tasks, args.objects, freeze)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
