import os
import signal

import pytest
import redis

from devtools.redis_cluster import LocalCluster
from devtools.servers import RedisServer
from django_blueque.core.context import set_current_task


def pytest_configure(config):
    """Tests stop the commands they start with SIGINT, as Ctrl-C in a terminal does. A shell
    starts a background job (``pytest ... &``, a CI step run so) with SIGINT ignored, and every
    process inherits that through exec: a command relying on Python's KeyboardInterrupt would
    never stop. The suite's processes get SIGINT's default back."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


LONGEST_FIRST = (("soak",), ("slow", "interop", "browser", "docs"))


def pytest_collection_modifyitems(items):
    """The minutes-long tests first, then the slow ones, then the rest (each group in its
    usual order): xdist workers hand tests out in this order, so the long ones start at once
    instead of running alone at the end while the other workers sit idle."""
    def rank(item):
        for position, marks in enumerate(LONGEST_FIRST):
            if any(item.get_closest_marker(mark) for mark in marks):
                return position
        return len(LONGEST_FIRST)

    items.sort(key=rank)


@pytest.fixture(autouse=True)
def no_task_left_running():
    """A test that starts a task through the 1.0 API in its own process and never records its
    end leaves it as this process's current task; the next test must start without one."""
    yield
    set_current_task(None)


def external_url():
    """A Redis URL given by the environment (BLUEQUE_TEST_REDIS_URL); the tests flush its db."""
    return os.environ.get("BLUEQUE_TEST_REDIS_URL")


@pytest.fixture(scope="session")
def redis_server():
    """One private redis-server for the session (or the URL in BLUEQUE_TEST_REDIS_URL)."""
    url = external_url()
    if url:
        yield type("External", (), {"url": url})()
        return
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_cluster():
    """One private 3-master Redis Cluster for the session's cluster-mode tests (started by the
    first that asks for it; each test uses queues of its own or empties it)."""
    cluster = LocalCluster(3).start()
    yield cluster
    cluster.close()


@pytest.fixture
def redis_url(redis_server):
    """The URL of a Redis database emptied before each test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    client.close()
    return redis_server.url


@pytest.fixture
def r(redis_url):
    """A plain redis-py client (decoded strings) to look at what the engine wrote."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
