"""The one test command: ``python3 runtests.py``.

It installs what the tests need and runs the whole suite once per supported (Python, Django)
pair, each in its own virtualenv at the repository root (which pairs, and what is installed:
testing_envs.py).

Order: install every environment, run ``ruff check .`` and ``mypy`` (configured in pyproject.toml:
strict on the public API) in the first one (each fails fast), then pytest in every environment
at the same time, each with ``--workers`` pytest-xdist workers (default: four in all, two per
environment, four for one alone: the tests mostly wait on timers, so four workers pay even on
two cores, while more starve the timing-bound tests of CPU; each worker starts its own private
Redis servers, and the tests marked ``xdist_group`` share one worker, one after another).
Both environments run everything that depends on Django's version. What does not is run in one
environment only: the browser tests in the newest-Django one (the admin's templates are what
changes between Django versions), as is the documentation (the ``docs`` extra: Sphinx, installed
there only); the blueque 1.0 interop tests in the Python 3.11 one (blueque 1.0's users are on the
older Pythons, and the interop venv is built with that interpreter), as are the minutes-long
fault scenarios (``soak``: the short soak and the Sentinel failovers) and the slow tests marked
``django_agnostic`` (benchmarks' smoke tests, the cluster, packaging, the demo). With a single
environment everything runs there.
``BLUEQUE_URL`` is removed from the tests' environment so that no test can reach a Redis it
did not start; ``BLUEQUE_TEST_REDIS_URL`` is the explicit way to give one (its database is
flushed).

Exit status: 0 only if every environment's pytest exited 0 (pytest's 5, "no tests ran", is a
failure). JUnit XML reports go to ``test-artifacts/``.

Developer options: ``--fast`` (one environment, no ``slow`` or ``browser`` tests),
``--workers N`` (pytest-xdist workers per environment; 0 for none),
``--env KEY`` (only the environments whose key contains KEY, e.g. ``py313``),
``--no-install`` (use the virtualenvs as they are), and pytest arguments after ``--``
(``python3 runtests.py --fast -- tests/core -x``; a ``-m`` there replaces the split above).
"""

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

from devtools.testing_envs import REPO, Failure, ensure_system_packages, find_envs, loud, say

ARTIFACTS = REPO / "test-artifacts"
PER_TEST_TIMEOUT = 600  # seconds, pytest-timeout: a hung test fails instead of hanging CI
WORKERS = 4  # pytest-xdist workers in all, shared by the environments that run at once
AGNOSTIC_MARK = "django_agnostic"
BROWSER_MARK = "browser"
DOCS_MARK = "docs"
INTEROP_MARK = "interop"
SLOW_MARK = "slow"
SOAK_MARK = "soak"


def has_markexpr(args):
    return any(a == "-m" or a.startswith("-m") and not a.startswith("--") for a in args)


def plan_markers(envs, fast, passthrough):
    if has_markexpr(passthrough):
        say("a -m was given after --: it replaces the environments' marker selection")
        return
    if fast:
        envs[0].markexpr = f"not {SLOW_MARK} and not {BROWSER_MARK}"
        return
    if len(envs) > 1:
        envs[0].markexpr = f"not {BROWSER_MARK} and not {DOCS_MARK}"
        envs[-1].markexpr = (f"not {INTEROP_MARK} and not {SOAK_MARK} "
                             f"and not {AGNOSTIC_MARK}")


