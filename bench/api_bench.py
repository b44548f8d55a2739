"""The JSON task API against a big Redis (issue 14): server time and Redis commands of each
call with 1,000,000 failed tasks in one queue, 1% of them of a second error type (indexed as
finish.lua indexes them), beside the same calls with 10,000: a call costs what it returns.

    python bench/api_bench.py [--tasks 1000000] [--small 10000] [--runs 30] [--json FILE]

It uses admin_bench.py's private redis-server and in-process Django test client; the API is
called with a Bearer token, as a script calls it. Outside the test suite (minutes to fill).
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from admin_bench import TRACEBACK, admin_site, summary, task_id, timed  # noqa: E402

FILL = """
-- KEYS[1] failed list, KEYS[2] error types; ARGV[1] first number, ARGV[2] count, ARGV[3]
-- queue, ARGV[4] time, ARGV[5] task key prefix, ARGV[6] traceback, ARGV[7] failed-of-type
-- key prefix; every 100th task is a TimeoutError, the others CalledProcessErrors
for n = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2]) - 1 do
  local id = string.format('%08x-b3c4-4d5e-8f60-%012d', n, n)
  local kind = (n % 100 == 0) and 'builtins.TimeoutError' or 'subprocess.CalledProcessError'
  local at = tonumber(ARGV[4]) + n / 1000
  redis.call('HSET', ARGV[5] .. id, 'status', 'failed', 'queue', ARGV[3],
    'parameters', '{"video_id": ' .. n .. ', "preset": "1080p"}', 'created', at,
    'updated', at, 'started', at, 'finished', at, 'node', 'worker-3_4242', 'pid', '5151',
    'attempts', '1', 'error', 'ffmpeg exited with status 1', 'error_type', kind,
    'traceback', ARGV[6])
  redis.call('LPUSH', KEYS[1], id)
  redis.call('ZADD', ARGV[7] .. kind, at, id)
  redis.call('ZADD', KEYS[2], 'GT', at, kind)
end
return redis.call('LLEN', KEYS[1])
"""

TOKEN = "bench-token-of-more-than-16"


def fill(engine, queue, count, chunk=20000):
    script = engine.redis.register_script(FILL)
    keys = engine.keys
    stamp = time.time() - 7200
    for first in range(0, count, chunk):
        script(keys=[keys.failed(queue), keys.error_types(queue)],
               args=[first, min(chunk, count - first), queue, stamp, keys.task(""), TRACEBACK,
                     keys.failed_of_type(queue, "")])
    engine.redis.zincrby(keys.queues, 0, queue)


def commands(engine, client, path, headers):
    engine.redis.config_resetstat()
    assert client.get(path, headers=headers).status_code == 200, path
    stats = engine.redis.info("commandstats")
    return sum(stats[name]["calls"] for name in stats
               if name not in ("cmdstat_info", "cmdstat_config"))


def calls(queue, tasks):
    base = "/admin/blueque/api"
    deep = tasks // 2
    return {
        "queues (counts by state)": f"{base}/queues/",
        "counts (by state and error type)":
            f"{base}/counts/?queue={queue}&error_type=builtins.TimeoutError",
        "tasks: failed, newest 100": f"{base}/tasks/?queue={queue}&state=failed&limit=100",
        "tasks: failed, 100 from the middle (cursor)":
            f"{base}/tasks/?queue={queue}&state=failed&limit=100&cursor=t{deep}",
        "tasks: one error type (1%), newest 100":
            f"{base}/tasks/?queue={queue}&state=failed&error_type=builtins.TimeoutError"
            "&limit=100",
        "tasks: one error type, 100 from its middle (cursor)":
            f"{base}/tasks/?queue={queue}&state=failed&error_type=builtins.TimeoutError"
            f"&limit=100&cursor=t{max(tasks // 200, 1)}",
        "task (fields and errors)": f"{base}/tasks/{task_id(deep)}/",
    }


def measure(engine, client, queue, tasks, runs):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    figures = {}
    for name, path in calls(queue, tasks).items():
        figures[name] = dict(summary(timed(client, path, runs, headers=headers)),
                             redis_commands=commands(engine, client, path, headers))
    retry = []  # 100 tasks by id, from the failed list's tail, each call new ones
    for run in range(min(runs, 10)):
        ids = [task_id(n) for n in range(run * 100, run * 100 + 100)]
        began = time.perf_counter()
        response = client.post("/admin/blueque/api/actions/",
                               json.dumps({"action": "retry", "ids": ids}),
                               content_type="application/json", headers=headers)
        retry.append((time.perf_counter() - began) * 1000)
        assert len(json.loads(response.content)["done"]) == 100
    figures["actions: retry 100 by id"] = {"median_ms": round(sorted(retry)[len(retry) // 2], 2),
                                           "runs": len(retry)}
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    from django.test import override_settings

    with admin_site("blueque-api-bench-") as (engine, client):
        from django.conf import settings

        with override_settings(BLUEQUE={**settings.BLUEQUE, "API_TOKENS": {TOKEN: "bench"}}):
            results = {}
            for queue, tasks in (("small", args.small), ("big", args.tasks)):
                began = time.perf_counter()
                fill(engine, queue, tasks)
                print(f"filled {tasks} failed tasks in {time.perf_counter() - began:.1f} s",
                      flush=True)
                results[tasks] = measure(engine, client, queue, tasks, args.runs)
    print(f"\n{'call':55} {'ms at ' + str(args.small):>12} {'ms at ' + str(args.tasks):>14}"
          f" {'commands':>9} {'commands':>9}")
    for name in results[args.tasks]:
        small, big = results[args.small][name], results[args.tasks][name]
        print(f"{name:55} {small['median_ms']:>12} {big['median_ms']:>14} "
              f"{small.get('redis_commands', ''):>9} {big.get('redis_commands', ''):>9}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
