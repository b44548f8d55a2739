"""Workflows (issue 40): how long a dependent waits after its last dependency ended.

    python bench/workflows.py                   # a chain of 100, a group of 1,000
    python bench/workflows.py --chain 20 --group 100 --concurrency 2

One private Redis, one of our listeners (bench/drivers/ours.py) on the benchmark's queue.
Chain: each step depends on the one before; the figure is, per step, the time from the end
of the step before (its ``finished`` field, written by the script that records the end and
releases the step) to the moment the step's code starts (its mark, as every benchmark task
writes it): median and p90 over the chain. Group: 1,000 tasks and one that depends on all;
the figure is from the end of the last of the group to that task's code starting. Both are
wall times on one host: the release itself is in the same script as the end, so what is
measured is the listener's pickup and fork.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "drivers"))
sys.path.insert(0, str(HERE.parent))

import common  # noqa: E402
import infra  # noqa: E402

from django_blueque.core import Client  # noqa: E402


def started_at(r):
    """{params: time its code started} of every mark so far."""
    return {params: float(at) for params, at, _ppid in
            (mark.split(" ") for mark in r.lrange(common.MARKS, 0, -1))}


def wait_until_complete(client, task_id, timeout):
    deadline = time.monotonic() + timeout
    while client.get_task(task_id).status != "complete":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{task_id} did not complete within {timeout} s")
        time.sleep(0.05)


def chain(client, r, length, timeout):
    queue, ids = client.get_queue(common.QUEUE), []
    for step in range(length):
        ids.append(queue.enqueue(f"chain-{step}", depends_on=ids[-1:] or None))
    wait_until_complete(client, ids[-1], timeout)
    marks, tasks = started_at(r), client.get_tasks(ids)
    return [marks[f"chain-{step + 1}"] - tasks[step].finished for step in range(length - 1)]


def group(client, r, width, timeout):
    ids = client.get_queue(common.QUEUE).enqueue_many([f"group-{n}" for n in range(width)])
    after = client.get_queue(common.QUEUE).enqueue("after-group", depends_on=ids)
    wait_until_complete(client, after, timeout)
    return started_at(r)["after-group"] - max(task.finished for task in client.get_tasks(ids))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chain", type=int, default=100)
    parser.add_argument("--group", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir, infra.private_redis(workdir) as url:
        client, r = Client(url), redis.Redis.from_url(url, decode_responses=True)
        listener = [sys.executable, str(HERE / "drivers" / "ours.py"), "listen", url,
                    "--concurrency", str(args.concurrency)]
        with infra.child(listener, stdout=subprocess.DEVNULL):
            gaps = sorted(chain(client, r, args.chain, args.timeout))
            group_gap = group(client, r, args.group, args.timeout)
    figures = {
        "chain": {"steps": args.chain, "median_ms": statistics.median(gaps) * 1000,
                  "p90_ms": gaps[int(len(gaps) * 0.9)] * 1000},
        "group": {"tasks": args.group, "last_end_to_start_ms": group_gap * 1000},
        "concurrency": args.concurrency}
    print(f"chain of {args.chain}: end of a step -> next step's code, median "
          f"{figures['chain']['median_ms']:.1f} ms, p90 {figures['chain']['p90_ms']:.1f} ms")
    print(f"group of {args.group}: end of the last -> the dependent's code, "
          f"{figures['group']['last_end_to_start_ms']:.1f} ms")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