def junit_counts(path):
    """{'passed', 'failed', 'skipped'} from a JUnit XML report, or None."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = failed = skipped = 0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}


def pytest_command(env, passthrough, workers):
    junit = ARTIFACTS / f"junit-{env.key}.xml"
    junit.unlink(missing_ok=True)
    cmd = [str(env.python), "-m", "pytest", f"--junitxml={junit}",
           f"--timeout={PER_TEST_TIMEOUT}"]
    if workers:
        # loadgroup: the tests marked xdist_group(name) run one after another in one worker
        cmd += ["-n", str(workers), "--dist", "loadgroup"]
    if env.markexpr:
        cmd += ["-m", env.markexpr]
    return cmd + passthrough, junit


def run_pytests(envs, passthrough, workers):
    """Every environment's pytest at the same time (each with its own xdist workers and their
    own private Redis servers); with several, each line of output is prefixed with its
    environment. Sets each env's returncode, seconds and counts."""
    ARTIFACTS.mkdir(exist_ok=True)
    test_env = {k: v for k, v in os.environ.items()
                if k not in ("BLUEQUE_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    prefix = len(envs) > 1
    lock = threading.Lock()
    running = []
    for env in envs:
        cmd, junit = pytest_command(env, passthrough, workers)
        loud(f"{env.key} ({env.describe()}): {' '.join(cmd[1:])}")
        process = subprocess.Popen(
            cmd, cwd=REPO, env=test_env, stdout=subprocess.PIPE if prefix else None,
            stderr=subprocess.STDOUT if prefix else None, text=True, errors="replace")
        pump = None
        if prefix:
            pump = threading.Thread(target=copy_prefixed, args=(process.stdout, env.key, lock))
            pump.start()
        running.append((env, process, pump, junit, time.monotonic()))
    try:
        while any(process.poll() is None for _, process, *_ in running):
            for env, process, _, _, started in running:
                if env.seconds is None and process.poll() is not None:
                    env.seconds = time.monotonic() - started  # its own time, not the longest
            time.sleep(0.2)
    except KeyboardInterrupt:
        for _, process, _, _, _ in running:
            process.wait()  # pytest got the SIGINT too and tears down
        raise
    for env, process, pump, junit, started in running:
        env.returncode = process.wait()
        if env.seconds is None:
            env.seconds = time.monotonic() - started
        if pump:
            pump.join()
        env.counts = junit_counts(junit)
        if env.returncode == 5:
            say(f"{env.key}: pytest ran no test (exit 5): that is a failure")


def copy_prefixed(stream, key, lock):
    for line in stream:
        with lock:
            sys.stdout.write(f"[{key}] {line}")
            sys.stdout.flush()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        description="Install the test dependencies and run the whole suite in each supported "
                    "(Python, Django) environment. Pytest arguments go after --.")
    parser.add_argument("--fast", action="store_true",
                        help=f"one environment only, without the '{SLOW_MARK}' and "
                             f"'{BROWSER_MARK}' tests")
    parser.add_argument("--env", action="append", default=[], metavar="KEY",
                        help="only environments whose key contains KEY (e.g. py311, py313, "
                             "dj52); repeatable")
    parser.add_argument("--no-install", action="store_true",
                        help="install nothing: use the test virtualenvs as they are")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help=f"pytest-xdist workers per environment (default: {WORKERS} "
                             f"shared by the environments; 0: none, every test in one process)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    try:
        envs = find_envs(args.env)
        if args.fast:
            envs = envs[:1]
        plan_markers(envs, args.fast, passthrough)
        envs[-1].extras = "test,docs"  # the environment that builds the documentation
        need_browser = not args.fast and not has_markexpr(passthrough)
        if not args.no_install:
            ensure_system_packages(need_browser)
        for env in envs:  # one at a time: each builds the editable package in the checkout
            env.install(args.no_install)
        say("ruff check .")
        ruff = env_ruff(envs[0])
        if subprocess.run([ruff, "check", "."], cwd=REPO).returncode != 0:
            say("ruff found problems: fix them first (no test was run)")
            return 1
        say("mypy (pyproject.toml [tool.mypy])")
        if subprocess.run([env_mypy(envs[0])], cwd=REPO).returncode != 0:
            say("mypy found type errors: fix them first (no test was run)")
            return 1
        if os.environ.get("BLUEQUE_TEST_REDIS_URL"):
            say("BLUEQUE_TEST_REDIS_URL is set: one Redis for every test, so one environment "
                "at a time and no xdist workers (each test flushes its database)")
            for env in envs:
                run_pytests([env], passthrough, workers=0)
        else:
            workers = args.workers if args.workers is not None else max(1, WORKERS // len(envs))
            run_pytests(envs, passthrough, workers)
    except Failure as exc:
        print(f"[runtests] {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("[runtests] interrupted", file=sys.stderr)
        return 130

    say()
    say(f"{'environment':<22} {'exit':>4} {'passed':>7} {'failed':>7} {'skipped':>8} "
        f"{'time':>7}  markers")
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for env in envs:
        counts = env.counts or {"passed": 0, "failed": 0, "skipped": 0}
        for name in totals:
            totals[name] += counts[name]
        say(f"{env.key:<22} {env.returncode:>4} {counts['passed']:>7} {counts['failed']:>7} "
            f"{counts['skipped']:>8} {env.seconds:>6.0f}s  {env.markexpr or '(all)'}")
    failed_envs = [env.key for env in envs if env.returncode != 0]
    say(f"total time {time.monotonic() - started:.0f} s; "
        + (f"FAILED in {', '.join(failed_envs)}" if failed_envs else "all environments passed"))
    print(f"runtests: {totals['passed']} passed, {totals['failed']} failed, "
          f"{totals['skipped']} skipped", flush=True)
    return 1 if failed_envs else 0


def env_mypy(env):
    """The environment's mypy: it must see the environment's Django and django-stubs (the
    ``test`` extra installs them), so none from PATH."""
    mypy = env.dir / "bin" / "mypy"
    if not mypy.exists():
        raise Failure(f"mypy is not installed in {env.dir}: run without --no-install (the "
                      f"test extra installs it)")
    return str(mypy)


def env_ruff(env):
    ruff = env.dir / "bin" / "ruff"
    if ruff.exists():
        return str(ruff)
    found = shutil.which("ruff")
    if not found:
        raise Failure(f"ruff is not installed in {env.dir} nor on PATH")
    return found
