"""The Blueque admin at the sizes of issue 10: 100,000 names in ``blueque_queues`` (dashboard,
metrics, listeners page, ``bq_status``), a task hash of 100,000 fields, a started set of
1,000,000 members, and the per-task admin actions (retry, delete, cancel) on lists of
1,000,000 tasks.

    python bench/admin_bench_scale.py [--queues 100000] [--started 1000000] [--tasks 1000000]
                                      [--runs 5] [--json FILE]

It starts its own redis-server (never the one on 6379) and requests the pages with Django's
test client in this process, logged in as a superuser. Each row gets the median wall time of
its runs and the median Redis time (the server's CPU time, from ``INFO cpu``), which a busy
machine inflates less than the wall time. The actions are
run on the oldest task of a list (the far end from the head that LREM scans from), on one in
the middle and on the newest; each run acts on a different task.
"""

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "testproject"), str(ROOT)]

from bench.admin_bench import admin_site  # noqa: E402

FILL_QUEUES = """
-- KEYS[1] queues zset; ARGV[1] first number, ARGV[2] count
for n = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  redis.call('ZADD', KEYS[1], 0, string.format('queue-%06d', n))
end
"""

FILL_STARTED = """
-- KEYS[1] started set; ARGV[1] first number, ARGV[2] count
for n = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  redis.call('SADD', KEYS[1], 'bench-host_4242 ' .. (1000 + n % 30000) .. ' running-' .. n)
end
"""

FILL_TASKS = """
-- KEYS[1] list; ARGV[1] first number, ARGV[2] count, ARGV[3] queue, ARGV[4] status,
-- ARGV[5] task key prefix, ARGV[6] time
for n = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  local id = ARGV[4] .. string.format('-%07d', n)
  redis.call('HSET', ARGV[5] .. id, 'status', ARGV[4], 'queue', ARGV[3], 'parameters', '{}',
    'created', ARGV[6], 'updated', ARGV[6], 'error', 'boom')
  redis.call('LPUSH', KEYS[1], id)
end
"""


def redis_usec(redis):
    """CPU time the Redis server has used so far, in microseconds."""
    cpu = redis.info("cpu")
    return (cpu["used_cpu_user"] + cpu["used_cpu_sys"]) * 1e6


def measure(redis, runs, act):
    """Median wall and Redis milliseconds of ``act(run)`` over ``runs`` runs."""
    wall, server = [], []
    for run in range(runs):
        before = redis_usec(redis)
        began = time.perf_counter()
        act(run)
        wall.append((time.perf_counter() - began) * 1000)
        server.append((redis_usec(redis) - before) / 1000)
    return {"median_ms": round(statistics.median(wall), 1),
            "redis_median_ms": round(statistics.median(server), 1), "runs": runs}


def fill_tasks(redis, keys, queue, status, count, chunk=50000):
    script = redis.register_script(FILL_TASKS)
    key = keys.pending(queue) if status == "pending" else keys.failed(queue)
    for first in range(0, count, chunk):
        script(keys=[key], args=[first, min(chunk, count - first), queue, status, keys.task(""),
                                 repr(time.time() - 3600)])
    redis.zincrby(keys.queues, 0, queue)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--started", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    with admin_site("blueque-admin-scale-") as (engine, client):
        from django.core.management import call_command

        redis, keys = engine.redis, engine.keys
        script = redis.register_script(FILL_QUEUES)
        for first in range(0, args.queues, 50000):
            script(keys=[keys.queues], args=[first, min(50000, args.queues - first)])
        engine.protocol.heartbeat("bench-host_4242", ["queue-000001"], {"host": "bench-host"})
        figures = {"queues": args.queues, "tasks": args.tasks, "rows": {}}

        def row(name, runs, act):
            figures["rows"][name] = measure(redis, runs, act)
            print(f"{name:55} {figures['rows'][name]}", flush=True)

        def page(path):
            def get(_run):
                response = client.get(path)
                assert response.status_code == 200, (path, response.status_code)
            return get

        for name, path in (("dashboard", "/admin/blueque/"),
                           ("metrics.json", "/admin/blueque/metrics.json"),
                           ("metrics (Prometheus)", "/admin/blueque/metrics/"),
                           ("listeners page", "/admin/blueque/listeners/")):
            page(path)(0)  # warm
            row(f"{name}, {args.queues} queues", args.runs, page(path))
        row(f"bq_status, {args.queues} queues", args.runs,
            lambda _run: call_command("bq_status", stdout=io.StringIO()))

        wide = keys.task("wide")
        redis.hset(wide, mapping={"status": "failed", "queue": "big", "parameters": "{}"})
        for start in range(0, 100_000, 10_000):
            redis.hset(wide, mapping={f"extra_{n:06d}": "v" * 20
                                      for n in range(start, start + 10_000)})
        redis.hset(wide, "node", "n" * 10_000_000)
        page("/admin/blueque/tasks/wide/")(0)
        row("task page, 100,000 fields and a 10 MB node", args.runs,
            page("/admin/blueque/tasks/wide/"))

        script = redis.register_script(FILL_STARTED)
        for first in range(0, args.started, 50000):
            script(keys=[keys.started("queue-000001")],
                   args=[first, min(50000, args.started - first)])
        for name, path in (
                ("started list", "/admin/blueque/queue/?name=queue-000001&state=started"),
                ("listeners page", "/admin/blueque/listeners/")):
            page(path)(0)
            row(f"{name}, started set of {args.started}", args.runs, page(path))

        fill_tasks(redis, keys, "big", "failed", args.tasks)
        fill_tasks(redis, keys, "big", "pending", args.tasks)

        def action(name, status, position, offset):
            def act(run):
                # positions counted from the head (newest); each run takes another task
                run += offset
                number = {"oldest": run, "middle": args.tasks // 2 + run,
                          "newest": args.tasks - 1 - run}[position]
                task_id = f"{status}-{number:07d}"
                response = client.post("/admin/blueque/actions/", {
                    "action": name, "ids": task_id, "confirm": "yes",
                    "next": "/admin/blueque/"})
                assert response.status_code == 302, response.status_code
            return act

        for name, status in (("retry", "failed"), ("delete", "failed"), ("cancel", "pending")):
            for position in ("oldest", "middle", "newest"):
                # retry and delete take different tasks of the same list
                offset = 100 if name == "delete" else 0
                row(f"{name} 1 selected {status} task ({position} of {args.tasks})", args.runs,
                    action(name, status, position, offset))
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
