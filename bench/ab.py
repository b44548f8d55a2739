"""Our engine before and after a change, interleaved: the figures of one change on a noisy
machine, where two run.py runs minutes apart differ by more than most changes do.

    python bench/ab.py BEFORE [AFTER] [--rounds 4] [--samples 60] [--long N] [--drain]
                       [--listeners N] [--enqueue] [--concurrency N]

BEFORE and AFTER are git revisions of this repository (AFTER: the working tree when left out),
each exported to a temporary directory (``git archive``) and run with this interpreter through
its own drivers/ours.py. One private Redis; each round starts BEFORE's listener, measures, stops
it, then the same for AFTER. Pickup: ``--samples`` idle pickups per round (0.1-0.3 s idle
before each), p50/p90/p99 over all rounds. ``--long N``: N tasks of 1 s per round, one at a
time, the listener idle 0.3-0.6 s before each: the overhead beyond the second (enqueue to the
end recorded, as run.py's row), p50/p90 over all rounds. ``--drain``: one drain of 200 queued
no-op tasks per round, through ``--listeners`` listeners (1). ``--enqueue``: 3 rounds of
5,000 one-at-a-time enqueues per round. Medians over rounds.
``--concurrency N``: each listener runs N tasks at a time.
"""

import argparse
import contextlib
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


def engine_tree(spec, directory):
    """``(label, tree)`` of an engine to measure: ``spec`` is a checkout's directory (labelled
    by its commit, or its name) or a git revision of this repository, exported to
    ``directory``."""
    if Path(spec).is_dir():
        tree = Path(spec).resolve()
        label = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                               capture_output=True, text=True).stdout.strip() or tree.name
    else:
        tree, label = export(spec, directory), spec
    if not (tree / "django_blueque" / "core").is_dir():
        raise SystemExit(f"engine {spec}: no django_blueque/core in {tree}")
    return label, tree


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_round(tree, url, args, figures):
    driver = [sys.executable, str(tree / "bench" / "drivers" / "ours.py")]
    if args.enqueue:
        rates = run_json([*driver, "enqueue", url, "-n", "5000", "--rounds", "3"], 600)
        figures["enqueue"] += rates["single"]
    redis.Redis.from_url(url).flushall()
    listen = [*driver, "listen", url, "--concurrency", str(args.concurrency)]
    with contextlib.ExitStack() as listeners:
        for _ in range(args.listeners):
            listeners.enter_context(child(listen, cwd=str(tree)))
        time.sleep(1.5)  # up and idle
        latency = run_json([*driver, "latency", url, "--samples", str(args.samples),
                            "--min-pause", "0.1", "--jitter", "0.2"], 600)
        figures["pickup"] += latency["latencies"]
        if args.long:
            overhead = run_json([*driver, "long", url, "--samples", str(args.long),
                                 "--min-pause", "0.3", "--jitter", "0.3"], 600)
            figures["long"] += [total - overhead["seconds"] for total in overhead["totals"]]
            figures["long_end"] += [
                total - overhead["seconds"] - pickup
                for total, pickup in zip(overhead["totals"], overhead["pickups"], strict=True)]
        if args.drain:
            drained = run_json([*driver, "throughput", url, "-n", "200", "--rounds", "1",
                                "--batch", "1000", "--listeners", str(args.listeners)], 600)
            figures["drain"].append(drained["tasks_per_s"])
            figures["gap"].append(drained["median_gap"])
    redis.Redis.from_url(url).flushall()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--long", type=int, default=0, help="tasks of 1 s per round")
    parser.add_argument("--drain", action="store_true")
    parser.add_argument("--listeners", type=int, default=1, help="listeners (the drain)")
    parser.add_argument("--enqueue", action="store_true")
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir, private_redis(workdir) as url:
        trees = {args.before: export(args.before, Path(workdir, "before")),
                 args.after or "working tree": export(args.after, Path(workdir, "after"))}
        figures = {name: {"pickup": [], "long": [], "long_end": [], "drain": [],
                         "gap": [], "enqueue": []} for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                one_round(tree, url, args, figures[name])
    for name, got in figures.items():
        pickup = [seconds * 1000 for seconds in got["pickup"]]
        line = (f"{name}: pickup p50/p90/p99 {percentile(pickup, .5):.2f}/"
                f"{percentile(pickup, .9):.2f}/{percentile(pickup, .99):.2f} ms "
                f"({len(pickup)} samples)")
        if got["long"]:
            long = [seconds * 1000 for seconds in got["long"]]
            line += (f"; 1-s overhead p50/p90 {percentile(long, .5):.2f}/"
                     f"{percentile(long, .9):.2f} ms ({len(long)}), after the second p50 "
                     f"{1000 * statistics.median(got['long_end']):.2f} ms")
        if got["drain"]:
            line += (f"; drain {statistics.median(got['drain']):.0f} tasks/s (median gap "
                     f"{1000 * statistics.median(got['gap']):.2f} ms)")
        if got["enqueue"]:
            line += f"; enqueue one {statistics.median(got['enqueue']):,.0f} tasks/s"
        if args.concurrency > 1:
            line += f"; {args.concurrency} tasks at a time"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
