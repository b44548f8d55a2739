"""Benchmark our engine against blueque 1.0.1, RQ and huey, in one run against one private Redis.

    python bench/run.py [--quick] [--only NAME] [--engine REVISION_OR_CHECKOUT] [--json out.json]

Every system is driven by its own module in bench/drivers/, run as a subprocess of the system's
own interpreter (the peers live in throwaway virtualenvs under bench/.venvs), so the figures
come from the same Redis, the same machine and the same minutes: the latency figures and the
drains are measured in rounds, each round visiting every system in turn. ``--engine`` adds
another revision's engine, run by this checkout's harness. bench/README.md says what each
figure means.
"""

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import redis
import redis.utils
from ab import engine_tree
from infra import (
    CommandCount,
    DriverError,
    child,
    ensure_venv,
    private_redis,
    run_json,
    tree_pss_kb,
)

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class System:
    name: str
    label: str
    driver: str
    requirement: str | None  # what its virtualenv holds; None runs it with this interpreter
    concurrent: bool  # one listener runs several tasks at once; else one listener per task slot
    engine: Path | None = None  # ours.py only: another checkout's engine (BENCH_ENGINE)
    venv: str | None = None  # the virtualenv it shares (by system name); default its own


SAME_LIBRARY = ("ours-redis5", "blueque1")
"""Ours run in blueque 1.0.1's virtualenv, beside blueque 1.0.1: the same redis-py in both, so
their ratio is the engines' alone (redis-py 8's own import is about 2 MiB over 5.3's)."""


SYSTEMS = [
    System("ours", "ours", "ours.py", None, True),
    System("blueque1", "blueque 1.0.1", "blueque1.py", "blueque==1.0.1", False),
    System("ours-redis5", "ours on blueque's redis-py", "ours.py", "blueque==1.0.1", True,
           venv="blueque1"),
    System("rq", "rq", "rq_driver.py", "rq", False),
    System("huey", "huey (threads)", "huey_driver.py", "huey[redis]", True),
    System("floor", "floor (bare fork)", "floor.py", None, True),
]


@dataclass(frozen=True)
class Profile:
    enqueue_n: int  # tasks per enqueue round
    rounds: int  # enqueue rounds and measuring rounds (each visits every system)
    batch: int  # tasks per batched enqueue call
    samples: int  # pickup latency samples, over all rounds
    long_samples: int  # tasks of 1 s, over all rounds
    throughput_n: int  # no-op tasks per drain (one drain a round, the median is reported)
    idle_s: float  # window over which the idle listener's commands are counted
    settle_s: float  # pause after the warm-up task, before the idle window and the PSS


PROFILES = {
    # idle_s: two of our idle listener's minute-long heartbeat and peek periods, so that the
    # window holds what an hour would, per second
    "full": Profile(enqueue_n=5000, rounds=3, batch=1000, samples=60, long_samples=21,
                    throughput_n=200, idle_s=120, settle_s=2),
    "quick": Profile(enqueue_n=1000, rounds=2, batch=1000, samples=4, long_samples=2,
                     throughput_n=50, idle_s=4, settle_s=1),
}
CONCURRENT_DRAIN_TIMES = 5
"""With several tasks at a time, each drain holds this many times ``throughput_n`` tasks: a
polling listener (blueque 1.0 sleeps 1 s on an empty queue) joins up to a second late, and
the drain is timed from its join (drivers/common.py), so it must last longer than that."""

# (key, label, unit, True when higher is better, format)
ROWS = [
    ("enqueue_single", "enqueue, one call per task", "tasks/s", True, "{:.0f}"),
    ("enqueue_batched", "enqueue, batched", "tasks/s", True, "{:.0f}"),
    ("pickup_p50_ms", "pickup latency p50", "ms", False, "{:.1f}"),
    ("pickup_p99_ms", "pickup latency p99", "ms", False, "{:.1f}"),
    ("long_p50_ms", "overhead on a task of 1 s, p50", "ms", False, "{:.1f}"),
    ("long_p90_ms", "overhead on a task of 1 s, p90", "ms", False, "{:.1f}"),
    ("long_end_p50_ms", "  of which after its second, p50", "ms", False, "{:.1f}"),
    ("fork_tasks_per_s", "no-op tasks, drained", "tasks/s", True, "{:.0f}"),
    ("fork_ms_per_task", "per-task overhead (median)", "ms", False, "{:.2f}"),
    ("idle_cmds_per_s", "idle listener Redis commands", "cmds/s", False, "{:.2f}"),
    ("idle_connections", "idle listener connections", "conns", False, "{:d}"),
    ("listener_memory_mib", "idle listener memory (PSS)", "MiB", False, "{:.1f}"),
]


