"""The engine's script calls from several threads, from a forked process, and through a
bounded pool."""

import os
import threading

import pytest
import redis

from django_blueque.core import Client


def test_threads_enqueueing_at_once_each_get_their_own_replies(client):
    queue = client.get_queue("q")
    ids: dict[int, list[str]] = {}
    errors = []

    def produce(number):
        try:
            ids[number] = [queue.enqueue(f"{number}-{n}") for n in range(300)]
        except Exception as exc:  # an interleaved reply would show as a wrong id or an error
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    every = [task_id for number in ids for task_id in ids[number]]
    assert len(set(every)) == 1200
    for number, produced in ids.items():
        assert [client.get_task(task_id).parameters for task_id in produced] == [
            f"{number}-{n}" for n in range(300)]


# the fork is the point; the child touches only this test's client (a thread an earlier test
# left in this process holds none of its locks): Python 3.12+ warns of any fork beside a thread
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_process_calls_scripts_on_a_connection_of_its_own(client, r):
    """Parent and child call a script at once, each with a reply of its own (a unique task's
    id): on one shared socket, they would read each other's replies."""
    queue = client.get_queue("q")
    queue.enqueue("parent, before")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            replies = {queue.enqueue(f"child {n}", unique_key="child") for n in range(300)}
            os.write(write, " ".join(replies).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    parent_replies = {queue.enqueue(f"parent {n}", unique_key="parent") for n in range(300)}
    with os.fdopen(read) as from_child:
        child_replies = set(from_child.read().split())
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    (parent_id,), (child_id,) = parent_replies, child_replies
    assert client.get_task(parent_id).parameters == "parent 0"
    assert client.get_task(child_id).parameters == "child 0"


@pytest.mark.parametrize("pool_class, options", [
    (redis.BlockingConnectionPool, {"timeout": 1}), (redis.ConnectionPool, {})])
def test_the_engine_works_through_a_pool_of_one(redis_url, pool_class, options):
    """The engine works through a one-connection pool (a blocking one too)."""
    small = redis.Redis(connection_pool=pool_class.from_url(redis_url, max_connections=1,
                                                            **options))
    engine = Client(redis_client=small)
    queue = engine.get_queue("q")
    task_id = queue.enqueue("p")
    assert engine.get_task(task_id).parameters == "p"
    assert queue.enqueue("q") != task_id
    engine.redis.connection_pool.disconnect()
