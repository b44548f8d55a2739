"""Concurrency limits (issue 39): what MAX_RUNNING costs a drain, and how soon a waiting task
starts once a run of its full queue ends.

    python bench/limits.py                                # 5 rounds, about 90 s
    python bench/limits.py --rounds 1 --drain 20 --handovers 3   # a smoke test, not figures

One private Redis; for each measure a fresh listener of ours (``ForkingRunner``, as
bench/drivers/ours.py runs it), given the queue's limits as a listener's settings give them
(its policy), through one task before the measure starts.

- Drain: ``--drain`` no-op tasks through one listener of ``--concurrency`` slots, with no
  limit and with MAX_RUNNING equal to its slots, in an order that turns each round: the rate
  from task start to task start and the median gap between starts (common.fork_throughput),
  and the ratio of the two rates within each round (the load of a shared machine moves from
  round to round more than between the two drains of one). The limit never refuses a start
  there (the slot of a run is free in Redis before its process exits): what it costs is the
  check in the take and the slot's bookkeeping in the end.
- Slot to start: MAX_RUNNING 1 on a listener of 2 slots; a task that runs ``--hold`` seconds
  and one enqueued behind it, whose take is refused (the listener then waits on the queue's
  slot wake list). The figure is the time from the first task's end (its ``finished`` field,
  written by the script that frees the slot and wakes the listener) to the second task's code
  starting (its mark). Beside it, the same hand-over with no limit on a listener of 1 slot:
  the listener's own slot frees (the process exits, then a take), the path of any queue.

Figures are medians over every round (the 2-core machines this runs on are noisy); the last
line of the output is every figure and raw sample as JSON.
"""

import argparse
import contextlib
import json
import os
import statistics
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
from ours import Driver  # noqa: E402

from django_blueque.core import Client, ForkingRunner  # noqa: E402

HOLD = "hold-"
"""Parameters starting with this name a task that sleeps ``--hold`` seconds after its mark."""


def listen(url, concurrency, max_running, hold):
    """The listener role (this script run with ``listen``): ours, with the queue's limit."""
    os.environ[common.URL_ENV] = url

    def callback(task):
        common.task_body(task.parameters)
        if task.parameters.startswith(HOLD):
            time.sleep(hold)
        return ""

    ForkingRunner(Client(url), common.QUEUE, callback, concurrency=concurrency,
                  policy=lambda queue: {"retention": None, "max_running": max_running}).run()


@contextlib.contextmanager
def listening(url, workdir, concurrency, max_running, hold):
    """A fresh listener on an emptied Redis, up and through one task."""
    with redis.Redis.from_url(url) as admin:
        admin.flushall()
    argv = [sys.executable, __file__, "listen", url, "--concurrency", str(concurrency),
            "--hold", str(hold)] + (["--max-running", str(max_running)] if max_running else [])
    with open(Path(workdir) / "listener.log", "a") as log, \
            infra.child(argv, stdout=log, stderr=log, start_new_session=True):
        common.pickup_latency(Driver(url), redis.Redis.from_url(url), 1, 0, 0, 30)
        yield


def handovers(url, samples, timeout):
    """Seconds from the end of a task (its ``finished``) to the code of the one enqueued
    behind it starting, ``samples`` times, one pair at a time."""
    driver, marks = Driver(url), redis.Redis.from_url(url, decode_responses=True)
    gaps = []
    for n in range(samples):
        time.sleep(0.1)  # the listener idle again, the queue's slot free
        first, second = driver.enqueue_many([f"{HOLD}{n}", f"next-{n}"])
        started = {}
        for _ in range(2):
            popped = marks.blpop([common.MARKS], timeout=timeout)
            if popped is None:
                raise SystemExit(f"pair {n}: a task did not start within {timeout} s")
            params, at, _parent = popped[1].split()
            started[params] = float(at)
        deadline = time.monotonic() + timeout
        while driver.client.get_task(second).status != "complete":
            if time.monotonic() > deadline:
                raise SystemExit(f"pair {n}: the second task did not complete")
            time.sleep(0.01)
        gaps.append(started[f"next-{n}"] - driver.client.get_task(first).finished)
    return gaps