def log(message):
    print(message, file=sys.stderr, flush=True)


def _last_line(path):
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(it wrote nothing)"


class Harness:
    """How to run each system's driver roles and listeners, and where they log."""

    def __init__(self, pythons, workdir, concurrency):
        self.pythons = pythons
        self.workdir = workdir
        self.concurrency = concurrency

    def driver(self, system):
        return [str(self.pythons[system.name]), str(HERE / "drivers" / system.driver)]

    def env(self, system):
        if system.engine is None:
            return None
        return {**os.environ, "BENCH_ENGINE": str(system.engine)}

    def role(self, system, url, name, *args, timeout):
        return run_json([*self.driver(system), name, url, *args], timeout, self.env(system))

    def listener_commands(self, system, url):
        """The command lines that run ``concurrency`` tasks at once: one listener for a system
        that can, else as many listeners (blueque 1.0 and RQ run one task per listener)."""
        driver = self.driver(system)
        if system.concurrent:
            return [[*driver, "listen", url, "--concurrency", str(self.concurrency)]]
        return [[*driver, "listen", url]] * self.concurrency

    @contextlib.contextmanager
    def listening(self, system, url):
        """The system's listeners, up and through one task; stopped when the block exits."""
        listener_log = self.workdir / f"{system.name}-listener.log"
        with open(listener_log, "a") as log_file, contextlib.ExitStack() as stack:
            listeners = [stack.enter_context(child(argv, stdout=log_file, stderr=log_file,
                                                   start_new_session=True, env=self.env(system)))
                         for argv in self.listener_commands(system, url)]
            try:
                # One task first: the listener is up and through its first fork.
                self.role(system, url, "latency", "--samples", 1, "--min-pause", 0,
                          "--jitter", 0, "--timeout", 30, timeout=60)
                yield listeners
            except DriverError as error:
                if any(listener.poll() is not None for listener in listeners):
                    raise DriverError(f"{error}; the listener exited: "
                                      f"{_last_line(listener_log)}") from None
                raise


def measure_enqueue(harness, system, url, profile):
    with redis.Redis.from_url(url) as admin:
        admin.flushall()
        enqueue = harness.role(system, url, "enqueue", "-n", profile.enqueue_n, "--rounds",
                               profile.rounds, "--batch", profile.batch, timeout=600)
        admin.flushall()
    return enqueue


def measure_idle(harness, systems, profile):
    """Commands/s and connections of every system's idle listener, all in the same window,
    each on a private Redis of its own (Redis counts commands per server)."""
    idle = {}
    with contextlib.ExitStack() as stack:
        counted = {}
        for system in systems:
            try:
                url = stack.enter_context(private_redis(harness.workdir))
                stack.enter_context(harness.listening(system, url))
                counted[system.name] = url
            except DriverError as error:
                idle[system.name] = error
        time.sleep(profile.settle_s)
        log(f"idle listeners for {profile.idle_s:g} s: {', '.join(counted)}")
        counts = {name: CommandCount(url) for name, url in counted.items()}
        time.sleep(profile.idle_s)
        for name, count in counts.items():
            idle[name] = count.rates()
    return idle


