"""Our engine before and after a change, interleaved: the figures of one change on a noisy
machine, where two run.py runs minutes apart differ by more than most changes do.

    python bench/ab.py BEFORE [AFTER] [--rounds 4] [--samples 60] [--drain] [--enqueue]
                       [--concurrency N]

BEFORE and AFTER are git revisions of this repository (AFTER: the working tree when left out),
each exported to a temporary directory (``git archive``) and run with this interpreter through
its own drivers/ours.py. One private Redis; each round starts BEFORE's listener, measures, stops
it, then the same for AFTER. Pickup: ``--samples`` idle pickups per round (0.1-0.3 s idle
before each), p50/p90/p99 over all rounds. ``--drain``: one drain of 200 queued no-op tasks per
round. ``--enqueue``: 3 rounds of 5,000 one-at-a-time enqueues per round. Medians over rounds.
``--concurrency N``: each listener runs N tasks at a time.
"""

import argparse
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

import redis
from infra import child, private_redis, run_json

HERE = Path(__file__).resolve().parent


def export(revision, directory):
    """The tree of ``revision`` in ``directory`` (None: the working tree, as it is)."""
    if revision is None:
        return HERE.parent
    archive = subprocess.run(["git", "archive", revision], cwd=HERE.parent, check=True,
                             capture_output=True).stdout
    safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # 3.11.4 and later
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(directory, **safe)
    return Path(directory)


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_round(tree, url, args, figures):
    driver = [sys.executable, str(tree / "bench" / "drivers" / "ours.py")]
    if args.enqueue:
        rates = run_json([*driver, "enqueue", url, "-n", "5000", "--rounds", "3"], 600)
        figures["enqueue"] += rates["single"]
    redis.Redis.from_url(url).flushall()
    with child([*driver, "listen", url, "--concurrency", str(args.concurrency)], cwd=str(tree)):
        time.sleep(1.5)  # up, idle, its spare forked
        latency = run_json([*driver, "latency", url, "--samples", str(args.samples),
                            "--min-pause", "0.1", "--jitter", "0.2"], 600)
        figures["pickup"] += latency["latencies"]
        if args.drain:
            drained = run_json([*driver, "throughput", url, "-n", "200", "--rounds", "1",
                                "--batch", "1000"], 600)
            figures["drain"].append(drained["tasks_per_s"])
    redis.Redis.from_url(url).flushall()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--enqueue", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir, private_redis(workdir) as url:
        trees = {args.before: export(args.before, Path(workdir, "before")),
                 args.after or "working tree": export(args.after, Path(workdir, "after"))}
        figures = {name: {"pickup": [], "drain": [], "enqueue": []} for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                one_round(tree, url, args, figures[name])
    for name, got in figures.items():
        pickup = [seconds * 1000 for seconds in got["pickup"]]
        line = (f"{name}: pickup p50/p90/p99 {percentile(pickup, .5):.2f}/"
                f"{percentile(pickup, .9):.2f}/{percentile(pickup, .99):.2f} ms "
                f"({len(pickup)} samples)")
        if got["drain"]:
            line += f"; drain {statistics.median(got['drain']):.0f} tasks/s"
        if got["enqueue"]:
            line += f"; enqueue one {statistics.median(got['enqueue']):,.0f} tasks/s"
        if args.concurrency > 1:
            line += f"; {args.concurrency} tasks at a time"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
