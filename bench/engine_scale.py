"""Issue 10, the engine's side: what a scheduler pass and a reaper pass cost at 100,000 queues
and at a started set of 1,000,000 members, and how late a listener running them inline
(``--with-scheduler``'s duties) beats and picks up tasks.

    python bench/engine_scale.py                       # this checkout
    python bench/engine_scale.py --code /tmp/before    # another checkout (e.g. main's)

Each figure is the median of ``--repeat`` runs, each pass in a fresh process (its peak RSS is
that process's ru_maxrss). Redis time is Redis's main-thread CPU (INFO cpu) spent during the
pass: commandstats' usec counts a script's inner commands again inside its EVALSHA.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import textwrap
import time

import redis
from infra import private_redis

QUEUES = 100_000
STARTED = 1_000_000
CHUNK = 50_000

FILL_STARTED = """
local prefix, queue, expiry = ARGV[1], ARGV[2], ARGV[5]
local first, last = tonumber(ARGV[3]), tonumber(ARGV[4])
for n = first, last do
  local id = 'run' .. n
  local member = 'bench~0_' .. 1000 + n % 1000 .. ' ' .. 1000 + n % 1000 .. ' ' .. id
  redis.call('HSET', prefix .. 'task_' .. id, 'status', 'started', 'queue', queue,
             'parameters', 'p',
             'node', 'bench~0_' .. 1000 + n % 1000, 'pid', 1000 + n % 1000, 'lease', 'tok' .. n)
  redis.call('SET', prefix .. 'lease_' .. id, 'tok' .. n, 'PX', 3600000)
  redis.call('SADD', prefix .. 'started_tasks_' .. queue, member)
  redis.call('ZADD', prefix .. 'lease_expiries', expiry, id)
end
return last - first + 1
"""

PASS = textwrap.dedent("""
    import json, resource, sys, time
    sys.path.insert(0, sys.argv[1])
    from django_blueque.core import Client, enqueue_due_tasks
    from django_blueque.core.maintenance import Reaper
    client = Client(sys.argv[2])
    step = {"scheduler": lambda: enqueue_due_tasks(client),
            "reaper": lambda: Reaper(client.protocol, hostname="bench-host").reap()}[sys.argv[3]]
    client.redis.ping()
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
          flush=True)
""")

LISTENER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from django_blueque.core import Client, ForkingRunner, enqueue_due_tasks
    from django_blueque.core.maintenance import Reaper
    client = Client(sys.argv[2])
    reaper = Reaper(client.protocol, hostname="bench-host")

    def duties():
        enqueue_due_tasks(client)
        reaper.reap()

    def mark(task):
        client.redis.rpush("bench:picked", repr(time.time()) + " " + task.parameters)

    ForkingRunner(client, "hb", mark, concurrency=1, duties=duties, duties_interval=5.0).run()
""")


def redis_cpu(r):
    info = r.info("cpu")
    return info["used_cpu_user_main_thread"] + info["used_cpu_sys_main_thread"]


def fill(r, with_started):
    r.flushall()
    for start in range(0, QUEUES, CHUNK):
        r.zadd("blueque_queues", {f"queue{n:06d}": 0 for n in range(start, start + CHUNK)})
    if with_started:
        fill_started = r.register_script(FILL_STARTED)
        expiry = time.time() + 3600
        for start in range(0, STARTED, CHUNK):
            fill_started(args=["blueque_", "queue000000", start, start + CHUNK - 1, expiry])


def one_pass(code, url, r, which):
    proc = subprocess.Popen([sys.executable, "-c", PASS, code, url, which], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == "ready"
    cpu = redis_cpu(r)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    figures = json.loads(proc.stdout.readline())
    figures["redis_s"] = redis_cpu(r) - cpu
    proc.wait()
    return figures


def listener_delays(code, url, r, seconds):
    """(longest gap between two heartbeats, longest wait from enqueue to pickup), in seconds,
    of a listener running the scheduler and the reaper as its duties."""
    proc = subprocess.Popen([sys.executable, "-c", LISTENER, code, url])
    try:
        beats, last_score, gap, waits = [], None, 0.0, []
        deadline = time.time() + seconds
        sent = 0
        while time.time() < deadline:
            leases = r.zrange("blueque_listener_leases_hb", 0, -1, withscores=True)
            if leases and leases[0][1] != last_score:
                last_score = leases[0][1]
                beats.append(time.time())
            if beats and time.time() - sent > 2:  # a task every 2 s once it beats
                sent = time.time()
                _enqueue(r, sent)
            time.sleep(0.05)
        if beats:
            beats.append(time.time())  # the gap still open at the end counts
            gap = max(b - a for a, b in zip(beats, beats[1:], strict=False))
        for entry in r.lrange("bench:picked", 0, -1):
            picked, sent_at = entry.split(" ")
            waits.append(float(picked) - float(sent_at))
        unpicked = r.llen("blueque_pending_tasks_hb")
        return gap, max(waits) if waits else None, unpicked
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _enqueue(r, at):
    task_id = f"hb{at!r}"
    r.hset(f"blueque_task_{task_id}", mapping={
        "status": "pending", "queue": "hb", "parameters": repr(at), "created": repr(at),
        "updated": repr(at)})
    r.lpush("blueque_pending_tasks_hb", task_id)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="checkout whose django_blueque is measured")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--listen", type=float, default=60.0,
                        help="seconds the listener with duties is watched")
    args = parser.parse_args()
    with private_redis() as url:
        r = redis.Redis.from_url(url, decode_responses=True)
        results = {}
        fill(r, with_started=False)
        for which in ("scheduler", "reaper"):
            runs = [one_pass(args.code, url, r, which) for _ in range(args.repeat)]
            results[f"{which} pass, {QUEUES:,} queues"] = runs
        fill(r, with_started=True)
        runs = [one_pass(args.code, url, r, "reaper") for _ in range(args.repeat)]
        results[f"reaper pass, {STARTED:,} started members"] = runs
        fill(r, with_started=False)
        gap, wait, unpicked = listener_delays(args.code, url, r, args.listen)
        report(results, gap, wait, unpicked, args)


def report(results, gap, wait, unpicked, args):
    print(f"code: {args.code}  (medians of {args.repeat})")
    print(f"{'pass':<40} {'wall s':>8} {'Redis s':>8} {'peak RSS MB':>12}")
    for name, runs in results.items():
        med = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        print(f"{name:<40} {med['seconds']:>8.3f} {med['redis_s']:>8.3f} {med['rss_mb']:>12.0f}")
    print(f"listener with duties, {QUEUES:,} queues, watched {args.listen:.0f} s: longest "
          f"heartbeat gap {gap:.1f} s, longest pickup wait "
          f"{'-' if wait is None else f'{wait:.2f} s'}, tasks never picked up: {unpicked}")
    print(f"peak RSS of this harness: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
