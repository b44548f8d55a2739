"""WAIT_REPLICAS: every step that records a task's start or end waits for the replicas, the
runner's take (reserve and start in one script) included, or a failover could forget a start
and run the task twice (tests/django_app/test_failover.py shows it end to end)."""

import pytest

from django_blueque.core import Client
from django_blueque.core.connections import NotReplicated


@pytest.fixture
def acknowledged(redis_url):
    """A client asking one replica to acknowledge, on a server that has none."""
    engine = Client(redis_url, wait_replicas=1, wait_timeout=0.05)
    yield engine
    engine.redis.close()


def test_the_runners_take_waits_for_a_replica(acknowledged):
    task_id = acknowledged.get_queue("q").enqueue("x")
    with pytest.raises(NotReplicated, match="take acknowledged by 0 of 1"):
        acknowledged.protocol.take("q", "host~1_1", "token", 4242)
    assert acknowledged.get_task(task_id).status == "started"  # written, not acknowledged


def test_a_start_and_an_end_wait_for_a_replica(acknowledged):
    task_id = acknowledged.get_queue("q").enqueue("x")
    acknowledged.protocol.reserve("q", "host~1_1", "token")
    with pytest.raises(NotReplicated, match="start acknowledged"):
        acknowledged.protocol.start("q", task_id, "host~1_1", 4242, "token")
    with pytest.raises(NotReplicated, match="finish acknowledged"):
        acknowledged.protocol.finish("q", task_id, listener_id="host~1_1", pid=4242,
                                     token="token", outcome="complete", value="done")
