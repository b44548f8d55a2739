"""The Blueque admin pages against a big Redis: server time of the dashboard, of 100-row pages
of a failed list and of a task page with 1,000,000 failed tasks in one queue, and a "delete
all failed" bulk job over 10,000 tasks (time to completion, longest request).

    python bench/admin_bench.py [--tasks 1000000] [--runs 50] [--bulk 10000] [--json FILE]

It starts its own redis-server (never the one on 6379), fills it with a Lua script in chunks,
and requests the pages with Django's test client, logged in as a superuser, in this process:
the times are the server's (middleware, views, Redis, templates), not a browser's. Each page
gets the median, 95th percentile and maximum of its wall time, and the median CPU time of this
process (Redis's own time not included), which a busy machine does not inflate.
"""

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "testproject"), str(ROOT)]

from devtools.servers import RedisServer  # noqa: E402

FILL = """
-- KEYS[1] failed list; ARGV[1] first number, ARGV[2] count, ARGV[3] queue, ARGV[4] time,
-- ARGV[5] task key prefix, ARGV[6] traceback
for n = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  local id = string.format('%08x-b3c4-4d5e-8f60-%012d', n, n)
  redis.call('HSET', ARGV[5] .. id, 'status', 'failed', 'queue', ARGV[3],
    'parameters', '{"video_id": ' .. n .. ', "preset": "1080p", "source": "s3://m/' .. n .. '"}',
    'created', ARGV[4], 'updated', ARGV[4], 'started', ARGV[4], 'finished', ARGV[4],
    'node', 'worker-3.example.com_4242', 'pid', '5151', 'attempts', '1',
    'error', 'ffmpeg exited with status 1: invalid data found when processing input',
    'error_type', 'subprocess.CalledProcessError', 'traceback', ARGV[6])
  redis.call('LPUSH', KEYS[1], id)
end
return redis.call('LLEN', KEYS[1])
"""

TRACEBACK = "".join(
    f'  File "/srv/app/video/encode.py", line {n}, in step_{n}\n    run(command)\n'
    for n in range(8))
TRACEBACK = f"Traceback (most recent call last):\n{TRACEBACK}subprocess.CalledProcessError: 1\n"


def fill(redis, keys, queue, count, chunk=20000):
    """``count`` failed tasks, newest pushed last, as finish.lua leaves them."""
    script = redis.register_script(FILL)
    stamp = repr(time.time() - 3600)
    for first in range(0, count, chunk):
        script(keys=[keys.failed(queue)],
               args=[first, min(chunk, count - first), queue, stamp, keys.task(""), TRACEBACK])
    redis.zincrby(keys.queues, 0, queue)


def task_id(n):
    return f"{n:08x}-b3c4-4d5e-8f60-{n:012d}"


def timed(client, path, runs, **extra):
    """(wall, CPU) milliseconds of each of ``runs`` requests, after three to warm up. The CPU
    time is this process's: on a busy machine it shows what the wall time hides."""
    for _ in range(3):
        assert client.get(path, **extra).status_code == 200, path
    wall, cpu = [], []
    for _ in range(runs):
        began, began_cpu = time.perf_counter(), time.process_time()
        response = client.get(path, **extra)
        wall.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
        assert response.status_code == 200, path
    return wall, cpu


def summary(measured):
    wall, cpu = (sorted(values) for values in measured)
    return {"median_ms": round(statistics.median(wall), 2),
            "p95_ms": round(wall[int(0.95 * (len(wall) - 1))], 2),
            "max_ms": round(wall[-1], 2), "cpu_median_ms": round(statistics.median(cpu), 2),
            "runs": len(wall)}


def bulk_delete(client, queue):
    """Start "delete all failed" and drive it as the job page does; returns its figures."""
    form = {"action": "delete", "state": "failed", "queue": queue}
    began = time.perf_counter()
    requests = []
    response = client.post("/admin/blueque/bulk/start/", dict(form, confirm="yes"))
    requests.append(time.perf_counter() - began)
    assert response.status_code == 302
    while True:
        sent = time.perf_counter()
        response = client.post("/admin/blueque/bulk/step/", form, HTTP_ACCEPT="application/json")
        requests.append(time.perf_counter() - sent)
        job = json.loads(response.content)
        if job["status"] != "running":
            break
    return {"tasks": job["affected"], "seconds_to_complete": round(time.perf_counter() - began, 3),
            "requests": len(requests), "longest_request_ms": round(max(requests) * 1000, 1)}


@contextmanager
def admin_site(prefix):
    """A private redis-server (never the one on 6379) with the testproject's admin on it, in
    this process: yields (the engine's Client, a Django test Client logged in as a
    superuser). Django is set up here, once the server's URL is known."""
    server = RedisServer().start()
    workdir = tempfile.mkdtemp(prefix=prefix)
    os.environ.update(BLUEQUE_URL=server.url, BLUEQUE_DB_PATH=f"{workdir}/db.sqlite3",
                      DJANGO_SETTINGS_MODULE="testproject.settings")
    try:
        import django

        django.setup()
        logging.getLogger("django_blueque").setLevel(logging.WARNING)
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client

        from django_blueque.conf import get_client

        call_command("migrate", verbosity=0)
        client = Client()
        client.force_login(User.objects.create_superuser("bench", "bench@example.com", "x"))
        yield get_client(), client
    finally:
        server.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    with admin_site("blueque-admin-bench-") as (engine, client):
        began = time.perf_counter()
        fill(engine.redis, engine.keys, "bench", args.tasks)
        filled = time.perf_counter() - began
        print(f"filled {args.tasks} failed tasks in {filled:.1f} s "
              f"({engine.redis.info('memory')['used_memory_human']} in Redis)", flush=True)
        middle = args.tasks // 2
        pages = {
            "dashboard": "/admin/blueque/",
            "failed list, page 1 (100 rows)": "/admin/blueque/queue/?name=bench&state=failed",
            f"failed list, page {middle // 100} (100 rows, middle)":
                f"/admin/blueque/queue/?name=bench&state=failed&p={middle // 100}",
            "failed list, last page (100 rows)":
                f"/admin/blueque/queue/?name=bench&state=failed&p={max(1, args.tasks // 100)}",
            "task page": f"/admin/blueque/tasks/{task_id(middle)}/",
            "metrics (Prometheus)": "/admin/blueque/metrics/",
        }
        figures = {"tasks": args.tasks, "fill_seconds": round(filled, 1), "pages": {}}
        for name, path in pages.items():
            figures["pages"][name] = summary(timed(client, path, args.runs))
            print(f"{name:45} {figures['pages'][name]}", flush=True)
        fill(engine.redis, engine.keys, "bench.bulk", args.bulk)
        figures["bulk_delete_all_failed"] = bulk_delete(client, "bench.bulk")
        print(f"{'delete all failed (bulk job)':45} {figures['bulk_delete_all_failed']}")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
