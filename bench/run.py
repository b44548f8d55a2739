"""Benchmark our engine against blueque 1.0.1, RQ and huey, in one run against one private Redis.

    python bench/run.py [--quick] [--only NAME] [--json out.json]

Every system is driven by its own module in bench/drivers/, run as a subprocess of the system's
own interpreter (the peers live in throwaway virtualenvs under bench/.venvs), so the figures
come from the same Redis, the same machine and the same minutes. bench/README.md says what
each figure means.
"""

import argparse
import contextlib
import json
import platform
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import redis
import redis.utils
from infra import (
    DriverError,
    child,
    command_rates,
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


SYSTEMS = [
    System("ours", "ours", "ours.py", None, True),
    System("blueque1", "blueque 1.0.1", "blueque1.py", "blueque==1.0.1", False),
    System("rq", "rq", "rq_driver.py", "rq", False),
    System("huey", "huey (threads)", "huey_driver.py", "huey[redis]", True),
    System("floor", "floor (bare fork)", "floor.py", None, True),
    System("floor_ahead", "floor (forked ahead)", "floor_ahead.py", None, True),
]


@dataclass(frozen=True)
class Profile:
    enqueue_n: int  # tasks per enqueue round
    rounds: int  # enqueue rounds, the median is reported
    batch: int  # tasks per batched enqueue call
    samples: int  # pickup latency samples
    throughput_n: int  # no-op tasks per drain (rounds drains, the median is reported)
    idle_s: float  # window over which the idle listener's commands are counted
    settle_s: float  # pause after the warm-up task, before the idle window


PROFILES = {
    # idle_s: two of our idle listener's minute-long heartbeat and peek periods, so that the
    # window holds what an hour would, per second
    "full": Profile(enqueue_n=5000, rounds=3, batch=1000, samples=50, throughput_n=200,
                    idle_s=120, settle_s=2),
    "quick": Profile(enqueue_n=1000, rounds=3, batch=1000, samples=6, throughput_n=50,
                     idle_s=4, settle_s=1),
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


def listener_commands(system, driver, url, concurrency):
    """The command lines that run ``concurrency`` tasks at once: one listener for a system that
    can, else as many listeners (blueque 1.0 and RQ run one task per listener process)."""
    if system.concurrent:
        return [[*driver, "listen", url, "--concurrency", str(concurrency)]]
    return [[*driver, "listen", url]] * concurrency


def measure(system, python, url, profile, workdir, concurrency):
    """All figures for one system; the listeners run only for the part that needs them."""
    driver = [str(python), str(HERE / "drivers" / system.driver)]

    def role(name, *args, timeout):
        return run_json([*driver, name, url, *args], timeout)

    started = time.monotonic()
    info = role("info", timeout=60)
    log(f"[{system.name}] {info['version']}: enqueue rate")
    with redis.Redis.from_url(url) as admin:
        admin.flushall()
        enqueue = role("enqueue", "-n", profile.enqueue_n, "--rounds", profile.rounds,
                       "--batch", profile.batch, timeout=600)
        admin.flushall()
    listener_log = workdir / f"{system.name}-listener.log"
    with open(listener_log, "w") as log_file, contextlib.ExitStack() as stack:
        listeners = [stack.enter_context(child(argv, stdout=log_file, stderr=log_file,
                                               start_new_session=True))
                     for argv in listener_commands(system, driver, url, concurrency)]
        try:
            # One task first: the listener is up and through its first fork before measuring.
            role("latency", "--samples", 1, "--min-pause", 0, "--jitter", 0, "--timeout", 30,
                 timeout=60)
            time.sleep(profile.settle_s)
            log(f"[{system.name}] idle listener for {profile.idle_s:g} s")
            commands, connections = command_rates(url, profile.idle_s)
            trees = [tree_pss_kb(listener.pid) for listener in listeners]
            memory_kb, processes = sum(t[0] for t in trees), sum(t[1] for t in trees)
            log(f"[{system.name}] pickup latency, {profile.samples} samples")
            latency = role("latency", "--samples", profile.samples,
                           timeout=profile.samples * 12 + 30)
            drained = profile.throughput_n * (1 if concurrency == 1 else CONCURRENT_DRAIN_TIMES)
            log(f"[{system.name}] {drained} no-op tasks through the listener")
            throughput = role("throughput", "-n", drained, "--batch", profile.batch,
                              "--rounds", profile.rounds, "--timeout", 300,
                              "--listeners", len(listeners), timeout=330 * profile.rounds)
        except DriverError as error:
            if any(listener.poll() is not None for listener in listeners):
                last = _last_line(listener_log)
                raise DriverError(f"{error}; the listener exited: {last}") from None
            raise

    latencies_ms = [s * 1000 for s in latency["latencies"]]
    figures = {
        "enqueue_single": statistics.median(enqueue["single"]),
        "enqueue_batched": statistics.median(enqueue["batched"]) if enqueue["batched"] else None,
        "pickup_p50_ms": statistics.median(latencies_ms),
        "pickup_p99_ms": _percentile(latencies_ms, 99),
        "fork_tasks_per_s": throughput["tasks_per_s"],
        "fork_ms_per_task": 1000 * throughput["median_gap"],
        "idle_cmds_per_s": sum(commands.values()),
        "idle_connections": connections,
        "listener_memory_mib": memory_kb / 1024,
    }
    raw = {"enqueue": enqueue, "pickup_ms": latencies_ms, "throughput": throughput,
           "idle_commands_per_s": commands, "listener_processes": processes}
    return {"version": info["version"], "redis_py": info["redis_py"],
            "hiredis": info["hiredis"], "seconds": time.monotonic() - started,
            "figures": figures, "raw": raw}


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
    labels = {s.name: s.label for s in SYSTEMS}
    names = [n for n in results if "figures" in results[n]]
    peers = [n for n in names if n != "ours"] if "ours" in names else []
    out = []
    if names:
        rows = [["figure", "unit", *(labels[n] for n in names),
                 *(f"ours/{labels[p]}" for p in peers), "better"]]
        for key, label, unit, higher, fmt in ROWS:
            values = {n: results[n]["figures"][key] for n in names}
            ratios = [_ratio(values["ours"], values[p]) for p in peers]
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
    pythons = {}
    for system in systems:
        if system.requirement:
            pythons[system.name] = ensure_venv(
                args.venvs / (system.name + ("-hiredis" if args.hiredis else "")),
                system.requirement + (" hiredis" if args.hiredis else ""))
        else:
            pythons[system.name] = Path(sys.executable)

    started = time.monotonic()
    results = {}
    with tempfile.TemporaryDirectory(prefix="blueque-bench-") as tmp, \
            private_redis(Path(tmp)) as url:
        with redis.Redis.from_url(url) as client:
            server = client.info("server")["redis_version"]
        for system in systems:
            try:
                results[system.name] = measure(system, pythons[system.name], url, profile,
                                               Path(tmp), args.concurrency)
            except DriverError as error:
                log(f"[{system.name}] failed: {error}")
                results[system.name] = {"error": str(error)}
    elapsed = time.monotonic() - started

    print(f"redis {server}, python {platform.python_version()}, "
          f"{'quick' if args.quick else 'full'} run in {elapsed:.0f} s, "
          f"{args.concurrency} task(s) at a time{', hiredis' if args.hiredis else ''}")
    print(table(results))
    if args.json:
        report = {"profile": asdict(profile), "quick": args.quick, "hiredis": args.hiredis,
                  "concurrency": args.concurrency, "redis_version": server,
                  "python": platform.python_version(), "seconds": elapsed, "systems": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; every process it started has been stopped")
