"""Fixtures for the engine tests: a Client on the private Redis, and real runner processes that
are always killed at the end of a test, with every task process they forked."""

import json
import uuid

import pytest

from django_blueque.core import Client
from tests.core.callbacks import RUNS_KEY
from tests.core.helpers import Runner, Script, kill_tagged


@pytest.fixture
def client(redis_url):
    engine = Client(redis_url)
    yield engine
    engine.redis.close()


@pytest.fixture
def tag():
    """A mark carried by the command line of every process a test starts."""
    value = f"core-test-{uuid.uuid4().hex}"
    yield value
    kill_tagged(value)


@pytest.fixture
def start_runner(redis_url, tmp_path, tag):
    """start_runner(queues, concurrency=..., kill_grace=..., retention=..., duties=...) -> Runner
    once it announced itself (its listener id is known; it may not have registered yet)."""
    runners = []

    def start(queues="q", **options):
        runner = Runner(redis_url, queues, tmp_path, tag, **options)
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        if runner.alive():
            runner.popen.kill()
        runner.wait(10)
        runner.popen.stdout.close()


@pytest.fixture
def start_script(redis_url, tmp_path, tag):
    """start_script(*args) -> Script (runner_script.py with those arguments)."""
    scripts = []

    def start(*args):
        script = Script([str(arg) for arg in args], tmp_path, tag)
        scripts.append(script)
        return script

    yield start
    for script in scripts:
        if script.alive():
            script.popen.kill()
        script.wait(10)
        script.popen.stdout.close()


@pytest.fixture
def runs(r):
    """runs() -> the callback's records of its runs: [{"id", "pid", "attempt"}], oldest first."""
    return lambda: [json.loads(item) for item in r.lrange(RUNS_KEY, 0, -1)]