def measure(url, workdir, args):
    slots = args.concurrency
    drains = {"none": [], "max_running": []}
    handover = {"max_running": [], "none": []}
    for round_number in range(args.rounds):
        order = list(drains) if round_number % 2 == 0 else list(reversed(drains))
        for kind in order:
            limit = slots if kind == "max_running" else None
            with listening(url, workdir, slots, limit, args.hold):
                drained = common.fork_throughput(Driver(url), redis.Redis.from_url(url),
                                                 args.drain, 100, 300)
            drains[kind].append(drained)
        for kind in handover:
            # the limit: 1 running, on 2 slots (a slot free, the queue full); none: 1 slot
            concurrency, limit = (2, 1) if kind == "max_running" else (1, None)
            with listening(url, workdir, concurrency, limit, args.hold):
                handover[kind] += handovers(url, args.handovers, 30)
        print(f"round {round_number + 1}/{args.rounds}: drain "
              f"{drains['none'][-1]['tasks_per_s']:.0f} / "
              f"{drains['max_running'][-1]['tasks_per_s']:.0f} tasks/s (none / limit)",
              file=sys.stderr, flush=True)
    return drains, handover


def figures(drains, handover):
    def ms(values):
        ordered = sorted(values)
        return {"median_ms": statistics.median(ordered) * 1000,
                "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000}

    def median_of(kind, figure):
        return statistics.median(drain[figure] for drain in drains[kind])

    paired = [limited["tasks_per_s"] / unlimited["tasks_per_s"]
              for unlimited, limited in zip(drains["none"], drains["max_running"], strict=True)]
    return {"drain_tasks_per_s": {kind: median_of(kind, "tasks_per_s") for kind in drains},
            "drain_ratio_per_round": statistics.median(paired),
            "drain_median_gap_ms": {kind: median_of(kind, "median_gap") * 1000
                                    for kind in drains},
            "slot_to_start": {kind: ms(gaps) for kind, gaps in handover.items()}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", nargs="?", choices=["measure", "listen"], default="measure")
    parser.add_argument("url", nargs="?", help="listen: the Redis of the measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--drain", type=int, default=300, help="tasks per drain")
    parser.add_argument("--concurrency", type=int, default=2, help="the drain's slots")
    parser.add_argument("--handovers", type=int, default=15, help="pairs per round and kind")
    parser.add_argument("--hold", type=float, default=0.2, help="seconds the first task runs")
    parser.add_argument("--max-running", type=int, help="listen: the queue's MAX_RUNNING")
    args = parser.parse_args()
    if args.role == "listen":
        listen(args.url, args.concurrency, args.max_running, args.hold)
        return
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as workdir, infra.private_redis(workdir) as url:
        drains, handover = measure(url, workdir, args)
    found = figures(drains, handover)
    drain, gap = found["drain_tasks_per_s"], found["slot_to_start"]
    between = found["drain_median_gap_ms"]
    print(f"drain of {args.drain} no-op tasks on {args.concurrency} slots, median of "
          f"{args.rounds}: {drain['none']:.0f} tasks/s without a limit, "
          f"{drain['max_running']:.0f} with MAX_RUNNING {args.concurrency} (within a round: "
          f"{found['drain_ratio_per_round']:.2f}x); median gap between starts "
          f"{between['none']:.2f} ms, {between['max_running']:.2f} ms")
    for kind, label in (("max_running", "MAX_RUNNING 1 on 2 slots (the slot wake list)"),
                        ("none", "no limit on 1 slot (the listener's own slot)")):
        print(f"end of a run -> the next task's code, {label}: median "
              f"{gap[kind]['median_ms']:.1f} ms, p90 {gap[kind]['p90_ms']:.1f} ms")
    print(json.dumps({**found, "raw": {"drains": drains, "handovers": handover},
                      "load_before": load, "load_after": os.getloadavg(),
                      "args": {name: value for name, value in vars(args).items()
                               if name not in ("role", "url", "max_running")}}))


if __name__ == "__main__":
    main()
