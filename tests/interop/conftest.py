"""Fixtures for the interop tests: the real blueque 1.0.1 in a cached throwaway virtualenv, and
subprocesses (blueque 1.0's side and ours) that are always stopped at the end of a test."""

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import pytest

from tests.interop.helpers import BQ1_SCRIPT, OURS_SCRIPT, REPO, Process, run_json

BLUEQUE_VERSION = "1.0.1"


def cache_root():
    """DJANGO_BLUEQUE_TEST_CACHE, else ~/.cache/django_blueque-tests (XDG_CACHE_HOME honoured)."""
    if os.environ.get("DJANGO_BLUEQUE_TEST_CACHE"):
        return Path(os.environ["DJANGO_BLUEQUE_TEST_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "django_blueque-tests"


def installed_version(python):
    """The blueque version importable by that python, or None if the venv is unusable."""
    if not python.exists():
        return None
    done = subprocess.run(
        [python, "-I", "-c",
         "import blueque, importlib.metadata as m; print(m.version('blueque'))"],
        capture_output=True, text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def build_venv(target):
    """Create a venv in a temporary folder beside target, install blueque into it, then move it
    into place, so that an interrupted build never leaves a half-made venv at target."""
    build = Path(tempfile.mkdtemp(prefix=target.name + ".build-", dir=target.parent))
    try:
        venv.create(build, with_pip=True, clear=True)
        done = subprocess.run(
            [build / "bin" / "python", "-m", "pip", "install", "--no-input",
             "--disable-pip-version-check", f"blueque=={BLUEQUE_VERSION}"],
            capture_output=True, text=True, timeout=600,
        )
        if done.returncode != 0:
            pytest.fail(f"could not install blueque=={BLUEQUE_VERSION} from PyPI into a venv:\n"
                        f"{done.stdout}\n{done.stderr}")
        shutil.rmtree(target, ignore_errors=True)
        build.rename(target)  # a venv's scripts hold absolute paths; bin/python does not care
    finally:
        shutil.rmtree(build, ignore_errors=True)


@pytest.fixture(scope="session")
def bq1_python():
    """The python of a virtualenv holding blueque==1.0.1 from PyPI, built once and cached, keyed
    by the blueque version and this interpreter's version."""
    tag = f"{sys.implementation.name}{sys.version_info.major}{sys.version_info.minor}"
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"venv-blueque-{BLUEQUE_VERSION}-{tag}"
    python = target / "bin" / "python"
    with open(root / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions (xdist, two checkouts) build once
        for stale in root.glob(f"{target.name}.build-*"):  # left by an interrupted build
            shutil.rmtree(stale, ignore_errors=True)
        if installed_version(python) != BLUEQUE_VERSION:
            build_venv(target)
        version = installed_version(python)
    assert version == BLUEQUE_VERSION, f"{python} has blueque {version!r}"
    return python


def bq1_env():
    """blueque 1.0's side sees neither this project nor the test's PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


def ours_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@pytest.fixture
def bq1(bq1_python, redis_url):
    """Run one-shot blueque 1.0 commands: bq1("enqueue", "q", params) -> the JSON it printed."""

    def run(command, *args):
        argv = [bq1_python, "-I", BQ1_SCRIPT, command, redis_url, *args]
        return run_json([str(a) for a in argv], env=bq1_env())

    return run


@pytest.fixture
def ours(redis_url):
    """Run one-shot commands of ours_script.py: ours("reserve-and-die", "q") -> its JSON."""

    def run(command, *args):
        argv = [sys.executable, OURS_SCRIPT, command, redis_url, *args]
        return run_json([str(a) for a in argv], env=ours_env())

    return run


@pytest.fixture
def processes(tmp_path, request):
    """Start long-running processes; all are stopped (SIGTERM, then SIGKILL) and waited for at
    teardown, and their output is printed when the test failed."""
    started = []

    def start(name, argv, env):
        process = Process(name, [str(a) for a in argv], tmp_path, env=env)
        started.append(process)
        return process

    yield start
    for process in reversed(started):
        process.stop()
    for process in started:
        sys.stdout.write(process.describe() + "\n")  # shown by pytest only for failing tests


@pytest.fixture
def start_bq1_runner(processes, bq1_python, redis_url):
    """Start blueque 1.0's ForkingRunner on a queue; returns the Process. Its first line of
    output is {"listener": the id blueque 1.0 will register}."""

    def start(queue, name="bq1-runner"):
        return processes(
            name, [bq1_python, "-I", BQ1_SCRIPT, "run-forking-runner", redis_url, queue],
            bq1_env(),
        )

    return start


@pytest.fixture
def start_our_runner(processes, redis_url):
    """Start our ForkingRunner (this interpreter, this checkout); returns the Process."""

    def start(queue, concurrency=2, name="our-runner"):
        return processes(
            name,
            [sys.executable, OURS_SCRIPT, "run-forking-runner", redis_url, queue,
             "--concurrency", concurrency],
            ours_env(),
        )

    return start
