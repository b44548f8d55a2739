"""Figures of run.py for several systems, interleaved round by round: where one run's figures
for two systems are closer than the machine's drift over the minutes between them.

    python bench/interleave.py [--only NAME ...] [--rounds 6] [--enqueue] [--pickup N]
                               [--drain N] [--listeners L]

Each round measures every system in turn on one private Redis (flushed before each):
``--enqueue``, the median of 3 rounds of 5,000 one-at-a-time enqueues (run.py's role);
``--pickup N``, N idle pickups through one listener (run.py's role: 0.1 s and a random 0-1 s
idle before each), p50, p90 and p99 over all rounds; ``--drain N``, one drain of N queued no-op
tasks through ``--listeners`` listener processes of one task at a time each (blueque 1.0's
way to run L tasks at once, which any system can do), timed once every listener has started
one (drivers/common.py). Rates: medians over the rounds, each system's rounds listed, and
ours divided by each other system.
"""

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import redis
from infra import child, private_redis, run_json
from run import HERE, SYSTEMS, python_of


@contextlib.contextmanager
def listening(driver, url, listeners, workdir):
    """``listeners`` fresh listener processes of the system, through their first task."""
    with open(workdir / "listeners.log", "a") as log, contextlib.ExitStack() as stack:
        for _ in range(listeners):
            stack.enter_context(child([*driver, "listen", url], stdout=log, stderr=log,
                                      start_new_session=True))
        run_json([*driver, "latency", url, "--samples", 1, "--min-pause", 0, "--jitter", 0,
                  "--timeout", 30], 60)
        time.sleep(1)
        yield


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=[s.name for s in SYSTEMS],
                        help="a system to measure (repeatable; default ours and huey)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--enqueue", action="store_true", help="one-at-a-time enqueue rate")
    parser.add_argument("--pickup", type=int, metavar="N", help="N idle pickups a round")
    parser.add_argument("--drain", type=int, metavar="N", help="drain N no-op tasks")
    parser.add_argument("--listeners", type=int, default=1, help="listener processes (drain)")
    parser.add_argument("--venvs", type=Path, default=HERE / ".venvs")
    args = parser.parse_args()
    if not (args.enqueue or args.pickup or args.drain):
        parser.error("say what to measure: --enqueue, --pickup N, --drain N")
    systems = [s for s in SYSTEMS if s.name in (args.only or ["ours", "huey"])]
    drivers = {s.name: [str(python_of(s, args.venvs)), str(HERE / "drivers" / s.driver)]
               for s in systems}
    figures = {(name, what): [] for name in drivers for what in ("enqueue", "pickup", "drain")}
    with tempfile.TemporaryDirectory(prefix="blueque-interleave-") as tmp, \
            private_redis(Path(tmp)) as url, redis.Redis.from_url(url) as admin:
        for _ in range(args.rounds):
            for name, driver in drivers.items():
                if args.enqueue:
                    admin.flushall()
                    rates = run_json([*driver, "enqueue", url, "-n", 5000, "--rounds", 3], 300)
                    figures[name, "enqueue"].append(statistics.median(rates["single"]))
                if args.pickup:
                    admin.flushall()
                    with listening(driver, url, 1, Path(tmp)):
                        samples = run_json([*driver, "latency", url, "--samples", args.pickup],
                                           args.pickup * 12 + 30)["latencies"]
                    figures[name, "pickup"] += [1000 * sample for sample in samples]
                if args.drain:
                    admin.flushall()
                    with listening(driver, url, args.listeners, Path(tmp)):
                        figures[name, "drain"].append(run_json(
                            [*driver, "throughput", url, "-n", args.drain, "--rounds", 1,
                             "--timeout", 300, "--listeners", args.listeners], 330
                        )["tasks_per_s"])
    for name in drivers:
        if figures[name, "pickup"]:
            pickups = figures[name, "pickup"]
            cuts = statistics.quantiles(pickups, n=100, method="inclusive")
            print(f"pickup {name}: p50 / p90 / p99 {statistics.median(pickups):.2f} / "
                  f"{cuts[89]:.2f} / {cuts[98]:.2f} ms ({len(pickups)} samples)")
    for what in ("enqueue", "drain"):
        medians = {name: statistics.median(figures[name, what]) for name in drivers
                   if figures[name, what]}
        for name, median in medians.items():
            rounds = ", ".join(f"{rate:.0f}" for rate in figures[name, what])
            ratio = (f"; ours / {name} {medians['ours'] / median:.2f}x"
                     if "ours" in medians and name != "ours" else "")
            print(f"{what} {name}: {median:.0f} tasks/s (rounds: {rounds}){ratio}")


if __name__ == "__main__":
    main()