def measure_round(harness, system, url, profile, rounds_left, got):
    """One round of one system: a fresh listener, its PSS once idle, its share of the pickup
    and 1-s task samples, one drain; appended to ``got``."""
    with redis.Redis.from_url(url) as admin:
        admin.flushall()
    samples = -(-(profile.samples - len(got["pickup"])) // rounds_left)
    long_samples = -(-(profile.long_samples - len(got["long"])) // rounds_left)
    with harness.listening(system, url) as listeners:
        time.sleep(profile.settle_s)
        trees = [tree_pss_kb(listener.pid) for listener in listeners]
        got["pss_kb"].append(sum(t[0] for t in trees))
        got["processes"].append(sum(t[1] for t in trees))
        if samples:
            got["pickup"] += harness.role(system, url, "latency", "--samples", samples,
                                          timeout=samples * 12 + 30)["latencies"]
        if long_samples:
            long = harness.role(system, url, "long", "--samples", long_samples, "--timeout", 30,
                                timeout=long_samples * 45 + 30)
            got["long"] += [total - long["seconds"] for total in long["totals"]]
            got["long_end"] += [total - pickup - long["seconds"]
                                for total, pickup in zip(long["totals"], long["pickups"],
                                                         strict=True)]
        drained = profile.throughput_n * (1 if harness.concurrency == 1
                                          else CONCURRENT_DRAIN_TIMES)
        got["drains"] += harness.role(system, url, "throughput", "-n", drained, "--batch",
                                      profile.batch, "--rounds", 1, "--timeout", 300,
                                      "--listeners", len(listeners), timeout=330)["drains"]


def figures_of(enqueue, idle, got):
    ms = [s * 1000 for s in got["pickup"]]
    long_ms = [s * 1000 for s in got["long"]]
    commands, connections = idle
    drains = got["drains"]
    figures = {
        "enqueue_single": statistics.median(enqueue["single"]),
        "enqueue_batched": statistics.median(enqueue["batched"]) if enqueue["batched"] else None,
        "pickup_p50_ms": statistics.median(ms),
        "pickup_p99_ms": _percentile(ms, 99),
        "long_p50_ms": statistics.median(long_ms),
        "long_p90_ms": _percentile(long_ms, 90),
        "long_end_p50_ms": 1000 * statistics.median(got["long_end"]),
        "fork_tasks_per_s": statistics.median(d["tasks_per_s"] for d in drains),
        "fork_ms_per_task": 1000 * statistics.median(d["median_gap"] for d in drains),
        "idle_cmds_per_s": sum(commands.values()),
        "idle_connections": connections,
        "listener_memory_mib": statistics.median(got["pss_kb"]) / 1024,
    }
    raw = {"enqueue": enqueue, "pickup_ms": ms, "long_overhead_ms": long_ms,
           "long_after_second_ms": [s * 1000 for s in got["long_end"]],
           "throughput": {"drains": drains}, "idle_commands_per_s": commands,
           "pss_kb": got["pss_kb"], "listener_processes": max(got["processes"])}
    return figures, raw


def measure(harness, systems, url, profile):
    """Every system's figures: the enqueue rates one system after the other, the idle
    listeners all at once, then ``profile.rounds`` rounds of the latency samples and a drain,
    each round visiting every system in turn (in an order that turns from one round to the
    next), so that a slow minute of the machine falls on all of them."""
    results, enqueue, got = {}, {}, {}
    for system in systems:
        try:
            info = harness.role(system, url, "info", timeout=60)
            log(f"[{system.name}] {info['version']}: enqueue rate")
            enqueue[system.name] = measure_enqueue(harness, system, url, profile)
            results[system.name] = {key: info.get(key) for key in ("version", "redis_py",
                                                                    "hiredis", "source")}
        except DriverError as error:
            log(f"[{system.name}] failed: {error}")
            results[system.name] = {"error": str(error)}
    live = [system for system in systems if "error" not in results[system.name]]
    idle = measure_idle(harness, live, profile)
    for system in live:
        if isinstance(idle[system.name], DriverError):
            results[system.name] = {"error": str(idle[system.name])}
    live = [system for system in live if "error" not in results[system.name]]
    got = {system.name: {"pickup": [], "long": [], "long_end": [], "drains": [], "pss_kb": [],
                         "processes": []} for system in live}
    for turn in range(profile.rounds):
        shift = turn % len(live) if live else 0
        for system in live[shift:] + live[:shift]:
            if "error" in results[system.name]:
                continue
            log(f"[{system.name}] round {turn + 1} of {profile.rounds}")
            try:
                measure_round(harness, system, url, profile, profile.rounds - turn,
                              got[system.name])
            except DriverError as error:
                log(f"[{system.name}] failed: {error}")
                results[system.name] = {"error": str(error)}
    for system in live:
        if "error" not in results[system.name]:
            figures, raw = figures_of(enqueue[system.name], idle[system.name], got[system.name])
            results[system.name].update(figures=figures, raw=raw)
    return results


def engines(specs, workdir):
    """The Systems of ``--engine`` values (ab.engine_tree): ours, another engine."""
    return [replace(SYSTEMS[0], name=f"ours@{label}", label=f"ours@{label}", engine=tree)
            for label, tree in (engine_tree(spec, workdir / f"engine-{i}")
                                for i, spec in enumerate(specs or []))]


def python_of(system, venvs, hiredis=False):
    """The interpreter that runs ``system``: this one, or its virtualenv's (built once)."""
    if not system.requirement:
        return Path(sys.executable)
    return ensure_venv(venvs / ((system.venv or system.name) + ("-hiredis" if hiredis else "")),
                       system.requirement + (" hiredis" if hiredis else ""))


def _percentile(values, pct):
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def _ratio(ours, peer):
    if ours is None or peer is None or peer == 0:
        return None
    return ours / peer


def _cell(value, fmt):
    return "n/a" if value is None else fmt.format(value)


def table(results):
    """The comparison as text: one column per system, then ours/peer for each peer."""
    labels = {name: result.get("label", name) for name, result in results.items()}
    names = [n for n in results if "figures" in results[n]]
    pairs = ([("ours", n) for n in names if n not in ("ours", SAME_LIBRARY[0])]
             if "ours" in names else [])
    if all(n in names for n in SAME_LIBRARY):
        pairs.append(SAME_LIBRARY)
    out = []
    if names:
        rows = [["figure", "unit", *(labels[n] for n in names),
                 *(f"{labels[a]}/{labels[b]}" for a, b in pairs), "better"]]
        for key, label, unit, higher, fmt in ROWS:
            values = {n: results[n]["figures"][key] for n in names}
            ratios = [_ratio(values[a], values[b]) for a, b in pairs]
            rows.append([label, unit, *(_cell(values[n], fmt) for n in names),
                         *(_cell(r, "{:.2f}x") for r in ratios), "higher" if higher else "lower"])
        widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
        out = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
               for row in rows]
        out.insert(1, "-" * len(out[0]))
    for name, result in results.items():
        if "error" in result:
            out.append(f"{labels[name]}: not measured: {result['error']}")
        else:
            out.append(f"{labels[name]}: version {result['version']}, "
                       f"redis-py {result['redis_py']}"
                       f"{', hiredis' if result['hiredis'] else ''}")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller samples, under a minute")
    parser.add_argument("--only", action="append", choices=[s.name for s in SYSTEMS],
                        help="measure only this system (repeatable)")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="tasks run at once: ours and huey in one listener, blueque 1.0 "
                             "and RQ in as many listener processes")
    parser.add_argument("--engine", action="append", metavar="REVISION_OR_CHECKOUT",
                        help="also measure another engine beside this checkout's, by this "
                             "checkout's harness: a git revision or a checkout's directory "
                             "(repeatable)")
    parser.add_argument("--json", type=Path, help="also write every figure and sample here")
    parser.add_argument("--venvs", type=Path, default=HERE / ".venvs",
                        help="where the peers' virtualenvs are built and reused")
    parser.add_argument("--hiredis", action="store_true",
                        help="every system parses and packs with hiredis (the peers' "
                             "virtualenvs get it; this interpreter must have it)")
    args = parser.parse_args()
    if args.hiredis and not redis.utils.HIREDIS_AVAILABLE:
        parser.error("--hiredis: this interpreter, which runs ours and the floor, lacks "
                     "hiredis (pip install hiredis)")
    # SIGTERM unwinds like Ctrl-C, so every listener and the Redis are stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)

    profile = PROFILES["quick" if args.quick else "full"]
    systems = [s for s in SYSTEMS if not args.only or s.name in args.only]
    pythons = {system.name: python_of(system, args.venvs, args.hiredis) for system in systems}

    started, load_before = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="blueque-bench-") as tmp, \
            private_redis(Path(tmp)) as url:
        added = engines(args.engine, Path(tmp))
        pythons.update((system.name, Path(sys.executable)) for system in added)
        at = 1 if systems and systems[0].name == "ours" else 0
        systems = systems[:at] + added + systems[at:]
        with redis.Redis.from_url(url) as client:
            server = client.info("server")["redis_version"]
        results = measure(Harness(pythons, Path(tmp), args.concurrency), systems, url, profile)
        for system in systems:
            results[system.name]["label"] = system.label
    elapsed = time.monotonic() - started
    load = os.getloadavg()

    print(f"redis {server}, python {platform.python_version()}, "
          f"{'quick' if args.quick else 'full'} run in {elapsed:.0f} s, "
          f"{args.concurrency} task(s) at a time{', hiredis' if args.hiredis else ''}, "
          f"load average (1, 5, 15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after {'/'.join(f'{x:.2f}' for x in load)}")
    print(table(results))
    if args.json:
        report = {"profile": asdict(profile), "quick": args.quick, "hiredis": args.hiredis,
                  "concurrency": args.concurrency, "redis_version": server,
                  "python": platform.python_version(), "seconds": elapsed,
                  "load_average": {"before": load_before, "after": load}, "systems": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; every process it started has been stopped")
